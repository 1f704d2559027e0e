//! "Past retention" is one instant, a key's `resend_safe_until`: the key page, the
//! resolve form and its review step, the backlog page and count, the overview, the
//! `idempotency_unknown_past_retention` gauge and the guard's takeover all agree one
//! second either side of it, on both backends. A claim row written without the column
//! gets it from the same formula.

use crate::both_backends;
use crate::metrics::scrape;
use crate::support::as_key;
use crate::support::auth::{Who, builtin_app, call, csrf_token, form};
use crate::support::fixture::{Fixture, refund};
use crate::support::provider::Fault;
use axum::http::{Method, StatusCode};
use chrono::{TimeDelta, Utc};
use idemwatch::guard::{
    AttemptKind, Clock, GuardError, Resolution, ResolveRequest, Status, ToolCall, resend_safe_until,
};
use idemwatch::metrics::port::BacklogSource;
use idemwatch::metrics::{Metrics, backlog};
use idemwatch::store::Store;
use std::sync::Arc;

/// Each reader's answer to "is `key` past retention now?".
async fn readings(f: &Fixture, key: &str) -> Vec<(&'static str, bool)> {
    let now = f.clock.now();
    let clock = Arc::new(f.clock.clone());
    // A fresh app per reading: the overview caches its counts for half a minute.
    let app = builtin_app(&f.store, clock).await;
    let who = Who::Session("sam");
    let page = call(&app, Method::GET, &format!("/keys/{key}"), who, None).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let record = f.store.record(&as_key(key)).await.unwrap().unwrap();
    let review = call(
        &app,
        Method::POST,
        &format!("/keys/{key}/resolve"),
        who,
        Some(form(&[
            ("resolution", "release"),
            ("reason", "checked the provider dashboard"),
            ("evidence", ""),
            ("result", ""),
            ("expected_token", &record.fencing_token.to_string()),
            ("csrf_token", &csrf_token()),
        ])),
    )
    .await;
    let preview = f.guard.preview_resolve(
        &record,
        &ResolveRequest {
            resolution: Resolution::Release,
            reason: "checked the provider dashboard".into(),
            evidence: None,
            result: None,
            actor: "sam".into(),
            expected_token: Some(record.fencing_token),
        },
    );
    let backlog_page = call(&app, Method::GET, "/backlog", who, None).await;
    let row = backlog_page
        .body
        .split("<tr")
        .find(|r| r.contains(key))
        .expect("the key is in the backlog")
        .to_string();
    let overview = call(&app, Method::GET, "/", who, None).await;
    let summary: i64 = f
        .store
        .backlog_by_tool(now)
        .await
        .unwrap()
        .iter()
        .map(|s| s.past_retention)
        .sum();
    let metrics = Arc::new(Metrics::default());
    backlog::refresh(&f.store, &metrics, now).await.unwrap();
    let gauge: f64 = scrape(&f.store, &metrics)
        .await
        .samples
        .iter()
        .filter(|(name, _, _)| name == "idempotency_unknown_past_retention")
        .map(|(_, _, v)| v)
        .sum();
    vec![
        ("key page", page.body.contains("Needs a person")),
        (
            "resolve form",
            page.body.contains("Release for resend is not offered"),
        ),
        (
            "resolve review step",
            review.status == StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "preview_resolve",
            matches!(preview, Err(GuardError::NotResolvable { .. })),
        ),
        ("backlog row", row.starts_with(" class=\"past-retention\"")),
        (
            "backlog count",
            backlog_page.body.contains(
                "UNKNOWN past retention</span><span class=\"stat-value\">1</span>",
            ),
        ),
        (
            "overview count",
            overview.body.contains(
                "<span class=\"stat-label\">Past retention</span><span class=\"stat-value\"><a href=\"/backlog\">1</a>",
            ),
        ),
        ("backlog summary", summary == 1),
        ("gauge", gauge == 1.0),
    ]
}

