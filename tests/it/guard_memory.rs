//! Issue 47, High: one worker token must not take the service down. The attack of the
//! review against a real `idemwatch serve`: 32 concurrent admits of ~1.9 MB bodies with
//! a valid worker token (three rounds), then 32 concurrent bodies just under the body
//! limit, which are read, parsed and stored. Before the fix the first alone peaked at
//! 3.3 GiB RSS (the bodies were parsed as trees before the token's limits were
//! checked); the bound asserted here is the issue's target, 300 MiB, with room: the
//! figure measured is in the commit message, and a healthy run stays far below it.

use crate::support::TestDb;
use crate::support::server::{Server, refund_tools_file, send_raw};
use idemwatch::auth::secrets;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const MIB: u64 = 1024 * 1024;

/// An admit body of about `bytes`, for tenant `acme`, with `cells` arguments that are
/// `[0]` (every 4 bytes a value and a vector: what grows most read as a tree) padded
/// with strings to the size.
fn admit_body(bytes: usize, cells: usize, n: usize) -> String {
    // Each cell and its comma: `[0],` (4 bytes), or `["xx…"],` padded to the size.
    let cell = match (bytes / cells.max(1)).saturating_sub(6) {
        0 => "[0]".to_string(),
        pad => format!("[\"{}\"]", "x".repeat(pad + 1)),
    };
    let list = vec![cell.as_str(); cells].join(",");
    format!(
        r#"{{"intent":{{"tenant":"acme","tool":"issue_refund","workflow_id":"w","step_id":"1","intent_id":"mem-{n}"}},"args":{{"order":"M-{n}","cells":[{list}]}}}}"#
    )
}

/// POSTs `body` to the admit route as the worker token; the status, or 0 when the
/// server closed the connection before answering (it may refuse a body it will not
/// read before the client has sent it).
async fn post(addr: &str, body: &str) -> u16 {
    let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else {
        return 0;
    };
    let head = format!(
        "POST /api/v1/guard/admit HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer iw_bots\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body.as_bytes()).await;
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw).await;
    String::from_utf8_lossy(&raw)
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// The peak resident set of `pid` (`VmHWM`), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("Linux /proc");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    kb * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_token_flooding_large_admits_keeps_serve_under_300_mib() {
    let db = TestDb::sqlite().await;
    let dir = tempfile::tempdir().unwrap();
    let tools = refund_tools_file(dir.path());
    let auth = dir.path().join("auth.toml");
    std::fs::write(
        &auth,
        format!(
            "mode = \"builtin\"\n[[tokens]]\nname = \"bots\"\nsha256 = \"{}\"\nroles = [\"worker\"]\ntenants = [\"acme\"]\n",
            secrets::hash_token("iw_bots")
        ),
    )
    .unwrap();
    let server = Server::start(
        "serve",
        &db.url,
        &[
            "--tools-file",
            tools.to_str().unwrap(),
            "--auth-file",
            auth.to_str().unwrap(),
        ],
    )
    .await;
    let pid = server.child.id();
    let before = peak_rss(pid);

    let big = std::sync::Arc::new(
        (0..32)
            .map(|n| admit_body(1_900_000, 1_900_000 / 4 - 100, n))
            .collect::<Vec<_>>(),
    );
    for _round in 0..3 {
        let mut tasks = tokio::task::JoinSet::new();
        for n in 0..32 {
            let (addr, big) = (server.addr.clone(), big.clone());
            tasks.spawn(async move { post(&addr, &big[n]).await });
        }
        while let Some(status) = tasks.join_next().await {
            let status = status.unwrap();
            assert!(
                status == 413 || status == 0,
                "a body past the limit is refused: {status}"
            );
        }
    }
    // Bodies just under the limit, with as many values as arguments may hold, are
    // read, parsed and stored (or 429 past the token's concurrency): the memory a
    // request may hold whatever its body.
    let values = idemwatch::web::GUARD_MAX_VALUES - 10;
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..32 {
        let addr = server.addr.clone();
        let body = admit_body(250 * 1024, values / 2, 100 + n);
        tasks.spawn(async move { post(&addr, &body).await });
    }
    let mut admitted = 0;
    while let Some(status) = tasks.join_next().await {
        match status.unwrap() {
            200 => admitted += 1,
            429 => {}
            other => panic!("a body under the limit is read: {other}"),
        }
    }
    assert!(admitted > 0, "some bodies under the limit were read");

    assert!(
        (1_800_000..2_000_000).contains(&big[0].len()),
        "the review's body size: {}",
        big[0].len()
    );
    let peak = peak_rss(pid);
    eprintln!(
        "serve peak RSS: {} MiB before the attack, {} MiB after ({admitted} large admits taken)",
        before / MIB,
        peak / MIB
    );
    assert!(
        peak < 300 * MIB,
        "peak RSS {} MiB, over the 300 MiB target",
        peak / MIB
    );
    // And the service still answers.
    let (status, _) = send_raw(
        &server.addr,
        &format!(
            "GET /healthz HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            server.addr
        ),
    )
    .await
    .unwrap();
    assert_eq!(status, 200);
}
