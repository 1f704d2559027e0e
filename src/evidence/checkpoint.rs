//! Signed checkpoints: a signed tree head (RFC 9162 §4.10 in spirit) over the log of
//! key heads, chained to the checkpoint before it.
//!
//! Each checkpoint appends one leaf per key whose head changed since the previous
//! checkpoint (and a tombstone leaf per key retention pruned), so the tree grows with
//! what changed. Its body names the tree size and root, the previous checkpoint's
//! hash and the signing key; `signature` is Ed25519 over
//! `"idemwatch checkpoint v1\n" + JCS(body)` and `hash` is SHA-256 of `JCS(body)`.

use super::keys::{Authenticity, TrustedKeys, key_id};
use super::merkle::{Hash, leaf_hash};
/// The types are the evidence port's (the store reads and writes them); what they mean is here.
pub use super::port::{Checkpoint, CheckpointBody, Leaf};
use crate::base::canonical::{canonical_json, write_canonical_text};
use crate::base::hash::sha256_hex;
use crate::guard::GENESIS_HASH;
use chrono::{DateTime, Utc};
use ed25519_dalek::{Signer, SigningKey, VerifyingKey};

pub const CHECKPOINT_VERSION: u32 = 1;
const SIGNING_CONTEXT: &str = "idemwatch checkpoint v1\n";

/// Leaves are read in index order from 0: leaf `idx` must come where `next` is due,
/// or leaves below it were deleted.
pub fn leaf_in_order(idx: u64, next: u64) -> Result<(), String> {
    if idx == next {
        return Ok(());
    }
    Err(format!(
        "leaf {idx} follows leaf {}: leaves were deleted",
        next.wrapping_sub(1)
    ))
}

impl Leaf {
    /// RFC 9162 leaf hash of `JCS({"key","log_hash","log_seq","pruned"})`: the leaf
    /// serialised, then written in JCS form from its text by the one writer (no
    /// `Value` per leaf: an export's proofs and `verify` hash every leaf). A leaf JCS
    /// refuses (a `log_seq` beyond 2^53, only in an edited table) hashes as serialised,
    /// which no signed root holds.
    pub fn hash(&self) -> Hash {
        let text = serde_json::to_string(self).expect("a leaf serialises");
        let mut canonical = String::with_capacity(text.len());
        match write_canonical_text(&mut canonical, &text) {
            Some(()) => leaf_hash(canonical.as_bytes()),
            None => leaf_hash(text.as_bytes()),
        }
    }
}

impl CheckpointBody {
    fn canonical(&self) -> String {
        let value = serde_json::to_value(self).expect("a body serialises");
        canonical_json(&value).expect("a body is canonicalisable")
    }

    pub fn hash(&self) -> String {
        sha256_hex(self.canonical().as_bytes())
    }

    fn message(&self) -> Vec<u8> {
        format!("{SIGNING_CONTEXT}{}", self.canonical()).into_bytes()
    }

    pub fn sign(self, key: &SigningKey) -> Checkpoint {
        let signature = hex::encode(key.sign(&self.message()).to_bytes());
        let hash = self.hash();
        Checkpoint {
            body: self,
            signature,
            hash,
        }
    }
}

impl Checkpoint {
    /// The body that follows `prev` (or the first one).
    pub(crate) fn next_body(
        prev: Option<&Checkpoint>,
        created_at: DateTime<Utc>,
        tree_size: u64,
        root: &Hash,
        leaves_added: u64,
        key: &VerifyingKey,
    ) -> CheckpointBody {
        CheckpointBody {
            version: CHECKPOINT_VERSION,
            seq: prev.map_or(1, |p| p.body.seq + 1),
            created_at,
            tree_size,
            root_hash: hex::encode(root),
            prev_hash: prev.map_or_else(|| GENESIS_HASH.to_string(), |p| p.hash.clone()),
            leaves_added,
            key_id: key_id(key),
        }
    }

    /// Checks the signature with `key` and that `hash` is the body's.
    pub fn verify(&self, key: &VerifyingKey) -> Result<(), String> {
        self.verify_with(&TrustedKeys::new([*key]))
    }

