//! The medium and low findings of issue 14 (docs/AUTH.md, "Security"), one test each,
//! through `web::app`: what an attacker sends, and the 3xx/4xx that must answer it.

use crate::support::TestDb;
use crate::support::auth::*;
use crate::ui_seed::seed;
use axum::Router;
use axum::http::{Method, StatusCode};
use chrono::Utc;
use std::sync::Arc;

async fn setup(db: &TestDb) -> Router {
    let s = seed(&db.store, Utc::now(), 0).await;
    builtin_app(&db.store, Arc::new(s.clock.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_sign_in_next_never_leaves_the_site_and_never_fails() {
    let db = TestDb::sqlite().await;
    let app = setup(&db).await;
    // Signed in, `/login?next=…` goes straight to `next`: the same check as after a
    // sign-in. `%09` is a tab, which browsers drop: `/\t/evil.example` is `//evil.example`.
    for (next, to) in [
        ("%2F%09%2Fevil.example", "/"),
        ("%2F%0A%2Fevil.example", "/"),
        ("%2F%5Cevil.example", "/"),
        ("%2F.%2F%2Fevil.example", "/"),
        ("https%3A%2F%2Fevil.example", "/"),
        ("javascript%3Aalert(1)", "/"),
        ("%2F%252F%252Fevil.example", "/%2F%2Fevil.example"),
        ("%2Fkeys%01x", "/keys%01x"),
        ("%2Fkeys%3Ftool%3Da", "/keys?tool=a"),
    ] {
        let r = call(
            &app,
            Method::GET,
            &format!("/login?next={next}"),
            Who::Session("vic"),
            None,
        )
        .await;
        assert_eq!(r.status, StatusCode::SEE_OTHER, "{next}: {}", r.body);
        assert_eq!(r.location(), to, "{next}");
    }
    // Anonymous, the form keeps only the safe value.
    let r = call(
        &app,
        Method::GET,
        "/login?next=%2F%09%2Fevil.example",
        Who::Anonymous,
        None,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.body.contains("name=\"next\" value=\"/\""), "{}", r.body);
}
