//! The checkpoint writer: `idemwatch checkpoint` once, `serve` on an interval. Each
//! checkpoint goes to the database, to a directory of files (`--checkpoint-dir`,
//! one `checkpoint-<seq>.json` each, written once and never rewritten), to the log,
//! and to three gauges, so copies exist where the database's writers cannot reach.

use super::checkpoint::{Checkpoint, Leaf, leaf_in_order};
use super::merkle::{BLOCK_HEIGHT, BLOCK_LEAVES, Frontier};
use super::port::{EvidenceStore, NewCheckpoint, StoredCheckpoint};
use crate::guard::Clock;
use crate::guard::StoreError;
use chrono::SubsecRound;
use ed25519_dalek::SigningKey;
use futures::StreamExt;
use prometheus::core::Collector;
use prometheus::{Gauge, Histogram, HistogramOpts, IntCounter, IntGauge, Registry};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// `idemwatch_checkpoint_last_seq`, `idemwatch_checkpoint_last_timestamp_seconds` and
/// `idemwatch_checkpoint_last_hash_prefix`: the newest checkpoint as Prometheus keeps
/// it. The hash prefix is the first 48 bits of the checkpoint's hash as an integer
/// (exact in a float64 sample); with the seq it pins the checkpoint without a label.
/// `idemwatch_checkpoint_duration_seconds`: how long each checkpoint took, so that one
/// approaching its interval is seen before the evidence falls behind.
/// `idemwatch_checkpoint_last_success_timestamp_seconds` and
/// `idemwatch_checkpoint_interval_seconds`: a heartbeat and the period it should beat
/// at. The newest checkpoint's time moves only when keys change, so it cannot tell a
/// quiet service from a checkpointer that fails or hangs; the heartbeat can
/// (`IdemwatchCheckpointerStalled`). `idemwatch_checkpoint_failures_total` says which.
#[derive(Debug, Clone)]
pub struct CheckpointMetrics {
    seq: IntGauge,
    timestamp: IntGauge,
    hash_prefix: IntGauge,
    duration: Histogram,
    last_success: Gauge,
    interval: Gauge,
    failures: IntCounter,
}

impl CheckpointMetrics {
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        fn registered<C: Collector + Clone + 'static>(
            registry: &Registry,
            c: C,
        ) -> prometheus::Result<C> {
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        }
        let gauge = |name: &str, help: &str| registered(registry, IntGauge::new(name, help)?);
        Ok(Self {
            seq: gauge(
                "idemwatch_checkpoint_last_seq",
                "Sequence number of the newest signed checkpoint (0: none yet).",
            )?,
            timestamp: gauge(
                "idemwatch_checkpoint_last_timestamp_seconds",
                "Creation time of the newest signed checkpoint, Unix seconds.",
            )?,
            hash_prefix: gauge(
                "idemwatch_checkpoint_last_hash_prefix",
                "First 48 bits of the newest checkpoint's SHA-256 hash, as an integer.",
            )?,
            duration: registered(
                registry,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "idemwatch_checkpoint_duration_seconds",
                        "Time to write one signed checkpoint (or to find nothing changed), seconds.",
                    )
                    .buckets(vec![
                        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                    ]),
                )?,
            )?,
            last_success: registered(
                registry,
                Gauge::new(
                    "idemwatch_checkpoint_last_success_timestamp_seconds",
                    "Unix time the checkpointer last succeeded (a checkpoint written, or nothing \
                     changed), or started: a heartbeat, at least every checkpoint interval.",
                )?,
            )?,
            failures: registered(
                registry,
                IntCounter::new(
                    "idemwatch_checkpoint_failures_total",
                    "Checkpoints that failed (each is retried at the next interval).",
                )?,
            )?,
            interval: registered(
                registry,
                Gauge::new(
                    "idemwatch_checkpoint_interval_seconds",
                    "Time between checkpoints of this process (--checkpoint-interval), seconds.",
                )?,
            )?,
        })
    }

    /// The checkpointer starts: its interval, and a heartbeat from now (its first
    /// checkpoint is an interval away).
    fn started(&self, interval: Duration, now: chrono::DateTime<chrono::Utc>) {
        self.interval.set(interval.as_secs_f64());
        self.succeeded(now);
    }

    fn succeeded(&self, now: chrono::DateTime<chrono::Utc>) {
        self.last_success
            .set(now.timestamp_micros() as f64 / 1_000_000.0);
    }

    pub(crate) fn observe(&self, c: &Checkpoint) {
        self.seq.set(c.body.seq as i64);
        self.timestamp.set(c.body.created_at.timestamp());
        self.hash_prefix.set(hash_prefix(&c.hash));
    }
}

