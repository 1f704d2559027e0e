//! Tamper evidence beyond the per-key hash chain: signed checkpoints over the log of
//! key heads (an RFC 9162 Merkle tree), inclusion proofs for exports, and the writer
//! that `serve` runs on an interval. docs/EXPORT.md says what this proves and what
//! it cannot.

mod checkpoint;
pub mod keys;
pub mod merkle;
pub mod port;
mod proof;
mod writer;

pub use checkpoint::{
    CHECKPOINT_VERSION, Checkpoint, CheckpointBody, Leaf, check_sequence, leaf_in_order,
};
pub use keys::{Authenticity, TrustedKeys};
pub use proof::{
    Anchor, EvidenceCheck, ExportEvidence, KeyProof, LeafLog, ProofPath, ProofSource, Proofs,
};
pub use writer::{CheckpointMetrics, Checkpointer, file_name, hash_prefix, read_dir};
