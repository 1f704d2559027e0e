//! What verification can find, and where: each finding names the key, seq, attempt
//! id and (in a file) line, and says in words what it means.

use std::fmt;

/// What is wrong at one place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// The row's content or `prev_hash` was changed after it was written.
    HashMismatch { stored: String, computed: String },
    /// The key is not derived from the row's intent (tenant, tool, workflow_id,
    /// step_id, intent_id): the record's context was edited.
    ContextMismatch { derived: String },
    /// `prev_hash` is not the hash of the row before.
    BrokenLink { prev_hash: String, expected: String },
    /// Rows between `expected` and `found` are missing.
    SeqGap { expected: i64, found: i64 },
    /// seq went backwards or repeated.
    SeqNotIncreasing { previous: i64, found: i64 },
    /// The key's chain does not start at seq 1 and the export was not filtered by time.
    MissingStart { found: i64 },
    /// seq 1 does not start from the genesis hash.
    BadGenesis { prev_hash: String },
    /// The key appears after a greater key: the file is not in (key, seq) order.
    KeyOutOfOrder { previous: String },
    /// The record's head and the last attempt row disagree.
    HeadMismatch {
        head_seq: i64,
        head_hash: String,
        last_seq: i64,
        last_hash: String,
    },
    /// The record exists but all of its attempt rows are gone.
    NoAttempts,
    /// A line or record that cannot be read as a row.
    Unreadable(String),
    /// No manifest at the end of an NDJSON file: it was truncated or the manifest removed.
    ManifestMissing,
    /// Lines after the manifest.
    AfterManifest,
    /// The manifest disagrees with the file.
    ManifestMismatch(String),
    /// The record's state differs from what its head row bound (`detail.state`):
    /// the record was edited without a row saying so. `(column, bound, stored)`.
    StateMismatch(Vec<(String, String, String)>),
    /// The stored fingerprint is not the hash of the stored business arguments.
    FingerprintMismatch {
        fingerprint: String,
        computed: String,
    },
    /// The head row's `detail.state` cannot be read.
    BadState(String),
    /// The key was in signed checkpoint `checkpoint` with its chain at `seq` and is
    /// gone, and retention left no receipt: it was deleted.
    KeyGone { checkpoint: u64, seq: i64 },
    /// The chain ends before the seq a signed checkpoint recorded: rows were cut off
    /// (and the record's head rolled back).
    ShorterThanCheckpoint {
        checkpoint: u64,
        seq: i64,
        last_seq: i64,
    },
    /// The row at the seq a signed checkpoint recorded has another hash: the chain was
    /// rewritten after the checkpoint.
    CheckpointMismatch {
        checkpoint: u64,
        expected: String,
        found: String,
    },
    /// The signed checkpoints themselves: deleted, altered, out of order, or their
    /// leaves changed.
    Checkpoint(String),
    /// An export's evidence (checkpoint, inclusion proofs) does not hold.
    Evidence(String),
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Finding::HashMismatch { stored, computed } => write!(
                f,
                "the row does not hash to its stored hash {stored} (computed {computed}): the row was edited"
            ),
            Finding::ContextMismatch { derived } => write!(
                f,
                "the key is not the one derived from the row's tenant, tool, workflow_id, step_id and intent_id ({derived}): the context was edited"
            ),
            Finding::BrokenLink {
                prev_hash,
                expected,
            } => write!(
                f,
                "prev_hash {prev_hash} is not the hash of the previous row ({expected}): a row was deleted, inserted or moved"
            ),
            Finding::SeqGap { expected, found } => write!(
                f,
                "seq jumps to {found}, expected {expected}: rows are missing"
            ),
            Finding::SeqNotIncreasing { previous, found } => write!(
                f,
                "seq {found} follows seq {previous}: rows are duplicated or out of order"
            ),
            Finding::MissingStart { found } => write!(
                f,
                "the chain starts at seq {found}, not 1, and the export is not filtered by time: rows are missing"
            ),
            Finding::BadGenesis { prev_hash } => write!(
                f,
                "seq 1 has prev_hash {prev_hash}, not the genesis hash (64 zeros)"
            ),
            Finding::KeyOutOfOrder { previous } => write!(
                f,
                "the key appears after key {previous}: rows were moved (exports are sorted by key, seq)"
            ),
            Finding::HeadMismatch {
                head_seq,
                head_hash,
                last_seq,
                last_hash,
            } => write!(
                f,
                "the record says the chain ends at seq {head_seq} (hash {head_hash}) but the log ends at seq {last_seq} (hash {last_hash}): rows were deleted or added at the end"
            ),
            Finding::NoAttempts => f.write_str("the record has no attempt rows: they were deleted"),
            Finding::Unreadable(why) => write!(f, "unreadable row: {why}"),
            Finding::ManifestMissing => f.write_str(
                "no manifest line at the end of the file: it was truncated or the manifest removed",
            ),
            Finding::AfterManifest => f.write_str("lines follow the manifest"),
            Finding::ManifestMismatch(why) => {
                write!(f, "the manifest does not match the file: {why}")
            }
            Finding::StateMismatch(columns) => {
                let names: Vec<String> = columns
                    .iter()
                    .map(|(c, bound, stored)| format!("{c} (chain {bound}, record {stored})"))
                    .collect();
                write!(
                    f,
                    "the record's {} differ from what its chain recorded: the record was edited",
                    names.join(", ")
                )
            }
            Finding::FingerprintMismatch {
                fingerprint,
                computed,
            } => write!(
                f,
                "the fingerprint {fingerprint} is not the hash of the stored business arguments ({computed}): the arguments or the fingerprint were edited"
            ),
            Finding::BadState(why) => write!(f, "the head row's detail.state is unreadable: {why}"),
            Finding::KeyGone { checkpoint, seq } => write!(
                f,
                "the key was in signed checkpoint {checkpoint} (chain at seq {seq}) and is gone, with no pruning receipt: it was deleted"
            ),
            Finding::ShorterThanCheckpoint {
                checkpoint,
                seq,
                last_seq,
            } => write!(
                f,
                "the chain ends at seq {last_seq} but signed checkpoint {checkpoint} recorded it at seq {seq}: rows were deleted and the head rolled back"
            ),
            Finding::CheckpointMismatch {
                checkpoint,
                expected,
                found,
            } => write!(
                f,
                "the row hashes to {found} but signed checkpoint {checkpoint} recorded {expected}: the chain was rewritten"
            ),
            Finding::Checkpoint(why) => write!(f, "checkpoints: {why}"),
            Finding::Evidence(why) => write!(f, "evidence: {why}"),
        }
    }
}

/// The first place something is wrong, and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Break {
    pub key: Option<String>,
    pub seq: Option<i64>,
    pub attempt_id: Option<i64>,
    /// 1-based line (NDJSON) or record (CSV, header = 1) of a file.
    pub line: Option<u64>,
    pub problem: Finding,
    /// Position in the stream, to tell which of two findings came first.
    pub(super) ordinal: u64,
}

impl fmt::Display for Break {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut place = Vec::new();
        if let Some(k) = &self.key {
            place.push(format!("key {k}"));
        }
        if let Some(s) = self.seq {
            place.push(format!("seq {s}"));
        }
        if let Some(id) = self.attempt_id {
            place.push(format!("attempt id {id}"));
        }
        if let Some(l) = self.line {
            place.push(format!("line {l}"));
        }
        if place.is_empty() {
            write!(f, "{}", self.problem)
        } else {
            write!(f, "{}: {}", place.join(", "), self.problem)
        }
    }
}