/// The first 12 hex digits (48 bits) of a hash, as an integer.
pub fn hash_prefix(hash: &str) -> i64 {
    i64::from_str_radix(hash.get(..12).unwrap_or("0"), 16).unwrap_or(0)
}

#[derive(Clone)]
pub struct Checkpointer<S> {
    store: S,
    key: Arc<SigningKey>,
    clock: Arc<dyn Clock>,
    dir: Option<PathBuf>,
    /// The first seq whose file this process knows is still to be written in `dir`
    /// (`None`: not known yet). Held while files are written, so that two
    /// checkpoints' files are never written at once.
    unfiled_from: Arc<tokio::sync::Mutex<Option<u64>>>,
    metrics: Option<CheckpointMetrics>,
}

/// Names the key by its id: the private key is never printed.
impl<S> std::fmt::Debug for Checkpointer<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpointer")
            .field("key_id", &super::keys::key_id(&self.key.verifying_key()))
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl<S: EvidenceStore> Checkpointer<S> {
    pub fn new(store: S, key: SigningKey, clock: Arc<dyn Clock>) -> Self {
        Self {
            store,
            key: Arc::new(key),
            clock,
            dir: None,
            unfiled_from: Arc::default(),
            metrics: None,
        }
    }

    pub fn with_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.dir = dir;
        self
    }

    pub fn with_metrics(mut self, metrics: CheckpointMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The key it signs with (an export's manifest is signed with it too).
    pub fn key(&self) -> Arc<SigningKey> {
        self.key.clone()
    }

    /// Writes a checkpoint of what changed since the last one; `None` when nothing did.
    #[tracing::instrument(skip_all)]
    pub async fn checkpoint(&self) -> anyhow::Result<Option<Checkpoint>> {
        let started = std::time::Instant::now();
        let written = self.write().await;
        if let Some(m) = &self.metrics {
            match &written {
                // Time successes only: a fast failure would make a slow checkpointer
                // look healthy.
                Ok(_) => {
                    m.duration.observe(started.elapsed().as_secs_f64());
                    m.succeeded(self.clock.now());
                }
                Err(_) => m.failures.inc(),
            }
        }
        written
    }

    async fn write(&self) -> anyhow::Result<Option<Checkpoint>> {
        if let Err(why) = self.backfill_blocks().await {
            tracing::warn!(
                error = %why,
                "block roots of older leaves not written; one-key exports read every leaf until they are"
            );
        }
        // Microseconds: the precision checkpoints are stored, signed and compared at.
        let now = self.clock.now().trunc_subsecs(6);
        let written = self
            .store
            .write_checkpoint(|last, leaves| self.sign(now, last, leaves))
            .await?;
        let Some(StoredCheckpoint { checkpoint, .. }) = written else {
            return Ok(None);
        };
        self.publish(&checkpoint).await?;
        Ok(Some(checkpoint))
    }

    /// The checkpoint after `last` that appends `leaves`, signed, created at `now` (or
    /// at `last`'s time if the clock is behind it): what [`EvidenceStore::write_checkpoint`]
    /// asks of its caller.
    pub fn sign(
        &self,
        now: chrono::DateTime<chrono::Utc>,
        last: Option<&StoredCheckpoint>,
        leaves: &[Leaf],
    ) -> Result<NewCheckpoint, StoreError> {
        // ~2 hashes a leaf: 100,000 leaves (a minute at 1,000 keys/s) are ~100 ms of
        // one core.
        crate::base::runtime::cpu_bound(|| {
            let mut frontier = match last {
                Some(l) => Frontier::from_hex(l.checkpoint.body.tree_size, &l.frontier)
                    .map_err(|e| StoreError::Corrupt(format!("checkpoint frontier: {e}")))?,
                None => Frontier::default(),
            };
            let blocks = leaves
                .iter()
                .filter_map(|leaf| frontier.push_noting(leaf.hash(), BLOCK_HEIGHT))
                .map(|(idx, root)| (idx, hex::encode(root)))
                .collect();
            // Never earlier than the checkpoint before, whatever the clock says.
            let created_at = last.map_or(now, |l| now.max(l.checkpoint.body.created_at));
            let body = Checkpoint::next_body(
                last.map(|l| &l.checkpoint),
                created_at,
                frontier.size(),
                &frontier.root(),
                leaves.len() as u64,
                &self.key.verifying_key(),
            );
            Ok(NewCheckpoint {
                checkpoint: body.sign(&self.key),
                frontier: frontier.to_hex(),
                blocks,
            })
        })
    }

    /// Writes the roots of complete blocks that have none: leaves checkpointed before
    /// `evidence_blocks` existed (migration 0008), or by a replica that predates it.
    /// Each checkpoint writes the blocks it completes, so after the first pass this is
    /// one count. An optimisation only: an export without the roots reads every leaf.
    async fn backfill_blocks(&self) -> Result<(), StoreError> {
        const BATCH: usize = 1_000;
        let Some(last) = self.store.latest_checkpoint().await? else {
            return Ok(());
        };
        let complete = last.checkpoint.body.tree_size / BLOCK_LEAVES;
        if self.store.checkpoint_block_count(complete).await? == complete {
            return Ok(());
        }
        let mut frontier = Frontier::default();
        let mut blocks = Vec::new();
        let mut leaves = self.store.checkpoint_leaves_below(complete * BLOCK_LEAVES);
        while let Some(item) = leaves.next().await {
            let (idx, leaf) = item?;
            leaf_in_order(idx, frontier.size()).map_err(StoreError::Corrupt)?;
            if let Some((block, root)) = frontier.push_noting(leaf.hash(), BLOCK_HEIGHT) {
                blocks.push((block, hex::encode(root)));
                if blocks.len() == BATCH {
                    self.store.insert_checkpoint_blocks(&blocks).await?;
                    blocks.clear();
                }
            }
        }
        self.store.insert_checkpoint_blocks(&blocks).await?;
        tracing::info!(blocks = complete, "block roots of older leaves written");
        Ok(())
    }

    /// The copies outside the database: the log line, the gauges, the file. The file
    /// last: it is the one that can fail (a full or unmounted volume), and the others
    /// are copies too.
    async fn publish(&self, c: &Checkpoint) -> anyhow::Result<()> {
        tracing::info!(
            checkpoint_seq = c.body.seq,
            tree_size = c.body.tree_size,
            leaves_added = c.body.leaves_added,
            root_hash = %c.body.root_hash,
            hash = %c.hash,
            checkpoint = %c.to_json_line(),
            "signed checkpoint"
        );
        if let Some(m) = &self.metrics {
            m.observe(c);
        }
        if let Some(dir) = &self.dir {
            self.file(dir, c).await?;
        }
        Ok(())
    }

    /// Writes `c`'s file and, first, those of the checkpoints before it that have none.
    /// Files are written in seq order and a failure stops the ones after it, so the
    /// checkpoints without a file are those from the first that failed (in this
    /// process) or after the directory's newest file (after a restart): a file that
    /// could not be written (a full or unmounted volume) is written by the next
    /// checkpoint that succeeds. A directory with no checkpoint file yet starts at `c`.
    /// A file already there (another replica's, in a shared directory) must be the
    /// same checkpoint.
    async fn file(&self, dir: &Path, c: &Checkpoint) -> anyhow::Result<()> {
        let mut unfiled = self.unfiled_from.lock().await;
        let from = match *unfiled {
            Some(seq) => seq,
            None => match newest_file(dir).await {
                Ok(newest) => newest.map_or(c.body.seq, |seq| seq + 1),
                Err(e) => {
                    *unfiled = Some(c.body.seq);
                    return Err(e);
                }
            },
        };
        let missing = if from < c.body.seq {
            let missing = self.store.checkpoints_between(from - 1, c.body.seq).await?;
            tracing::info!(
                from,
                to = c.body.seq - 1,
                "writing checkpoint files missing from the directory"
            );
            missing
        } else {
            Vec::new()
        };
        for m in missing.iter().chain([c]) {
            if let Err(e) = write_file_once(dir, m).await {
                unfiled.get_or_insert(m.body.seq);
                return Err(e);
            }
            *unfiled = Some(m.body.seq + 1);
        }
        Ok(())
    }

    /// Sets the gauges from the newest stored checkpoint (at start-up).
    pub(crate) async fn observe_latest(&self) -> Result<(), StoreError> {
        if let (Some(m), Some(latest)) = (&self.metrics, self.store.latest_checkpoint().await?) {
            m.observe(&latest.checkpoint);
        }
        Ok(())
    }

    /// Every `interval` until `stop`; a failure is logged and retried next time.
    pub async fn run(self, interval: Duration, mut stop: watch::Receiver<bool>) {
        tracing::info!(interval_s = interval.as_secs_f64(), dir = ?self.dir, "checkpointer started");
        if let Some(m) = &self.metrics {
            m.started(interval, self.clock.now());
        }
        if let Err(e) = self.observe_latest().await {
            tracing::warn!(error = %e, "cannot read the newest checkpoint");
        }
        loop {
            tokio::select! {
                () = tokio::time::sleep(interval) => {}
                _ = stop.wait_for(|s| *s) => break,
            }
            if let Err(e) = self.checkpoint().await {
                tracing::error!(error = %format!("{e:#}"), "checkpoint failed; retrying at the next interval");
            }
        }
        tracing::info!("checkpointer stopped");
    }
}

/// `checkpoint-<seq, 12 digits>.json`, created new (never overwritten), fsynced, and
/// complete whenever it can be seen: the text goes to `<name>.partial` first, which is
/// then linked under its name (a link, unlike a rename, fails when the name exists)
/// and removed. A reader polling the directory, or a crash halfway, never leaves an
/// empty or cut-off checkpoint that every later `verify --checkpoint-dir` would
/// refuse; a leftover `.partial` is not a checkpoint to [`read_dir`].
async fn write_file(dir: &Path, c: &Checkpoint) -> anyhow::Result<()> {
    use anyhow::Context;
    use tokio::io::AsyncWriteExt;
    tokio::fs::create_dir_all(dir)
        .await
        .with_context(|| format!("cannot create the checkpoint directory {}", dir.display()))?;
    let path = dir.join(file_name(c.body.seq));
    let partial = dir.join(format!("{}.partial", file_name(c.body.seq)));
    let mut file = tokio::fs::File::create(&partial)
        .await
        .with_context(|| format!("cannot create {}", partial.display()))?;
    file.write_all(format!("{}\n", c.to_json_line()).as_bytes())
        .await?;
    file.sync_all().await?;
    drop(file);
    match tokio::fs::hard_link(&partial, &path).await {
        Ok(()) => tokio::fs::remove_file(&partial).await?,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            tokio::fs::remove_file(&partial).await?;
            return Err(e).with_context(|| format!("cannot create {}", path.display()));
        }
        // A file system without hard links (some object-store mounts): a rename,
        // after looking. Only one checkpoint has each seq (the database's), so the
        // look cannot lose a race with another writer of the same name.
        Err(_) => {
            if tokio::fs::try_exists(&path).await? {
                tokio::fs::remove_file(&partial).await?;
                anyhow::bail!("cannot create {}: it exists", path.display());
            }
            tokio::fs::rename(&partial, &path).await?;
        }
    }
    // The new name itself survives a crash only once the directory is synced.
    tokio::fs::File::open(dir).await?.sync_all().await?;
    Ok(())
}

