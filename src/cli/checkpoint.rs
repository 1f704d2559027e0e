//! Signed checkpoints on the command line: `new-signing-key`, `public-key`,
//! `checkpoint`, and the flags `serve` shares (docs/EXPORT.md).

use super::DatabaseArgs;
use super::serve::open_store;
use crate::evidence::{CheckpointMetrics, Checkpointer, keys};
use crate::guard::SystemClock;
use crate::metrics::Metrics;
use crate::retention::HumanDuration;
use crate::web;
use anyhow::{Context, bail};
use axum::Router;
use clap::Args;
use ed25519_dalek::{SigningKey, VerifyingKey};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where checkpoints are signed and kept.
#[derive(Debug, Clone, Args)]
pub struct CheckpointArgs {
    /// The Ed25519 signing key (PKCS#8 PEM, from `idemwatch new-signing-key`). Without
    /// it `serve` writes no checkpoints.
    #[arg(long, env = "IDEMWATCH_SIGNING_KEY")]
    pub signing_key: Option<PathBuf>,
    /// Also write each checkpoint here as `checkpoint-<seq>.json` (a place the
    /// database's writers cannot rewrite: another volume, a WORM bucket mount).
    #[arg(long, env = "IDEMWATCH_CHECKPOINT_DIR")]
    pub checkpoint_dir: Option<PathBuf>,
    /// Time between checkpoints of `serve`; 0 turns them off.
    #[arg(long, env = "IDEMWATCH_CHECKPOINT_INTERVAL", default_value = "1m")]
    pub checkpoint_interval: HumanDuration,
}

impl CheckpointArgs {
    pub fn signing_key(&self) -> anyhow::Result<Option<SigningKey>> {
        self.signing_key
            .as_deref()
            .map(read_signing_key)
            .transpose()
    }

    /// The checkpointer `serve` runs, with its gauges on `metrics`; `None` without a
    /// signing key or with interval 0.
    pub fn checkpointer(
        &self,
        store: &crate::store::Store,
        metrics: &Metrics,
    ) -> anyhow::Result<Option<Checkpointer>> {
        let Some(key) = self.signing_key()? else {
            tracing::info!("checkpoints off (no --signing-key)");
            return Ok(None);
        };
        if self.checkpoint_interval.is_zero() {
            tracing::info!("checkpoints off (--checkpoint-interval 0)");
            return Ok(None);
        }
        let gauges = CheckpointMetrics::register(metrics.registry())
            .context("cannot register checkpoint metrics")?;
        Ok(Some(
            Checkpointer::new(store.clone(), key, Arc::new(SystemClock))
                .with_dir(self.checkpoint_dir.clone())
                .with_metrics(gauges),
        ))
    }

    /// The public-key route ([`web::checkpoints`]): the key, or a 404 saying that
    /// this server signs no checkpoints.
    pub fn router(&self) -> anyhow::Result<Router> {
        let key = self.signing_key()?.map(|k| k.verifying_key());
        Ok(web::checkpoints::router(key.as_ref()))
    }
}

pub fn read_signing_key(path: &Path) -> anyhow::Result<SigningKey> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the signing key {}", path.display()))?;
    keys::parse_signing_key(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

pub fn read_public_key(path: &Path) -> anyhow::Result<VerifyingKey> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the public key {}", path.display()))?;
    // A signing key file works too: its public half is derived.
    keys::parse_public_key(&text)
        .or_else(|_| keys::parse_signing_key(&text).map(|k| k.verifying_key()))
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

#[derive(Debug, Clone, Args)]
pub struct NewSigningKeyArgs {
    /// Write the private key here (created new, mode 0600); the public key is printed.
    #[arg(long, short)]
    pub output: PathBuf,
}

pub fn new_signing_key_command(args: NewSigningKeyArgs) -> anyhow::Result<()> {
    use std::io::Write;
    let key = keys::generate();
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(&args.output).with_context(|| {
        format!(
            "cannot create {} (it must not exist)",
            args.output.display()
        )
    })?;
    file.write_all(keys::signing_key_pem(&key).as_bytes())?;
    file.sync_all()?;
    eprintln!(
        "wrote the signing key to {} (key id {}); its public key:",
        args.output.display(),
        keys::key_id(&key.verifying_key())
    );
    print!("{}", keys::public_key_pem(&key.verifying_key()));
    Ok(())
}

#[derive(Debug, Clone, Args)]
pub struct PublicKeyArgs {
    /// The signing key whose public key to print.
    #[arg(long, env = "IDEMWATCH_SIGNING_KEY")]
    pub signing_key: PathBuf,
}

pub fn public_key_command(args: PublicKeyArgs) -> anyhow::Result<()> {
    let key = read_signing_key(&args.signing_key)?;
    print!("{}", keys::public_key_pem(&key.verifying_key()));
    Ok(())
}

#[derive(Debug, Clone, Args)]
pub struct CheckpointNowArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,
    #[command(flatten)]
    pub checkpoint: CheckpointArgs,
}

/// `idemwatch checkpoint`: one checkpoint now, printed as JSON.
pub async fn checkpoint_command(args: CheckpointNowArgs) -> anyhow::Result<()> {
    let Some(key) = args.checkpoint.signing_key()? else {
        bail!("--signing-key (or IDEMWATCH_SIGNING_KEY) is required");
    };
    let store = open_store(&args.database).await?;
    let written = Checkpointer::new(store.clone(), key, Arc::new(SystemClock))
        .with_dir(args.checkpoint.checkpoint_dir.clone())
        .checkpoint()
        .await;
    store.close().await;
    match written? {
        Some(c) => println!("{}", c.to_json_line()),
        None => eprintln!("nothing changed since the last checkpoint; none written"),
    }
    Ok(())
}
