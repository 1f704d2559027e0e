//! The evidence an export carries (docs/EXPORT.md, "Checkpoints"): the newest signed
//! checkpoint, chosen before the first row is read, and the inclusion proof of each
//! exported key's newest leaf under it, gathered after the last row. Memory grows with
//! the exported keys, not with the head log: each key's newest leaf is looked up by
//! index. Its path comes from its block of 1,024 leaves and the stored block roots
//! (`evidence_blocks`), so one key's export reads about a thousand leaves whatever the
//! log's size; an export of keys spread over most blocks streams every leaf hash past
//! once instead, and keeps either the tree of every leaf (a whole export: the paths are
//! computed as the manifest is written) or the proved keys' paths ([`PathCollector`]).

use crate::evidence::merkle::{BLOCK_LEAVES, Frontier, Hash, PathCollector, Tree, parse_hash};
use crate::evidence::{Checkpoint, ExportEvidence, KeyProof, Leaf, ProofPath, leaf_in_order};
use crate::store::{Store, StoreError};
use futures::StreamExt;
use std::collections::HashMap;
use std::sync::Arc;

/// Keys looked up a statement.
const LOOKUP_BATCH: usize = 1_000;

/// A streamed pass keeps the whole tree when at least one leaf in this many is proved:
/// the tree costs 64 bytes a leaf, gathering the paths ~1 kB a proved leaf.
const DENSE: u64 = 16;

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
                path,
            })
            .collect();
        Ok(ExportEvidence {
            checkpoint: self.checkpoint.clone(),
            proofs,
            uncovered_keys: uncovered,
        })
    }

    /// The audit paths of leaves `indices` in the checkpoint's tree: from their blocks
    /// and the block roots when that reads less than half the leaves, else (or when
    /// the roots are missing or wrong) from one ordered pass over every leaf.
    async fn paths(&self, indices: &[u64]) -> Result<Vec<ProofPath>, StoreError> {
        if let Some(paths) = self.paths_by_block(indices).await? {
            return Ok(paths.into_iter().map(ProofPath::from).collect());
        }
        self.paths_streamed(indices).await
    }

    /// A leaf's path is its path inside its block of [`BLOCK_LEAVES`] leaves (from
    /// the block's leaves) followed by the block's path in the tree whose leaves are
    /// the block roots (each complete block is a node of the checkpoint's tree, and
    /// the last, partial block's root is the MTH of its leaves). The stored roots are
    /// folded to the root the checkpoint signs before any is used: `None` when they do
    /// not give it, or one is missing, and the caller reads every leaf instead.
    async fn paths_by_block(&self, indices: &[u64]) -> Result<Option<Vec<Vec<Hash>>>, StoreError> {
        let size = self.checkpoint.body.tree_size;
        // The wanted leaves by block, as indices inside it.
        let mut by_block: HashMap<u64, Vec<u64>> = HashMap::new();
        for i in indices {
            by_block
                .entry(i / BLOCK_LEAVES)
                .or_default()
                .push(i % BLOCK_LEAVES);
        }
        let mut blocks: Vec<u64> = by_block.keys().copied().collect();
        blocks.sort_unstable();
        if blocks.len() as u64 * BLOCK_LEAVES * 2 > size {
            return Ok(None);
        }
        let complete = size / BLOCK_LEAVES;
        let stored = self.store.checkpoint_blocks(complete).await?;
        let mut roots = Vec::with_capacity(size.div_ceil(BLOCK_LEAVES) as usize);
        for (n, (idx, hex)) in stored.into_iter().enumerate() {
            match parse_hash(&hex) {
                Ok(root) if idx == n as u64 => roots.push(root),
                _ => return Ok(self.unusable_blocks("a block root is missing or not a hash")),
            }
        }
        if roots.len() as u64 != complete {
            return Ok(self.unusable_blocks(
                "older blocks have no stored root yet; the next checkpoint writes them",
            ));
        }
        // Inside each wanted block (and the partial last one, whose root is needed).
        let mut inner: HashMap<u64, Vec<Hash>> = HashMap::new();
        let partial = (!size.is_multiple_of(BLOCK_LEAVES)).then_some(complete);
        let unwanted_partial = partial.filter(|p| !blocks.contains(p));
        for block in blocks.iter().copied().chain(unwanted_partial) {
            let (from, to) = (block * BLOCK_LEAVES, ((block + 1) * BLOCK_LEAVES).min(size));
            let wanted = by_block.remove(&block).unwrap_or_default();
            let mut collector = PathCollector::new(to - from, &wanted);
            let mut root = Frontier::default();
            let mut leaves = self.store.checkpoint_leaves_between(from, to);
            while let Some(item) = leaves.next().await {
                let (idx, leaf) = item?;
                if idx != from + root.size() {
                    return Ok(self.unusable_blocks("a block's leaves have a gap"));
                }
                let hash = leaf.hash();
                collector.push(hash);
                root.push(hash);
            }
            let Some(paths) = collector.finish() else {
                return Ok(self.unusable_blocks("a block's leaves are short"));
            };
            if Some(block) == partial {
                roots.push(root.root());
            } else if roots[block as usize] != root.root() {
                return Ok(self.unusable_blocks("a stored block root differs from its leaves"));
            }
            for (local, path) in wanted.into_iter().zip(paths) {
                inner.insert(from + local, path);
            }
        }
        let mut folded = Frontier::default();
        for root in &roots {
            folded.push(*root);
        }
        if Some(folded.root()) != self.checkpoint.root().ok() {
            return Ok(self.unusable_blocks("the block roots do not give the checkpoint's root"));
        }
        let mut upper = PathCollector::new(roots.len() as u64, &blocks);
        for root in roots {
            upper.push(root);
        }
        let upper = upper.finish().expect("every block root pushed");
        let upper: HashMap<u64, Vec<Hash>> = blocks.into_iter().zip(upper).collect();
        Ok(Some(
            indices
                .iter()
                .map(|i| {
                    let mut path = inner[i].clone();
                    path.extend_from_slice(&upper[&(i / BLOCK_LEAVES)]);
                    path
                })
                .collect(),
        ))
    }

    fn unusable_blocks<T>(&self, why: &str) -> Option<T> {
        tracing::warn!(
            checkpoint_seq = self.checkpoint.body.seq,
            "block roots not used ({why}): the proofs are read from every leaf"
        );
        None
    }

    /// The audit paths of leaves `indices` in the checkpoint's tree, from one ordered
    /// pass over its leaves. When at least one leaf in [`DENSE`] is wanted (a whole
    /// export), every leaf hash is kept in one [`Tree`] (64 bytes a leaf) and each path
    /// is computed from it when the manifest is written; otherwise the paths are
    /// gathered as the leaves pass ([`PathCollector`]: ~1 kB a wanted leaf while it
    /// runs, the tree's leaves not kept).
    async fn paths_streamed(&self, indices: &[u64]) -> Result<Vec<ProofPath>, StoreError> {
        let size = self.checkpoint.body.tree_size;
        let dense = indices.len() as u64 * DENSE >= size;
        let mut collector = (!dense).then(|| PathCollector::new(size, indices));
        let mut hashes = Vec::with_capacity(if dense { size as usize } else { 0 });
        let mut leaves = self.store.checkpoint_leaves_below(size);
        let mut next = 0u64;
        while let Some(item) = leaves.next().await {
            let (idx, leaf) = item?;
            leaf_in_order(idx, next).map_err(StoreError::Corrupt)?;
            match collector.as_mut() {
                Some(collector) => collector.push(leaf.hash()),
                None => hashes.push(leaf.hash()),
            }
            next += 1;
        }
        let deleted = || {
            StoreError::Corrupt(format!(
                "checkpoint {} covers {size} leaves, but {next} are stored: leaves were deleted",
                self.checkpoint.body.seq
            ))
        };
        if let Some(collector) = collector {
            let paths = collector.finish().ok_or_else(deleted)?;
            return Ok(paths.into_iter().map(ProofPath::from).collect());
        }
        if next != size {
            return Err(deleted());
        }
        let tree = Arc::new(Tree::new(hashes));
        Ok(indices
            .iter()
            .map(|&index| ProofPath::InTree {
                tree: tree.clone(),
                index,
            })
            .collect())
    }
}
