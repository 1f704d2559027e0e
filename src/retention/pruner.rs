//! The pruner: deletes expired DONE / FAILED keys with their attempts in small
//! batches, archiving each batch first when asked. Never UNKNOWN or IN_PROGRESS
//! keys: those wait for a person or a worker (their count is already a metric).

use super::archive;
use super::settings::RetentionSettings;
use crate::export::ExportError;
use crate::guard::Clock;
use crate::store::{PrunedCounts, Store, StoreError};
use prometheus::{IntCounterVec, Opts, Registry};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Batches in one run before the pruner yields to its interval check.
const MAX_BATCHES_PER_RUN: u32 = 100;
/// A pause between batches, so the guard's writers (SQLite has one write lock) get in.
const PAUSE_BETWEEN_BATCHES: Duration = Duration::from_millis(20);

/// `idemwatch_pruned_total{status}`: keys deleted by retention (each with all of its
/// attempt rows), by the status they had. The caller owns the registry.
#[derive(Debug, Clone)]
pub struct PruneMetrics {
    pruned: IntCounterVec,
}

impl PruneMetrics {
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let pruned = IntCounterVec::new(
            Opts::new(
                "idemwatch_pruned_total",
                "Keys deleted by retention, each with all of its attempt rows, by the status they had.",
            ),
            &["status"],
        )?;
        registry.register(Box::new(pruned.clone()))?;
        // Both series exist from the start, at 0.
        for status in ["DONE", "FAILED"] {
            pruned.with_label_values(&[status]);
        }
        Ok(Self { pruned })
    }

    fn observe(&self, counts: &PrunedCounts) {
        self.pruned.with_label_values(&["DONE"]).inc_by(counts.done);
        self.pruned
            .with_label_values(&["FAILED"])
            .inc_by(counts.failed);
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PruneError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot write the archive {path}: {source}")]
    Archive {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// How long to wait before the next run. Runs start one `interval` apart, not one
/// `interval` after the previous run *ended*: sleeping a whole interval after each run
/// made the period interval + run time, so a key that expired just after a run's cutoff
/// waited for longer than one interval. With 5 s runs every 60 s that drifted against
/// the clock with a 12-minute beat and put the pruner 60 s behind in the soak
/// (docs/PERFORMANCE.md). A run that stopped at its batch limit goes on at once.
fn next_wait(interval: Duration, ran_for: Duration, more: bool) -> Duration {
    if more {
        Duration::ZERO
    } else {
        interval.saturating_sub(ran_for)
    }
}

/// What a run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PruneSummary {
    pub counts: PrunedCounts,
    pub batches: u32,
    pub archives: Vec<PathBuf>,
    /// The run stopped at its batch limit with more to do.
    pub more: bool,
}

#[derive(Debug, Clone)]
pub struct Pruner {
    store: Store,
    settings: RetentionSettings,
    clock: Arc<dyn Clock>,
    metrics: Option<PruneMetrics>,
}

impl Pruner {
    pub fn new(store: Store, settings: RetentionSettings, clock: Arc<dyn Clock>) -> Self {
        Self {
            store,
            settings,
            clock,
            metrics: None,
        }
    }

    pub fn with_metrics(mut self, metrics: PruneMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Prunes until nothing has expired (or the batch limit of one run is reached).
    #[tracing::instrument(skip_all)]
    pub async fn run_once(&self) -> Result<PruneSummary, PruneError> {
        let mut summary = PruneSummary::default();
        while summary.batches < MAX_BATCHES_PER_RUN {
            let (counts, archive) = self.batch().await?;
            if counts.keys() == 0 {
                return Ok(summary);
            }
            summary.batches += 1;
            summary.counts.done += counts.done;
            summary.counts.failed += counts.failed;
            summary.counts.attempts += counts.attempts;
            summary.archives.extend(archive);
            if counts.keys() < u64::from(self.settings.batch_size) {
                return Ok(summary);
            }
            tokio::time::sleep(PAUSE_BETWEEN_BATCHES).await;
        }
        summary.more = true;
        Ok(summary)
    }

    /// One transaction: lock a batch, archive it, delete it.
    async fn batch(&self) -> Result<(PrunedCounts, Option<PathBuf>), PruneError> {
        let cutoffs = self.settings.cutoffs(self.clock.now());
        let mut batch = self
            .store
            .prune_begin(&cutoffs, self.settings.batch_size)
            .await?;
        if batch.keys().is_empty() {
            return Ok((PrunedCounts::default(), None));
        }
        let mut archived = None;
        if let Some(dir) = &self.settings.archive_dir {
            // Durable before the delete commits: a crash in between leaves the rows
            // both archived and in the database, and the next batch archives them again.
            let (path, _manifest) =
                archive::write(dir, batch.rows())
                    .await
                    .map_err(|e| match e {
                        ExportError::Store(e) => PruneError::Store(e),
                        ExportError::Io(source) => PruneError::Archive {
                            path: dir.clone(),
                            source,
                        },
                    })?;
            archived = Some(path);
        }
        let counts = batch.delete_and_commit().await?;
        if let Some(m) = &self.metrics {
            m.observe(&counts);
        }
        tracing::info!(
            done = counts.done,
            failed = counts.failed,
            attempts = counts.attempts,
            archive = archived.as_ref().map(|p| p.display().to_string()),
            "pruned expired keys"
        );
        Ok((counts, archived))
    }

    /// Runs every `interval` until `stop` turns true; a failed run is logged and
    /// retried at the next interval.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let interval = self.settings.interval.to_std();
        tracing::info!(
            retain_done = %self.settings.retain_done,
            retain_failed = %self.settings.retain_failed,
            interval = %self.settings.interval,
            batch_size = self.settings.batch_size,
            archive_dir = self.settings.archive_dir.as_ref().map(|p| p.display().to_string()),
            "pruner started"
        );
        loop {
            let started = tokio::time::Instant::now();
            let more = match self.run_once().await {
                Ok(summary) => summary.more,
                Err(e) => {
                    tracing::error!(error = %e, "pruning failed; retrying at the next interval");
                    false
                }
            };
            let wait = next_wait(interval, started.elapsed(), more);
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                _ = stop.wait_for(|s| *s) => break,
            }
            if *stop.borrow() {
                break;
            }
        }
        tracing::info!("pruner stopped");
    }
}

#[cfg(test)]
mod tests {
    use super::next_wait;
    use std::time::Duration;

    #[test]
    fn runs_start_one_interval_apart_whatever_a_run_takes() {
        let minute = Duration::from_secs(60);
        assert_eq!(
            next_wait(minute, Duration::from_secs(5), false),
            Duration::from_secs(55)
        );
        assert_eq!(next_wait(minute, Duration::ZERO, false), minute);
        // A run longer than the interval is followed by the next at once, not a
        // negative or a whole extra interval.
        assert_eq!(
            next_wait(minute, Duration::from_secs(75), false),
            Duration::ZERO
        );
    }

    #[test]
    fn a_run_stopped_at_its_batch_limit_goes_on_at_once() {
        let minute = Duration::from_secs(60);
        assert_eq!(
            next_wait(minute, Duration::from_secs(5), true),
            Duration::ZERO
        );
    }
}