pub fn file_name(seq: u64) -> String {
    format!("checkpoint-{seq:012}.json")
}

/// [`write_file`], or nothing if the file is there with the same checkpoint.
async fn write_file_once(dir: &Path, c: &Checkpoint) -> anyhow::Result<()> {
    let path = dir.join(file_name(c.body.seq));
    match tokio::fs::read_to_string(&path).await {
        Ok(text) if text == format!("{}\n", c.to_json_line()) => Ok(()),
        Ok(_) => anyhow::bail!(
            "{} holds another checkpoint than the database's {}",
            path.display(),
            c.body.seq
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => write_file(dir, c).await,
        Err(e) => Err(anyhow::Error::new(e).context(format!("cannot read {}", path.display()))),
    }
}

/// The highest seq among the checkpoint files in `dir` (by name); `None` when there
/// are none, or no directory yet.
async fn newest_file(dir: &Path) -> anyhow::Result<Option<u64>> {
    use anyhow::Context;
    let mut entries = match tokio::fs::read_dir(dir).await {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(anyhow::Error::new(e).context(format!("cannot read {}", dir.display())));
        }
    };
    let mut newest = None;
    while let Some(entry) = entries
        .next_entry()
        .await
        .with_context(|| format!("cannot read {}", dir.display()))?
    {
        let name = entry.file_name();
        let seq = name.to_str().and_then(|n| {
            n.strip_prefix("checkpoint-")?
                .strip_suffix(".json")?
                .parse()
                .ok()
        });
        newest = newest.max(seq);
    }
    Ok(newest)
}

