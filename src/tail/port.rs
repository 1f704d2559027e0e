//! The tail's port: the reads the tailer needs from the attempt log, owned here so the
//! tailer never names the store. `crate::store::Store` implements it for PostgreSQL
//! and SQLite (`store/tail.rs`, where the commit-order reasoning lives).

use crate::guard::StoreError;
use chrono::{DateTime, Utc};
use std::future::Future;
use std::time::Duration;

/// Where the tail stands: every row at or before this position has been read.
/// `txid` is always 0 on SQLite, where ids alone give commit order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TailPosition {
    pub txid: i64,
    pub id: i64,
}

/// The head of the log when a tail starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TailHead {
    pub position: TailPosition,
    /// PostgreSQL: rows already committed at the start but after `position` in tail
    /// order (their transaction is newer than one still running). They happened before
    /// the start, so the tail skips them when it reaches them.
    pub already_committed: Vec<TailPosition>,
}

/// One attempt row as the tailer needs it: no key, no payload.
#[derive(Debug, Clone, PartialEq)]
pub struct TailEvent {
    pub id: i64,
    pub txid: i64,
    pub tool: String,
    pub tenant: String,
    pub kind: String,
    /// `detail.resolution` of a `resolved` row.
    pub resolution: Option<String>,
    /// `detail.previous_status` of a `resolved` row.
    pub previous_status: Option<String>,
    /// `detail.suspected_duplicate_of` of a `claimed` row (a suspected duplicate).
    pub suspected_duplicate_of: Option<String>,
    pub duration_ms: Option<i64>,
    pub occurred_at: DateTime<Utc>,
}

impl TailEvent {
    pub fn position(&self) -> TailPosition {
        TailPosition {
            txid: self.txid,
            id: self.id,
        }
    }
}

/// What the tail cannot read yet.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct TailPending {
    /// `occurred_at` of the oldest committed row the tail may not read yet.
    pub oldest_pending: Option<DateTime<Utc>>,
    /// Age of the oldest open write transaction in the cluster (PostgreSQL; 0 on
    /// SQLite). Needs `pg_read_all_stats` to see other roles' sessions.
    pub held_back: Duration,
}

/// The attempt log in commit order, and the names the tailer exports at zero.
pub trait TailSource: Send + Sync {
    /// The head of the log now: a tail started here counts only what commits from
    /// now on.
    fn tail_head(&self) -> impl Future<Output = Result<TailHead, StoreError>> + Send;

    /// Up to `limit` rows after `after`, in commit order.
    fn tail_batch(
        &self,
        after: TailPosition,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<TailEvent>, StoreError>> + Send;

    /// What holds the tail back (never anything on SQLite: nothing is pending once a
    /// batch comes back short).
    fn tail_pending(&self) -> impl Future<Output = Result<TailPending, StoreError>> + Send;

    /// Every tool that has a record, by name.
    fn distinct_tools(&self) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;

    /// The first `limit` tenants that have a record, by name.
    fn first_tenants(
        &self,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;
}
