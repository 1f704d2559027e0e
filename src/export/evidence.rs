//! The evidence an export carries (docs/EXPORT.md, "Checkpoints"): the newest signed
//! checkpoint, chosen before the first row is read, and the inclusion proof of each
//! exported key's newest leaf under it, gathered after the last row. Memory grows with
//! the exported keys, not with the head log: each key's newest leaf is looked up by
//! index, and the tree's leaf hashes stream past once ([`PathCollector`]). So one
//! key's export holds one proof whatever the number of leaves.

use crate::evidence::merkle::PathCollector;
use crate::evidence::{Checkpoint, ExportEvidence, KeyProof, Leaf};
use crate::store::{Store, StoreError};
use futures::StreamExt;

/// Keys looked up a statement.
const LOOKUP_BATCH: usize = 1_000;

/// The checkpoint an export is proved under, and where its leaves are read.
pub struct EvidenceSource {
    store: Store,
    checkpoint: Checkpoint,
}

impl EvidenceSource {
    /// The newest checkpoint; `None` before the first.
    pub async fn newest(store: &Store) -> Result<Option<EvidenceSource>, StoreError> {
        Ok(store
            .latest_checkpoint()
            .await?
            .map(|latest| EvidenceSource {
                store: store.clone(),
                checkpoint: latest.checkpoint,
            }))
    }

    /// The evidence for the exported keys, each with the last seq the export holds
    /// (in key order). A key is proved only when the file holds its checkpointed
    /// row: an export cut off by `until` before it is "uncovered", not broken.
    pub async fn evidence(&self, exported: &[(String, i64)]) -> Result<ExportEvidence, StoreError> {
        self.evidence_by(exported, LOOKUP_BATCH).await
    }

    /// [`EvidenceSource::evidence`], looking up `batch` keys a statement (tests cross
    /// the batch boundary with a small one).
    #[doc(hidden)]
    pub async fn evidence_by(
        &self,
        exported: &[(String, i64)],
        batch: usize,
    ) -> Result<ExportEvidence, StoreError> {
        let size = self.checkpoint.body.tree_size;
        let mut proved: Vec<(u64, Leaf)> = Vec::new();
        let mut uncovered = 0;
        for chunk in exported.chunks(batch.max(1)) {
            let keys: Vec<String> = chunk.iter().map(|(k, _)| k.clone()).collect();
            let mut newest: std::collections::HashMap<String, (u64, Leaf)> = self
                .store
                .newest_leaves(&keys, size)
                .await?
                .into_iter()
                .map(|(idx, leaf)| (leaf.key.clone(), (idx, leaf)))
                .collect();
            for (key, last_seq) in chunk {
                match newest.remove(key) {
                    Some((idx, leaf)) if !leaf.pruned && leaf.log_seq <= *last_seq => {
                        proved.push((idx, leaf))
                    }
                    _ => uncovered += 1,
                }
            }
        }
        let paths = if proved.is_empty() {
            Vec::new() // nothing to prove: the leaves are not read
        } else {
            let indices: Vec<u64> = proved.iter().map(|(idx, _)| *idx).collect();
            self.paths(&indices).await?
        };
        let proofs = proved
            .into_iter()
            .zip(paths)
            .map(|((leaf_index, leaf), path)| KeyProof {
                leaf,
                leaf_index,
                path: path.iter().map(hex::encode).collect(),
            })
            .collect();
        Ok(ExportEvidence {
            checkpoint: self.checkpoint.clone(),
            proofs,
            uncovered_keys: uncovered,
        })
    }

    /// The audit paths of leaves `indices` in the checkpoint's tree, from one ordered
    /// pass over its leaves.
    async fn paths(&self, indices: &[u64]) -> Result<Vec<Vec<[u8; 32]>>, StoreError> {
        let size = self.checkpoint.body.tree_size;
        let mut collector = PathCollector::new(size, indices);
        let mut leaves = self.store.checkpoint_leaves_below(size);
        let mut next = 0u64;
        while let Some(item) = leaves.next().await {
            let (idx, leaf) = item?;
            if idx != next {
                return Err(StoreError::Corrupt(format!(
                    "leaf {idx} follows leaf {}: leaves were deleted",
                    next.wrapping_sub(1)
                )));
            }
            collector.push(leaf.hash());
            next += 1;
        }
        collector.finish().ok_or_else(|| {
            StoreError::Corrupt(format!(
                "checkpoint {} covers {size} leaves, but {next} are stored: leaves were deleted",
                self.checkpoint.body.seq
            ))
        })
    }
}
