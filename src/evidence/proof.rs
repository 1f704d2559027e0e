//! What an export carries so that it checks offline: the newest signed checkpoint
//! and, for each exported key, the inclusion proof of its newest leaf (RFC 9162
//! §2.1.3) under that checkpoint's root.

use super::checkpoint::{Checkpoint, Leaf, leaf_in_order};
use super::keys::{Authenticity, TrustedKeys};
use super::merkle::{Frontier, Hash, parse_hash, verify_inclusion};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::HashMap;
use std::sync::Arc;

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
    pub path: ProofPath,
}

/// The sibling hashes of an inclusion proof, written as a list of 64 lowercase hex
/// digits each.
///
/// Held as bytes: each hash as a 64-character `String` cost ~100 bytes of memory, and
/// a path ~1.7 kB (docs/PERFORMANCE.md, "A whole export's proofs in a quarter of the
/// memory"). A manifest read back with anything but this form in a path keeps that
/// path's text exactly as it was, so that [`ExportEvidence::check`] names the key
/// whose proof was altered instead of the whole manifest failing to parse.
#[derive(Clone)]
pub enum ProofPath {
    Hashes(Vec<Hash>),
    Text(Vec<String>),
}

impl ProofPath {
    pub fn hashes(&self) -> Result<Vec<Hash>, String> {
        match self {
            ProofPath::Hashes(hashes) => Ok(hashes.clone()),
            ProofPath::Text(text) => text.iter().map(|h| parse_hash(h)).collect(),
        }
    }
}

/// Equal when they write the same JSON.
impl PartialEq for ProofPath {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (ProofPath::Text(a), ProofPath::Text(b)) => a == b,
            (ProofPath::Text(_), _) | (_, ProofPath::Text(_)) => false,
            (ProofPath::Hashes(a), ProofPath::Hashes(b)) => a == b,
        }
    }
}

impl Eq for ProofPath {}

impl std::fmt::Debug for ProofPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self, self.hashes()) {
            (ProofPath::Text(text), _) => f.debug_tuple("Text").field(text).finish(),
            (_, hashes) => {
                let hex: Vec<String> = hashes.unwrap_or_default().iter().map(hex::encode).collect();
                f.debug_tuple("Hashes").field(&hex).finish()
            }
        }
    }
}

impl From<Vec<Hash>> for ProofPath {
    fn from(hashes: Vec<Hash>) -> Self {
        ProofPath::Hashes(hashes)
    }
}

impl Serialize for ProofPath {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        match self {
            ProofPath::Text(text) => text.serialize(serializer),
            path => {
                let hashes = path.hashes().expect("a path of hashes");
                let mut seq = serializer.serialize_seq(Some(hashes.len()))?;
                let mut hex = [0u8; 64];
                for hash in &hashes {
                    hex::encode_to_slice(hash, &mut hex).expect("64 hex digits for 32 bytes");
                    seq.serialize_element(std::str::from_utf8(&hex).expect("hex is ASCII"))?;
                }
                seq.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for ProofPath {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = Vec::<String>::deserialize(deserializer)?;
        // Only the form this crate writes becomes bytes, so what is read is written
        // back unchanged (upper-case hex, say, stays text and still parses in `hashes`).
        let canonical = |h: &String| parse_hash(h).ok().filter(|b| hex::encode(b) == *h);
        Ok(
            match text.iter().map(canonical).collect::<Option<Vec<Hash>>>() {
                Some(hashes) => ProofPath::Hashes(hashes),
                None => ProofPath::Text(text),
            },
        )
    }
}

/// Proofs too many to hold in memory (a whole export's: one a key), read in key
/// order as the manifest is written. The export keeps them in temporary files
/// (`export::evidence`); this layer only reads them.
pub trait ProofSource: Send + Sync {
    /// How many proofs [`ProofSource::for_each`] gives.
    fn count(&self) -> u64;
    /// Calls `each` with every proof in key order; stops at the first error.
    fn for_each(&self, each: &mut dyn FnMut(&KeyProof) -> Result<(), String>)
    -> Result<(), String>;
}

/// The proofs of a manifest: a list (as read back from a file, or a few keys'), or a
/// source read as they are written. Either is written as the same JSON list.
#[derive(Clone)]
pub enum Proofs {
    Listed(Vec<KeyProof>),
    Streamed(Arc<dyn ProofSource>),
}

impl Proofs {
    pub fn len(&self) -> u64 {
        match self {
            Proofs::Listed(list) => list.len() as u64,
            Proofs::Streamed(source) => source.count(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `each` with every proof in key order; stops at the first error.
    pub fn for_each(
        &self,
        mut each: impl FnMut(&KeyProof) -> Result<(), String>,
    ) -> Result<(), String> {
        match self {
            Proofs::Listed(list) => list.iter().try_for_each(each),
            Proofs::Streamed(source) => source.for_each(&mut each),
        }
    }

    /// Every proof in memory (tests, and small exports).
    pub fn to_vec(&self) -> Result<Vec<KeyProof>, String> {
        let mut all = Vec::with_capacity(self.len() as usize);
        self.for_each(|p| {
            all.push(p.clone());
            Ok(())
        })?;
        Ok(all)
    }
}

/// Equal when they hold the same proofs (a source that cannot be read equals nothing).
impl PartialEq for Proofs {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Proofs::Listed(a), Proofs::Listed(b)) => a == b,
            (a, b) => matches!((a.to_vec(), b.to_vec()), (Ok(a), Ok(b)) if a == b),
        }
    }
}

impl Eq for Proofs {}

impl std::fmt::Debug for Proofs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Proofs::Listed(list) => list.fmt(f),
            Proofs::Streamed(source) => write!(f, "Streamed({} proofs)", source.count()),
        }
    }
}

