//! EXPLAIN of every page query, for the test that checks each is served by an index
//! and for the benchmark.

use super::backlog::BACKLOG;
use super::key_detail::SAME_BUSINESS_REF;
use super::keys::{bind_listing, first_page};
use super::overview::ATTEMPT_BUCKETS;
use super::{KeyFilter, ResolvedAs, far_future, far_past};
use crate::guard::{AttemptKind, Resolution, Status};
use crate::store::tail::BACKLOG_BY_TOOL;
use crate::store::{Store, StoreError};
use chrono::Utc;

/// Representative listings, one per driving index (and one that filters off-index).
fn sample_filters() -> Vec<(&'static str, KeyFilter)> {
    let f = KeyFilter::default;
    vec![
        (
            "keys by search term",
            KeyFilter {
                search: Some("ticket-1934".into()),
                ..f()
            },
        ),
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
                // As `entered=DONE` asks: settles, and the resolutions that decided DONE.
                attempt_kinds: vec![
                    AttemptKind::Completed,
                    AttemptKind::ReconciledFound,
                    AttemptKind::Resolved,
                ],
                resolved_as: Some(vec![ResolvedAs {
                    resolution: Resolution::Done,
                    previous_status: Some(Status::Unknown),
                }]),
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

/// Runs EXPLAIN (`$explain`) of every page query, as `$store` spells it, on `$conn`;
/// `$row` is the shape of a plan row and `$text` takes its text. Expanded once per
/// backend: the connection and the plan rows are the backend's own types.
macro_rules! explain_all {
    ($store:expr, $conn:expr, $explain:literal, $row:ty, $text:expr) => {{
        let plan = |rows: Vec<$row>| {
            rows.into_iter()
                .map($text)
                .collect::<Vec<String>>()
                .join("\n")
        };
        let explain = |sql: &str| sqlx::AssertSqlSafe(format!("{} {sql}", $explain));
        let mut plans: Vec<(String, String)> = Vec::new();
        let now = Utc::now();
        let cursor = first_page();
        for (name, filter) in sample_filters() {
            let range = filter.key_range();
            let s = filter.statements();
            for (what, sql) in [("", s.list), (" (count)", s.count)] {
                let q = sqlx::query_as(explain(sql.on($store)));
                let rows: Vec<$row> = bind_listing!(q, filter, range, cursor, 51_i64)
                    .fetch_all(&mut *$conn)
                    .await?;
                plans.push((format!("{name}{what}"), plan(rows)));
            }
        }
        let rows: Vec<$row> = sqlx::query_as(explain(SAME_BUSINESS_REF))
            .bind("order:A-88214")
            .bind(21_i64)
            .fetch_all(&mut *$conn)
            .await?;
        plans.push(("same business ref".into(), plan(rows)));
        for (name, tool) in [
            ("backlog", None),
            ("backlog of a tool", Some("issue_refund")),
        ] {
            let rows: Vec<$row> = sqlx::query_as(explain(BACKLOG))
                .bind(now)
                .bind(tool)
                .bind(far_past())
                .bind("")
                .bind(51_i64)
                .bind(None::<String>)
                .fetch_all(&mut *$conn)
                .await?;
            plans.push((name.into(), plan(rows)));
        }
        let rows: Vec<$row> = sqlx::query_as(explain(BACKLOG_BY_TOOL))
            .bind(now)
            .fetch_all(&mut *$conn)
            .await?;
        plans.push(("backlog summary".into(), plan(rows)));
        let rows: Vec<$row> = sqlx::query_as(explain(ATTEMPT_BUCKETS.on($store)))
            .bind(now)
            .bind(now)
            .fetch_all(&mut *$conn)
            .await?;
        plans.push(("attempt buckets".into(), plan(rows)));
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
                let mut tx = crate::store::pools::begin(pool, None).await?;
                sqlx::query("SET LOCAL enable_seqscan = off")
                    .execute(&mut *tx)
                    .await?;
                let plans = explain_all!(self, tx, "EXPLAIN", (String,), |r: (String,)| r.0);
                tx.rollback().await?;
                Ok(plans)
            }
            Store::Sqlite(pool) => {
                let mut conn = pool.acquire().await?;
                let plans = explain_all!(
                    self,
                    conn,
                    "EXPLAIN QUERY PLAN",
                    (i64, i64, i64, String),
                    |r: (i64, i64, i64, String)| r.3
                );
                Ok(plans)
            }
        }
    }
}
