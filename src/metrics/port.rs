//! The backlog refresher's port: the two reads behind the table-state gauges, owned
//! here so metrics never name the store. `crate::store::Store` implements it
//! (`store/tail.rs`).

use crate::guard::StoreError;
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

/// The keys of one (tool, tenant) that need a decision now: UNKNOWN, or IN_PROGRESS
/// with a lease that ran out. The gauges read it per (tool, tenant), the pages per tool
/// ([`BacklogGroup::per_tool`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BacklogGroup {
    pub tool: String,
    /// Empty once groups of several tenants are added together.
    pub tenant: String,
    pub unknown: i64,
    pub expired_leases: i64,
    /// The oldest of these keys, UNKNOWN or with an expired lease.
    pub oldest_created_at: Option<DateTime<Utc>>,
    pub oldest_unknown_created_at: Option<DateTime<Utc>>,
    /// The earliest instant after which a resend of an UNKNOWN key is no longer safe,
    /// among those still ahead (`resend_safe_until`).
    pub earliest_retention_deadline: Option<DateTime<Utc>>,
    /// UNKNOWN keys past retention: only a person can resolve them.
    pub past_retention: i64,
}

impl BacklogGroup {
    /// Adds `other`'s counts to these, keeping the earliest of each time.
    pub fn add(&mut self, other: &BacklogGroup) {
        let earliest = |a: Option<DateTime<Utc>>, b: Option<DateTime<Utc>>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.unknown += other.unknown;
        self.expired_leases += other.expired_leases;
        self.past_retention += other.past_retention;
        self.oldest_created_at = earliest(self.oldest_created_at, other.oldest_created_at);
        self.oldest_unknown_created_at = earliest(
            self.oldest_unknown_created_at,
            other.oldest_unknown_created_at,
        );
        self.earliest_retention_deadline = earliest(
            self.earliest_retention_deadline,
            other.earliest_retention_deadline,
        );
    }

    /// `groups` added together per tool, by tool name.
    pub fn per_tool(groups: &[BacklogGroup]) -> BTreeMap<String, BacklogGroup> {
        let mut tools: BTreeMap<String, BacklogGroup> = BTreeMap::new();
        for g in groups {
            tools
                .entry(g.tool.clone())
                .or_insert_with(|| BacklogGroup {
                    tool: g.tool.clone(),
                    ..BacklogGroup::default()
                })
                .add(g);
        }
        tools
    }
}

pub trait BacklogSource: Send + Sync {
    /// The backlog per (tool, tenant) at `now`; groups with nothing to decide are absent
    /// (the caller reports them as 0).
    fn backlog_by_tool(
        &self,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<Vec<BacklogGroup>, StoreError>> + Send;

    /// How far behind its primary this database replays, when it is a PostgreSQL hot
    /// standby; `None` on a primary and on SQLite.
    fn replica_lag(&self) -> impl Future<Output = Result<Option<Duration>, StoreError>> + Send;
}
