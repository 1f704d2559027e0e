//! Request bodies trickled in on purpose (issue 47): over real TCP against `serve`, a
//! body sent steadily, one byte at a time, is cut off with 408 at the
//! `--request-body-timeout` deadline (before, each byte restarted the timeout), and
//! beyond `--max-slow-bodies` such bodies the next is refused with 503 at once while
//! a request whose body arrives whole is served.

use crate::support::TestDb;
use crate::support::server::{Server, send_raw};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A sign-in post announcing 200 bytes, of which it sends one every `gap` (forever,
/// until the server closes). Returns the task reading the answer.
async fn trickle(addr: &str, gap: Duration) -> tokio::task::JoinHandle<String> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    let head = format!(
        "POST /login HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 200\r\n\r\nn"
    );
    write.write_all(head.as_bytes()).await.unwrap();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(gap).await;
            if write.write_all(b"a").await.is_err() {
                break;
            }
        }
    });
    tokio::spawn(async move {
        let mut raw = Vec::new();
        let _ = read.read_to_end(&mut raw).await;
        String::from_utf8_lossy(&raw).to_string()
    })
}

fn status(answer: &str) -> u16 {
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_trickled_a_byte_at_a_time_is_cut_off_with_408_at_the_deadline() {
    let db = TestDb::sqlite().await;
    let server = Server::start("serve", &db.url, &["--request-body-timeout", "2s"]).await;
    // A byte every 300 ms: the whole body would take a minute; no gap is near 2 s.
    let answer = trickle(&server.addr, Duration::from_millis(300)).await;
    let answer = tokio::time::timeout(Duration::from_secs(20), answer)
        .await
        .expect("the server cut the trickled body off (before: it read on, byte by byte)")
        .unwrap();
    assert_eq!(status(&answer), 408, "{answer}");
    assert!(answer.contains("did not arrive in time"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_the_cap_a_slow_body_gets_503_at_once_and_whole_bodies_are_served() {
    let db = TestDb::sqlite().await;
    let server = Server::start(
        "serve",
        &db.url,
        &["--request-body-timeout", "30s", "--max-slow-bodies", "4"],
    )
    .await;
    let addr = server.addr.clone();
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(trickle(&addr, Duration::from_millis(500)).await);
    }
    // Each of the four has reached the handler and waits for its body.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let fifth = trickle(&addr, Duration::from_millis(500)).await;
    let answer = tokio::time::timeout(Duration::from_secs(10), fifth)
        .await
        .expect("refused at once, not held")
        .unwrap();
    assert_eq!(status(&answer), 503, "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("retry-after: 5"),
        "{answer}"
    );
    assert!(answer.contains("Too many slow requests"), "{answer}");
    // A sign-in whose body comes whole with its head needs no slot.
    let body = "name=a&password=b";
    let (code, text) = send_raw(
        &addr,
        &format!(
            "POST /login HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
    .await
    .unwrap();
    assert_ne!(code, 503, "{text}");
    assert!(code > 0 && code < 500, "{code}: {text}");
    for h in &held {
        assert!(
            !h.is_finished(),
            "the four slow bodies are still being read"
        );
    }
}
