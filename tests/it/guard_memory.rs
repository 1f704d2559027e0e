//! Issue 47, High: one worker token must not take the service down. The attack of the
//! review against a real `idemwatch serve`: 32 concurrent admits of ~1.9 MB bodies with
//! a valid worker token (three rounds), then 32 concurrent bodies just under the body
//! limit, which are read, parsed and stored. Before the fix the first alone peaked at
//! 3.3 GiB RSS (the bodies were parsed as trees before the token's limits were
//! checked); the bound asserted here is the target, 300 MiB, with room: the
//! figure measured is in the commit message, and a healthy run stays far below it.

use crate::support::TestDb;
use crate::support::attack::{admit_body, post_admit};
use crate::support::server::{Server, refund_tools_file, send_raw};
use idemwatch::auth::secrets;

const MIB: u64 = 1024 * 1024;

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
            tasks.spawn(async move { post_admit(&addr, "iw_bots", big[n].as_bytes()).await });
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
        tasks.spawn(async move { post_admit(&addr, "iw_bots", body.as_bytes()).await });
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
