//! Support's search box (issue 50): a key is found by whatever id the customer or the
//! agent has — the order in any case or its number alone, a part of the intent id such
//! as the ticket, the provider's id in the stored result — on both backends, with the
//! terms the database writes for each key (migration 0009).

use crate::both_backends;
use crate::support::app::{TestApp, linked_keys};
use axum::http::{StatusCode, header};
use idemwatch::guard::IdempotencyKey;
use idemwatch::store::Store;
use std::collections::BTreeSet;

/// `$body` on the store's pool, whichever backend it is (the pools' types differ).
macro_rules! on_pool {
    ($store:expr, $pool:ident => $body:expr) => {
        match $store {
            Store::Postgres($pool) => $body,
            Store::Sqlite($pool) => $body,
        }
    };
}

both_backends!(
    async fn support_finds_a_key_by_any_id_it_carries(db: TestDb) {
        let (app, s) = TestApp::open(&db).await;
        let record = |k: &str| {
            let store = db.store.clone();
            let key = IdempotencyKey::parse(k).unwrap();
            async move { store.record(&key).await.unwrap().unwrap() }
        };
        // The provider's refund id, as the test provider wrote it into the result.
        let refund_id = record(&s.second_refund).await.result.unwrap()["refund_id"]
            .as_str()
            .unwrap()
            .to_string();
        let to_key = |k: &str| format!("/keys/{k}");
        let cases = [
            // One key matches: straight to it.
            ("a-1001".to_string(), to_key(&s.mismatch)),
            ("A-1001".into(), to_key(&s.mismatch)),
            ("ORDER:a-1001".into(), to_key(&s.mismatch)),
            // The number alone (also 4 hex digits: a recorded id wins over a key prefix).
            ("1001".into(), to_key(&s.mismatch)),
            ("ticket-5521".into(), to_key(&s.second_refund)),
            ("TICKET-5521".into(), to_key(&s.second_refund)),
            ("5521".into(), to_key(&s.second_refund)),
            (refund_id.to_uppercase(), to_key(&s.second_refund)),
            (format!("  {refund_id} "), to_key(&s.second_refund)),
            // The whole intent id, in another case.
            ("Refund:Order-A-4004".into(), to_key(&s.failed)),
            // Two keys on the order: their list.
            ("a-88214".into(), "/keys?q=a-88214".into()),
            ("88214".into(), "/keys?q=88214".into()),
            // Nothing recorded: the list says so (and offers a key prefix for hex).
            ("zz-404".into(), "/keys?q=zz-404".into()),
        ];
        for (q, location) in cases {
            let p = app.get(&format!("/search?q={}", q.replace(' ', "+"))).await;
            assert_eq!(p.status, StatusCode::SEE_OTHER, "{q}");
            assert_eq!(p.headers[header::LOCATION], location.as_str(), "{q}");
        }

        let set = |keys: &[&String]| keys.iter().map(|k| k.to_string()).collect::<BTreeSet<_>>();
        let listed = |body: &str| linked_keys(body).into_iter().collect::<BTreeSet<_>>();
        for q in ["a-88214", "88214", "Order:A-88214"] {
            let p = app.get(&format!("/keys?q={q}")).await;
            assert_eq!(p.status, StatusCode::OK, "{q}");
            assert_eq!(
                listed(&p.body),
                set(&[&s.replayed, &s.second_refund]),
                "{q}"
            );
            assert!(p.body.contains("2 keys"), "{q}: counted");
        }
        // The Keys page opens on the search box; the engineer's filters are folded unless
        // a link sets one.
        let p = app.get("/keys").await;
        let search_box = p.body.find("id=\"f-q\"").expect("the search box");
        let folded = p
            .body
            .find("<details class=\"filters advanced\">")
            .expect("folded filters");
        assert!(search_box < folded);
        let p = app.get("/keys?tool=issue_refund").await;
        assert!(p.body.contains("<details class=\"filters advanced\" open>"));

        // Search and another filter: both apply.
        let p = app.get("/keys?q=88214&business_ref=A-1001").await;
        assert!(listed(&p.body).is_empty());
        let p = app.get("/keys?q=zz-404").await;
        assert!(p.body.contains("No keys match"), "{}", p.body);
        // A part without a digit is no term: every refund's intent starts with it.
        let p = app.get("/keys?q=refund").await;
        assert!(listed(&p.body).is_empty());
    }
);

both_backends!(
    async fn a_completed_call_is_found_by_the_id_in_its_result(db: TestDb) {
        // The terms follow the record: written when the claim inserts it, rewritten when
        // the result arrives, deleted with the record (retention's delete).
        let (app, s) = TestApp::open(&db).await;
        let key = IdempotencyKey::parse(&s.expired).unwrap();
        let before = db.store.record(&key).await.unwrap().unwrap();
        assert!(
            before.result.is_none(),
            "the expired lease has no result yet"
        );
        let p = app.get("/search?q=RF_EXPIRED_77").await;
        assert_eq!(p.headers[header::LOCATION], "/keys?q=RF_EXPIRED_77");
        // Raw SQL, as a provider's answer would set it: no write path names the terms.
        const SET_RESULT: &str = "UPDATE idempotency_records \
            SET result = '{\"refund\": {\"id\": \"rf_expired_77\"}}' WHERE key = $1";
        let updated = on_pool!(&db.store, pool => {
            let done = sqlx::query(SET_RESULT).bind(&s.expired).execute(pool).await;
            done.unwrap().rows_affected()
        });
        assert_eq!(updated, 1);
        let p = app.get("/search?q=RF_EXPIRED_77").await;
        assert_eq!(p.headers[header::LOCATION], format!("/keys/{}", s.expired));

        const TERMS: &str = "SELECT count(*) FROM idempotency_search_terms WHERE key = $1";
        const DELETE: [&str; 2] = [
            "DELETE FROM idempotency_attempts WHERE key = $1",
            "DELETE FROM idempotency_records WHERE key = $1",
        ];
        let terms = on_pool!(&db.store, pool => {
            let count = || sqlx::query_scalar::<_, i64>(TERMS).bind(&s.expired).fetch_one(pool);
            let before = count().await.unwrap();
            for sql in DELETE {
                sqlx::query(sql).bind(&s.expired).execute(pool).await.unwrap();
            }
            (before, count().await.unwrap())
        });
        assert!(
            terms.0 > 0 && terms.1 == 0,
            "the terms go with their record: {terms:?}"
        );
    }
);
