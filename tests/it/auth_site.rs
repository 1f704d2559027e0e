//! DNS rebinding and cross-site requests through `web::app` (docs/AUTH.md, "Security"):
//! without an auth file only loopback and `--allowed-host` names are served; in every
//! mode a state-changing request that a browser says came from another site is refused
//! before anything is written.

use crate::both_backends;
use crate::support::TestDb;
use crate::support::as_key;
use crate::support::auth::*;
use crate::ui_seed::{Seeded, seed};
use axum::Router;
use axum::body::Body;
use axum::http::{HeaderValue, Method, Request, StatusCode};
use chrono::Utc;
use idemwatch::auth::{AllowedHosts, Authenticator};
use idemwatch::web::{self, AppState};
use std::sync::Arc;

pub const FOREIGN: &str = "rebind.attacker.example:8080";

/// The default mode (no auth file: everyone is the local admin), with `allowed` hosts.
fn local_app(db: &TestDb, s: &Seeded, allowed: &[&str]) -> Router {
    let auth = Authenticator::new(None, Some(SECRET))
        .with_allowed_hosts(AllowedHosts::parse(allowed).unwrap());
    web::app(
        AppState::new(db.store.clone())
            .with_clock(Arc::new(s.clock.clone()))
            .with_auth(auth, false),
    )
}

