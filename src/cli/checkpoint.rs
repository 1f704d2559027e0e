//! Signed checkpoints on the command line: `new-signing-key`, `public-key`,
//! `checkpoint`, and the flags `serve` shares (docs/EXPORT.md).

use super::DatabaseArgs;
use super::serve::open_store;
use crate::evidence::{CheckpointMetrics, Checkpointer, keys};
use crate::guard::SystemClock;
use crate::metrics::Metrics;
use crate::retention::HumanDuration;
use crate::store::Store;
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
    ) -> anyhow::Result<Option<Checkpointer<Store>>> {
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

pub(crate) fn read_signing_key(path: &Path) -> anyhow::Result<SigningKey> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the signing key {}", path.display()))?;
    refuse_open_permissions(path)?;
    keys::parse_signing_key(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// Refuses a signing key that group or others may read or write, as ssh refuses such
/// a private key: whoever reads it can sign any history, so a key that was exposed
/// must be replaced (docs/EXPORT.md, "Rotating the signing key"), not used.
fn refuse_open_permissions(path: &Path) -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)
            .with_context(|| format!("cannot read the signing key {}", path.display()))?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            bail!(
                "refusing the signing key {}: permissions {:04o} are too open. A signing key must be readable by its owner only (chmod 600 {}; in Kubernetes, defaultMode: 0400). Whoever could read it can sign any history: if others may have, make a new key (idemwatch new-signing-key) and rotate (docs/EXPORT.md)",
                path.display(),
                mode & 0o777,
                path.display()
            );
        }
    }
    Ok(())
}

pub(crate) fn read_public_key(path: &Path) -> anyhow::Result<VerifyingKey> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the public key {}", path.display()))?;
    if let Ok(key) = keys::parse_public_key(&text) {
        return Ok(key);
    }
    // A signing key file works, but an auditor should never hold one: whoever has it
    // can sign any history. Said plainly, then its public half is used.
    let key = keys::parse_signing_key(&text).map_err(|_| {
        anyhow::anyhow!(
            "{}: not an Ed25519 public key (PEM \"PUBLIC KEY\") nor a signing key",
            path.display()
        )
    })?;
    eprintln!(
        "warning: {} is a PRIVATE signing key, not a public key: verifying with its public half (key id {}). Whoever holds this file can sign any history; give auditors the public key (`idemwatch public-key --signing-key {}`) and keep the private key only where idemwatch signs.",
        path.display(),
        keys::key_id(&key.verifying_key()),
        path.display()
    );
    Ok(key.verifying_key())
}

#[derive(Debug, Clone, Args)]
pub struct NewSigningKeyArgs {
    /// Write the private key here (created new, mode 0600); the public key is printed.
    #[arg(long, short)]
    pub output: PathBuf,
}

pub fn new_signing_key_command(args: NewSigningKeyArgs) -> anyhow::Result<()> {
    let key = write_new_signing_key(&args.output)?;
    eprintln!(
        "wrote the signing key to {} (key id {}); its public key:",
        args.output.display(),
        keys::key_id(&key.verifying_key())
    );
    print!("{}", keys::public_key_pem(&key.verifying_key()));
    Ok(())
}

/// A new signing key in a new file at `path`, readable by its owner only.
pub(crate) fn write_new_signing_key(path: &Path) -> anyhow::Result<SigningKey> {
    use std::io::Write;
    let key = keys::generate();
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(path)
        .with_context(|| format!("cannot create {} (it must not exist)", path.display()))?;
    file.write_all(keys::signing_key_pem(&key).as_bytes())?;
    file.sync_all()?;
    Ok(key)
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
