//! The security headers on every kind of response.

use super::setup;
use crate::support::TestDb;
use crate::support::auth::*;
use axum::http::Method;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_response_carries_the_security_headers() {
    let db = TestDb::sqlite().await;
    let (app, s) = setup(&db).await;
    let cases = [
        (Method::GET, "/".to_string(), Who::Session("vic")),
        (
            Method::GET,
            format!("/keys/{}", s.unknown),
            Who::Session("vic"),
        ),
        (Method::GET, "/nowhere".into(), Who::Session("vic")),
        (
            Method::GET,
            "/keys?from=yesterday".into(),
            Who::Session("vic"),
        ),
        (Method::GET, "/static/app.css".into(), Who::Anonymous),
        (Method::GET, "/static/nothing.css".into(), Who::Anonymous),
        (
            Method::GET,
            format!("/api/v1/keys/{}", s.unknown),
            Who::Token("vic"),
        ),
        (Method::GET, "/api/v1/keys/nope".into(), Who::Token("vic")),
        (Method::GET, "/api/v1/keys/x".into(), Who::Anonymous),
        (
            Method::GET,
            "/export/attempts.csv".into(),
            Who::Token("vic"),
        ),
        (Method::GET, "/metrics".into(), Who::Anonymous),
        (Method::GET, "/healthz".into(), Who::Anonymous),
        (Method::GET, "/login".into(), Who::Anonymous),
        (Method::GET, "/backlog".into(), Who::Anonymous),
    ];
    let mut statuses = Vec::new();
    for (method, uri, who) in cases {
        let a = call(&app, method, &uri, who, None).await;
        statuses.push(a.status.as_u16());
        let h = |name: &str| a.headers.get(name).map(|v| v.to_str().unwrap().to_string());
        assert_eq!(
            h("content-security-policy").as_deref(),
            Some(
                "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
            ),
            "{uri}"
        );
        assert_eq!(
            h("x-content-type-options").as_deref(),
            Some("nosniff"),
            "{uri}"
        );
        assert_eq!(
            h("referrer-policy").as_deref(),
            Some("same-origin"),
            "{uri}"
        );
        assert_eq!(h("x-frame-options").as_deref(), Some("DENY"), "{uri}");
    }
    assert_eq!(
        statuses,
        [
            200, 200, 404, 400, 200, 404, 200, 400, 401, 403, 200, 200, 200, 303
        ]
    );
}
