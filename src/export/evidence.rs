//! The evidence an export carries (docs/EXPORT.md, "Checkpoints"): the newest signed
//! checkpoint, chosen before the first row is read, and the inclusion proof of each
//! exported key's newest leaf under it, gathered after the last row. Each key's newest
//! leaf is looked up by index, so the head log is never held.
//!
//! A few keys' proofs ([`LISTED_UP_TO`], and fewer than one leaf in [`DENSE`]) are
//! held in memory: each path comes from its block of 1,024 leaves and the stored
//! block roots (`evidence_blocks`), so one key's export reads about a thousand leaves
//! whatever the log's size. More (a whole export, a large tenant) go through
//! temporary files ([`SpilledProofs`]): one streamed pass over every leaf hash writes
//! each proved leaf's path inside its block, and the proofs are read back in key order
//! as the manifest is written. Memory stays flat however many keys are exported
//! (docs/PERFORMANCE.md, "A whole export's proofs in flat memory").

use super::error::ExportError;
use super::spool::{At, Fields, Spool};
use crate::evidence::merkle::{BLOCK_LEAVES, Frontier, Hash, PathCollector, Tree, parse_hash};
use crate::evidence::port::EvidenceStore;
use crate::evidence::{
    Checkpoint, ExportEvidence, KeyProof, Leaf, ProofPath, ProofSource, Proofs, leaf_in_order,
};
use crate::guard::StoreError;
use futures::StreamExt;
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

/// Keys looked up a statement.
const LOOKUP_BATCH: usize = 1_000;

/// Proofs of at most this many keys are held in memory (~1 kB each while gathered).
pub const LISTED_UP_TO: u64 = 4_096;

/// Proving at least one leaf in this many, the proofs go through files however few:
/// reading every leaf once costs less than a block (1,024 leaves) a key.
const DENSE: u64 = 16;

/// The checkpoint an export is proved under, and where its leaves are read.
pub struct EvidenceSource<S> {
    store: S,
    checkpoint: Checkpoint,
}

impl<S: EvidenceStore + Clone> EvidenceSource<S> {
    /// The newest checkpoint; `None` before the first.
    pub async fn newest(store: &S) -> Result<Option<Self>, StoreError> {
        Ok(store
            .latest_checkpoint()
            .await?
            .map(|latest| EvidenceSource {
                store: store.clone(),
                checkpoint: latest.checkpoint,
            }))
    }

    /// The evidence for the exported keys, each with the last seq the export holds
    /// (in key order, as [`super::encode::exported_key`] records). A key is proved
    /// only when the file holds its checkpointed row: an export cut off by `until`
    /// before it is "uncovered", not broken.
    pub async fn evidence(&self, exported: &Spool) -> Result<ExportEvidence, ExportError> {
        self.evidence_by(exported, LOOKUP_BATCH, LISTED_UP_TO).await
    }

    /// [`EvidenceSource::evidence`], looking up `batch` keys a statement and holding
    /// at most `listed_up_to` proofs in memory (tests cross both bounds with small
    /// numbers).
    #[doc(hidden)]
    pub async fn evidence_by(
        &self,
        exported: &Spool,
        batch: usize,
        listed_up_to: u64,
    ) -> Result<ExportEvidence, ExportError> {
        let size = self.checkpoint.body.tree_size;
        // The proved leaves in key order, as `proved_leaf` records.
        let mut proved = Spool::new();
        let mut uncovered = 0;
        let mut keys = exported.reader();
        let mut chunk: Vec<(String, i64)> = Vec::with_capacity(batch.max(1));
        loop {
            chunk.clear();
            while chunk.len() < batch.max(1)
                && let Some(record) = keys.next_record()?
            {
                chunk.push(super::encode::read_exported_key(record)?);
            }
            if chunk.is_empty() {
                break;
            }
            let names: Vec<String> = chunk.iter().map(|(k, _)| k.clone()).collect();
            let mut newest: HashMap<String, (u64, Leaf)> = self
                .store
                .newest_leaves(&names, size)
                .await?
                .into_iter()
                .map(|(idx, leaf)| (leaf.key.clone(), (idx, leaf)))
                .collect();
            for (key, last_seq) in &chunk {
                match newest.remove(key) {
                    Some((idx, leaf)) if !leaf.pruned && leaf.log_seq <= *last_seq => {
                        proved.push(&proved_leaf(idx, &leaf))?
                    }
                    _ => uncovered += 1,
                }
            }
        }
        let count = proved.len();
        let proofs = if count == 0 {
            Proofs::Listed(Vec::new()) // nothing to prove: the leaves are not read
        } else if count <= listed_up_to && count * DENSE < size {
            let mut leaves = Vec::with_capacity(count as usize);
            let mut records = proved.reader();
            while let Some(record) = records.next_record()? {
                leaves.push(read_proved_leaf(record)?);
            }
            let indices: Vec<u64> = leaves.iter().map(|(idx, _)| *idx).collect();
            let paths = self.paths(&indices).await?;
            Proofs::Listed(
                leaves
                    .into_iter()
                    .zip(paths)
                    .map(|((leaf_index, leaf), path)| KeyProof {
                        leaf,
                        leaf_index,
                        path,
                    })
                    .collect(),
            )
        } else {
            Proofs::Streamed(Arc::new(self.spill(proved).await?))
        };
        Ok(ExportEvidence {
            checkpoint: self.checkpoint.clone(),
            proofs,
            uncovered_keys: uncovered,
        })
    }

