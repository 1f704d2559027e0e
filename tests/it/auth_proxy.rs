//! Proxy mode's findings of issue 14, through `web::app` as if over TCP: a duplicated
//! identity header is refused, an IPv4 proxy seen on a dual-stack socket
//! (`::ffff:a.b.c.d`) is trusted, and a proxy user named `token:X` is never written
//! to the attempt log as token X.

use crate::support::TestDb;
use crate::support::as_key;
use crate::support::auth::*;
use crate::ui_seed::seed;
use axum::http::{Method, StatusCode};
use chrono::Utc;
use idemwatch::auth::{AuthFile, Authenticator};
use idemwatch::web::{self, AppState};
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_identity_is_unambiguous_and_kept_apart_from_tokens() {
    let db = TestDb::sqlite().await;
    let s = seed(&db.store, Utc::now(), 0).await;
    let file = AuthFile::parse(
        "mode = \"proxy\"\n[proxy]\ntrusted = [\"10.0.0.0/8\"]\n[proxy.group_roles]\nsupport = \"resolver\"\n",
    )
    .unwrap();
    let app = web::app(
        AppState::new(db.store.clone())
            .with_clock(Arc::new(s.clock.clone()))
            .with_auth(Authenticator::new(Some(file), Some(SECRET)), false),
    );
    let as_user = |method: Method, uri: &str, users: &[&str], peer: &str, body: Option<String>| {
        let mut r = request(method, uri, Who::Anonymous, body);
        for u in users {
            r.headers_mut()
                .append("x-forwarded-user", u.parse().unwrap());
        }
        r.headers_mut()
            .insert("x-forwarded-groups", "support".parse().unwrap());
        r.headers_mut()
            .insert("x-csrf-token", csrf_token().parse().unwrap());
        from_peer(r, peer)
    };

    // A proxy that appends passes the client's header on first: refused, not believed.
    let twice = send(
        &app,
        as_user(
            Method::GET,
            "/backlog",
            &["admin", "ana"],
            "10.1.2.3:4000",
            None,
        ),
    )
    .await;
    assert_eq!(twice.status, StatusCode::UNAUTHORIZED, "{}", twice.body);
    assert!(twice.body.contains("X-Forwarded-User"), "{}", twice.body);

    // The same proxy on a dual-stack listener.
    let mapped = send(
        &app,
        as_user(
            Method::GET,
            "/backlog",
            &["ana"],
            "[::ffff:10.1.2.3]:4000",
            None,
        ),
    )
    .await;
    assert_eq!(mapped.status, StatusCode::OK, "{}", mapped.body);

    // A person called `token:nightly` resolves: the log must not say a token did.
    let uri = format!("/api/v1/keys/{}/resolve", s.unknown);
    let body = r#"{"resolution":"failed","reason":"no refund at the provider"}"#;
    let ok = send(
        &app,
        as_user(
            Method::POST,
            &uri,
            &["token:nightly"],
            "10.1.2.3:4000",
            Some(body.into()),
        ),
    )
    .await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.body);
    let attempts = db.store.attempts(&as_key(&s.unknown)).await.unwrap();
    assert_eq!(attempts.last().unwrap().actor, "user:token:nightly");
}