/// Takes `call`'s key over with a provider that shows no effect; returns the kind of
/// the row the reconciliation wrote.
async fn takeover(f: &Fixture, call: &ToolCall) -> AttemptKind {
    let _ = f.guard.run(call, &f.client([])).await;
    let key = call.intent.key().unwrap();
    let attempts = f.store.attempts(&key).await.unwrap();
    let after = attempts
        .iter()
        .position(|a| a.kind == AttemptKind::TakenOver)
        .expect("a takeover");
    attempts[after + 1].kind
}

both_backends!(
    async fn every_reader_agrees_a_second_either_side_of_resend_safe_until(db: TestDb) {
        let f = Fixture::new(&db);
        // Claimed a day ago, so that the instant is about now: the signed-in session
        // the pages are read with is checked against the same clock.
        f.clock
            .set(Utc::now() - TimeDelta::hours(24) + TimeDelta::minutes(1));
        // Two keys claimed at the same instant, both left UNKNOWN: one is taken over
        // just before the instant, the other just after.
        let (early, late) = (refund("A-41", 4500, "1"), refund("A-42", 4500, "1"));
        for c in [&early, &late] {
            f.guard
                .run(c, &f.client([Fault::Unavailable]))
                .await
                .unwrap_err();
        }
        let key = |c: &ToolCall| c.intent.key().unwrap().to_string();
        let record = f.store.record(&as_key(&key(&late))).await.unwrap().unwrap();
        let instant = record.resend_safe_until;
        // The margin: a minute before the provider's own deadline (24 h retention).
        assert_eq!(
            instant,
            record.provider_retention_until - TimeDelta::minutes(1)
        );

        f.clock.set(instant - TimeDelta::seconds(1));
        for (reader, past) in readings(&f, &key(&late)).await {
            assert!(!past, "{reader} says past retention a second before");
        }
        assert_eq!(takeover(&f, &early).await, AttemptKind::Resent);
        assert_eq!(f.status(&key(&early)).await, Status::Done);

        f.clock.set(instant + TimeDelta::seconds(1));
        for (reader, past) in readings(&f, &key(&late)).await {
            assert!(past, "{reader} says not past retention a second after");
        }
        assert_eq!(takeover(&f, &late).await, AttemptKind::Escalated);
        assert_eq!(f.status(&key(&late)).await, Status::Unknown);
    }
);

both_backends!(
    async fn a_claim_row_written_without_the_column_gets_it_from_the_same_formula(db: TestDb) {
        // A guard in another language that predates the column (docs/GUARD.md, 5.1).
        const OLD_CLAIM: &str = "INSERT INTO idempotency_records (key, tenant, tool, \
            workflow_id, step_id, intent_id, business_ref, fingerprint, business_args, status, \
            fencing_token, lease_until, attempt_count, result, error, provider_retention_until, \
            release_approved, created_at, updated_at, log_seq, log_hash) \
            VALUES ($1, 'acme', 'issue_refund', 'w', '1', 'i', NULL, 'f', '{}', 'IN_PROGRESS', \
            1, $2, 1, NULL, NULL, $3, false, $2, $2, 0, 'h')";
        let created = Utc::now() - TimeDelta::hours(3);
        for (n, retention) in [TimeDelta::hours(24), TimeDelta::minutes(5)]
            .into_iter()
            .enumerate()
        {
            let key = format!("{n:064x}");
            let deadline = created + retention;
            // One statement, bound the same way on either pool.
            macro_rules! old_claim {
                ($pool:expr) => {
                    sqlx::query(OLD_CLAIM)
                        .bind(&key)
                        .bind(created)
                        .bind(deadline)
                        .execute($pool)
                        .await
                        .map(drop)
                        .unwrap()
                };
            }
            match &db.store {
                Store::Postgres(pool) => old_claim!(pool),
                Store::Sqlite(pool) => old_claim!(pool),
            }
            let record = db.store.record(&as_key(&key)).await.unwrap().unwrap();
            let expected = resend_safe_until(record.created_at, record.provider_retention_until);
            // SQLite's date functions keep milliseconds.
            let off = (record.resend_safe_until - expected).abs();
            assert!(
                off < TimeDelta::milliseconds(1),
                "{retention}: off by {off}"
            );
        }
    }
);
