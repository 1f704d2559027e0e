//! The resolve workflow as a person does it, in headless Chromium driven by
//! chromedriver (WebDriver: real typing and clicks, real cookies, the real CSP): a
//! resolver signs in, marks the UNKNOWN key DONE with evidence rf_8XM1, confirms, and
//! sees the `resolved` row on the timeline; a viewer sees no resolve control.
//! Screenshots of the confirmation page and the resolved timeline go to
//! docs/screenshots/ under `IDEMWATCH_UPDATE_SCREENSHOTS=1`.
//!
//! Without Chromium or chromedriver the test fails under `CI=true` and skips loudly
//! elsewhere.

use crate::support::TestDb;
use crate::support::as_key;
use crate::support::auth::{HASH, PASSWORD, auth_file_text};
use crate::support::server::Server;
use crate::support::webdriver::{Driver, browser_or_skip, publish_screenshots};
use crate::ui_seed::seed;
use chrono::Utc;
use std::path::Path;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resolver_resolves_an_unknown_key_in_a_real_browser() {
    let Some((chromium, chromedriver)) = browser_or_skip() else {
        return;
    };
    let db = TestDb::sqlite().await;
    let s = seed(&db.store, Utc::now(), 0).await;
    let dir = tempfile::tempdir().unwrap();
    let auth_file = dir.path().join("auth.toml");
    std::fs::write(&auth_file, auth_file_text(&HASH)).unwrap();
    let server = Server::start(
        "serve",
        &db.url,
        &[
            "--auth-file",
            auth_file.to_str().unwrap(),
            "--session-secret",
            "browser-test-secret-0123456789abcdef",
        ],
    )
    .await;
    let base = format!("http://{}", server.addr);
    let profile = tempfile::tempdir().unwrap();
    let shots = tempfile::tempdir().unwrap();
    let (unknown, escalated) = (s.unknown.clone(), s.escalated.clone());
    let shots_dir = shots.path().to_path_buf();
    tokio::task::spawn_blocking(move || {
        let driver = Driver::start(&chromedriver, &chromium, profile.path());
        resolve_as_a_person(&driver, &base, &unknown, &escalated, &shots_dir);
    })
    .await
    .unwrap();

    let last = db
        .store
        .attempts(&as_key(&s.unknown))
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert_eq!(
        (last.kind.as_str(), last.actor.as_str()),
        ("resolved", "sam")
    );
    assert_eq!(last.detail["evidence"], "rf_8XM1");
    drop(server);

    publish_screenshots(shots.path(), ["resolve-confirm.png", "key-resolved.png"]);
}

fn sign_in(d: &Driver, name: &str) {
    d.wait_for("<h1 id=\"login-h\">Sign in</h1>");
    d.type_into("#login-name", name);
    d.type_into("#login-password", PASSWORD);
    d.click(".login button[type=submit]");
    d.wait_for(&format!("Signed in as <strong>{name}</strong>"));
}

fn resolve_as_a_person(d: &Driver, base: &str, unknown: &str, escalated: &str, shots: &Path) {
    // Not signed in: the key page sends the person to the login and back.
    d.goto(&format!("{base}/keys/{unknown}"));
    sign_in(d, "sam");
    assert!(
        d.url().ends_with(&format!("/keys/{unknown}")),
        "{}",
        d.url()
    );
    let page = d.wait_for("class=\"resolve-form stacked-form\"");
    assert!(page.contains("(resolver)"), "the roles are shown");

    d.click("input[name=resolution][value=done]");
    d.type_into(
        "#resolve-reason",
        "Refund rf_8XM1 for order A-2002 is in the provider dashboard, settled 14:02:22",
    );
    d.type_into("#resolve-evidence", "rf_8XM1");
    d.click(".resolve-form button[type=submit]");
    let confirm = d.wait_for("<h1>Confirm: Mark DONE</h1>");
    for needle in [
        "Nothing has been written yet.",
        "<td><code>UNKNOWN</code></td><td><code>DONE</code></td>",
        "<dt>evidence</dt><dd>rf_8XM1</dd>",
        "the provider remembers this key for",
    ] {
        assert!(
            confirm.contains(needle),
            "{needle:?} not on the confirmation page"
        );
    }
    d.screenshot(&shots.join("resolve-confirm.png"));

    d.click(".confirm-form button[type=submit]");
    let timeline = d.wait_for("data-kind=\"resolved\"");
    assert!(timeline.contains("<span class=\"badge badge-resolution\">Decided by a person</span>"));
    assert!(timeline.contains("<code>resolved</code> by sam"));
    assert!(timeline.contains("<dt>evidence</dt><dd>rf_8XM1</dd>"));
    assert!(d.url().ends_with("#timeline-h"), "{}", d.url());
    d.screenshot(&shots.join("key-resolved.png"));

    // A viewer sees the undecided key, and no control to resolve it.
    d.click(".logout button[type=submit]");
    d.wait_for("<h1 id=\"login-h\">Sign in</h1>");
    d.goto(&format!("{base}/keys/{escalated}"));
    sign_in(d, "vic");
    let page = d.wait_for("Needs a person");
    assert!(
        !page.contains("resolve-form"),
        "no resolve form for a viewer"
    );
    assert!(page.contains("Recording the decision needs the resolver role"));
    d.goto(&format!("{base}/backlog"));
    let backlog = d.wait_for("Undecided keys");
    assert!(!backlog.contains("type=\"checkbox\"") && !backlog.contains("bulk-form"));
}