fn with(mut request: Request<Body>, headers: &[(&'static str, &str)]) -> Request<Body> {
    for (k, v) in headers {
        request
            .headers_mut()
            .insert(*k, HeaderValue::from_str(v).unwrap());
    }
    request
}

/// GET `path` as `who`, addressed to `host`.
async fn get_under(app: &Router, who: Who<'_>, path: &str, host: &str) -> Answer {
    send(
        app,
        with(request(Method::GET, path, who, None), &[("host", host)]),
    )
    .await
}

/// Step 2 of the resolve form (recorded at once), with a valid CSRF token.
fn confirm_done(evidence: &str) -> String {
    form(&[
        ("resolution", "done"),
        ("reason", "checked the provider dashboard"),
        ("evidence", evidence),
        ("result", ""),
        ("expected_token", "1"),
        ("csrf_token", &csrf_token()),
        ("confirm", "yes"),
    ])
}

fn json_resolve() -> String {
    r#"{"resolution":"failed","reason":"attacker","expected_token":1}"#.into()
}

async fn attempt_count(db: &TestDb, key: &str) -> usize {
    db.store.attempts(&as_key(key)).await.unwrap().len()
}

both_backends!(
    async fn without_auth_a_foreign_host_gets_nothing_and_changes_nothing(db: TestDb) {
        let s = seed(&db.store, Utc::now(), 0).await;
        let app = local_app(&db, &s, &[]);
        let host = [("host", FOREIGN)];
        for path in [
            "/".to_string(),
            "/keys".into(),
            "/backlog".into(),
            format!("/keys/{}", s.unknown),
            format!("/api/v1/keys/{}", s.unknown),
            "/api/v1/csrf".into(),
            "/login".into(),
            "/no-such-page".into(),
        ] {
            let a = get_under(&app, Who::Anonymous, &path, FOREIGN).await;
            assert_eq!(
                a.status,
                StatusCode::MISDIRECTED_REQUEST,
                "{path}: {}",
                a.body
            );
            assert!(
                a.body.contains("--allowed-host rebind.attacker.example"),
                "{path}: {}",
                a.body
            );
            assert!(a.body.contains("DNS rebinding"), "{path}: {}", a.body);
            assert!(
                !a.body.contains(&csrf_token()),
                "{path}: no CSRF token handed out"
            );
            assert!(a.set_cookies().is_empty(), "{path}: no cookie either");
            assert!(a.headers.contains_key("content-security-policy"), "{path}");
        }
        let a = send(
            &app,
            with(
                request(Method::GET, "/api/v1/csrf", Who::Anonymous, None),
                &host,
            ),
        )
        .await;
        let json: serde_json::Value = serde_json::from_str(&a.body).unwrap();
        assert_eq!(
            (json["status"].clone(), json["code"].clone()),
            (
                serde_json::json!(421),
                serde_json::json!("misdirected_host")
            ),
            "the problem shape under /api/"
        );

        // Resolving, with a valid CSRF cookie and token, by form and by JSON: refused,
        // and the key's log is untouched.
        let before = attempt_count(&db, &s.unknown).await;
        let uri = format!("/keys/{}/resolve", s.unknown);
        let a = send(
            &app,
            with(
                request(
                    Method::POST,
                    &uri,
                    Who::Anonymous,
                    Some(confirm_done("attacker")),
                ),
                &host,
            ),
        )
        .await;
        assert_eq!(a.status, StatusCode::MISDIRECTED_REQUEST, "{}", a.body);
        let mut json = request(
            Method::POST,
            &format!("/api/v1/keys/{}/resolve", s.unknown),
            Who::Anonymous,
            Some(json_resolve()),
        );
        json.headers_mut().insert(
            "x-csrf-token",
            HeaderValue::from_str(&csrf_token()).unwrap(),
        );
        let a = send(&app, with(json, &host)).await;
        assert_eq!(a.status, StatusCode::MISDIRECTED_REQUEST, "{}", a.body);
        assert_eq!(
            attempt_count(&db, &s.unknown).await,
            before,
            "nothing was written"
        );

        // Probes answer whatever the name: a kubelet or Prometheus uses the pod's address.
        for probe in ["/healthz", "/readyz", "/metrics", "/static/app.css"] {
            let a = get_under(&app, Who::Anonymous, probe, FOREIGN).await;
            assert_eq!(a.status, StatusCode::OK, "{probe}");
        }

        // The same resolve under a loopback name goes through.
        let a = send(
            &app,
            with(
                request(
                    Method::POST,
                    &uri,
                    Who::Anonymous,
                    Some(confirm_done("rf_1")),
                ),
                &[("host", "127.0.0.1:8080")],
            ),
        )
        .await;
        assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
        assert_eq!(attempt_count(&db, &s.unknown).await, before + 1);
    }
);

#[tokio::test]
async fn without_auth_loopback_names_and_configured_names_are_served() {
    let db = TestDb::sqlite().await;
    let s = seed(&db.store, Utc::now(), 0).await;
    let app = local_app(&db, &s, &["idemwatch.internal", "box.lan:9000"]);
    for host in [
        "localhost",
        "localhost:8080",
        "127.0.0.1:8080",
        "127.0.0.2",
        "[::1]:8080",
        "idemwatch.internal",
        "idemwatch.internal:8080",
        "box.lan:9000",
    ] {
        let a = get_under(&app, Who::Anonymous, "/", host).await;
        assert_eq!(a.status, StatusCode::OK, "{host}: {}", a.body);
    }
    for host in [
        "box.lan:9001",
        "idemwatch.internal.attacker.example",
        "10.0.0.5:8080",
    ] {
        let a = get_under(&app, Who::Anonymous, "/", host).await;
        assert_eq!(a.status, StatusCode::MISDIRECTED_REQUEST, "{host}");
    }
}

#[tokio::test]
async fn with_an_auth_file_the_host_name_is_not_checked() {
    let db = TestDb::sqlite().await;
    let s = seed(&db.store, Utc::now(), 0).await;
    let app = builtin_app(&db.store, Arc::new(s.clock.clone())).await;
    let a = get_under(&app, Who::Session("vic"), "/", "idemwatch.example.com").await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
}

both_backends!(
    async fn a_cross_site_post_is_refused_in_every_mode_before_anything_is_written(db: TestDb) {
        let s = seed(&db.store, Utc::now(), 0).await;
        let local = local_app(&db, &s, &[]);
        let builtin = builtin_app(&db.store, Arc::new(s.clock.clone())).await;
        let uri = format!("/keys/{}/resolve", s.unknown);
        let api = format!("/api/v1/keys/{}/resolve", s.unknown);
        let before = attempt_count(&db, &s.unknown).await;
        let host = ("host", "127.0.0.1:8080");
        for (mode, app, who) in [
            ("default", &local, Who::Anonymous),
            ("builtin", &builtin, Who::Session("sam")),
        ] {
            for refused in [
                [host, ("origin", "http://evil.example")],
                [host, ("origin", "null")],
                [host, ("sec-fetch-site", "cross-site")],
                [host, ("sec-fetch-site", "same-site")],
            ] {
                let a = send(
                    app,
                    with(
                        request(Method::POST, &uri, who, Some(confirm_done("attacker"))),
                        &refused,
                    ),
                )
                .await;
                assert_eq!(
                    a.status,
                    StatusCode::FORBIDDEN,
                    "{mode} {refused:?}: {}",
                    a.body
                );
                assert!(
                    a.body.contains("cross-site request refused"),
                    "{mode}: {}",
                    a.body
                );
                let a = send(
                    app,
                    with(
                        request(Method::POST, &api, who, Some(json_resolve())),
                        &refused,
                    ),
                )
                .await;
                assert_eq!(
                    a.status,
                    StatusCode::FORBIDDEN,
                    "{mode} JSON {refused:?}: {}",
                    a.body
                );
                let a = send(
                    app,
                    with(
                        request(
                            Method::POST,
                            "/logout",
                            who,
                            Some(form(&[("csrf_token", &csrf_token())])),
                        ),
                        &refused,
                    ),
                )
                .await;
                assert_eq!(a.status, StatusCode::FORBIDDEN, "{mode} logout {refused:?}");
                let a = send(
                    app,
                    with(
                        request(
                            Method::POST,
                            "/login",
                            Who::Anonymous,
                            Some(form(&[
                                ("name", "sam"),
                                ("password", PASSWORD),
                                ("csrf_token", &csrf_token()),
                            ])),
                        ),
                        &refused,
                    ),
                )
                .await;
                assert_eq!(a.status, StatusCode::FORBIDDEN, "{mode} login {refused:?}");
            }
        }
        assert_eq!(
            attempt_count(&db, &s.unknown).await,
            before,
            "nothing was written"
        );

        // This site's own pages: the same origin (and the browser saying so) pass.
        let own = [
            host,
            ("origin", "http://127.0.0.1:8080"),
            ("sec-fetch-site", "same-origin"),
        ];
        let a = send(
            &builtin,
            with(
                request(
                    Method::POST,
                    &uri,
                    Who::Session("sam"),
                    Some(confirm_done("rf_1")),
                ),
                &own,
            ),
        )
        .await;
        assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
        assert_eq!(attempt_count(&db, &s.unknown).await, before + 1);
    }
);