impl Serialize for Proofs {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error, SerializeSeq};
        let mut seq = serializer.serialize_seq(Some(self.len() as usize))?;
        let mut failed = None;
        let read = self.for_each(|proof| {
            seq.serialize_element(proof).map_err(|e| {
                let why = e.to_string();
                failed = Some(e);
                why
            })
        });
        if let Some(e) = failed {
            return Err(e);
        }
        read.map_err(|why| S::Error::custom(format!("cannot read the export's proofs: {why}")))?;
        seq.end()
    }
}

impl<'de> Deserialize<'de> for Proofs {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::<KeyProof>::deserialize(deserializer).map(Proofs::Listed)
    }
}

/// The `evidence` member of a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportEvidence {
    pub checkpoint: Checkpoint,
    /// One per exported key that the checkpoint covers, in key order.
    pub proofs: Proofs,
    /// Exported keys the checkpoint does not cover yet (changed after it, first time).
    pub uncovered_keys: u64,
}

/// What checking an export's evidence found: where each covered key's chain must
/// pass, what failed (in words), and whether a trusted key verified the checkpoint.
#[derive(Debug, Default)]
pub struct EvidenceCheck {
    pub anchors: HashMap<String, Anchor>,
    pub problems: Vec<String>,
    pub signature: Authenticity,
}

impl ExportEvidence {
    /// Checks the checkpoint's signature with the trusted keys (unchecked when none
    /// are given) and every proof.
    pub fn check(&self, trusted: &TrustedKeys) -> EvidenceCheck {
        let mut problems = Vec::new();
        let signed = (!trusted.is_empty()).then(|| self.checkpoint.verify_with(trusted));
        let signature = Authenticity::of(signed.as_ref());
        if let Some(Err(why)) = signed {
            problems.push(why);
        }
        let root = match self.checkpoint.root() {
            Ok(root) => root,
            Err(why) => {
                problems.push(format!("the checkpoint's root: {why}"));
                return EvidenceCheck {
                    problems,
                    signature,
                    ..EvidenceCheck::default()
                };
            }
        };
        let size = self.checkpoint.body.tree_size;
        let mut anchors = HashMap::new();
        let read = self.proofs.for_each(|p| {
            let path = p.path.hashes();
            let ok = path.is_ok_and(|path| {
                verify_inclusion(&p.leaf.hash(), p.leaf_index, size, &path, &root)
            });
            if !ok {
                problems.push(format!(
                    "key {}: the inclusion proof of (seq {}, hash {}) does not lead to checkpoint {}'s root: the key's head or its proof was altered",
                    p.leaf.key, p.leaf.log_seq, p.leaf.log_hash, self.checkpoint.body.seq
                ));
                return Ok(());
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
            Ok(())
        });
        if let Err(why) = read {
            problems.push(format!("the manifest's proofs cannot be read: {why}"));
        }
        EvidenceCheck {
            anchors,
            problems,
            signature,
        }
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
    pub(crate) fn root_hex(&self) -> String {
        hex::encode(self.frontier.root())
    }

    /// Each key's newest leaf as an anchor; `checkpoint_of(idx)` names the checkpoint
    /// that added leaf idx.
    pub(crate) fn anchors(&self, checkpoint_of: impl Fn(u64) -> u64) -> HashMap<String, Anchor> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_path_is_written_as_hex_and_read_back_as_it_was() {
        let hashes: Vec<Hash> = (0..3u8)
            .map(|n| std::array::from_fn(|i| i as u8 * 7 + n))
            .collect();
        let hex: Vec<String> = hashes.iter().map(hex::encode).collect();
        let written = serde_json::to_string(&ProofPath::from(hashes.clone())).unwrap();
        assert_eq!(
            written,
            serde_json::to_string(&hex).unwrap(),
            "the same bytes as the Vec<String> it replaced"
        );
        let read: ProofPath = serde_json::from_str(&written).unwrap();
        assert_eq!(read, ProofPath::Hashes(hashes.clone()));
        assert_eq!(read.hashes().unwrap(), hashes);
        // Anything else keeps the path as text, written back unchanged; only what does
        // not parse at all fails, in `hashes`.
        for (odd, parses) in [
            (hex[1].to_uppercase(), true),
            ("zz".repeat(32), false),
            ("ab".to_string(), false),
        ] {
            let text = vec![hex[0].clone(), odd.clone(), hex[2].clone()];
            let json = serde_json::to_string(&text).unwrap();
            let read: ProofPath = serde_json::from_str(&json).unwrap();
            assert_eq!(read, ProofPath::Text(text));
            assert_eq!(serde_json::to_string(&read).unwrap(), json);
            assert_eq!(read.hashes().is_ok(), parses, "{odd}");
        }
    }
}
