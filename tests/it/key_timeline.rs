//! A key retried thousands of times (issue 14): its page and its JSON show one page of
//! the timeline with a link to the next, and the counts still cover every attempt.

use crate::both_backends;
use crate::support::auth::*;
use crate::ui_seed::seed;
use axum::http::{Method, StatusCode};
use chrono::Utc;
use idemwatch::store::Store;
use std::sync::Arc;

/// Appends replays to `key` up to attempt number `upto` (raw SQL: the guard would
/// take a while; the page reads rows, not the hash chain).
async fn replays(store: &Store, key: &str, upto: i64) {
    const PG: &str = "INSERT INTO idempotency_attempts (key, tenant, tool, seq, kind, \
        fencing_token, actor, detail, occurred_at, prev_hash, hash) \
        SELECT key, tenant, tool, i, 'replayed', 1, 'w', '{}'::jsonb, now(), 'p', 'h' \
        FROM idempotency_records, generate_series((SELECT max(seq) + 1 FROM idempotency_attempts WHERE key = $1), $2) AS i \
        WHERE key = $1";
    const SQLITE: &str = "WITH RECURSIVE n(i) AS (SELECT (SELECT max(seq) + 1 FROM idempotency_attempts WHERE key = $1) \
        UNION ALL SELECT i + 1 FROM n WHERE i < $2) \
        INSERT INTO idempotency_attempts (key, tenant, tool, seq, kind, fencing_token, actor, \
        detail, occurred_at, prev_hash, hash) \
        SELECT key, tenant, tool, i, 'replayed', 1, 'w', '{}', \
        strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), 'p', 'h' FROM idempotency_records, n WHERE key = $1";
    match store {
        Store::Postgres(pool) => {
            sqlx::query(PG)
                .bind(key)
                .bind(upto)
                .execute(pool)
                .await
                .unwrap();
        }
        Store::Sqlite(pool) => {
            sqlx::query(SQLITE)
                .bind(key)
                .bind(upto)
                .execute(pool)
                .await
                .unwrap();
        }
    }
}

both_backends!(
    async fn a_key_with_thousands_of_attempts_is_shown_a_page_at_a_time(db: TestDb) {
        let s = seed(&db.store, Utc::now(), 0).await;
        replays(&db.store, &s.unknown, 1_200).await;
        let app = builtin_app(&db.store, Arc::new(s.clock.clone())).await;
        let who = Who::Session("vic");

        let page = call(
            &app,
            Method::GET,
            &format!("/keys/{}", s.unknown),
            who,
            None,
        )
        .await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        assert!(page.body.contains("1200 steps"), "counted over all");
        // The two ends: how it started and where it stands now, the middle on demand.
        assert!(page.body.contains("id=\"attempt-1\""));
        assert!(page.body.contains("id=\"attempt-250\""));
        assert!(
            !page.body.contains("id=\"attempt-251\""),
            "the middle is left out"
        );
        assert!(
            !page.body.contains("id=\"attempt-950\""),
            "the middle is left out"
        );
        assert!(page.body.contains("id=\"attempt-951\""));
        assert!(
            page.body.contains("id=\"attempt-1200\""),
            "the newest is shown"
        );
        assert!(page.body.contains("Attempts #251 to #950 are not shown"));
        let middle = format!("/keys/{}?after=250", s.unknown);
        assert!(
            page.body.contains(&format!("href=\"{middle}\"")),
            "a link into the middle"
        );
        assert!(!page.body.contains("rel=\"next\""));

        let second = call(&app, Method::GET, &middle, who, None).await;
        assert!(second.body.contains("id=\"attempt-251\""));
        assert!(second.body.contains("id=\"attempt-750\""));
        assert!(!second.body.contains("id=\"attempt-751\""), "one page only");
        let next = format!("/keys/{}?after=750", s.unknown);
        assert!(
            second.body.contains(&format!("href=\"{next}\"")),
            "a link to the next page"
        );
        let last = call(
            &app,
            Method::GET,
            &format!("/keys/{}?after=1000", s.unknown),
            who,
            None,
        )
        .await;
        assert!(last.body.contains("id=\"attempt-1200\""));
        assert!(
            !last.body.contains("rel=\"next\""),
            "no next page after the last"
        );

        let json = call(
            &app,
            Method::GET,
            &format!("/api/v1/keys/{}", s.unknown),
            who,
            None,
        )
        .await;
        let v: serde_json::Value = serde_json::from_str(&json.body).unwrap();
        assert_eq!(v["attempts"].as_array().unwrap().len(), 500);
        assert_eq!(v["next"], format!("/api/v1/keys/{}?after=500", s.unknown));
        let tail = call(
            &app,
            Method::GET,
            &format!("/api/v1/keys/{}?after=1000", s.unknown),
            who,
            None,
        )
        .await;
        let v: serde_json::Value = serde_json::from_str(&tail.body).unwrap();
        assert_eq!(v["attempts"].as_array().unwrap().len(), 200);
        assert!(v["next"].is_null());

        let bad = call(
            &app,
            Method::GET,
            &format!("/api/v1/keys/{}?after=-1", s.unknown),
            who,
            None,
        )
        .await;
        assert_eq!(bad.status, StatusCode::BAD_REQUEST);
        assert!(bad.body.contains("after"), "{}", bad.body);
        let bad = call(
            &app,
            Method::GET,
            &format!("/keys/{}?after=x", s.unknown),
            who,
            None,
        )
        .await;
        assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    }
);
