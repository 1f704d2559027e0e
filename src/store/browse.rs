//! What the UI reads: key listings, the backlog, the overview's counts. Read-only.
//!
//! Every statement here is served by an index (the test `every_page_query_uses_an_index`
//! checks the plans on both backends). Listings page with a keyset on
//! `(updated_at DESC, key DESC)`, never OFFSET. Optional filters are
//! `($n IS NULL OR col = $n)`; sqlx declares each parameter's type, so PostgreSQL needs
//! no casts and one text serves both backends. Which index drives a listing is chosen
//! in Rust ([`KeyFilter::index`]) and each choice is its own statement, so no planner
//! has to guess from a generic plan. Statements are assembled from shared pieces with
//! `concat!`, so every piece is written once and each statement is still a `&'static str`.

use super::{Store, StoreError, on_pool};
use crate::guard::Status;
use chrono::{DateTime, Utc};
use serde::Serialize;

/// The columns of a listing row: the record without its JSON payloads.
macro_rules! summary_columns {
    () => {
        "key, tenant, tool, workflow_id, step_id, intent_id, business_ref, status, \
         fencing_token, lease_until, attempt_count, provider_retention_until, created_at, updated_at"
    };
}

/// The filters every listing applies, after its driving condition.
/// $1/$2 key range, $3 business ref (driver only), $4 workflow, $5 intent, $6 tenant,
/// $7 tool, $8 status, $9/$10 last-activity range (never NULL: sentinels when absent),
/// $11/$12 the keyset position (a sentinel above every row on the first page).
/// `$u` is how the time column is written: `updated_at`, or on SQLite `+updated_at`
/// where the time index must not be used (a no-op that SQLite's planner cannot index).
macro_rules! key_filters {
    () => {
        key_filters!("updated_at")
    };
    ($u:literal) => {
        concat!(
            " AND ($1 IS NULL OR key >= $1) AND ($2 IS NULL OR key <= $2) \
             AND ($4 IS NULL OR workflow_id = $4) AND ($5 IS NULL OR intent_id = $5) \
             AND ($6 IS NULL OR tenant = $6) AND ($7 IS NULL OR tool = $7) \
             AND ($8 IS NULL OR status = $8) AND ",
            $u,
            " >= $9 AND ",
            $u,
            " < $10 AND (",
            $u,
            ", key) < ($11, $12)"
        )
    };
}

/// A listing page: newest activity first, `$13` rows.
macro_rules! keys_sql {
    ($driver:expr) => {
        keys_sql!($driver, "updated_at")
    };
    ($driver:expr, $u:literal) => {
        concat!(
            "SELECT ",
            summary_columns!(),
            " FROM idempotency_records WHERE ",
            $driver,
            key_filters!($u),
            " ORDER BY updated_at DESC, key DESC LIMIT $13"
        )
    };
}

/// How many rows a listing has, counting at most `$13` (the cursor is the sentinel).
macro_rules! count_sql {
    ($driver:expr) => {
        count_sql!($driver, "updated_at")
    };
    ($driver:expr, $u:literal) => {
        concat!(
            "SELECT count(*) FROM (SELECT 1 FROM idempotency_records WHERE ",
            $driver,
            key_filters!($u),
            " LIMIT $13) AS capped"
        )
    };
}

/// The driving conditions. Each one is the condition of one index; the ones after
/// business_ref also state `$3 IS NULL`: they serve listings without a business ref.
macro_rules! by_business_ref_postgres {
    () => {
        "(business_ref = $3 OR substr(business_ref, strpos(business_ref, ':') + 1) = $3)"
    };
}
macro_rules! by_business_ref_sqlite {
    () => {
        "(business_ref = $3 OR substr(business_ref, instr(business_ref, ':') + 1) = $3)"
    };
}
macro_rules! by_key {
    () => {
        "$3 IS NULL AND key >= $1 AND key <= $2"
    };
}
macro_rules! by_workflow {
    () => {
        "$3 IS NULL AND workflow_id = $4"
    };
}
macro_rules! by_intent {
    () => {
        "$3 IS NULL AND intent_id = $5"
    };
}
// The literal IN list repeats the predicate of the partial index
// idempotency_records_undecided_updated_at, so both planners may use it.
macro_rules! by_undecided_status {
    () => {
        "$3 IS NULL AND status IN ('UNKNOWN', 'IN_PROGRESS') AND status = $8"
    };
}
macro_rules! by_tool {
    () => {
        "$3 IS NULL AND tool = $7"
    };
}
macro_rules! by_updated_at {
    () => {
        "$3 IS NULL"
    };
}

