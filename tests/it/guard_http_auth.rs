//! Who may call the guard over HTTP (docs/AUTH.md): bearer tokens with the `worker`
//! or `admin` role, limited to their tenants and tools; a worker reaches nothing else;
//! sessions (even an admin's) and other roles do not reach the guard.

use crate::both_backends;
use crate::support::auth::HASH;
use crate::support::fixture::refund;
use crate::support::guard_api::GuardApi;
use axum::http::{Method, StatusCode};
use idemwatch::auth::{AuthFile, Authenticator, secrets};
use serde_json::json;

/// Token `iw_<name>` for each entry: (name, roles, extra lines).
const TOKENS: [(&str, &str, &str); 6] = [
    ("bots", "[\"worker\"]", ""),
    ("acme-bots", "[\"worker\"]", "tenants = [\"acme\"]\n"),
    (
        "voucher-bots",
        "[\"worker\"]",
        "tools = [\"send_voucher\"]\n",
    ),
    ("viewer", "[\"viewer\"]", ""),
    ("resolver", "[\"resolver\"]", ""),
    ("root", "[\"admin\"]", ""),
];

fn authenticator() -> Authenticator {
    let mut text = format!(
        "mode = \"builtin\"\n[[users]]\nname = \"root\"\npassword_hash = \"{}\"\nroles = [\"admin\"]\n",
        *HASH
    );
    for (name, roles, extra) in TOKENS {
        text.push_str(&format!(
            "[[tokens]]\nname = \"{name}\"\nsha256 = \"{}\"\nroles = {roles}\n{extra}",
            secrets::hash_token(&format!("iw_{name}"))
        ));
    }
    Authenticator::new(
        Some(AuthFile::parse(&text).unwrap()),
        Some(b"guard http auth secret"),
    )
}

both_backends!(
    async fn a_worker_token_calls_the_guard_under_its_own_name(db: TestDb) {
        let api = GuardApi::with_auth(&db, Some(authenticator()));
        let d = api
            .as_token("iw_bots")
            .admit(&refund("A-1", 4500, "1"))
            .await;
        assert_eq!(d.json["decision"], "execute", "{:?}", d.json);
        let key = d.key();
        let s = api
            .as_token("iw_bots")
            .settle(
                &key,
                1,
                json!({"outcome": "done", "result": {"refund_id": "rf_1"}}),
            )
            .await;
        assert_eq!(s.json["status"], "DONE");
        let attempts = db.store.attempts(&key).await.unwrap();
        let actors: Vec<&str> = attempts.iter().map(|a| a.actor.as_str()).collect();
        assert_eq!(actors, ["token:bots/worker-1", "token:bots/worker-1"]);
        // An admin token may call it too.
        let r = api
            .as_token("iw_root")
            .admit(&refund("A-2", 4500, "1"))
            .await;
        assert_eq!(r.json["decision"], "execute");
    }
);

both_backends!(
    async fn a_token_limited_to_tenants_or_tools_is_refused_outside_them(db: TestDb) {
        let api = GuardApi::with_auth(&db, Some(authenticator()));
        let mut globex = refund("G-1", 4500, "1");
        globex.intent.tenant = "globex".into();
        let r = api.as_token("iw_acme-bots").admit(&globex).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN);
        assert_eq!(r.json["code"], "forbidden");
        assert!(
            r.json["detail"]
                .as_str()
                .unwrap()
                .contains("tenant \"globex\"")
        );
        assert!(
            db.store
                .record(&globex.intent.key().unwrap())
                .await
                .unwrap()
                .is_none()
        );

        // Inside its tenant it works; another tenant's key cannot be settled or read.
        let acme = api
            .as_token("iw_acme-bots")
            .admit(&refund("A-3", 4500, "1"))
            .await;
        assert_eq!(acme.json["decision"], "execute");
        let other = api.as_token("iw_bots").admit(&globex).await;
        let g = other.key();
        let r = api
            .as_token("iw_acme-bots")
            .settle(&g, 1, json!({"outcome": "unknown", "reason": "r"}))
            .await;
        assert_eq!(r.status, StatusCode::FORBIDDEN);
        let r2 = api.as_token("iw_acme-bots").key_state(&g, "").await;
        assert_eq!(r2.status, StatusCode::FORBIDDEN);
        // Issue 47: the refusal does not tell a limited worker whose key it is.
        for r in [&r, &r2] {
            let detail = r.json["detail"].as_str().unwrap();
            assert!(!detail.contains("globex"), "{detail}");
            assert!(detail.contains("outside the token's"), "{detail}");
        }

        let r = api
            .as_token("iw_voucher-bots")
            .admit(&refund("A-4", 4500, "1"))
            .await;
        assert_eq!(r.status, StatusCode::FORBIDDEN);
        assert!(
            r.json["detail"]
                .as_str()
                .unwrap()
                .contains("tool \"issue_refund\"")
        );
    }
);

both_backends!(
    async fn other_roles_and_sessions_do_not_reach_the_guard(db: TestDb) {
        let api = GuardApi::with_auth(&db, Some(authenticator()));
        let call = refund("A-5", 4500, "1");
        for token in ["iw_viewer", "iw_resolver"] {
            let r = api.as_token(token).admit(&call).await;
            assert_eq!(r.status, StatusCode::FORBIDDEN, "{token}");
            assert!(
                r.json["detail"].as_str().unwrap().contains("worker"),
                "{token}"
            );
        }
        let r = api.http.admit(&call).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
        // An admin signed in with a session: a browser's ambient credentials never
        // claim keys.
        crate::support::auth::sign_in_all(&db.store).await;
        let session = crate::support::auth::session("root");
        let request = axum::http::Request::builder()
            .method(Method::POST)
            .uri("/api/v1/guard/admit")
            .header("content-type", "application/json")
            .header("cookie", format!("idemwatch_session={session}"))
            .body(axum::body::Body::from(
                json!({"intent": call.intent, "args": call.args}).to_string(),
            ))
            .unwrap();
        let response = tower::ServiceExt::oneshot(api.http.app.clone(), request)
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
    }
);

both_backends!(
    async fn a_worker_reaches_nothing_but_the_guard(db: TestDb) {
        let api = GuardApi::with_auth(&db, Some(authenticator()));
        let key = api
            .as_token("iw_bots")
            .admit(&refund("A-6", 4500, "1"))
            .await
            .key();
        let worker = api.as_token("iw_bots");
        for uri in [
            "/".to_string(),
            "/keys".into(),
            format!("/keys/{key}"),
            "/backlog".into(),
            format!("/api/v1/keys/{key}"),
            "/export/attempts.csv".into(),
        ] {
            let r = worker.raw(Method::GET, &uri, None, "").await;
            assert_eq!(r.status, StatusCode::FORBIDDEN, "{uri}");
        }
        let r = worker
            .raw(
                Method::POST,
                &format!("/api/v1/keys/{key}/resolve"),
                Some("application/json"),
                r#"{"resolution":"failed","reason":"r"}"#,
            )
            .await;
        assert_eq!(r.status, StatusCode::FORBIDDEN);
        // The worker's own key state is readable through the guard route.
        let r = worker.key_state(&key, "").await;
        assert_eq!(r.json["status"], "IN_PROGRESS");
    }
);
