//! Retention flags (shared by `serve` and `prune`) and `idemwatch prune`.

use super::DatabaseArgs;
use super::serve::open_store;
use crate::guard::SystemClock;
use crate::retention::{HumanDuration, Pruner, RetentionSettings, prepare_archive_dir};
use anyhow::Context;
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;

/// How long decided keys are kept. Durations: `30d`, `12h`, `90m`, `1d12h`.
#[derive(Debug, Clone, Args)]
pub struct RetentionArgs {
    /// DONE keys (record and attempt rows) are deleted this long after their last activity.
    #[arg(long, env = "IDEMWATCH_RETAIN_DONE", default_value = "30d")]
    pub retain_done: HumanDuration,
    /// FAILED keys are deleted this long after their last activity (they are what people investigate).
    #[arg(long, env = "IDEMWATCH_RETAIN_FAILED", default_value = "90d")]
    pub retain_failed: HumanDuration,
    /// The longest a workflow runs, time awaiting approvals included; start-up refuses a shorter retention.
    #[arg(long, env = "IDEMWATCH_MAX_WORKFLOW_DURATION", default_value = "7d")]
    pub max_workflow_duration: HumanDuration,
    /// The longest key retention of any tool's provider (it is per tool: give the longest); start-up refuses a shorter retention.
    #[arg(
        long,
        env = "IDEMWATCH_MAX_PROVIDER_KEY_RETENTION",
        default_value = "30d"
    )]
    pub max_provider_key_retention: HumanDuration,
    /// Write pruned rows here as NDJSON files (with a manifest) before deleting them.
    #[arg(long, env = "IDEMWATCH_ARCHIVE_DIR")]
    pub archive_dir: Option<PathBuf>,
    /// Time between the starts of `serve`'s pruning runs; 0 turns the pruner off.
    #[arg(long, env = "IDEMWATCH_PRUNE_INTERVAL", default_value = "5m")]
    pub prune_interval: HumanDuration,
    /// Keys deleted per transaction: small batches keep row locks short.
    #[arg(long, env = "IDEMWATCH_PRUNE_BATCH_SIZE", default_value_t = 500)]
    pub prune_batch_size: u32,
}

impl RetentionArgs {
    pub fn settings(&self) -> RetentionSettings {
        RetentionSettings {
            retain_done: self.retain_done,
            retain_failed: self.retain_failed,
            max_workflow_duration: self.max_workflow_duration,
            max_provider_key_retention: self.max_provider_key_retention,
            archive_dir: self.archive_dir.clone(),
            interval: self.prune_interval,
            batch_size: self.prune_batch_size,
        }
    }

    /// The checked settings, with the archive directory ready: what `serve` and
    /// `prune` need before they touch anything.
    pub async fn checked(&self) -> anyhow::Result<RetentionSettings> {
        let settings = self.settings();
        settings
            .check()
            .context("refusing the retention settings")?;
        if let Some(dir) = &settings.archive_dir {
            prepare_archive_dir(dir)
                .await
                .with_context(|| format!("--archive-dir {} is not writable", dir.display()))?;
        }
        Ok(settings)
    }
}

#[derive(Debug, Clone, Args)]
pub struct PruneArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,
    #[command(flatten)]
    pub retention: RetentionArgs,
}

/// `idemwatch prune`: one pruning pass now, until nothing expired is left.
pub async fn prune_command(args: PruneArgs) -> anyhow::Result<()> {
    let settings = args.retention.checked().await?;
    let store = open_store(&args.database).await?;
    let pruner = Pruner::new(store.clone(), settings, Arc::new(SystemClock));
    let mut total = crate::retention::PruneSummary::default();
    loop {
        let run = pruner.run_once().await.context("pruning failed")?;
        total.batches += run.batches;
        total.counts.done += run.counts.done;
        total.counts.failed += run.counts.failed;
        total.counts.attempts += run.counts.attempts;
        total.archives.extend(run.archives);
        if !run.more {
            break;
        }
    }
    store.close().await;
    println!(
        "pruned {} keys ({} DONE, {} FAILED) and {} attempt rows in {} batches",
        total.counts.keys(),
        total.counts.done,
        total.counts.failed,
        total.counts.attempts,
        total.batches
    );
    for path in &total.archives {
        println!("archived {}", path.display());
    }
    Ok(())
}
