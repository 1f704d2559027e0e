//! The backlog gauges, refreshed from one indexed query on an interval (never per
//! scrape). Every slot ever exported is set on every refresh, so a tool whose backlog
//! empties reads 0 rather than keeping its last value.

use super::port::{BacklogGroup, BacklogSource};
use super::{Metrics, Slot};
use crate::guard::StoreError;
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Unix seconds, or 0 for "none" (the rules filter with `> 0`).
fn timestamp(t: Option<DateTime<Utc>>) -> f64 {
    t.map_or(0.0, |t| t.timestamp_millis() as f64 / 1000.0)
}

/// Reads the backlog once and sets every backlog gauge.
#[tracing::instrument(skip_all)]
pub async fn refresh(
    store: &impl BacklogSource,
    metrics: &Metrics,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let started = Instant::now();
    let f = metrics.families();
    let read = async {
        Ok::<_, StoreError>((
            store.backlog_by_tool(now).await?,
            store.replica_lag().await?,
        ))
    };
    let (groups, replica_lag) = match read.await {
        Ok(read) => read,
        Err(e) => {
            f.idemwatch_db_up.set(0);
            return Err(e);
        }
    };
    f.idemwatch_replica_lag_seconds
        .set(replica_lag.map_or(0.0, |lag| lag.as_secs_f64()));
    let mut by_slot: HashMap<Slot, BacklogGroup> = HashMap::new();
    for g in &groups {
        by_slot
            .entry(metrics.slot(&g.tool, &g.tenant))
            .or_default()
            .add(g);
    }
    let none = BacklogGroup::default();
    for slot in metrics.slots() {
        let b = by_slot.get(&slot).unwrap_or(&none);
        let labels = slot.values(&[]);
        f.idempotency_unknown_backlog
            .with_label_values(&labels)
            .set(b.unknown);
        f.idempotency_expired_leases
            .with_label_values(&labels)
            .set(b.expired_leases);
        f.idempotency_unknown_oldest_created_timestamp_seconds
            .with_label_values(&labels)
            .set(timestamp(b.oldest_unknown_created_at));
        f.idempotency_unknown_earliest_retention_deadline_timestamp_seconds
            .with_label_values(&labels)
            .set(timestamp(b.earliest_retention_deadline));
        f.idempotency_unknown_past_retention
            .with_label_values(&labels)
            .set(b.past_retention);
    }
    f.idemwatch_backlog_refresh_duration_seconds
        .set(started.elapsed().as_secs_f64());
    f.idemwatch_db_up.set(1);
    Ok(())
}

/// Refreshes every `interval` until `stop` turns true. Failures are logged and retried
/// at the next tick; the gauges keep their last values meanwhile and `idemwatch_db_up`
/// says they are stale.
pub async fn run(
    store: impl BacklogSource,
    metrics: Arc<Metrics>,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => break,
            _ = ticks.tick() => {}
        }
        let refreshed = tokio::select! {
            _ = stop.wait_for(|stop| *stop) => break,
            r = refresh(&store, &metrics, Utc::now()) => r,
        };
        match refreshed {
            Ok(()) if failing => {
                failing = false;
                tracing::info!("backlog refresh recovered");
            }
            Ok(()) => {}
            Err(e) => {
                failing = true;
                tracing::warn!(error = %e, "backlog refresh failed; retrying next interval");
            }
        }
    }
    tracing::debug!("backlog refresher stopped");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    #[test]
    fn folded_groups_add_counts_and_keep_the_earliest_times() {
        let group =
            |tool: &str, unknown, created: Option<&str>, deadline: Option<&str>| BacklogGroup {
                tool: tool.into(),
                tenant: "x".into(),
                unknown,
                expired_leases: 1,
                oldest_created_at: created.map(at),
                oldest_unknown_created_at: created.map(at),
                earliest_retention_deadline: deadline.map(at),
                past_retention: 2,
            };
        let mut b = BacklogGroup::default();
        let groups = [
            group("t", 3, Some("2026-01-02T00:00:00Z"), None),
            group(
                "t",
                4,
                Some("2026-01-01T00:00:00Z"),
                Some("2026-01-03T00:00:00Z"),
            ),
            group("t", 0, None, Some("2026-01-05T00:00:00Z")),
            group("u", 5, None, None),
        ];
        for g in &groups[..3] {
            b.add(g);
        }
        let added = BacklogGroup {
            unknown: 7,
            expired_leases: 3,
            oldest_created_at: Some(at("2026-01-01T00:00:00Z")),
            oldest_unknown_created_at: Some(at("2026-01-01T00:00:00Z")),
            earliest_retention_deadline: Some(at("2026-01-03T00:00:00Z")),
            past_retention: 6,
            ..BacklogGroup::default()
        };
        assert_eq!(b, added);
        let per_tool = BacklogGroup::per_tool(&groups);
        let tool_t = BacklogGroup {
            tool: "t".into(),
            ..added
        };
        assert_eq!(per_tool.keys().collect::<Vec<_>>(), ["t", "u"]);
        assert_eq!(per_tool["t"], tool_t);
        assert_eq!(
            (per_tool["u"].unknown, per_tool["u"].tenant.as_str()),
            (5, "")
        );
    }

    #[test]
    fn no_time_is_exported_as_zero() {
        assert_eq!(timestamp(None), 0.0);
        assert_eq!(timestamp(Some(at("1970-01-01T00:00:01.500Z"))), 1.5);
    }
}