    /// The paths of the `proved` leaves ([`proved_leaf`] records in key order) in
    /// files, from one pass over every leaf below the checkpoint's size. A leaf's path
    /// is its path inside its block of [`BLOCK_LEAVES`] (written to a file as the
    /// block's leaves pass) followed by the block's path among the block roots (kept
    /// in memory: 64 bytes a block, computed as the proofs are read).
    async fn spill(&self, proved: Spool) -> Result<SpilledProofs, ExportError> {
        let size = self.checkpoint.body.tree_size;
        // Where each proved leaf's path goes: its position in key order (plus one; 0
        // is a leaf nobody asked for), at 8 × its index. A sparse file: the pass
        // below reads it in index order beside the leaves.
        let positions = tempfile::tempfile()?;
        let mut records = proved.reader();
        let mut position = 0u64;
        while let Some(record) = records.next_record()? {
            let idx = Fields(record).u64()?;
            positions.write_all_at(&(position + 1).to_le_bytes(), idx * 8)?;
            position += 1;
        }
        drop(records);
        let paths = tempfile::tempfile()?;
        let mut block = Block::default();
        let mut roots = Vec::with_capacity(size.div_ceil(BLOCK_LEAVES) as usize);
        let mut leaves = self.store.checkpoint_leaves_below(size);
        let mut next = 0u64;
        while let Some(item) = leaves.next().await {
            let (idx, leaf) = item?;
            leaf_in_order(idx, next).map_err(StoreError::Corrupt)?;
            block.hashes.push(leaf.hash());
            next += 1;
            if block.hashes.len() as u64 == BLOCK_LEAVES {
                roots.push(block.close(next - BLOCK_LEAVES, &positions, &paths)?);
            }
        }
        if !block.hashes.is_empty() {
            let from = next - block.hashes.len() as u64;
            roots.push(block.close(from, &positions, &paths)?);
        }
        if next != size {
            return Err(self.deleted(next).into());
        }
        Ok(SpilledProofs {
            leaves: proved,
            paths,
            upper: Tree::new(roots),
        })
    }

