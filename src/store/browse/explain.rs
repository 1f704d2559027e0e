//! EXPLAIN of every page query, for the test that checks each is served by an index
//! and for the benchmark.

use super::sql::*;
use super::{KEY_AFTER_ALL, KeyFilter, far_future, far_past};
use crate::guard::{AttemptKind, Status};
use crate::store::{Store, StoreError};
use chrono::Utc;

/// Representative listings, one per driving index (and one that filters off-index).
fn sample_filters() -> Vec<(&'static str, KeyFilter)> {
    let f = KeyFilter::default;
    vec![
        (
            "keys by business ref",
            KeyFilter {
                business_ref: Some("A-88214".into()),
                ..f()
            },
        ),
        (
            "keys by key prefix",
            KeyFilter {
                key_prefix: Some("ab12".into()),
                ..f()
            },
        ),
        (
            "keys by workflow id",
            KeyFilter {
                workflow_id: Some("run-7f3a".into()),
                ..f()
            },
        ),
        (
            "keys by intent id",
            KeyFilter {
                intent_id: Some("refund:order-A-88214".into()),
                ..f()
            },
        ),
        (
            "keys by undecided status",
            KeyFilter {
                status: Some(Status::Unknown),
                ..f()
            },
        ),
        (
            "keys by tool and time",
            KeyFilter {
                tool: Some("issue_refund".into()),
                from: Some(far_past()),
                to: Some(far_future()),
                ..f()
            },
        ),
        (
            "keys by attempt kind and time",
            KeyFilter {
                tool: Some("issue_refund".into()),
                attempt_kinds: vec![AttemptKind::Replayed, AttemptKind::ReplayedFailure],
                from: Some(Utc::now() - chrono::TimeDelta::hours(1)),
                to: Some(Utc::now()),
                ..f()
            },
        ),
        (
            "keys by business ref and attempt kind",
            KeyFilter {
                business_ref: Some("A-88214".into()),
                attempt_kinds: vec![AttemptKind::PayloadMismatch],
                ..f()
            },
        ),
        ("keys by last activity", f()),
        (
            "keys by last activity and tenant",
            KeyFilter {
                tenant: Some("acme".into()),
                ..f()
            },
        ),
    ]
}

/// Runs EXPLAIN (`$explain`) of every page query on `$conn`; `$row` is the shape of a
/// plan row and `$text` takes its text. Expanded once per backend.
macro_rules! explain_all {
    ($conn:expr, $explain:literal, $row:ty, $text:expr, $list:ident, $count:ident, $buckets:expr) => {{
        let mut plans: Vec<(String, String)> = Vec::new();
        let now = Utc::now();
        let cursor = (far_future(), KEY_AFTER_ALL.to_string());
        for (name, filter) in sample_filters() {
            let range = filter.key_range();
            let s = filter.statements();
            for (what, sql) in [("", s.$list), (" (count)", s.$count)] {
                let q = sqlx::query_as(sqlx::AssertSqlSafe(format!("{} {sql}", $explain)));
                let rows: Vec<$row> = bind_listing!(q, filter, range, cursor, 51_i64)
                    .fetch_all(&mut *$conn)
                    .await?;
                plans.push((
                    format!("{name}{what}"),
                    rows.into_iter()
                        .map($text)
                        .collect::<Vec<String>>()
                        .join("\n"),
                ));
            }
        }
        let q = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "{} {SAME_BUSINESS_REF}",
            $explain
        )));
        let rows: Vec<$row> = q
            .bind("order:A-88214")
            .bind(21_i64)
            .fetch_all(&mut *$conn)
            .await?;
        plans.push((
            "same business ref".into(),
            rows.into_iter()
                .map($text)
                .collect::<Vec<String>>()
                .join("\n"),
        ));
        for tool in [None, Some("issue_refund")] {
            let q = sqlx::query_as(sqlx::AssertSqlSafe(format!("{} {BACKLOG}", $explain)));
            let rows: Vec<$row> = q
                .bind(now)
                .bind(tool)
                .bind(far_past())
                .bind("")
                .bind(51_i64)
                .bind(None::<String>)
                .fetch_all(&mut *$conn)
                .await?;
            let name = if tool.is_some() {
                "backlog of a tool"
            } else {
                "backlog"
            };
            plans.push((
                name.into(),
                rows.into_iter()
                    .map($text)
                    .collect::<Vec<String>>()
                    .join("\n"),
            ));
        }
        let q = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "{} {BACKLOG_SUMMARY}",
            $explain
        )));
        let rows: Vec<$row> = q.bind(now).fetch_all(&mut *$conn).await?;
        plans.push((
            "backlog summary".into(),
            rows.into_iter()
                .map($text)
                .collect::<Vec<String>>()
                .join("\n"),
        ));
        let q = sqlx::query_as(sqlx::AssertSqlSafe(format!("{} {}", $explain, $buckets)));
        let rows: Vec<$row> = q.bind(now).bind(now).fetch_all(&mut *$conn).await?;
        plans.push((
            "attempt buckets".into(),
            rows.into_iter()
                .map($text)
                .collect::<Vec<String>>()
                .join("\n"),
        ));
        plans
    }};
}

impl Store {
    /// The plan of every page query, with representative parameters: (query, plan).
    /// For the test that checks each is served by an index, and for the benchmark.
    /// PostgreSQL plans are taken with sequential scans disabled, so that a small table
    /// shows the index a large one would use (the test asserts which).
    pub async fn explain_page_queries(&self) -> Result<Vec<(String, String)>, StoreError> {
        match self {
            Store::Postgres(pool) => {
                let mut tx = pool.begin().await?;
                sqlx::query("SET LOCAL enable_seqscan = off")
                    .execute(&mut *tx)
                    .await?;
                let plans = explain_all!(
                    tx,
                    "EXPLAIN",
                    (String,),
                    |r: (String,)| r.0,
                    list_postgres,
                    count_postgres,
                    ATTEMPT_BUCKETS_POSTGRES
                );
                tx.rollback().await?;
                Ok(plans)
            }
            Store::Sqlite(pool) => {
                let mut conn = pool.acquire().await?;
                let plans = explain_all!(
                    conn,
                    "EXPLAIN QUERY PLAN",
                    (i64, i64, i64, String),
                    |r: (i64, i64, i64, String)| r.3,
                    list_sqlite,
                    count_sqlite,
                    ATTEMPT_BUCKETS_SQLITE
                );
                Ok(plans)
            }
        }
    }
}