/// The listing and capped-count statements of one driving index, per backend.
struct KeyStatements {
    list_postgres: &'static str,
    list_sqlite: &'static str,
    count_postgres: &'static str,
    count_sqlite: &'static str,
}

/// The statements of a selective driving index. On SQLite the time column is hidden
/// from the planner (see [`key_filters!`]): without it SQLite may prefer walking the
/// time index to sorting the few rows the driving index finds.
macro_rules! selective {
    ($postgres:expr, $sqlite:expr) => {
        KeyStatements {
            list_postgres: keys_sql!($postgres),
            list_sqlite: keys_sql!($sqlite, "+updated_at"),
            count_postgres: count_sql!($postgres),
            count_sqlite: count_sql!($sqlite, "+updated_at"),
        }
    };
}

/// The statements of a listing meant to walk a time-ordered index.
macro_rules! ordered {
    ($driver:expr) => {
        KeyStatements {
            list_postgres: keys_sql!($driver),
            list_sqlite: keys_sql!($driver),
            count_postgres: count_sql!($driver),
            count_sqlite: count_sql!($driver),
        }
    };
}

const BY_BUSINESS_REF: KeyStatements =
    selective!(by_business_ref_postgres!(), by_business_ref_sqlite!());
const BY_KEY: KeyStatements = selective!(by_key!(), by_key!());
const BY_WORKFLOW: KeyStatements = selective!(by_workflow!(), by_workflow!());
const BY_INTENT: KeyStatements = selective!(by_intent!(), by_intent!());
const BY_UNDECIDED_STATUS: KeyStatements = ordered!(by_undecided_status!());
const BY_TOOL: KeyStatements = ordered!(by_tool!());
const BY_UPDATED_AT: KeyStatements = ordered!(by_updated_at!());

/// Other keys with the same business ref, newest first (idempotency_records_business_ref).
pub const SAME_BUSINESS_REF: &str = concat!(
    "SELECT ",
    summary_columns!(),
    " FROM idempotency_records WHERE business_ref = $1 ORDER BY created_at DESC, key DESC LIMIT $2"
);

/// The condition of an undecided key: UNKNOWN, or IN_PROGRESS with a lease that ran out
/// at `$1`. The IN list is the partial index idempotency_records_backlog's predicate.
macro_rules! undecided {
    () => {
        "status IN ('UNKNOWN', 'IN_PROGRESS') AND (status = 'UNKNOWN' OR lease_until <= $1)"
    };
}

/// The backlog, oldest first, keyset on (created_at, key).
pub const BACKLOG: &str = concat!(
    "SELECT ",
    summary_columns!(),
    " FROM idempotency_records WHERE ",
    undecided!(),
    " AND ($2 IS NULL OR tool = $2) AND (created_at, key) > ($3, $4) \
     ORDER BY created_at, key LIMIT $5"
);

/// Per tool: the undecided keys now. Small by design, read from the partial index.
pub const BACKLOG_SUMMARY: &str = concat!(
    "SELECT tool, \
     sum(CASE WHEN status = 'UNKNOWN' THEN 1 ELSE 0 END) AS unknown, \
     sum(CASE WHEN status = 'IN_PROGRESS' THEN 1 ELSE 0 END) AS expired_leases, \
     sum(CASE WHEN status = 'UNKNOWN' AND provider_retention_until <= $1 THEN 1 ELSE 0 END) AS past_retention, \
     min(CASE WHEN status = 'UNKNOWN' THEN created_at END) AS oldest_unknown, \
     min(created_at) AS oldest \
     FROM idempotency_records WHERE ",
    undecided!(),
    " GROUP BY tool ORDER BY tool"
);