/// Reads every `checkpoint-*.json` in `dir`, in seq order.
pub fn read_dir(dir: &Path) -> anyhow::Result<Vec<Checkpoint>> {
    use anyhow::Context;
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let path = entry?.path();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name.starts_with("checkpoint-") && name.ends_with(".json") {
            let text = std::fs::read_to_string(&path)?;
            out.push(
                serde_json::from_str(text.trim())
                    .with_context(|| format!("{} is not a checkpoint", path.display()))?,
            );
        }
    }
    out.sort_by_key(|c: &Checkpoint| c.body.seq);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::merkle::empty_root;
    use chrono::Utc;

    fn checkpoint(seq_from: Option<&Checkpoint>) -> Checkpoint {
        let key = SigningKey::from_bytes(&[7; 32]);
        Checkpoint::next_body(
            seq_from,
            Utc::now().trunc_subsecs(6),
            3,
            &empty_root(),
            3,
            &key.verifying_key(),
        )
        .sign(&key)
    }

    #[tokio::test]
    async fn a_checkpoint_file_appears_whole_once_and_is_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let first = checkpoint(None);
        write_file(dir.path(), &first).await.unwrap();
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [file_name(first.body.seq)],
            "no .partial left behind"
        );
        assert_eq!(read_dir(dir.path()).unwrap(), std::slice::from_ref(&first));

        // Another checkpoint under the same seq: refused, the first file untouched.
        let path = dir.path().join(file_name(first.body.seq));
        let before = std::fs::read(&path).unwrap();
        let mut other = checkpoint(None);
        other.body.tree_size = 99;
        let err = write_file(dir.path(), &other).await.unwrap_err();
        assert!(format!("{err:#}").contains("cannot create"), "{err:#}");
        assert_eq!(std::fs::read(&path).unwrap(), before);

        // A crash's leftover: a cut-off `.partial` is no checkpoint to read_dir.
        std::fs::write(
            dir.path().join("checkpoint-000000000002.json.partial"),
            "{\"bo",
        )
        .unwrap();
        assert_eq!(read_dir(dir.path()).unwrap(), [first]);
    }

    /// An auditor's script (or `verify --checkpoint-dir`) may list the directory while
    /// serve writes: whatever it finds under a checkpoint's name must be the whole
    /// checkpoint. A reader polls for each new name and reads it the moment it exists.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reader_never_sees_a_checkpoint_file_before_it_is_whole() {
        let dir = tempfile::tempdir().unwrap();
        let mut prev: Option<Checkpoint> = None;
        for _ in 0..200 {
            let c = checkpoint(prev.as_ref());
            let path = dir.path().join(file_name(c.body.seq));
            let reader = std::thread::spawn(move || {
                loop {
                    if let Ok(text) = std::fs::read_to_string(&path) {
                        return text;
                    }
                }
            });
            write_file(dir.path(), &c).await.unwrap();
            let seen = reader.join().unwrap();
            assert_eq!(
                seen,
                format!("{}\n", c.to_json_line()),
                "seq {}",
                c.body.seq
            );
            prev = Some(c);
        }
    }
}
