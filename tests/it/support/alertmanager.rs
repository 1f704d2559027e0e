//! A real Alertmanager (Debian's `prometheus-alertmanager`) with the example
//! configuration in grafana/alertmanager/, on a free loopback port with its own
//! storage, clustering off, its receivers pointed at a [`super::webhook::Webhook`].

use super::pg;
use super::process::{Running, free_addr, installed, start};
use std::net::SocketAddr;
use std::path::Path;

pub const CONFIG: &str = "grafana/alertmanager/alertmanager.yml";
/// What the example's receivers post to; the test's copy posts to its webhook instead.
const PLACEHOLDER: &str = "http://127.0.0.1:5001/";

/// The Alertmanager binary (`ALERTMANAGER`, else Debian's name, else upstream's), or
/// `None` with a loud message when there is none. Under `CI=true` that fails instead.
pub fn program() -> Option<String> {
    let candidates = std::env::var("ALERTMANAGER")
        .into_iter()
        .chain(["prometheus-alertmanager".into(), "alertmanager".into()]);
    for candidate in candidates {
        if installed(&candidate) {
            return Some(candidate);
        }
    }
    assert!(
        !pg::required(),
        "Alertmanager is required under CI=true (apt-get install prometheus-alertmanager)"
    );
    eprintln!(
        "\n*** SKIPPED: Alertmanager not installed (apt-get install prometheus-alertmanager): \
         alert delivery NOT tested ***\n"
    );
    None
}

/// The example configuration as the test runs it: every receiver posts to `webhook`
/// (under the receiver's path), and the first notification of a group waits 1 s
/// instead of 30 s. Routing, grouping and inhibitions are the example's own.
pub fn config_for_test(text: &str, webhook: SocketAddr) -> String {
    assert!(
        text.contains(PLACEHOLDER),
        "{CONFIG}: no receiver posts to {PLACEHOLDER}"
    );
    assert!(
        text.contains("\n  group_wait: 30s\n"),
        "{CONFIG}: no top-level `group_wait: 30s` to shorten"
    );
    text.replace(PLACEHOLDER, &format!("http://{webhook}/"))
        .replace("\n  group_wait: 30s\n", "\n  group_wait: 1s\n")
}

/// Starts `program` with the test's copy of the example configuration, storage in
/// `dir`, and waits until it is ready.
pub async fn start_alertmanager(
    program: &str,
    dir: &Path,
    webhook: SocketAddr,
) -> (Running, SocketAddr) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join(CONFIG)).expect("the example Alertmanager config");
    let config = dir.join("alertmanager.yml");
    std::fs::write(&config, config_for_test(&text, webhook)).unwrap();
    let storage = dir.join("alertmanager-data");
    let addr = free_addr();
    let running = start(
        "alertmanager",
        program,
        &[
            &format!("--config.file={}", config.display()),
            &format!("--storage.path={}", storage.display()),
            &format!("--web.listen-address={addr}"),
            // No gossip: it would listen on every interface and look for peers.
            "--cluster.listen-address=",
            "--log.level=warn",
        ],
        dir,
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Ok((200, _)) = super::server::get(&addr.to_string(), "/-/ready").await {
            return (running, addr);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "Alertmanager not ready on {addr} within 30 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// POSTs a JSON body (HTTP/1.0: no chunked answer to decode); returns the status code
/// and the response body.
pub async fn post_json(addr: SocketAddr, path: &str, body: &str) -> (u16, String) {
    let request = format!(
        "POST {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    super::server::send_raw(&addr.to_string(), &request)
        .await
        .unwrap()
}

#[test]
fn the_test_config_posts_to_the_webhook_and_waits_a_second() {
    let example = "route:\n  receiver: ticket\n  group_wait: 30s\n  routes:\n    - group_wait: 30s\nreceivers:\n  - url: http://127.0.0.1:5001/page\n";
    let out = config_for_test(example, "127.0.0.1:4321".parse().unwrap());
    assert!(out.contains("\n  group_wait: 1s\n"), "{out}");
    assert!(
        out.contains("    - group_wait: 30s\n"),
        "only the top level: {out}"
    );
    assert!(out.contains("url: http://127.0.0.1:4321/page"), "{out}");
}
