//! Resolve through the JSON API: statuses that mean what they say.

use super::kinds;
use crate::both_backends;
use crate::support::app::TestApp;
use crate::support::auth::*;
use axum::http::{Method, StatusCode};
use idemwatch::guard::AttemptKind;
use serde_json::{Value, json};

both_backends!(
    async fn the_json_api_resolves_with_statuses_that_mean_what_they_say(db: TestDb) {
        let (app, s) = TestApp::builtin(&db).await;
        let uri = format!("/api/v1/keys/{}/resolve", s.unknown);
        let post = |who: Who<'static>, body: &str| {
            let (app, uri, body) = (app.as_(who), uri.clone(), body.to_string());
            async move { app.call(Method::POST, &uri, Some(body)).await }
        };

        let a = post(Who::Token("sam"), "{\"resolution\": ").await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST);
        assert_eq!(a.json()["field"], "body");
        let a = post(Who::Token("sam"), r#"{"resolution":"refund","reason":"r"}"#).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST);
        assert_eq!(a.json()["field"], "resolution");
        let a = post(Who::Token("sam"), r#"{"resolution":"done","reason":"r"}"#).await;
        assert_eq!(
            (a.status, a.json()["field"].clone()),
            (StatusCode::BAD_REQUEST, json!("evidence"))
        );
        let a = post(Who::Anonymous, r#"{"resolution":"failed","reason":"r"}"#).await;
        assert_eq!(a.status, StatusCode::UNAUTHORIZED);
        let a = post(Who::Token("vic"), r#"{"resolution":"failed","reason":"r"}"#).await;
        assert_eq!(a.status, StatusCode::FORBIDDEN);
        assert!(
            a.json()["detail"]
                .as_str()
                .unwrap()
                .contains("resolver role")
        );
        let a = app
            .as_(Who::Token("sam"))
            .call(
                Method::POST,
                &format!("/api/v1/keys/{}/resolve", "0".repeat(64)),
                Some(r#"{"resolution":"failed","reason":"r"}"#.into()),
            )
            .await;
        assert_eq!(a.status, StatusCode::NOT_FOUND);
        let a = post(
            Who::Token("sam"),
            r#"{"resolution":"failed","reason":"r","expected_token":7}"#,
        )
        .await;
        assert_eq!(a.status, StatusCode::CONFLICT);
        assert!(
            a.json()["detail"]
                .as_str()
                .unwrap()
                .contains("changed since you looked")
        );
        assert_eq!(
            kinds(&db.store, &s.unknown).await,
            [
                AttemptKind::Claimed,
                AttemptKind::MarkedUnknown,
                AttemptKind::StaleWriteRejected
            ]
        );

        let body = r#"{"resolution":"done","reason":"found at provider","evidence":"rf_8XM1","result":{"refund_id":"rf_8XM1","amount_p":2500},"expected_token":1}"#;
        let a = post(Who::Token("sam"), body).await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.body);
        let v: Value = serde_json::from_str(&a.body).unwrap();
        assert_eq!(v["record"]["status"], "DONE");
        assert_eq!(
            v["record"]["result"],
            json!({"refund_id":"rf_8XM1","amount_p":2500})
        );
        let last = v["attempts"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(
            (last["kind"].as_str(), last["actor"].as_str()),
            (Some("resolved"), Some("token:sam-script"))
        );
        let a = post(
            Who::Token("root"),
            r#"{"resolution":"failed","reason":"r"}"#,
        )
        .await;
        assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY);
        // A session may use the API too, with the CSRF header (the helper adds it).
        let a = app
            .call(
                Method::POST,
                &format!("/api/v1/keys/{}/resolve", s.expired),
                Some(r#"{"resolution":"failed","reason":"worker died before the call"}"#.into()),
            )
            .await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    }
);

both_backends!(
    /// PostgreSQL's text and jsonb cannot hold U+0000: a resolution carrying one in any
    /// field it stores is a 400 naming that field on both backends, with nothing written
    /// (Schemathesis's stateful run drew a NUL in `reason` and got a 500 on PostgreSQL).
    async fn a_nul_in_a_resolution_is_a_400_naming_the_field_and_writes_nothing(db: TestDb) {
        let (app, s) = TestApp::builtin(&db).await;
        let uri = format!("/api/v1/keys/{}/resolve", s.unknown);
        let before = kinds(&db.store, &s.unknown).await;
        for (body, field) in [
            (
                json!({"resolution": "failed", "reason": "r\u{0}"}),
                "reason",
            ),
            (
                json!({"resolution": "done", "reason": "r", "evidence": "rf\u{0}"}),
                "evidence",
            ),
            (
                json!({"resolution": "done", "reason": "r", "evidence": "rf", "result": {"id\u{0}": 1}}),
                "result",
            ),
            (
                json!({"resolution": "done", "reason": "r", "evidence": "rf", "result": ["\u{0}"]}),
                "result",
            ),
        ] {
            let a = app
                .as_(Who::Token("sam"))
                .call(Method::POST, &uri, Some(body.to_string()))
                .await;
            assert_eq!(
                (a.status, a.json()["field"].as_str()),
                (StatusCode::BAD_REQUEST, Some(field)),
                "{body}: {}",
                a.body
            );
        }
        assert_eq!(kinds(&db.store, &s.unknown).await, before);
    }
);
