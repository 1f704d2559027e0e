//! The tailer: follows `idempotency_attempts` in commit order, in batches, and turns
//! each row into metric updates ([`events::effects`]).
//!
//! - It starts at the head of the log, so counters start at zero with the process.
//! - Its position only moves past rows whose updates are applied, and it never moves
//!   back, so within a process no row is skipped or counted twice. On PostgreSQL the
//!   store reads only transactions older than every running one (see
//!   `store::tail`); an open write transaction holds the tail back, it loses nothing.
//! - It polls: immediately again while batches come back full, every `busy_interval`
//!   while rows keep arriving, backing off to `idle_interval` when the log is quiet.
//!   (No LISTEN/NOTIFY: every notifying commit takes a cluster-wide lock, and a
//!   ≤ 1 s pickup is plenty for a 15 s scrape.)
//! - A failed poll sets `idemwatch_db_up` to 0 and retries with exponential backoff
//!   from the same position; /metrics keeps answering meanwhile.

pub mod events;
pub mod port;

use crate::guard::AttemptKind;
use crate::guard::StoreError;
use crate::metrics::Metrics;
use chrono::Utc;
use events::MetricUpdate;
pub use port::{TailEvent, TailHead, TailPending, TailPosition, TailSource};
use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

#[derive(Debug, Clone)]
pub struct TailSettings {
    /// Rows per query.
    pub batch_size: u32,
    /// Wait between polls while rows keep arriving.
    pub busy_interval: Duration,
    /// Longest wait between polls when the log is quiet.
    pub idle_interval: Duration,
    /// Longest wait between retries while the database fails.
    pub max_backoff: Duration,
}

impl Default for TailSettings {
    fn default() -> Self {
        Self {
            batch_size: 500,
            busy_interval: Duration::from_millis(50),
            idle_interval: Duration::from_secs(1),
            max_backoff: Duration::from_secs(10),
        }
    }
}

/// What one poll read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Polled {
    /// Rows read (including rows that predate the start and were skipped).
    pub rows: usize,
    /// The batch was full: more rows are waiting.
    pub more: bool,
}

#[derive(Debug)]
pub struct Tailer {
    metrics: Arc<Metrics>,
    settings: TailSettings,
    position: Option<TailPosition>,
    /// Rows committed before the start that lie after the start position in tail
    /// order (PostgreSQL, see `TailHead`): skipped when reached.
    already_committed: BTreeSet<TailPosition>,
    /// Attempt kinds from a newer guard, warned about once each.
    unknown_kinds: HashSet<String>,
}

impl Tailer {
    pub fn new(metrics: Arc<Metrics>, settings: TailSettings) -> Self {
        Self {
            metrics,
            settings,
            position: None,
            already_committed: BTreeSet::new(),
            unknown_kinds: HashSet::new(),
        }
    }

    /// The last row read, once started.
    pub fn position(&self) -> Option<TailPosition> {
        self.position
    }

    /// One poll: starts at the head on first use, then reads the next batch. Updates
    /// the self-metrics either way.
    pub async fn poll(&mut self, store: &impl TailSource) -> Result<Polled, StoreError> {
        let metrics = self.metrics.clone();
        let f = metrics.families();
        match self.try_poll(store).await {
            Ok(polled) => {
                f.idemwatch_db_up.set(1);
                f.idemwatch_tail_last_success_timestamp_seconds
                    .set(Utc::now().timestamp_millis() as f64 / 1000.0);
                Ok(polled)
            }
            Err(e) => {
                f.idemwatch_db_up.set(0);
                f.idemwatch_tail_errors_total.inc();
                Err(e)
            }
        }
    }

    /// Polls until a batch comes back short (test and benchmark helper).
    pub async fn catch_up(&mut self, store: &impl TailSource) -> Result<u64, StoreError> {
        let mut rows = 0;
        loop {
            let polled = self.poll(store).await?;
            rows += polled.rows as u64;
            if !polled.more {
                return Ok(rows);
            }
        }
    }

    #[tracing::instrument(skip_all)]
    async fn try_poll(&mut self, store: &impl TailSource) -> Result<Polled, StoreError> {
        let position = match self.position {
            Some(p) => p,
            None => self.start(store).await?,
        };
        let batch = store.tail_batch(position, self.settings.batch_size).await?;
        let more = batch.len() >= self.settings.batch_size as usize;
        // No await from here until the position moves: a cancelled poll either
        // applied nothing or applied the batch and moved past it.
        for event in &batch {
            self.apply(event);
        }
        if let Some(last) = batch.last() {
            let p = last.position();
            self.position = Some(p);
            self.already_committed.retain(|c| *c > p);
        }
        let f = self.metrics.families();
        let now = Utc::now();
        let lag = if more {
            batch.last().map(|last| now - last.occurred_at)
        } else {
            let pending = store.tail_pending().await?;
            f.idemwatch_tail_held_back_seconds
                .set(pending.held_back.as_secs_f64());
            pending.oldest_pending.map(|t| now - t)
        };
        let lag = lag.map_or(0.0, |d| d.num_milliseconds().max(0) as f64 / 1000.0);
        f.idemwatch_tail_lag_seconds.set(lag);
        Ok(Polled {
            rows: batch.len(),
            more,
        })
    }

