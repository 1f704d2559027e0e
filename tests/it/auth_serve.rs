//! The secure default of the real binary, authentication over real TCP connections
//! (the peer address comes from the socket), and the two secret-writing commands.

use crate::support::TestDb;
use crate::support::auth::{HASH, PASSWORD, auth_file_text};
use crate::support::server::{Server, free_port, get};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn idemwatch() -> Command {
    Command::new(env!("CARGO_BIN_EXE_idemwatch"))
}

#[tokio::test]
async fn a_public_address_without_auth_is_refused_unless_insecure_is_explicit() {
    let db = TestDb::sqlite().await;
    let port = free_port();
    let listen = format!("0.0.0.0:{port}");
    let out = idemwatch()
        .args(["serve", "--listen", &listen, "--database-url", &db.url])
        .env_remove("IDEMWATCH_AUTH_FILE")
        .env_remove("IDEMWATCH_INSECURE_NO_AUTH")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "error: refusing to serve on {listen} without authentication"
        )),
        "{err}"
    );
    for how in [
        "--auth-file",
        "--listen 127.0.0.1:8080",
        "--insecure-no-auth",
    ] {
        assert!(err.contains(how), "says how: {how}: {err}");
    }
    assert!(!err.contains("panicked"));

    let mut child = idemwatch()
        .args([
            "serve",
            "--listen",
            &listen,
            "--database-url",
            &db.url,
            "--insecure-no-auth",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let local = format!("127.0.0.1:{port}");
    let started = Instant::now();
    let mut answered = None;
    while started.elapsed() < Duration::from_secs(30) {
        if let Ok((200, _)) = get(&local, "/healthz").await {
            answered = Some(get(&local, "/").await.unwrap().0);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(
        answered,
        Some(200),
        "--insecure-no-auth serves, everyone as admin"
    );
}

#[tokio::test]
async fn built_in_and_proxy_auth_work_over_real_connections() {
    let db = TestDb::sqlite().await;
    let dir = tempfile::tempdir().unwrap();
    let builtin = dir.path().join("builtin.toml");
    std::fs::write(&builtin, auth_file_text(&HASH)).unwrap();
    let secret = "0123456789abcdef0123456789abcdef";
    let server = Server::start(
        "serve",
        &db.url,
        &[
            "--auth-file",
            builtin.to_str().unwrap(),
            "--session-secret",
            secret,
        ],
    )
    .await;
    let (status, _) = get(&server.addr, "/").await.unwrap();
    assert_eq!(status, 303, "to the login page");
    let (status, body) = get(&server.addr, "/login").await.unwrap();
    assert_eq!(status, 200);
    assert!(body.contains("<h1 id=\"login-h\">Sign in</h1>"));
    assert_eq!(
        get(&server.addr, "/metrics").await.unwrap().0,
        200,
        "Prometheus scrapes without credentials"
    );
    drop(server);

    // Proxy headers are believed from 127.0.0.1 because the socket says so.
    let proxy = dir.path().join("proxy.toml");
    std::fs::write(
        &proxy,
        "mode = \"proxy\"\n[proxy]\ntrusted = [\"127.0.0.1\"]\ndefault_role = \"viewer\"\n",
    )
    .unwrap();
    let server = Server::start("serve", &db.url, &["--auth-file", proxy.to_str().unwrap()]).await;
    let (status, _) = get(&server.addr, "/keys").await.unwrap();
    assert_eq!(status, 401, "no user header");
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(&server.addr).await.unwrap();
    let request = format!(
        "GET /keys HTTP/1.1\r\nHost: {}\r\nX-Forwarded-User: ana\r\nConnection: close\r\n\r\n",
        server.addr
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.unwrap();
    assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
    assert!(raw.contains("Signed in as <strong>ana</strong>"));
    assert!(
        raw.to_ascii_lowercase()
            .contains("content-security-policy: default-src 'self'")
    );
}

#[test]
fn hash_password_reads_stdin_and_new_token_prints_its_entry() {
    let mut child = idemwatch()
        .arg("hash-password")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{PASSWORD}\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let phc = String::from_utf8(out.stdout).unwrap();
    assert!(phc.starts_with("$argon2id$"), "{phc}");
    assert!(idemwatch::auth::secrets::verify_password(
        PASSWORD,
        phc.trim()
    ));

    let out = idemwatch()
        .args(["new-token", "--name", "nightly-export", "--role", "auditor"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let token = text
        .lines()
        .next()
        .unwrap()
        .strip_prefix("token: ")
        .unwrap();
    assert!(token.starts_with("iw_"));
    assert!(
        text.contains(&format!(
            "[[tokens]]\nname = \"nightly-export\"\nsha256 = \"{}\"\nroles = [\"auditor\"]",
            idemwatch::auth::secrets::hash_token(token)
        )),
        "{text}"
    );
}
