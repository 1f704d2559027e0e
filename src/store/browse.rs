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

mod sql;

use super::{Store, StoreError, on_pool};
use crate::guard::{AttemptKind, LeaseState, Status};
use chrono::{DateTime, Utc};
use serde::Serialize;
pub use sql::BUCKET_SECONDS;
use sql::*;

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
    pub resend_safe_until: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl KeySummary {
    pub fn lease_state(&self, now: DateTime<Utc>) -> LeaseState {
        LeaseState::of(self.status, self.lease_until, now)
    }

    /// IN_PROGRESS with a lease that ran out: the worker died or hung mid-call.
    pub fn lease_expired(&self, now: DateTime<Utc>) -> bool {
        self.lease_state(now) == LeaseState::Expired
    }

    /// Whether a resend with the same key is still safe ([`crate::guard::resend_safe`]).
    pub fn resend_safe(&self, now: DateTime<Utc>) -> bool {
        crate::guard::resend_safe(self.resend_safe_until, now)
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
    resend_safe_until: DateTime<Utc>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl TryFrom<SummaryRow> for KeySummary {
    type Error = StoreError;
    fn try_from(r: SummaryRow) -> Result<Self, StoreError> {
        Ok(KeySummary {
            status: super::rows::status_of(&r.key, &r.status)?,
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
            resend_safe_until: r.resend_safe_until,
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
    /// Last activity (`updated_at`) at or after this time; with `attempt_kinds`, the
    /// start of the window the attempt must fall in instead.
    pub from: Option<DateTime<Utc>>,
    /// Last activity before this time; with `attempt_kinds`, the window's end.
    pub to: Option<DateTime<Utc>>,
    /// Keys with an attempt of one of these kinds in the window (`from`, `to`),
    /// whatever happened to them later; empty: no such filter.
    pub attempt_kinds: Vec<AttemptKind>,
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
    Attempts,
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
        } else if !self.attempt_kinds.is_empty() {
            KeyIndex::Attempts
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
            KeyIndex::Attempts => &BY_ATTEMPTS,
        }
    }

    /// Whether a plan made for other parameter values serves this listing. Not with an
    /// attempt filter: the best plan depends on how common the kinds are in the window
    /// (a rare kind drives from its attempts, a common one walks the records newest
    /// first), and a cached generic plan on PostgreSQL knows neither (measured: 1.6 s
    /// instead of 0.2 ms for a kind with no attempts among 200,000 keys). Such
    /// statements are prepared unnamed, so PostgreSQL plans them for the values bound.
    fn plan_is_reusable(&self) -> bool {
        self.attempt_kinds.is_empty()
    }

    /// The bounds on last activity: `from`/`to`, unless they bound the attempts.
    fn activity_range(&self) -> (DateTime<Utc>, DateTime<Utc>) {
        if self.attempt_kinds.is_empty() {
            (
                self.from.unwrap_or_else(far_past),
                self.to.unwrap_or_else(far_future),
            )
        } else {
            (far_past(), far_future())
        }
    }

    /// The window an attempt must fall in (only read with attempt kinds).
    fn attempt_range(&self) -> (DateTime<Utc>, DateTime<Utc>) {
        (
            self.from.unwrap_or_else(far_past),
            self.to.unwrap_or_else(far_future),
        )
    }

    /// The attempt kinds as the statements take them: comma-separated names, or NULL
    /// for none.
    fn attempt_kinds_list(&self) -> Option<String> {
        if self.attempt_kinds.is_empty() {
            return None;
        }
        let names: Vec<&str> = self.attempt_kinds.iter().map(|k| k.as_str()).collect();
        Some(names.join(","))
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

/// Binds a listing's sixteen parameters in the order of [`key_filters!`].
macro_rules! bind_listing {
    ($q:expr, $f:expr, $range:expr, $cursor:expr, $limit:expr) => {{
        let activity = $f.activity_range();
        let window = $f.attempt_range();
        $q.bind(&$range.0)
            .bind(&$range.1)
            .bind(&$f.business_ref)
            .bind(&$f.workflow_id)
            .bind(&$f.intent_id)
            .bind(&$f.tenant)
            .bind(&$f.tool)
            .bind($f.status.map(Status::as_str))
            .bind(activity.0)
            .bind(activity.1)
            .bind($cursor.0)
            .bind($cursor.1.clone())
            .bind($limit)
            .bind(window.0)
            .bind(window.1)
            .bind($f.attempt_kinds_list())
    }};
}

// After `bind_listing!`, which it uses.
mod explain;

/// Per tool, the keys that need attention now.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct BacklogSummary {
    pub tool: String,
    pub unknown: i64,
    pub expired_leases: i64,
    /// UNKNOWN keys past retention (`resend_safe_until` passed): only a person can
    /// resolve them.
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
                    sqlx::query_as(statements.list_postgres).persistent(filter.plan_is_reusable()),
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
                    sqlx::query_as(statements.list_sqlite).persistent(filter.plan_is_reusable()),
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
                    sqlx::query_scalar(statements.count_postgres)
                        .persistent(filter.plan_is_reusable()),
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
                    sqlx::query_scalar(statements.count_sqlite)
                        .persistent(filter.plan_is_reusable()),
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

    /// UNKNOWN keys and IN_PROGRESS keys whose lease ran out by `now`, oldest first;
    /// of one `status` if given (`IN_PROGRESS`: exactly the expired leases).
    pub async fn backlog(
        &self,
        tool: Option<&str>,
        status: Option<&str>,
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
                .bind(status)
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
        f.attempt_kinds = vec![AttemptKind::PayloadMismatch];
        assert_eq!(f.index(), KeyIndex::Attempts);
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
    fn with_attempt_kinds_the_window_bounds_the_attempts_not_the_last_activity() {
        let t = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().to_utc();
        let mut f = KeyFilter {
            from: Some(t("2026-11-29T14:00:00Z")),
            to: Some(t("2026-11-29T15:00:00Z")),
            ..KeyFilter::default()
        };
        assert_eq!(f.activity_range(), (f.from.unwrap(), f.to.unwrap()));
        assert_eq!(f.attempt_kinds_list(), None);
        f.attempt_kinds = vec![AttemptKind::Replayed, AttemptKind::ReplayedFailure];
        assert_eq!(f.activity_range(), (far_past(), far_future()));
        assert_eq!(f.attempt_range(), (f.from.unwrap(), f.to.unwrap()));
        assert_eq!(
            f.attempt_kinds_list().as_deref(),
            Some("replayed,replayed_failure")
        );
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
}