    /// Finds the head, and exports every tool (and tenant, up to the cap) known to the
    /// database at zero. Both lists come from loose index scans.
    async fn start(&mut self, store: &impl TailSource) -> Result<TailPosition, StoreError> {
        let head = store.tail_head().await?;
        let tools = store.distinct_tools().await?;
        let tenants = match self.metrics.tenant_cap() {
            Some(cap) => {
                store
                    .first_tenants(u32::try_from(cap).unwrap_or(u32::MAX))
                    .await?
            }
            None => Vec::new(),
        };
        self.metrics.seed(&tools, &tenants);
        self.already_committed = head.already_committed.into_iter().collect();
        self.position = Some(head.position);
        tracing::info!(
            txid = head.position.txid,
            id = head.position.id,
            tools = tools.len(),
            "tailing the attempt log from its head"
        );
        Ok(head.position)
    }

    fn apply(&mut self, event: &TailEvent) {
        if self.already_committed.remove(&event.position()) {
            return;
        }
        let metrics = self.metrics.clone();
        let f = metrics.families();
        f.idemwatch_tail_events_total.inc();
        let Ok(kind) = event.kind.parse::<AttemptKind>() else {
            if self.unknown_kinds.insert(event.kind.clone()) {
                tracing::warn!(kind = %event.kind, "attempt kind unknown to this version; not counted");
            }
            return;
        };
        let effects = events::effects(
            kind,
            event.resolution.as_deref(),
            event.previous_status.as_deref(),
            event.duration_ms,
            event.suspected_duplicate_of.is_some(),
        );
        let slot = self.metrics.event_slot(&event.tool, &event.tenant);
        for effect in effects {
            match effect {
                MetricUpdate::Request(outcome) => f
                    .idempotency_requests_total
                    .with_label_values(&slot.values(&[outcome.as_str()]))
                    .inc(),
                MetricUpdate::Transition(status) => f
                    .idempotency_transitions_total
                    .with_label_values(&slot.values(&[status.as_str()]))
                    .inc(),
                MetricUpdate::Resolution(r) => f
                    .idempotency_resolutions_total
                    .with_label_values(&slot.values(&[r.as_str()]))
                    .inc(),
                MetricUpdate::Escalation => f
                    .idempotency_escalations_total
                    .with_label_values(&slot.values(&[]))
                    .inc(),
                MetricUpdate::SuspectedDuplicate => f
                    .idempotency_suspected_duplicates_total
                    .with_label_values(&[slot.tool.as_str()])
                    .inc(),
                MetricUpdate::Duration(seconds) => f
                    .idempotency_attempt_duration_seconds
                    .with_label_values(&[slot.tool.as_str()])
                    .observe(seconds),
            }
        }
    }

    /// Polls until `stop` turns true.
    pub async fn run(mut self, store: impl TailSource, mut stop: watch::Receiver<bool>) {
        let s = self.settings.clone();
        let mut idle = s.busy_interval;
        let mut backoff = Duration::ZERO;
        loop {
            let polled = tokio::select! {
                _ = stop.wait_for(|stop| *stop) => break,
                polled = self.poll(&store) => polled,
            };
            let wait = match polled {
                Ok(polled) => {
                    if !backoff.is_zero() {
                        tracing::info!(
                            "attempt log readable again; resuming from the same position"
                        );
                        backoff = Duration::ZERO;
                    }
                    if polled.more {
                        Duration::ZERO
                    } else if polled.rows > 0 {
                        idle = s.busy_interval;
                        idle
                    } else {
                        idle = (idle * 2).min(s.idle_interval);
                        idle
                    }
                }
                Err(e) => {
                    backoff = (backoff * 2)
                        .max(Duration::from_millis(250))
                        .min(s.max_backoff);
                    tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "tailing the attempt log failed");
                    backoff
                }
            };
            if wait.is_zero() {
                tokio::task::yield_now().await;
                continue;
            }
            tokio::select! {
                _ = stop.wait_for(|stop| *stop) => break,
                () = tokio::time::sleep(wait) => {}
            }
        }
        tracing::debug!("tailer stopped");
    }
}
