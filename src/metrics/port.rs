//! The backlog refresher's port: the two reads behind the table-state gauges, owned
//! here so metrics never name the store. `crate::store::Store` implements it
//! (`store/tail.rs`).

use crate::guard::StoreError;
use chrono::{DateTime, Utc};
use std::future::Future;
use std::time::Duration;

/// The UNKNOWN / IN_PROGRESS backlog of one (tool, tenant).
#[derive(Debug, Clone, PartialEq)]
pub struct BacklogGroup {
    pub tool: String,
    pub tenant: String,
    pub unknown: i64,
    pub expired_leases: i64,
    pub oldest_unknown_created_at: Option<DateTime<Utc>>,
    /// The earliest instant after which a resend of an UNKNOWN key is no longer safe,
    /// among those still ahead (`resend_safe_until`).
    pub earliest_retention_deadline: Option<DateTime<Utc>>,
    pub past_retention: i64,
}

pub trait BacklogSource: Send + Sync {
    /// The backlog per (tool, tenant) at `now`; groups with no UNKNOWN or IN_PROGRESS
    /// key are absent (the caller reports them as 0).
    fn backlog_by_tool(
        &self,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<Vec<BacklogGroup>, StoreError>> + Send;

    /// How far behind its primary this database replays, when it is a PostgreSQL hot
    /// standby; `None` on a primary and on SQLite.
    fn replica_lag(&self) -> impl Future<Output = Result<Option<Duration>, StoreError>> + Send;
}
