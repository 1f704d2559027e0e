//! What a worker (and its model's status tool) reads over HTTP (issue 49): the keys of a
//! run or of a business object, only inside a limited token's scope; a long poll that
//! wakes when the key is settled; and a refused resolve that does not end a wait for a
//! person.

use crate::both_backends;
use crate::support::auth::HASH;
use crate::support::fixture::refund;
use crate::support::guard_api::GuardApi;
use axum::http::{Method, StatusCode};
use chrono::TimeDelta;
use idemwatch::auth::{AuthFile, Authenticator, secrets};
use idemwatch::guard::{GuardError, Resolution, ResolveRequest};
use serde_json::json;
use std::time::{Duration, Instant};

fn authenticator() -> Authenticator {
    let mut text = format!(
        "mode = \"builtin\"\n[[users]]\nname = \"root\"\npassword_hash = \"{}\"\nroles = [\"admin\"]\n",
        *HASH
    );
    for (name, extra) in [("bots", ""), ("acme-bots", "tenants = [\"acme\"]\n")] {
        text.push_str(&format!(
            "[[tokens]]\nname = \"{name}\"\nsha256 = \"{}\"\nroles = [\"worker\"]\n{extra}",
            secrets::hash_token(&format!("iw_{name}"))
        ));
    }
    Authenticator::new(
        Some(AuthFile::parse(&text).unwrap()),
        Some(b"guard http status secret"),
    )
}

both_backends!(
    async fn a_worker_lists_the_keys_of_a_run_or_an_object_inside_its_scope(db: TestDb) {
        let api = GuardApi::with_auth(&db, Some(authenticator()));
        let all = api.as_token("iw_bots");
        let mut globex = refund("A-1", 100, "2");
        globex.intent.tenant = "globex".into();
        for call in [refund("A-1", 100, "1"), globex, refund("A-2", 200, "1")] {
            assert_eq!(all.admit(&call).await.json["decision"], "execute");
        }
        let get = |token: &'static str, query: &'static str| {
            let http = api.as_token(token);
            async move {
                http.raw(
                    Method::GET,
                    &format!("/api/v1/guard/keys?{query}"),
                    None,
                    "",
                )
                .await
            }
        };
        let run = get("iw_bots", "workflow_id=run-7f3a").await;
        assert_eq!(run.status, StatusCode::OK, "{:?}", run.json);
        assert_eq!(run.json["keys"].as_array().unwrap().len(), 3);
        assert_eq!(run.json["truncated"], false);
        let order = get("iw_bots", "business_ref=order%3AA-1").await;
        let tenants: Vec<&str> = order.json["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["tenant"].as_str().unwrap())
            .collect();
        assert_eq!(tenants.len(), 2, "{:?}", order.json);
        // A token limited to acme never sees globex's key.
        let limited = get("iw_acme-bots", "business_ref=order%3AA-1").await;
        let keys = limited.json["keys"].as_array().unwrap();
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0]["tenant"], "acme");
        assert_eq!(keys[0]["status"], "IN_PROGRESS");
        // Bounded and checked.
        let page = get("iw_bots", "workflow_id=run-7f3a&limit=2").await;
        assert_eq!(page.json["keys"].as_array().unwrap().len(), 2);
        assert_eq!(page.json["truncated"], true);
        for bad in [
            "tenant=acme",
            "workflow_id=run-7f3a&limit=1000",
            "workflow_id=x&colour=red",
        ] {
            let r = get("iw_bots", bad).await;
            assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {:?}", r.json);
        }
        let anonymous = api
            .http
            .raw(
                Method::GET,
                "/api/v1/guard/keys?workflow_id=run-7f3a",
                None,
                "",
            )
            .await;
        assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    }
);

both_backends!(
    async fn a_long_poll_wakes_when_the_key_is_settled(db: TestDb) {
        let api = GuardApi::new(&db);
        let key = api.admit(&refund("A-3", 4500, "1")).await.key();
        let settle = async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            api.settle(
                &key,
                1,
                json!({"outcome": "done", "result": {"refund_id": "rf_1"}}),
            )
            .await
        };
        let started = Instant::now();
        let (state, settled) = tokio::join!(api.key_state(&key, "?after_token=1&wait=30"), settle);
        assert_eq!(settled.json["status"], "DONE");
        assert_eq!(state.json["status"], "DONE", "{:?}", state.json);
        assert_eq!(state.json["changed"], false, "the token did not move");
        // Woken by the settle, not by the 30 s wait running out.
        assert!(started.elapsed() < Duration::from_secs(25));
    }
);

both_backends!(
    async fn a_refused_resolve_does_not_end_the_wait_for_a_person(db: TestDb) {
        let api = GuardApi::new(&db);
        let call = refund("A-4", 4500, "1");
        let key = api.admit_then_unknown(&call, "worker crashed").await;
        api.f.clock.advance(TimeDelta::hours(25));
        let r = api.admit(&call).await;
        let rep = api
            .reconcile(&key, r.token(), json!({"lookup": "not_found"}))
            .await;
        assert_eq!(rep.json["code"], "needs_human_review");
        // A release past the provider's retention is refused (422 on the page and the
        // keys API): nobody decided, and only a `stale_write_rejected` row is written.
        let refused = api
            .f
            .guard
            .resolve(
                &key,
                &ResolveRequest {
                    resolution: Resolution::Release,
                    reason: "try again".into(),
                    evidence: None,
                    result: None,
                    actor: "sam".into(),
                    expected_token: None,
                },
            )
            .await;
        assert!(
            matches!(refused, Err(GuardError::NotResolvable { .. })),
            "{refused:?}"
        );
        let state = api.key_state(&key, "").await;
        assert_eq!(state.json["awaiting_person"], true, "{:?}", state.json);
    }
);