/// Attempts per tool, kind and 5-minute bucket since `$1`, with the count since `$2`
/// (the last hour) alongside; one range scan of idempotency_attempts_occurred_at_tool_kind.
/// The bucket arithmetic is the one part the two backends spell differently.
macro_rules! attempt_buckets {
    ($bucket:literal) => {
        concat!(
            "SELECT tool, kind, ",
            $bucket,
            " AS bucket, count(*) AS n, \
             sum(CASE WHEN occurred_at >= $2 THEN 1 ELSE 0 END) AS n_recent \
             FROM idempotency_attempts WHERE occurred_at >= $1 \
             GROUP BY tool, kind, bucket"
        )
    };
}
pub const ATTEMPT_BUCKETS_POSTGRES: &str =
    attempt_buckets!("CAST(floor(extract(epoch FROM occurred_at) / 300) AS bigint)");
pub const ATTEMPT_BUCKETS_SQLITE: &str =
    attempt_buckets!("CAST(strftime('%s', occurred_at) AS INTEGER) / 300");

/// Width of an overview bucket.
pub const BUCKET_SECONDS: i64 = 300;

/// One row of a listing: a record without its JSON payloads.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KeySummary {
    pub key: String,
    pub tenant: String,
    pub tool: String,
    pub workflow_id: String,
    pub step_id: String,
    pub intent_id: String,
    pub business_ref: Option<String>,
    pub status: Status,
    pub fencing_token: i64,
    pub lease_until: DateTime<Utc>,
    pub attempt_count: i64,
    pub provider_retention_until: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl KeySummary {
    /// IN_PROGRESS with a lease that ran out: the worker died or hung mid-call.
    pub fn lease_expired(&self, now: DateTime<Utc>) -> bool {
        self.status == Status::InProgress && self.lease_until <= now
    }
}

#[derive(Debug, sqlx::FromRow)]
struct SummaryRow {
    key: String,
    tenant: String,
    tool: String,
    workflow_id: String,
    step_id: String,
    intent_id: String,
    business_ref: Option<String>,
    status: String,
    fencing_token: i64,
    lease_until: DateTime<Utc>,
    attempt_count: i64,
    provider_retention_until: DateTime<Utc>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl TryFrom<SummaryRow> for KeySummary {
    type Error = StoreError;
    fn try_from(r: SummaryRow) -> Result<Self, StoreError> {
        Ok(KeySummary {
            status: r
                .status
                .parse()
                .map_err(|e| StoreError::Corrupt(format!("record {}: {e}", r.key)))?,
            key: r.key,
            tenant: r.tenant,
            tool: r.tool,
            workflow_id: r.workflow_id,
            step_id: r.step_id,
            intent_id: r.intent_id,
            business_ref: r.business_ref,
            fencing_token: r.fencing_token,
            lease_until: r.lease_until,
            attempt_count: r.attempt_count,
            provider_retention_until: r.provider_retention_until,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

fn summaries(rows: Vec<SummaryRow>) -> Result<Vec<KeySummary>, StoreError> {
    rows.into_iter().map(KeySummary::try_from).collect()
}

/// What a key listing is filtered by; every field is optional. Values are taken as
/// given: the web layer validates them (a key prefix is lowercase hex).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyFilter {
    /// The beginning of a key, lowercase hex.
    pub key_prefix: Option<String>,
    /// The whole business ref (`order:A-88214`) or the part after its first colon.
    pub business_ref: Option<String>,
    pub workflow_id: Option<String>,
    pub intent_id: Option<String>,
    pub tenant: Option<String>,
    pub tool: Option<String>,
    pub status: Option<Status>,
    /// Last activity (`updated_at`) at or after this time.
    pub from: Option<DateTime<Utc>>,
    /// Last activity before this time.
    pub to: Option<DateTime<Utc>>,
}

/// The index that drives a listing: the most selective filter present wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyIndex {
    BusinessRef,
    KeyPrefix,
    WorkflowId,
    IntentId,
    UndecidedStatus,
    Tool,
    UpdatedAt,
}

impl KeyFilter {
    pub fn index(&self) -> KeyIndex {
        let undecided = matches!(self.status, Some(Status::Unknown | Status::InProgress));
        if self.business_ref.is_some() {
            KeyIndex::BusinessRef
        } else if self.key_prefix.is_some() {
            KeyIndex::KeyPrefix
        } else if self.workflow_id.is_some() {
            KeyIndex::WorkflowId
        } else if self.intent_id.is_some() {
            KeyIndex::IntentId
        } else if undecided {
            KeyIndex::UndecidedStatus
        } else if self.tool.is_some() {
            KeyIndex::Tool
        } else {
            KeyIndex::UpdatedAt
        }
    }

    /// A count is cheap when the driving index bounds the rows it reads: always for the
    /// selective indexes; for tool and time alone only without filters the index cannot
    /// apply (a tenant or a common status would make the count scan for rare rows).
    fn count_is_cheap(&self) -> bool {
        match self.index() {
            KeyIndex::Tool | KeyIndex::UpdatedAt => self.tenant.is_none() && self.status.is_none(),
            _ => true,
        }
    }

    fn statements(&self) -> &'static KeyStatements {
        match self.index() {
            KeyIndex::BusinessRef => &BY_BUSINESS_REF,
            KeyIndex::KeyPrefix => &BY_KEY,
            KeyIndex::WorkflowId => &BY_WORKFLOW,
            KeyIndex::IntentId => &BY_INTENT,
            KeyIndex::UndecidedStatus => &BY_UNDECIDED_STATUS,
            KeyIndex::Tool => &BY_TOOL,
            KeyIndex::UpdatedAt => &BY_UPDATED_AT,
        }
    }

    /// The key range a prefix stands for: keys are exactly 64 lowercase hex digits.
    fn key_range(&self) -> (Option<String>, Option<String>) {
        match &self.key_prefix {
            Some(p) => (Some(format!("{p:0<64}")), Some(format!("{p:f<64}"))),
            None => (None, None),
        }
    }
}

/// Where the next page of a listing starts: after this row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub at: DateTime<Utc>,
    pub key: String,
}

/// How many rows match, counted up to [`COUNT_CAP`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    Exact(i64),
    AtLeast(i64),
}