    /// Checks that `hash` is the body's and the signature verifies with the trusted
    /// key its `key_id` names (a key rotation leaves several).
    pub(crate) fn verify_with(&self, trusted: &TrustedKeys) -> Result<(), String> {
        if self.body.hash() != self.hash {
            return Err(format!(
                "checkpoint {}: its hash is not the hash of its body: it was altered",
                self.body.seq
            ));
        }
        trusted.verify(
            &format!("checkpoint {}", self.body.seq),
            &self.body.key_id,
            &self.body.message(),
            &self.signature,
        )
    }

    pub fn root(&self) -> Result<Hash, String> {
        super::merkle::parse_hash(&self.body.root_hash)
    }

    pub(crate) fn to_json_line(&self) -> String {
        serde_json::to_string(self).expect("a checkpoint serialises")
    }
}

/// Checks a run of checkpoints read in `seq` order: signatures (with the trusted
/// keys, when any are given), seq without gaps from `first_expected`, each `prev_hash` naming the one
/// before, times and tree sizes never going back. Returns what is wrong, in words,
/// and what the trusted keys established about the signatures (all of them).
pub fn check_sequence(
    checkpoints: &[Checkpoint],
    trusted: &TrustedKeys,
    first_expected: u64,
) -> (Vec<String>, Authenticity) {
    let mut problems = Vec::new();
    let mut signature = if checkpoints.is_empty() {
        Authenticity::Unsigned
    } else if trusted.is_empty() {
        Authenticity::Unchecked
    } else {
        Authenticity::Verified
    };
    let mut prev: Option<&Checkpoint> = None;
    for c in checkpoints {
        let seq = c.body.seq;
        if !trusted.is_empty()
            && let Err(why) = c.verify_with(trusted)
        {
            signature = Authenticity::Failed;
            problems.push(why);
        } else if trusted.is_empty() && c.body.hash() != c.hash {
            problems.push(format!(
                "checkpoint {seq}: its hash is not the hash of its body: it was altered"
            ));
        }
        match prev {
            None if seq != first_expected => problems.push(format!(
                "the first checkpoint is {seq}, expected {first_expected}: checkpoints {first_expected}..{} were deleted",
                seq.saturating_sub(1)
            )),
            None if seq == 1 && c.body.prev_hash != GENESIS_HASH => problems.push(
                "checkpoint 1 does not start from the genesis hash".to_string(),
            ),
            Some(p) if seq <= p.body.seq => problems.push(format!(
                "checkpoint {seq} follows checkpoint {}: out of order",
                p.body.seq
            )),
            Some(p) if seq != p.body.seq + 1 => problems.push(format!(
                "checkpoints {}..{} are missing between {} and {seq}: deleted",
                p.body.seq + 1,
                seq - 1,
                p.body.seq
            )),
            Some(p) if c.body.prev_hash != p.hash => problems.push(format!(
                "checkpoint {seq} does not chain to checkpoint {}: one of them was replaced",
                p.body.seq
            )),
            Some(p) if c.body.tree_size < p.body.tree_size || c.body.created_at < p.body.created_at => {
                problems.push(format!(
                    "checkpoint {seq} goes back in tree size or time from checkpoint {}: out of order",
                    p.body.seq
                ))
            }
            _ => {}
        }
        prev = Some(c);
    }
    (problems, signature)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::merkle::empty_root;

    /// Leaf hashes fixed before leaves had one JCS writer (escapes, non-ASCII, the
    /// largest safe log_seq); a log_seq JCS refuses (an edited table) hashes without a
    /// panic, to a hash no signed root holds.
    #[test]
    fn leaf_hashes_keep_their_bytes() {
        let leaf = |key: &str, log_seq, pruned| Leaf {
            key: key.into(),
            log_seq,
            log_hash: "ab\"c".into(),
            pruned,
        };
        let got: Vec<String> = [
            leaf("k", 1, false),
            leaf("ünï\t€😀", (1 << 53) - 1, true),
            leaf("", -7, false),
        ]
        .iter()
        .map(|l| hex::encode(l.hash()))
        .collect();
        assert_eq!(
            got,
            [
                "250b8f3bacc46e68c74b178f8c669f7b9cfc20d1d2df28735be488948c27f33b",
                "f5c60c704b0151d0e7d466745e73815a4a04ab32468c6835a641be8c955c5842",
                "6943d55007264a571b49596949be29d24c6d2fbb53949a48a7d4c57552dcad4d",
            ]
        );
        let edited = leaf("k", 1 << 60, false);
        assert_ne!(edited.hash(), leaf("k", 1, false).hash());
    }

    fn chain(key: &SigningKey, n: u64) -> Vec<Checkpoint> {
        let mut out: Vec<Checkpoint> = Vec::new();
        for i in 0..n {
            let body = Checkpoint::next_body(
                out.last(),
                Utc::now(),
                i * 3,
                &empty_root(),
                3,
                &key.verifying_key(),
            );
            out.push(body.sign(key));
        }
        out
    }

    #[test]
    fn a_leaf_hashes_its_jcs_form() {
        let leaves = [
            ("ab".repeat(32), 7, "cd".repeat(32), false),
            ("k\"\\\u{1}é😀".into(), 0, String::new(), true),
            ("k".into(), -((1 << 53) - 1), "h\n".into(), false),
            ("k".into(), (1 << 53) - 1, "h".into(), true),
        ];
        for (key, log_seq, log_hash, pruned) in leaves {
            let leaf = Leaf {
                key,
                log_seq,
                log_hash,
                pruned,
            };
            let jcs = canonical_json(&serde_json::to_value(&leaf).unwrap()).unwrap();
            assert_eq!(leaf.hash(), leaf_hash(jcs.as_bytes()), "{leaf:?}");
        }
        // A fixed value: the leaf hash is part of every signed root.
        let leaf = Leaf {
            key: "ab".repeat(32),
            log_seq: 7,
            log_hash: "cd".repeat(32),
            pruned: false,
        };
        let text = format!(
            "{{\"key\":\"{}\",\"log_hash\":\"{}\",\"log_seq\":7,\"pruned\":false}}",
            "ab".repeat(32),
            "cd".repeat(32)
        );
        assert_eq!(leaf.hash(), leaf_hash(text.as_bytes()));
    }

    #[test]
    fn a_chain_of_signed_checkpoints_verifies_and_every_tampering_is_named() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let pk = TrustedKeys::new([key.verifying_key()]);
        let good = chain(&key, 4);
        assert!(check_sequence(&good, &pk, 1).0.is_empty());

        let mut deleted = good.clone();
        deleted.remove(1);
        assert!(check_sequence(&deleted, &pk, 1).0[0].contains("missing"));

        let mut altered = good.clone();
        altered[2].body.tree_size = 99;
        assert!(check_sequence(&altered, &pk, 1).0[0].contains("altered"));

        let mut swapped = good.clone();
        swapped.swap(1, 2);
        let found = check_sequence(&swapped, &pk, 1).0;
        assert!(
            found.iter().any(|p| p.contains("out of order")),
            "{found:?}"
        );

        let other = TrustedKeys::new([SigningKey::from_bytes(&[8; 32]).verifying_key()]);
        assert!(check_sequence(&good, &other, 1).0[0].contains("another key"));
    }

    /// Key rotation: checkpoints 1–2 signed by the old key, 3–4 by the new one, chained
    /// across the change. Both keys trusted: all verify; either alone: the other's
    /// checkpoints are named as signed by a key that is not trusted.
    #[test]
    fn a_chain_signed_across_a_key_rotation_verifies_with_both_keys() {
        let (old, new) = (
            SigningKey::from_bytes(&[1; 32]),
            SigningKey::from_bytes(&[2; 32]),
        );
        let mut rotated = chain(&old, 2);
        for _ in 0..2 {
            let body = Checkpoint::next_body(
                rotated.last(),
                Utc::now(),
                9,
                &empty_root(),
                3,
                &new.verifying_key(),
            );
            rotated.push(body.sign(&new));
        }
        let both = TrustedKeys::new([old.verifying_key(), new.verifying_key()]);
        assert!(check_sequence(&rotated, &both, 1).0.is_empty());
        let only_new = check_sequence(&rotated, &TrustedKeys::new([new.verifying_key()]), 1).0;
        assert_eq!(only_new.len(), 2, "{only_new:?}");
        assert!(
            only_new[0].starts_with("checkpoint 1 is signed by key"),
            "{only_new:?}"
        );
        assert!(only_new[0].contains(&key_id(&old.verifying_key())));
        let only_old = check_sequence(&rotated, &TrustedKeys::new([old.verifying_key()]), 1).0;
        assert!(
            only_old.len() == 2 && only_old[0].starts_with("checkpoint 3"),
            "{only_old:?}"
        );
    }
}