    fn deleted(&self, stored: u64) -> StoreError {
        StoreError::Corrupt(format!(
            "checkpoint {} covers {} leaves, but {stored} are stored: leaves were deleted",
            self.checkpoint.body.seq, self.checkpoint.body.tree_size
        ))
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

    /// The audit paths of leaves `indices` in the checkpoint's tree, gathered from one
    /// ordered pass over its leaves ([`PathCollector`]: ~1 kB a wanted leaf while it
    /// runs, the tree's leaves not kept).
    async fn paths_streamed(&self, indices: &[u64]) -> Result<Vec<ProofPath>, StoreError> {
        let size = self.checkpoint.body.tree_size;
        let mut collector = PathCollector::new(size, indices);
        let mut leaves = self.store.checkpoint_leaves_below(size);
        let mut next = 0u64;
        while let Some(item) = leaves.next().await {
            let (idx, leaf) = item?;
            leaf_in_order(idx, next).map_err(StoreError::Corrupt)?;
            collector.push(leaf.hash());
            next += 1;
        }
        let paths = collector.finish().ok_or_else(|| self.deleted(next))?;
        Ok(paths.into_iter().map(ProofPath::from).collect())
    }
}

/// A proved leaf as a [`Spool`] record: its index, then the leaf.
fn proved_leaf(idx: u64, leaf: &Leaf) -> Vec<u8> {
    let mut record = Vec::with_capacity(33 + leaf.key.len() + leaf.log_hash.len());
    record.extend_from_slice(&idx.to_le_bytes());
    record.extend_from_slice(&leaf.log_seq.to_le_bytes());
    record.extend_from_slice(&u64::from(leaf.pruned).to_le_bytes());
    record.extend_from_slice(&(leaf.key.len() as u64).to_le_bytes());
    record.extend_from_slice(leaf.key.as_bytes());
    record.extend_from_slice(leaf.log_hash.as_bytes());
    record
}

fn read_proved_leaf(record: &[u8]) -> io::Result<(u64, Leaf)> {
    let mut f = Fields(record);
    let idx = f.u64()?;
    let log_seq = f.i64()?;
    let pruned = f.u64()? != 0;
    let key_len = f.u64()? as usize;
    let key = f.text(Some(key_len))?.to_owned();
    let log_hash = f.text(None)?.to_owned();
    Ok((
        idx,
        Leaf {
            key,
            log_seq,
            log_hash,
            pruned,
        },
    ))
}

/// A proved leaf's path inside its block, in the paths file at its position: a
/// byte (the path's length plus one; 0 where nothing was written) and up to
/// `BLOCK_HEIGHT` hashes.
const SLOT: usize = 1 + 32 * BLOCK_LEAVES.trailing_zeros() as usize;

/// The leaf hashes of the block being read.
#[derive(Default)]
struct Block {
    hashes: Vec<Hash>,
}

impl Block {
    /// The block of leaves `from..`: writes the path of each of its proved leaves to
    /// its slot in `paths` and returns the block's root.
    fn close(&mut self, from: u64, positions: &File, paths: &File) -> io::Result<Hash> {
        let n = self.hashes.len();
        let mut wanted = vec![0u8; n * 8];
        read_at_most(positions, &mut wanted, from * 8)?;
        let slots: Vec<(usize, u64)> = wanted
            .chunks_exact(8)
            .enumerate()
            .filter_map(|(i, p)| {
                let p = u64::from_le_bytes(p.try_into().expect("8 bytes"));
                (p != 0).then(|| (i, p - 1))
            })
            .collect();
        if slots.is_empty() {
            let mut root = Frontier::default();
            self.hashes.drain(..).for_each(|h| root.push(h));
            return Ok(root.root());
        }
        let tree = Tree::new(std::mem::take(&mut self.hashes));
        let mut slot = [0u8; SLOT];
        for (i, position) in slots {
            let path = tree.inclusion_proof(i as u64);
            slot.fill(0);
            slot[0] = path.len() as u8 + 1;
            for (n, hash) in path.iter().enumerate() {
                slot[1 + 32 * n..33 + 32 * n].copy_from_slice(hash);
            }
            paths.write_all_at(&slot, position * SLOT as u64)?;
        }
        self.hashes = Vec::with_capacity(BLOCK_LEAVES as usize);
        Ok(tree.root())
    }
}

/// Fills `buf` from `offset`, leaving zeros past the file's end (a sparse file's
/// unwritten tail).
fn read_at_most(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64)? {
            0 => break,
            n => done += n,
        }
    }
    Ok(())
}

/// Proofs held in temporary files: the proved leaves in key order ([`proved_leaf`]
/// records), each one's path inside its block at its position in `paths`, and the
/// tree of block roots for the rest of each path.
pub(crate) struct SpilledProofs {
    leaves: Spool,
    paths: File,
    upper: Tree,
}

impl ProofSource for SpilledProofs {
    fn count(&self) -> u64 {
        self.leaves.len()
    }

    fn for_each(
        &self,
        each: &mut dyn FnMut(&KeyProof) -> Result<(), String>,
    ) -> Result<(), String> {
        let io = |e: io::Error| e.to_string();
        let mut leaves = self.leaves.reader();
        let end = self.leaves.len() * SLOT as u64;
        let mut paths = BufReader::with_capacity(
            64 * 1024,
            At {
                file: &self.paths,
                pos: 0,
                end,
            },
        );
        let mut slot = [0u8; SLOT];
        while let Some(record) = leaves.next_record().map_err(io)? {
            let (leaf_index, leaf) = read_proved_leaf(record).map_err(io)?;
            paths.read_exact(&mut slot).map_err(io)?;
            let Some(len) = (slot[0] as usize).checked_sub(1) else {
                return Err(format!("the path of leaf {leaf_index} was not computed"));
            };
            let mut path: Vec<Hash> = slot[1..1 + 32 * len]
                .chunks_exact(32)
                .map(|h| h.try_into().expect("32 bytes"))
                .collect();
            path.extend(self.upper.inclusion_proof(leaf_index / BLOCK_LEAVES));
            each(&KeyProof {
                leaf,
                leaf_index,
                path: ProofPath::Hashes(path),
            })?;
        }
        Ok(())
    }
}
