//! The evidence port: the evidence tables' rows (signed checkpoints, the leaves of the
//! head log, pruning receipts) and the reads and writes the checkpoint writer and the
//! export's proofs need, owned here so neither names the store.
//! `crate::store::Store` implements it (`store/evidence.rs`). What the rows mean (leaf
//! hashes, the signed message, the checks) is in `checkpoint.rs`.

use crate::base::time::micros;
use crate::guard::StoreError;
use crate::tail::port::TailPosition;
use chrono::{DateTime, Utc};
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};
use std::future::Future;

/// One leaf of the head log: where a key's chain stood (or that retention pruned it
/// at that head).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leaf {
    pub key: String,
    pub log_seq: i64,
    pub log_hash: String,
    pub pruned: bool,
}

/// What is signed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointBody {
    pub version: u32,
    /// 1, 2, 3 … without gaps.
    pub seq: u64,
    #[serde(with = "micros")]
    pub created_at: DateTime<Utc>,
    /// Leaves in the head log, this checkpoint's included.
    pub tree_size: u64,
    /// Lowercase hex RFC 9162 Merkle tree hash of the first `tree_size` leaves.
    pub root_hash: String,
    /// `hash` of the checkpoint before; 64 zeros for the first.
    pub prev_hash: String,
    /// Leaves this checkpoint added (keys changed or pruned since the one before).
    pub leaves_added: u64,
    /// First 16 hex characters of the SHA-256 of the Ed25519 public key.
    pub key_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    #[serde(flatten)]
    pub body: CheckpointBody,
    /// Lowercase hex Ed25519 signature (64 bytes).
    pub signature: String,
    /// Lowercase hex SHA-256 of `JCS(body)`: what the next checkpoint's `prev_hash` names.
    pub hash: String,
}

/// What the checkpoint writer makes of the new leaves
/// ([`EvidenceStore::write_checkpoint`]).
pub struct NewCheckpoint {
    pub checkpoint: Checkpoint,
    /// The tree's new right border, hex.
    pub frontier: Vec<String>,
    /// The blocks of leaves the new leaves complete: (block index, root as hex).
    pub blocks: Vec<(u64, String)>,
}

/// A checkpoint as stored: the signed checkpoint, and where the next one continues.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredCheckpoint {
    pub checkpoint: Checkpoint,
    /// The right border of the Merkle tree (the evidence layer's `merkle::Frontier`).
    pub frontier: Vec<String>,
    pub tail: TailPosition,
    pub pruned_id: i64,
}

/// A stream of leaves with their index, in index order.
pub type Leaves<'a> = BoxStream<'a, Result<(u64, Leaf), StoreError>>;

pub trait EvidenceStore: Send + Sync {
    /// Appends a checkpoint for what changed since the last one: `make` receives the
    /// last checkpoint and the new leaves and returns the signed checkpoint, the tree's
    /// new right border and the block roots the new leaves complete, all written in
    /// one transaction. Nothing changed: no checkpoint, `None`.
    fn write_checkpoint<F>(
        &self,
        make: F,
    ) -> impl Future<Output = Result<Option<StoredCheckpoint>, StoreError>> + Send
    where
        F: Fn(Option<&StoredCheckpoint>, &[Leaf]) -> Result<NewCheckpoint, StoreError> + Send;

    fn latest_checkpoint(
        &self,
    ) -> impl Future<Output = Result<Option<StoredCheckpoint>, StoreError>> + Send;

    /// Every checkpoint, in seq order.
    fn checkpoints(&self) -> impl Future<Output = Result<Vec<Checkpoint>, StoreError>> + Send;

    /// The checkpoints after seq `after` and before seq `before`, in seq order.
    fn checkpoints_between(
        &self,
        after: u64,
        before: u64,
    ) -> impl Future<Output = Result<Vec<Checkpoint>, StoreError>> + Send;

    /// The head log, leaf by leaf in index order, streamed.
    fn checkpoint_leaves(&self) -> Leaves<'_>;

    /// The leaves of the first `size`, in index order, streamed.
    fn checkpoint_leaves_below(&self, size: u64) -> Leaves<'_> {
        self.checkpoint_leaves_between(0, size)
    }

    /// Leaves `from` to `to` (exclusive), in index order, streamed.
    fn checkpoint_leaves_between(&self, from: u64, to: u64) -> Leaves<'_>;

    /// The stored roots of blocks `0..count` (`evidence_blocks`), in index order:
    /// (block index, root as hex). Blocks without a row are left out.
    fn checkpoint_blocks(
        &self,
        count: u64,
    ) -> impl Future<Output = Result<Vec<(u64, String)>, StoreError>> + Send;

    /// How many of blocks `0..count` have a stored root.
    fn checkpoint_block_count(
        &self,
        count: u64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Stores block roots computed from leaves already written (the checkpoint
    /// writer's backfill of blocks older than the table); a block already stored is
    /// kept.
    fn insert_checkpoint_blocks(
        &self,
        blocks: &[(u64, String)],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Each of `keys`' newest leaf among the first `size` (keys without one are left
    /// out), in no particular order.
    fn newest_leaves(
        &self,
        keys: &[String],
        size: u64,
    ) -> impl Future<Output = Result<Vec<(u64, Leaf)>, StoreError>> + Send;

    /// The newest pruning receipt of `key`: (log_seq, log_hash) it had when pruned.
    fn pruning_receipt(
        &self,
        key: &str,
    ) -> impl Future<Output = Result<Option<(i64, String)>, StoreError>> + Send;
}