pub const COUNT_CAP: i64 = 1000;

#[derive(Debug, Clone, PartialEq)]
pub struct KeyPage {
    pub keys: Vec<KeySummary>,
    /// Present when there are older rows.
    pub next: Option<Cursor>,
    /// Present when counting was cheap (see [`KeyFilter::index`]).
    pub count: Option<Count>,
}

/// Below every stored time / above every stored time: the bounds of an absent range.
/// Both backends store and compare these (SQLite as RFC 3339 text, which sorts).
fn far_past() -> DateTime<Utc> {
    DateTime::from_timestamp(-62_135_596_800, 0).unwrap_or(DateTime::<Utc>::MIN_UTC)
}
fn far_future() -> DateTime<Utc> {
    DateTime::from_timestamp(253_402_300_799, 0).unwrap_or(DateTime::<Utc>::MAX_UTC)
}
/// Sorts after every key (keys are lowercase hex) and before none.
const KEY_AFTER_ALL: &str = "g";

/// Binds a listing's thirteen parameters in the order of [`key_filters!`].
macro_rules! bind_listing {
    ($q:expr, $f:expr, $range:expr, $cursor:expr, $limit:expr) => {
        $q.bind(&$range.0)
            .bind(&$range.1)
            .bind(&$f.business_ref)
            .bind(&$f.workflow_id)
            .bind(&$f.intent_id)
            .bind(&$f.tenant)
            .bind(&$f.tool)
            .bind($f.status.map(Status::as_str))
            .bind($f.from.unwrap_or_else(far_past))
            .bind($f.to.unwrap_or_else(far_future))
            .bind($cursor.0)
            .bind($cursor.1.clone())
            .bind($limit)
    };
}

/// Per tool, the keys that need attention now.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct BacklogSummary {
    pub tool: String,
    pub unknown: i64,
    pub expired_leases: i64,
    /// UNKNOWN keys the provider has already forgotten: only a person can resolve them.
    pub past_retention: i64,
    pub oldest_unknown: Option<DateTime<Utc>>,
    pub oldest: Option<DateTime<Utc>>,
}

/// Attempts of one tool and kind in one 5-minute bucket.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct AttemptBucket {
    pub tool: String,
    pub kind: String,
    /// Start of the bucket in seconds since the epoch, divided by [`BUCKET_SECONDS`].
    pub bucket: i64,
    pub n: i64,
    /// Of those, the attempts at or after the "recent" bound (the last hour).
    pub n_recent: i64,
}

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

#[derive(Debug, Clone, PartialEq)]
pub struct BacklogPage {
    pub keys: Vec<KeySummary>,
    pub next: Option<Cursor>,
}

