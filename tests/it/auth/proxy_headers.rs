//! Proxy identity and forwarding headers count only from a trusted proxy.

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
async fn proxy_headers_count_only_from_a_trusted_proxy() {
    let db = TestDb::sqlite().await;
    let s = seed(&db.store, Utc::now(), 0).await;
    let file = AuthFile::parse(
        "mode = \"proxy\"\n[proxy]\ntrusted = [\"10.0.0.0/8\"]\n[proxy.group_roles]\nsupport = \"resolver\"\naudit = \"auditor\"\n",
    )
    .unwrap();
    let app = web::app(
        AppState::new(db.store.clone())
            .with_clock(Arc::new(s.clock.clone()))
            .with_auth(Authenticator::new(Some(file), Some(SECRET)), false),
    );
    let as_ana = |uri: &str, groups: &str, peer: Option<&str>| {
        let mut r = request(Method::GET, uri, Who::Anonymous, None);
        r.headers_mut()
            .insert("x-forwarded-user", "ana@example.com".parse().unwrap());
        r.headers_mut()
            .insert("x-forwarded-groups", groups.parse().unwrap());
        match peer {
            Some(p) => from_peer(r, p),
            None => r,
        }
    };
    let trusted = Some("10.1.2.3:40000");
    let p = send(&app, as_ana("/backlog", "staff,support", trusted)).await;
    assert_eq!(p.status, StatusCode::OK);
    assert!(p.body.contains(
        "Signed in as <strong>ana@example.com</strong> <span class=\"roles\">(resolver)</span>"
    ));
    assert!(
        !p.body.contains("action=\"/logout\""),
        "the proxy owns the session"
    );
    assert_eq!(
        send(&app, as_ana("/export/attempts.csv", "support", trusted))
            .await
            .status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        send(&app, as_ana("/export/attempts.csv", "audit", trusted))
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        send(&app, as_ana("/backlog", "staff", trusted))
            .await
            .status,
        StatusCode::FORBIDDEN,
        "no mapped group"
    );
    // The same headers from anyone else are an attacker's.
    let spoofed = send(
        &app,
        as_ana("/backlog", "support", Some("203.0.113.9:40000")),
    )
    .await;
    assert_eq!(spoofed.status, StatusCode::UNAUTHORIZED);
    assert!(spoofed.body.contains("company login"), "{}", spoofed.body);
    assert_eq!(
        send(&app, as_ana("/backlog", "support", None)).await.status,
        StatusCode::UNAUTHORIZED
    );

    // A proxy user's JSON resolve needs the CSRF header: the browser sends the proxy's cookie.
    let uri = format!("/api/v1/keys/{}/resolve", s.unknown);
    let body = r#"{"resolution":"failed","reason":"no refund at the provider"}"#;
    let mut r = request(Method::POST, &uri, Who::Anonymous, Some(body.into()));
    r.headers_mut()
        .insert("x-forwarded-user", "ana".parse().unwrap());
    r.headers_mut()
        .insert("x-forwarded-groups", "support".parse().unwrap());
    let no_header = send(&app, from_peer(r, "10.1.2.3:40000")).await;
    assert_eq!(no_header.status, StatusCode::FORBIDDEN);
    assert_eq!(
        db.store.attempts(&as_key(&s.unknown)).await.unwrap().len(),
        2,
        "nothing written"
    );
    let mut r = request(Method::POST, &uri, Who::Anonymous, Some(body.into()));
    r.headers_mut()
        .insert("x-forwarded-user", "ana".parse().unwrap());
    r.headers_mut()
        .insert("x-forwarded-groups", "support".parse().unwrap());
    r.headers_mut().insert(
        "x-csrf-token",
        Authenticator::new(None, Some(SECRET))
            .csrf_token(
                &idemwatch::auth::csrf_binding(CSRF_COOKIE),
                Utc::now().timestamp(),
            )
            .parse()
            .unwrap(),
    );
    let ok = send(&app, from_peer(r, "10.1.2.3:40000")).await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.body);
    let attempts = db.store.attempts(&as_key(&s.unknown)).await.unwrap();
    assert_eq!(attempts.last().unwrap().actor, "ana");
}
