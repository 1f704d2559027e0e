//! DNS rebinding and cross-site posts against the real binary over real TCP, and in a
//! real browser: headless Chromium told that `rebind.attacker.example` is 127.0.0.1
//! (what a rebinding DNS server makes a victim's browser believe) gets the refusal,
//! not the overview.
//!
//! Without Chromium the browser test fails under `CI=true` and skips loudly elsewhere.

use crate::auth_site::FOREIGN;
use crate::browser::chromium_run;
use crate::support::TestDb;
use crate::support::auth::{HASH, SECRET, auth_file_text};
use crate::support::pg::required;
use crate::support::server::{Server, send_raw};
use crate::support::webdriver::chromium;

fn request(method: &str, path: &str, host: &str, extra: &[&str]) -> String {
    let mut text = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for h in extra {
        text.push_str(h);
        text.push_str("\r\n");
    }
    if method == "POST" {
        text.push_str("Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 0\r\n");
    }
    text.push_str("\r\n");
    text
}

async fn status(
    server: &Server,
    method: &str,
    path: &str,
    host: &str,
    extra: &[&str],
) -> (u16, String) {
    send_raw(&server.addr, &request(method, path, host, extra))
        .await
        .unwrap()
}

#[tokio::test]
async fn the_default_mode_answers_only_to_loopback_and_allowed_names() {
    let db = TestDb::sqlite().await;
    let server = Server::start("serve", &db.url, &["--allowed-host", "idemwatch.internal"]).await;
    let port = server.addr.rsplit_once(':').unwrap().1.to_string();
    for path in ["/", "/keys", "/api/v1/csrf", "/api/v1/keys/abc", "/backlog"] {
        let (code, body) = status(&server, "GET", path, FOREIGN, &[]).await;
        assert_eq!(code, 421, "{path}: {body}");
        assert!(body.contains("--allowed-host"), "{path}: {body}");
        assert!(!body.contains("csrf_token"), "{path}: {body}");
    }
    let (code, _) = status(&server, "POST", "/keys/abc/resolve", FOREIGN, &[]).await;
    assert_eq!(code, 421, "resolve");
    for host in [
        server.addr.clone(),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
        format!("idemwatch.internal:{port}"),
    ] {
        let (code, body) = status(&server, "GET", "/", &host, &[]).await;
        assert_eq!(code, 200, "{host}: {body}");
    }
    let (code, _) = status(&server, "GET", "/metrics", FOREIGN, &[]).await;
    assert_eq!(code, 200, "probes answer under any name");

    // A post from another site's page, to the right name, is refused before the
    // CSRF check or the key lookup.
    let own = server.addr.clone();
    let (code, body) = status(
        &server,
        "POST",
        "/keys/abc/resolve",
        &own,
        &["Origin: http://evil.example"],
    )
    .await;
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("cross-site request refused"), "{body}");
    let (code, _) = status(
        &server,
        "POST",
        "/keys/abc/resolve",
        &own,
        &["Sec-Fetch-Site: cross-site"],
    )
    .await;
    assert_eq!(code, 403);
    let origin = format!("Origin: http://{own}");
    let (code, body) = status(&server, "POST", "/keys/abc/resolve", &own, &[&origin]).await;
    assert_eq!(code, 403, "past the site check: the CSRF token is missing");
    assert!(body.contains("CSRF check"), "{body}");
}

#[tokio::test]
async fn with_built_in_auth_a_cross_site_login_is_refused_over_tcp() {
    let db = TestDb::sqlite().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("auth.toml");
    std::fs::write(&file, auth_file_text(&HASH)).unwrap();
    let secret = String::from_utf8(SECRET.to_vec()).unwrap();
    let server = Server::start(
        "serve",
        &db.url,
        &[
            "--auth-file",
            file.to_str().unwrap(),
            "--session-secret",
            &secret,
        ],
    )
    .await;
    let own = server.addr.clone();
    let (code, body) = status(
        &server,
        "POST",
        "/login",
        &own,
        &["Origin: https://evil.example"],
    )
    .await;
    assert_eq!(code, 403, "{body}");
    let (code, _) = status(
        &server,
        "POST",
        "/logout",
        &own,
        &["Sec-Fetch-Site: cross-site"],
    )
    .await;
    assert_eq!(code, 403);
    let (code, _) = status(&server, "GET", "/login", FOREIGN, &[]).await;
    assert_eq!(code, 200, "with an auth file the name is not checked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebound_name_in_a_real_browser_gets_the_refusal_not_the_overview() {
    let Some(chromium) = chromium() else {
        if required() {
            panic!("Chromium is required under CI=true (apt-get install chromium)");
        }
        eprintln!("\n*** SKIPPED (Chromium not installed: apt-get install chromium) ***\n");
        return;
    };
    let db = TestDb::sqlite().await;
    let server = Server::start("serve", &db.url, &[]).await;
    let port = server.addr.rsplit_once(':').unwrap().1.to_string();
    let profile = tempfile::tempdir().unwrap();
    let rule = "--host-resolver-rules=MAP rebind.attacker.example 127.0.0.1";
    let dump = |url: String| {
        let dom = chromium_run(&chromium, profile.path(), &["--dump-dom", rule], &url);
        assert!(dom.contains("</html>"), "no page from {url}: {dom}");
        dom
    };
    let (rebound, own) = tokio::task::block_in_place(|| {
        (
            dump(format!("http://rebind.attacker.example:{port}/")),
            dump(format!("http://127.0.0.1:{port}/")),
        )
    });
    assert!(
        rebound.contains("Not served under this name") && rebound.contains("DNS rebinding"),
        "the refusal: {rebound}"
    );
    assert!(!rebound.contains("<h1>Overview</h1>"), "{rebound}");
    assert!(!rebound.contains("csrf"), "no token: {rebound}");
    assert!(
        own.contains("<h1>Overview</h1>"),
        "the real name still works: {own}"
    );
}