impl Store {
    /// One page of keys matching `filter`, newest activity first, after `after`.
    #[tracing::instrument(skip_all, fields(index = ?filter.index()))]
    pub async fn list_keys(
        &self,
        filter: &KeyFilter,
        after: Option<&Cursor>,
        limit: u32,
    ) -> Result<KeyPage, StoreError> {
        let statements = filter.statements();
        let range = filter.key_range();
        let cursor = match after {
            Some(c) => (c.at, c.key.clone()),
            None => (far_future(), KEY_AFTER_ALL.to_string()),
        };
        // One row more than asked tells whether there is a next page.
        let fetch = i64::from(limit) + 1;
        let rows: Vec<SummaryRow> = match self {
            Store::Postgres(pool) => {
                bind_listing!(
                    sqlx::query_as(statements.list_postgres),
                    filter,
                    range,
                    cursor,
                    fetch
                )
                .fetch_all(pool)
                .await?
            }
            Store::Sqlite(pool) => {
                bind_listing!(
                    sqlx::query_as(statements.list_sqlite),
                    filter,
                    range,
                    cursor,
                    fetch
                )
                .fetch_all(pool)
                .await?
            }
        };
        let mut keys = summaries(rows)?;
        let next = if keys.len() > limit as usize {
            keys.truncate(limit as usize);
            keys.last().map(|k| Cursor {
                at: k.updated_at,
                key: k.key.clone(),
            })
        } else {
            None
        };
        let count = if filter.count_is_cheap() {
            Some(self.count_keys(filter).await?)
        } else {
            None
        };
        Ok(KeyPage { keys, next, count })
    }

    async fn count_keys(&self, filter: &KeyFilter) -> Result<Count, StoreError> {
        let statements = filter.statements();
        let range = filter.key_range();
        let cursor = (far_future(), KEY_AFTER_ALL.to_string());
        let cap = COUNT_CAP + 1;
        let n: i64 = match self {
            Store::Postgres(pool) => {
                bind_listing!(
                    sqlx::query_scalar(statements.count_postgres),
                    filter,
                    range,
                    cursor,
                    cap
                )
                .fetch_one(pool)
                .await?
            }
            Store::Sqlite(pool) => {
                bind_listing!(
                    sqlx::query_scalar(statements.count_sqlite),
                    filter,
                    range,
                    cursor,
                    cap
                )
                .fetch_one(pool)
                .await?
            }
        };
        Ok(if n > COUNT_CAP {
            Count::AtLeast(COUNT_CAP)
        } else {
            Count::Exact(n)
        })
    }

    /// Keys whose business ref is exactly `business_ref`, newest first.
    pub async fn keys_with_business_ref(
        &self,
        business_ref: &str,
        limit: u32,
    ) -> Result<Vec<KeySummary>, StoreError> {
        let rows: Vec<SummaryRow> = on_pool!(self, pool => {
            sqlx::query_as(SAME_BUSINESS_REF)
                .bind(business_ref)
                .bind(i64::from(limit))
                .fetch_all(pool)
                .await
        })?;
        summaries(rows)
    }

    /// UNKNOWN keys and IN_PROGRESS keys whose lease ran out by `now`, oldest first.
    pub async fn backlog(
        &self,
        tool: Option<&str>,
        after: Option<&Cursor>,
        limit: u32,
        now: DateTime<Utc>,
    ) -> Result<BacklogPage, StoreError> {
        let (at, key) = match after {
            Some(c) => (c.at, c.key.as_str()),
            None => (far_past(), ""),
        };
        let fetch = i64::from(limit) + 1;
        let rows: Vec<SummaryRow> = on_pool!(self, pool => {
            sqlx::query_as(BACKLOG)
                .bind(now)
                .bind(tool)
                .bind(at)
                .bind(key)
                .bind(fetch)
                .fetch_all(pool)
                .await
        })?;
        let mut keys = summaries(rows)?;
        let next = if keys.len() > limit as usize {
            keys.truncate(limit as usize);
            keys.last().map(|k| Cursor {
                at: k.created_at,
                key: k.key.clone(),
            })
        } else {
            None
        };
        Ok(BacklogPage { keys, next })
    }

