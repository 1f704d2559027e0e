//! A client that sends half a request is not waited for forever: `serve` over real
//! TCP with short `--header-read-timeout` and `--request-body-timeout`.

use crate::support::TestDb;
use crate::support::server::Server;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends `bytes`, then reads until the server closes; returns what came back and how
/// long it took, or panics after `limit`.
async fn send_and_wait(addr: &str, bytes: &[u8], limit: Duration) -> (String, Duration) {
    let started = Instant::now();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    let mut raw = Vec::new();
    let read = tokio::time::timeout(limit, stream.read_to_end(&mut raw)).await;
    assert!(
        read.is_ok(),
        "still open after {limit:?}: {:?}",
        String::from_utf8_lossy(&raw)
    );
    (String::from_utf8_lossy(&raw).to_string(), started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_requests_and_idle_connections_are_closed_after_the_timeouts() {
    let db = TestDb::sqlite().await;
    let server = Server::start(
        "serve",
        &db.url,
        &[
            "--header-read-timeout",
            "1s",
            "--request-body-timeout",
            "1s",
        ],
    )
    .await;
    let limit = Duration::from_secs(10);
    let addr = server.addr.clone();

    // Half a request head (no blank line): closed, unanswered, after about 1 s.
    let (_, took) = send_and_wait(
        &addr,
        format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\n").as_bytes(),
        limit,
    )
    .await;
    assert!(took < Duration::from_secs(5), "{took:?}");

    // A connection that sends nothing at all.
    let (_, took) = send_and_wait(&addr, b"", limit).await;
    assert!(took < Duration::from_secs(5), "{took:?}");

    // A whole head but half the body it announced: answered with an error, not held.
    let head = format!(
        "POST /login HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\nConnection: close\r\n\r\nname=a"
    );
    let (answer, took) = send_and_wait(&addr, head.as_bytes(), limit).await;
    assert!(took < Duration::from_secs(5), "{took:?}");
    let status: u16 = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    assert!((400..500).contains(&status), "{answer}");

    // And a normal request still works.
    let (answer, _) = send_and_wait(
        &addr,
        format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
        limit,
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

/// Starts `GET path` on a socket with a tiny receive window and reads only the head:
/// a client that then stops reading. Returns the status and the socket.
async fn stall(addr: &str, path: &str) -> (u16, TcpStream) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(65536).unwrap();
    let mut stream = socket.connect(addr.parse().unwrap()).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = [0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut head))
        .await
        .expect("an answer starts")
        .unwrap();
    let text = String::from_utf8_lossy(&head[..n]).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, stream)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_downloads_are_cut_off_after_the_write_timeout_while_pages_answer() {
    let db = TestDb::sqlite().await;
    // Far more than the socket buffers hold (checked below), so a download that is
    // not read really waits on the socket.
    crate::page_indexes::fill(&db.store, 60_000).await;
    let server = Server::start("serve", &db.url, &["--write-timeout", "2s"]).await;
    let addr = server.addr.clone();
    let path = "/export/attempts.csv";

    // 20 clients start a download and stop reading: as many as the export cap allows
    // get one (200), the rest a 429 at once.
    let mut stalled = Vec::new();
    for _ in 0..20 {
        stalled.push(stall(&addr, path).await);
    }
    let ok = stalled.iter().filter(|(s, _)| *s == 200).count();
    let busy = stalled.iter().filter(|(s, _)| *s == 429).count();
    assert_eq!(
        (ok, busy),
        (idemwatch::web::MAX_EXPORTS, 20 - ok),
        "statuses"
    );
    // Pages and probes keep answering while they stall, and the slots are taken.
    for page in ["/healthz", "/keys", "/backlog"] {
        let (status, _) = crate::support::server::get(&addr, page).await.unwrap();
        assert_eq!(status, 200, "{page}");
    }
    let (status, _) = stall(&addr, path).await;
    assert_eq!(status, 429, "every export slot is held by a stalled client");

    // After the write timeout the server has cut them all off: every slot is free
    // again, taken here by as many new downloads at once (old behaviour: 429 for as
    // long as the stalled clients stay).
    let started = Instant::now();
    loop {
        let mut again = Vec::new();
        for _ in 0..idemwatch::web::MAX_EXPORTS {
            // Kept open while the next ones start: each holds its slot.
            again.push(stall(&addr, path).await);
        }
        let again: Vec<u16> = again.into_iter().map(|(s, _)| s).collect();
        if again.iter().all(|s| *s == 200) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "stalled downloads still hold export slots after {:?}: {again:?}",
            started.elapsed()
        );
        // Those that got a slot give it back when dropped here.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Each stalled download was closed unfinished (no last chunk), not held.
    for (_, mut stream) in stalled.into_iter().filter(|(s, _)| *s == 200) {
        let mut rest = Vec::new();
        let read =
            tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut rest)).await;
        assert!(read.is_ok(), "a stalled download is still open");
        assert!(
            !rest.ends_with(b"0\r\n\r\n"),
            "the download was cut off, not finished: {} bytes",
            rest.len()
        );
    }
    // A client that reads gets the whole export, which is far larger than any socket
    // buffer (so the stall above was real).
    let (status, body) = crate::support::server::get(&addr, path).await.unwrap();
    assert_eq!(status, 200);
    assert!(body.len() > 8 << 20, "export of {} bytes", body.len());
}
