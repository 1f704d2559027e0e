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