    /// Per tool: UNKNOWN keys, expired leases, past-retention keys and the oldest, now.
    pub async fn backlog_summary(
        &self,
        now: DateTime<Utc>,
    ) -> Result<Vec<BacklogSummary>, StoreError> {
        let rows = on_pool!(self, pool => {
            sqlx::query_as(BACKLOG_SUMMARY).bind(now).fetch_all(pool).await
        })?;
        Ok(rows)
    }

    /// Attempt counts per tool, kind and 5-minute bucket since `since`, each with the
    /// part at or after `recent`.
    pub async fn attempt_buckets(
        &self,
        since: DateTime<Utc>,
        recent: DateTime<Utc>,
    ) -> Result<Vec<AttemptBucket>, StoreError> {
        let rows = match self {
            Store::Postgres(pool) => {
                sqlx::query_as(ATTEMPT_BUCKETS_POSTGRES)
                    .bind(since)
                    .bind(recent)
                    .fetch_all(pool)
                    .await?
            }
            Store::Sqlite(pool) => {
                sqlx::query_as(ATTEMPT_BUCKETS_SQLITE)
                    .bind(since)
                    .bind(recent)
                    .fetch_all(pool)
                    .await?
            }
        };
        Ok(rows)
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_selective_filter_drives_the_listing() {
        let mut f = KeyFilter {
            tool: Some("issue_refund".into()),
            ..KeyFilter::default()
        };
        assert_eq!(f.index(), KeyIndex::Tool);
        f.status = Some(Status::Done);
        assert_eq!(f.index(), KeyIndex::Tool);
        f.status = Some(Status::Unknown);
        assert_eq!(f.index(), KeyIndex::UndecidedStatus);
        f.intent_id = Some("i".into());
        assert_eq!(f.index(), KeyIndex::IntentId);
        f.workflow_id = Some("w".into());
        assert_eq!(f.index(), KeyIndex::WorkflowId);
        f.key_prefix = Some("ab12".into());
        assert_eq!(f.index(), KeyIndex::KeyPrefix);
        f.business_ref = Some("order:A-88214".into());
        assert_eq!(f.index(), KeyIndex::BusinessRef);
        assert_eq!(KeyFilter::default().index(), KeyIndex::UpdatedAt);
    }

    #[test]
    fn a_key_prefix_stands_for_every_key_that_starts_with_it() {
        let f = KeyFilter {
            key_prefix: Some("ab12".into()),
            ..KeyFilter::default()
        };
        let (lo, hi) = f.key_range();
        let (lo, hi) = (lo.unwrap(), hi.unwrap());
        assert_eq!(lo.len(), 64);
        assert!(lo.starts_with("ab120000") && hi.starts_with("ab12ffff"));
        assert_eq!(hi.len(), 64);
    }

    #[test]
    fn a_count_is_skipped_where_it_could_scan() {
        let tenant_only = KeyFilter {
            tenant: Some("acme".into()),
            ..KeyFilter::default()
        };
        assert!(!tenant_only.count_is_cheap());
        assert!(KeyFilter::default().count_is_cheap());
        let by_ref = KeyFilter {
            business_ref: Some("order:A-1".into()),
            tenant: Some("acme".into()),
            ..KeyFilter::default()
        };
        assert!(by_ref.count_is_cheap());
    }

    #[test]
    fn the_sentinels_sort_outside_every_stored_time() {
        assert_eq!(
            crate::guard::rfc3339(far_past()),
            "0001-01-01T00:00:00.000000Z"
        );
        assert_eq!(
            crate::guard::rfc3339(far_future()),
            "9999-12-31T23:59:59.000000Z"
        );
    }

    #[test]
    fn each_statement_filters_the_same_way() {
        for s in [&BY_BUSINESS_REF, &BY_KEY, &BY_WORKFLOW, &BY_INTENT] {
            for sql in [s.list_postgres, s.count_postgres] {
                assert!(sql.contains(key_filters!()), "{sql}");
            }
            for sql in [s.list_sqlite, s.count_sqlite] {
                assert!(sql.contains(key_filters!("+updated_at")), "{sql}");
            }
        }
        for s in [&BY_UNDECIDED_STATUS, &BY_TOOL, &BY_UPDATED_AT] {
            for sql in [
                s.list_postgres,
                s.list_sqlite,
                s.count_postgres,
                s.count_sqlite,
            ] {
                assert!(sql.contains(key_filters!()), "{sql}");
                assert!(!sql.contains("OFFSET"), "{sql}");
            }
        }
    }
}
