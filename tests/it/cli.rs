//! The binary as users run it: `key`, `fingerprint`, `migrate`, `serve`.

use crate::support::TestDb;
use crate::support::server::{Server, get};
use std::process::Command;

fn idemwatch(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_idemwatch"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        String::from_utf8_lossy(&out.stderr).trim().to_string(),
    )
}

#[test]
fn key_prints_the_sha256_of_the_canonical_intent() {
    let (code, out, _) = idemwatch(&[
        "key",
        "--tenant",
        "acme",
        "--tool",
        "issue_refund",
        "--workflow-id",
        "run-7f3a",
        "--step-id",
        "4",
        "--intent-id",
        "refund:order-A-88214",
    ]);
    assert_eq!(code, 0);
    // sha256 of {"intent_id":"refund:order-A-88214","step_id":"4","tenant":"acme","tool":"issue_refund","workflow_id":"run-7f3a"}
    assert_eq!(
        out,
        "e55d58980962737c8863ac27f3757a238f665bd9fab5bae0425e4d95a5375b08"
    );
}

#[test]
fn fingerprint_ignores_free_text_key_order_and_number_spelling() {
    let (code, a, _) = idemwatch(&[
        "fingerprint",
        "--args",
        r#"{"order":"A-88214","amount_p":4500,"reason":"late"}"#,
        "--exclude",
        "reason",
    ]);
    assert_eq!(code, 0);
    let (_, b, _) = idemwatch(&[
        "fingerprint",
        "--args",
        r#"{ "amount_p": 4500.0, "order": "A-88214" }"#,
    ]);
    assert_eq!(a, b);
    // sha256 of {"amount_p":4500,"order":"A-88214"}
    assert_eq!(
        a,
        "00a306a9b5ce3568ed945fd88471265770260cdd540aedbe4ad976fd5a64185f"
    );
}

#[test]
fn bad_input_is_a_clear_one_line_error_not_a_panic() {
    let (code, _, err) = idemwatch(&["fingerprint", "--args", "{\"a\":"]);
    assert_eq!(code, 1);
    assert!(err.starts_with("error: --args is not valid JSON"), "{err}");
    let (code, _, err) = idemwatch(&["fingerprint", "--args", "[1,2]"]);
    assert_eq!(code, 1);
    assert!(err.contains("must be a JSON object"), "{err}");
    let (code, _, err) = idemwatch(&[
        "key",
        "--tenant",
        "",
        "--tool",
        "t",
        "--workflow-id",
        "w",
        "--step-id",
        "s",
        "--intent-id",
        "i",
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("tenant must not be empty"), "{err}");
    let (code, _, err) = idemwatch(&["migrate", "--database-url", "mysql://db/x"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("must start with postgres://, postgresql:// or sqlite://"),
        "{err}"
    );
    assert!(!err.contains("panicked"));
}

#[tokio::test]
async fn serve_answers_health_and_readiness_and_stops_on_sigterm() {
    let db = TestDb::sqlite().await;
    let server = Server::start("serve", &db.url, &[]).await;
    assert_eq!(get(&server.addr, "/healthz").await.unwrap().0, 200);
    let (status, body) = get(&server.addr, "/readyz").await.unwrap();
    assert_eq!(status, 200, "{body}");
    let out = server.terminate();
    assert!(
        out.status.success(),
        "graceful shutdown exits 0: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("stopped"));
}

#[tokio::test]
async fn readiness_fails_when_the_database_is_gone() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let server = Server::start("serve", &db.url, &[]).await;
    assert_eq!(get(&server.addr, "/readyz").await.unwrap().0, 200);
    let name = db.url.rsplit('/').next().unwrap().to_string();
    let admin = crate::support::pg::admin_url().await.unwrap();
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin)
        .await
        .unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE {name} WITH (FORCE)"
    )))
    .execute(&mut conn)
    .await
    .unwrap();
    let (status, body) = get(&server.addr, "/readyz").await.unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("unavailable"), "{body}");
    assert_eq!(
        get(&server.addr, "/healthz").await.unwrap().0,
        200,
        "the process itself is fine"
    );
}

#[test]
fn no_migrate_refuses_an_unmigrated_database_and_migrate_creates_a_plain_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("fresh.db").display());
    let (code, _, err) = idemwatch(&["prune", "--database-url", &url, "--no-migrate"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("not ready (--no-migrate)") && err.contains("idemwatch migrate"),
        "{err}"
    );
    let (code, _, err) = idemwatch(&["migrate", "--database-url", &url]);
    assert_eq!(
        code, 0,
        "a plain sqlite://FILE is created by migrate: {err}"
    );
    let (code, _, err) = idemwatch(&["prune", "--database-url", &url, "--no-migrate"]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn help_never_prints_the_database_password_from_the_environment() {
    for command in ["serve", "migrate", "export", "demo"] {
        let out = Command::new(env!("CARGO_BIN_EXE_idemwatch"))
            .args([command, "--help"])
            .env("DATABASE_URL", "postgres://app:s3cret-db@db/idem")
            .env(
                "IDEMWATCH_DEMO_DATABASE_URL",
                "postgres://app:s3cret-demo@db/idem",
            )
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{command}: {text}");
        assert!(!text.contains("s3cret"), "{command} --help: {text}");
    }
}
