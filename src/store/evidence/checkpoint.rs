//! The evidence tables' rows as the store reads and writes them: signed checkpoints
//! and the leaves of the head log. What they mean (leaf hashes, the signed message,
//! the checks) is `crate::evidence`'s, which adds those methods to these types.

use crate::store::export::micros;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

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
