//! What an export carries so that it checks offline: the newest signed checkpoint
//! and, for each exported key, the inclusion proof of its newest leaf (RFC 9162
//! §2.1.3) under that checkpoint's root.

use super::checkpoint::{Checkpoint, Leaf, leaf_in_order};
use super::merkle::{Frontier, parse_hash, verify_inclusion};
use ed25519_dalek::VerifyingKey;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Where a signed checkpoint last saw a key's chain: the row at `seq` must still be
/// there with this `hash` (later rows may follow).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Anchor {
    pub seq: i64,
    pub hash: String,
    /// The sequence number of the checkpoint that recorded it.
    pub checkpoint: u64,
    /// Retention pruned the key at this head: it may be absent.
    pub pruned: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyProof {
    #[serde(flatten)]
    pub leaf: Leaf,
    pub leaf_index: u64,
    /// Sibling hashes, bottom up, lowercase hex.
    pub path: Vec<String>,
}

/// The `evidence` member of a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportEvidence {
    pub checkpoint: Checkpoint,
    /// One per exported key that the checkpoint covers, in key order.
    pub proofs: Vec<KeyProof>,
    /// Exported keys the checkpoint does not cover yet (changed after it, first time).
    pub uncovered_keys: u64,
}

impl ExportEvidence {
    /// Checks the checkpoint's signature (when `key` is given) and every proof. The
    /// anchors say where each covered key's chain must pass; the strings, what failed.
    pub fn check(&self, key: Option<&VerifyingKey>) -> (HashMap<String, Anchor>, Vec<String>) {
        let mut problems = Vec::new();
        if let Some(key) = key
            && let Err(why) = self.checkpoint.verify(key)
        {
            problems.push(why);
        }
        let root = match self.checkpoint.root() {
            Ok(root) => root,
            Err(why) => {
                problems.push(format!("the checkpoint's root: {why}"));
                return (HashMap::new(), problems);
            }
        };
        let size = self.checkpoint.body.tree_size;
        let mut anchors = HashMap::new();
        for p in &self.proofs {
            let path: Result<Vec<_>, _> = p.path.iter().map(|h| parse_hash(h)).collect();
            let ok = path.is_ok_and(|path| {
                verify_inclusion(&p.leaf.hash(), p.leaf_index, size, &path, &root)
            });
            if !ok {
                problems.push(format!(
                    "key {}: the inclusion proof of (seq {}, hash {}) does not lead to checkpoint {}'s root: the key's head or its proof was altered",
                    p.leaf.key, p.leaf.log_seq, p.leaf.log_hash, self.checkpoint.body.seq
                ));
                continue;
            }
            anchors.insert(
                p.leaf.key.clone(),
                Anchor {
                    seq: p.leaf.log_seq,
                    hash: p.leaf.log_hash.clone(),
                    checkpoint: self.checkpoint.body.seq,
                    pruned: p.leaf.pruned,
                },
            );
        }
        (anchors, problems)
    }
}

/// The head log read back for `verify`: each key's newest leaf and its index, and the
/// root. Built by streaming the leaves in index order; memory grows with the number of
/// keys. (An export proves its keys without it: `export::EvidenceSource`.)
#[derive(Default)]
pub struct LeafLog {
    latest: HashMap<String, (u64, Leaf)>,
    frontier: Frontier,
}

impl LeafLog {
    /// Adds leaf `idx`; leaves must come in index order without gaps.
    pub fn push(&mut self, idx: u64, leaf: Leaf) -> Result<(), String> {
        leaf_in_order(idx, self.frontier.size())?;
        let h = leaf.hash();
        self.frontier.push(h);
        self.latest.insert(leaf.key.clone(), (idx, leaf));
        Ok(())
    }

    pub fn size(&self) -> u64 {
        self.frontier.size()
    }

    /// The root of the leaves pushed so far.
    pub fn root_hex(&self) -> String {
        hex::encode(self.frontier.root())
    }

    /// Each key's newest leaf as an anchor; `checkpoint_of(idx)` names the checkpoint
    /// that added leaf idx.
    pub fn anchors(&self, checkpoint_of: impl Fn(u64) -> u64) -> HashMap<String, Anchor> {
        self.latest
            .iter()
            .map(|(k, (idx, l))| {
                (
                    k.clone(),
                    Anchor {
                        seq: l.log_seq,
                        hash: l.log_hash.clone(),
                        checkpoint: checkpoint_of(*idx),
                        pruned: l.pruned,
                    },
                )
            })
            .collect()
    }
}
