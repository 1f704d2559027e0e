//! What `serve` writes to its log under attack (issue 47), over real TCP: a stream of
//! bad bearer tokens logs a few lines, not one per request, while
//! `idemwatch_auth_refusals_total` counts every one; and a secret in a database URL
//! parameter the driver does not know (`sslpassword=…`) never reaches the log.

use crate::support::TestDb;
use crate::support::server::{Server, get, send_raw};
use idemwatch::auth::secrets;
use idemwatch::web::auth_log::{BURST, INTERVAL};
use std::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tokens_are_counted_every_one_and_logged_a_few_lines_per_interval() {
    let db = TestDb::sqlite().await;
    let dir = tempfile::tempdir().unwrap();
    let auth = dir.path().join("auth.toml");
    std::fs::write(
        &auth,
        format!(
            "mode = \"builtin\"\n[[tokens]]\nname = \"ops\"\nsha256 = \"{}\"\nroles = [\"viewer\"]\n",
            secrets::hash_token("iw_the_real_one")
        ),
    )
    .unwrap();
    let server = Server::start("serve", &db.url, &["--auth-file", auth.to_str().unwrap()]).await;
    let addr = server.addr.clone();
    let started = Instant::now();
    let n = 300;
    for i in 0..n {
        let (code, _) = send_raw(
            &addr,
            &format!(
                "GET /api/v1/csrf HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer iw_guess_{i}\r\nConnection: close\r\n\r\n"
            ),
        )
        .await
        .unwrap();
        assert_eq!(code, 401);
    }
    let elapsed = started.elapsed();
    let (code, metrics) = get(&addr, "/metrics").await.unwrap();
    let out = server.terminate();
    let log = String::from_utf8_lossy(&out.stderr);
    let lines = log.matches("refused credentials").count();
    // A burst per interval begun during the run.
    let intervals = elapsed.as_secs() / INTERVAL.as_secs() + 1;
    let most = BURST as usize * intervals as usize;
    assert!(
        (1..=most).contains(&lines),
        "{lines} lines for {n} bad tokens in {elapsed:?} (at most {most}; before: one each)"
    );
    assert_eq!(code, 200);
    assert!(
        metrics.contains(&format!(
            "idemwatch_auth_refusals_total{{reason=\"bad_token\"}} {n}"
        )),
        "{metrics}"
    );
    assert!(metrics.contains("idemwatch_auth_refusals_total{reason=\"csrf\"} 0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_in_an_unknown_database_url_parameter_is_never_logged() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let secret = "s3cret-client-key-passphrase";
    let separator = if db.url.contains('?') { '&' } else { '?' };
    let url = format!("{}{separator}sslpassword={secret}", db.url);
    let server = Server::start("serve", &url, &[]).await;
    let out = server.terminate();
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!log.contains(secret), "the secret was logged:\n{log}");
    assert!(
        log.contains("ignoring unrecognized database URL parameter") && log.contains("sslpassword"),
        "the key is still named:\n{log}"
    );
}
