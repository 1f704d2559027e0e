//! CSRF refusals write nothing.

use super::setup;
use crate::support::TestDb;
use crate::support::as_key;
use crate::support::auth::*;
use axum::http::{Method, StatusCode};
use chrono::Utc;
use idemwatch::auth::Authenticator;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_wrong_csrf_token_is_refused_and_nothing_is_written() {
    let db = TestDb::sqlite().await;
    let (app, s) = setup(&db).await;
    let before = db.store.attempts(&as_key(&s.unknown)).await.unwrap().len();
    let record = db.store.record(&as_key(&s.unknown)).await.unwrap().unwrap();
    let token = record.fencing_token.to_string();
    let resolve = |csrf: Option<&str>| {
        let mut f = vec![
            ("resolution", "failed"),
            ("reason", "no refund at the provider"),
            ("expected_token", token.as_str()),
            ("confirm", "yes"),
        ];
        if let Some(c) = csrf {
            f.push(("csrf_token", c));
        }
        form(&f)
    };
    let uri = format!("/keys/{}/resolve", s.unknown);
    let other_browser = Authenticator::new(None, Some(SECRET)).csrf_token(
        &idemwatch::auth::csrf_binding("another-browser's-cookie-value-xxxxxxxxxxx"),
        Utc::now().timestamp(),
    );
    for (what, body) in [
        ("missing", resolve(None)),
        ("forged", resolve(Some("forged"))),
        ("another browser's", resolve(Some(&other_browser))),
    ] {
        let a = call(&app, Method::POST, &uri, Who::Session("sam"), Some(body)).await;
        assert_eq!(a.status, StatusCode::FORBIDDEN, "{what}");
        assert!(a.body.contains("CSRF"), "{what}: {}", a.body);
    }
    // (A session's token is bound to the session itself, not to whatever CSRF cookie
    // comes with it: see auth_sessions.rs, a planted CSRF cookie.)
    // Bulk, and JSON by a session without the header.
    let bulk = form(&[
        ("scope", "selected"),
        ("key", &format!("{}.{token}", s.unknown)),
        ("resolution", "failed"),
        ("reason", "r"),
        ("confirm", "yes"),
    ]);
    let a = call(
        &app,
        Method::POST,
        "/backlog/resolve",
        Who::Session("sam"),
        Some(bulk),
    )
    .await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    let mut r = request(
        Method::POST,
        &format!("/api/v1/keys/{}/resolve", s.unknown),
        Who::Session("sam"),
        Some(r#"{"resolution":"failed","reason":"r"}"#.into()),
    );
    r.headers_mut().remove("x-csrf-token");
    let a = send(&app, r).await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    assert!(a.body.contains("X-CSRF-Token"), "{}", a.body);

    let after = db.store.attempts(&as_key(&s.unknown)).await.unwrap();
    assert_eq!(after.len(), before, "no attempt row: {after:#?}");
    assert_eq!(
        db.store.record(&as_key(&s.unknown)).await.unwrap().unwrap(),
        record
    );
}
