//! A token's `tenants` limit holds on every route, not only the guard's (issue 47):
//! an admin token limited to `acme` can neither read nor resolve a `globex` key, nor
//! export or list `globex`, and pages that show every tenant are refused to it.

use crate::both_backends;
use crate::support::app::send;
use crate::support::auth::{CSRF_COOKIE, SECRET, form};
use crate::ui_seed::seed;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use chrono::Utc;
use idemwatch::auth::{AuthFile, Authenticator, secrets};
use idemwatch::guard::Status;
use idemwatch::web::{self, AppState};
use std::sync::Arc;

const LIMITED: &str = "iw_limited_to_acme";
const UNLIMITED: &str = "iw_every_tenant";

fn auth_file_text() -> String {
    format!(
        "mode = \"builtin\"\n\
         [[tokens]]\nname = \"acme-admin\"\nsha256 = \"{}\"\nroles = [\"admin\"]\ntenants = [\"acme\"]\n\
         [[tokens]]\nname = \"root\"\nsha256 = \"{}\"\nroles = [\"admin\"]\n",
        secrets::hash_token(LIMITED),
        secrets::hash_token(UNLIMITED)
    )
}

fn auth() -> Authenticator {
    let file = AuthFile::parse(&auth_file_text()).unwrap();
    Authenticator::new(Some(file), Some(SECRET))
}

/// `idemwatch tokens` lists the limits the server applies (above, on every route).
#[test]
fn idemwatch_tokens_lists_the_limited_token_with_its_tenants() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("auth.toml");
    std::fs::write(&path, auth_file_text()).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_idemwatch"))
        .args(["tokens", "--auth-file", path.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("acme-admin\tadmin\tacme\tany\tnever"),
        "{text}"
    );
    assert!(text.contains("root\tadmin\tany\tany\tnever"), "{text}");
}

fn request(method: Method, uri: &str, token: &str, body: Option<String>) -> Request<Body> {
    let b = Request::builder()
        .method(method)
        .uri(uri)
        .header("authorization", format!("Bearer {token}"))
        .header("cookie", format!("idemwatch_csrf={CSRF_COOKIE}"));
    match body {
        Some(body) if body.starts_with('{') => b
            .header("content-type", "application/json")
            .body(Body::from(body)),
        Some(body) => b
            .header("content-type", "application/x-www-form-urlencoded")
            .body(Body::from(body)),
        None => b.body(Body::empty()),
    }
    .unwrap()
}

both_backends!(
    async fn a_token_limited_to_one_tenant_reaches_no_other_tenant_on_any_route(db: TestDb) {
        let s = seed(&db.store, Utc::now(), 0).await;
        let state = AppState::new(db.store.clone())
            .with_clock(Arc::new(s.clock.clone()))
            .with_auth(auth(), false);
        let app = web::app(state);
        let call = |method: Method, uri: String, token: &'static str, body: Option<String>| {
            let app = app.clone();
            async move { send(&app, request(method, &uri, token, body)).await }
        };
        let refused = |a: &crate::support::app::Page, what: &str| {
            assert_eq!(a.status, StatusCode::FORBIDDEN, "{what}: {}", a.body);
            assert!(a.body.contains("acme-admin"), "{what}: {}", a.body);
            assert!(
                !a.body.contains("globex") && !a.body.contains("send_message"),
                "{what}: a refusal must not name the other key's tenant or tool: {}",
                a.body
            );
        };
        let (globex, acme) = (s.escalated.clone(), s.unknown.clone());
        let failed = r#"{"resolution":"failed","reason":"provider says no charge"}"#;

        // One key: read, page, resolve (JSON, form, bulk), each refused for globex.
        let key = idemwatch::guard::IdempotencyKey::parse(&globex).unwrap();
        let token = db
            .store
            .record(&key)
            .await
            .unwrap()
            .unwrap()
            .fencing_token
            .0;
        let reason = ("reason", "provider says no charge");
        let resolve_form = form(&[("resolution", "failed"), reason, ("confirm", "yes")]);
        let item = format!("{globex}.{token}");
        let bulk_form = form(&[
            ("resolution", "failed"),
            reason,
            ("key", &item),
            ("confirm", "yes"),
        ]);
        let attempts: [(Method, String, Option<String>); 5] = [
            (Method::GET, format!("/api/v1/keys/{globex}"), None),
            (Method::GET, format!("/keys/{globex}"), None),
            (
                Method::POST,
                format!("/api/v1/keys/{globex}/resolve"),
                Some(failed.into()),
            ),
            (
                Method::POST,
                format!("/keys/{globex}/resolve"),
                Some(resolve_form),
            ),
            (Method::POST, "/backlog/resolve".into(), Some(bulk_form)),
        ];
        for (method, uri, body) in attempts {
            let a = call(method, uri.clone(), LIMITED, body).await;
            refused(&a, &uri);
        }
        // The router decodes `%61` to `a`: the check reads the key the same way.
        let spelled = format!("/keys/%{:x}{}", globex.as_bytes()[0], &globex[1..]);
        let a = call(Method::GET, spelled, LIMITED, None).await;
        assert!(
            a.status.is_client_error() && a.status != StatusCode::NOT_FOUND,
            "{}",
            a.body
        );
        let record = db.store.record(&key).await.unwrap().unwrap();
        assert_eq!(record.status, Status::Unknown, "nothing was resolved");

        // Its own tenant works as before.
        let a = call(Method::GET, format!("/api/v1/keys/{acme}"), LIMITED, None).await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.body);
        let a = call(
            Method::POST,
            format!("/api/v1/keys/{acme}/resolve"),
            LIMITED,
            Some(failed.into()),
        )
        .await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.body);

        // Exports: only filtered by its tenant.
        for q in ["tenant=globex", "", "tenant=acme&tenant=globex", "tenant="] {
            let a = call(
                Method::GET,
                format!("/export/attempts.csv?{q}"),
                LIMITED,
                None,
            )
            .await;
            assert_eq!(a.status, StatusCode::FORBIDDEN, "export ?{q}: {}", a.body);
            assert!(a.body.contains("add tenant="), "{}", a.body);
        }
        let a = call(
            Method::GET,
            "/export/attempts.ndjson?tenant=acme".into(),
            LIMITED,
            None,
        )
        .await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.body);
        assert!(a.body.contains("\"acme\"") && !a.body.contains("globex"));
        let all = call(
            Method::GET,
            "/export/attempts.ndjson".into(),
            UNLIMITED,
            None,
        )
        .await;
        assert!(
            all.body.contains("globex"),
            "the unlimited token sees globex"
        );

        // Lists: only its tenant; pages across tenants are refused.
        let a = call(Method::GET, "/keys?tenant=acme".into(), LIMITED, None).await;
        assert_eq!(a.status, StatusCode::OK);
        assert!(a.body.contains(&acme[..12]) && !a.body.contains(&globex[..12]));
        let a = call(Method::GET, "/keys".into(), LIMITED, None).await;
        assert_eq!(a.status, StatusCode::FORBIDDEN);
        for page in [
            "/",
            "/backlog",
            "/duplicates",
            "/search?q=A-88214",
            "/runbook",
        ] {
            let a = call(Method::GET, page.into(), LIMITED, None).await;
            refused(&a, page);
            let a = call(Method::GET, page.into(), UNLIMITED, None).await;
            assert!(
                !a.status.is_client_error(),
                "{page} for the unlimited admin: {}",
                a.status
            );
        }
    }
);
