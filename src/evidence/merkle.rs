//! The Merkle tree of RFC 9162 (Certificate Transparency 2.0, §2.1): leaves hashed
//! with a 0x00 prefix, interior nodes with 0x01, a tree of n leaves split at the
//! largest power of two below n. Checkpoints append leaves and keep only the right
//! border (the [`Frontier`]), so a checkpoint costs what changed, not the tree.

use sha2::{Digest, Sha256};

pub(crate) type Hash = [u8; 32];

/// Blocks of 2^10 leaves: the perfect subtrees whose roots the database keeps beside
/// the leaves (`evidence_blocks`). A block that lies wholly below a tree's size is a
/// node of that tree (RFC 9162 splits at powers of two, so every left subtree is
/// perfect and aligned), so one leaf's audit path needs its block's leaves and the
/// block roots, not every leaf.
pub(crate) const BLOCK_HEIGHT: u32 = 10;
pub const BLOCK_LEAVES: u64 = 1 << BLOCK_HEIGHT;

/// MTH({}) = SHA-256 of the empty string.
pub(crate) fn empty_root() -> Hash {
    Sha256::digest([]).into()
}

pub(crate) fn leaf_hash(data: &[u8]) -> Hash {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(data);
    h.finalize().into()
}

pub(crate) fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(left);
    h.update(right);
    h.finalize().into()
}

/// The roots of the perfect subtrees along the right border of a tree, largest
/// first: enough to append leaves and compute the root without the rest of the tree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Frontier {
    size: u64,
    /// (height, root) of each perfect subtree, heights strictly decreasing.
    peaks: Vec<(u32, Hash)>,
}

impl Frontier {
    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn push(&mut self, leaf: Hash) {
        self.push_noting(leaf, u32::MAX);
    }

    /// [`Frontier::push`], returning the perfect subtree of `height` this leaf
    /// completes, if it completes one: (its index among the subtrees of that height,
    /// its root). The checkpoint writer keeps these as [`BLOCK_HEIGHT`] blocks.
    pub(crate) fn push_noting(&mut self, leaf: Hash, height: u32) -> Option<(u64, Hash)> {
        let mut completed = None;
        let mut node = (0u32, leaf);
        loop {
            if node.0 == height {
                completed = Some((((self.size + 1) >> height) - 1, node.1));
            }
            match self.peaks.last() {
                Some(&(h, left)) if h == node.0 => {
                    self.peaks.pop();
                    node = (h + 1, node_hash(&left, &node.1));
                }
                _ => break,
            }
        }
        self.peaks.push(node);
        self.size += 1;
        completed
    }

    /// MTH of the leaves pushed so far: the peaks folded right to left.
    pub fn root(&self) -> Hash {
        let mut iter = self.peaks.iter().rev();
        let Some(&(_, mut acc)) = iter.next() else {
            return empty_root();
        };
        for (_, left) in iter {
            acc = node_hash(left, &acc);
        }
        acc
    }

    /// The peaks as hex, for storage with a checkpoint (heights follow from the size).
    pub fn to_hex(&self) -> Vec<String> {
        self.peaks.iter().map(|(_, h)| hex::encode(h)).collect()
    }

    pub(crate) fn from_hex(size: u64, peaks: &[String]) -> Result<Self, String> {
        let heights: Vec<u32> = (0..64).rev().filter(|b| (size >> b) & 1 == 1).collect();
        if heights.len() != peaks.len() {
            return Err(format!(
                "a tree of {size} leaves has {} peaks, not {}",
                heights.len(),
                peaks.len()
            ));
        }
        let peaks = heights
            .into_iter()
            .zip(peaks)
            .map(|(h, p)| parse_hash(p).map(|p| (h, p)))
            .collect::<Result<_, _>>()?;
        Ok(Frontier { size, peaks })
    }
}

pub(crate) fn parse_hash(text: &str) -> Result<Hash, String> {
    let bytes = hex::decode(text).map_err(|e| format!("{text:?} is not hex: {e}"))?;
    bytes
        .try_into()
        .map_err(|_| format!("{text:?} is not 32 bytes"))
}

/// Every level of a tree built from its leaf hashes, for inclusion proofs of any leaf
/// (memory 64 bytes a leaf). An export that proves many keys builds one a block of
/// 1,024 leaves as the leaves stream past, and one of the block roots (64 bytes a
/// block); the tests check [`PathCollector`] and those paths against this.
pub struct Tree {
    levels: Vec<Vec<Hash>>,
}

impl Tree {
    pub fn new(leaves: Vec<Hash>) -> Tree {
        let mut levels = vec![leaves];
        while levels.last().is_some_and(|l| l.len() > 1) {
            let below = levels.last().expect("a level");
            let above = below
                .chunks(2)
                .map(|pair| match pair {
                    [l, r] => node_hash(l, r),
                    [single] => *single,
                    _ => unreachable!("chunks of two"),
                })
                .collect();
            levels.push(above);
        }
        Tree { levels }
    }

    pub fn size(&self) -> u64 {
        self.levels[0].len() as u64
    }

    /// The root of the first `size` leaves (RFC 9162 MTH).
    pub fn root(&self) -> Hash {
        match self.levels.last() {
            Some(top) if top.len() == 1 => top[0],
            _ => empty_root(),
        }
    }

    /// The audit path of leaf `index` in the whole tree, bottom up (RFC 9162 §2.1.3).
    /// With unbalanced right edges promoted unchanged, the levels give exactly the
    /// RFC's path: a node without a sibling contributes nothing at that level.
    pub fn inclusion_proof(&self, index: u64) -> Vec<Hash> {
        let mut path = Vec::new();
        let mut i = index as usize;
        for level in &self.levels[..self.levels.len().saturating_sub(1)] {
            let sibling = i ^ 1;
            if sibling < level.len() {
                path.push(level[sibling]);
            }
            i /= 2;
        }
        path
    }
}

/// The audit paths of a few leaves, gathered while every leaf hash of the tree streams
/// past once in index order: memory is the paths plus one pending node a level, not the
/// tree ([`Tree`] keeps 64 bytes a leaf). The same paths as [`Tree::inclusion_proof`]:
/// level `l` has `ceil(size / 2^l)` nodes, a node without a right sibling is promoted
/// unchanged, and a leaf's path holds its ancestors' siblings that exist, bottom up.
pub(crate) struct PathCollector {
    size: u64,
    pushed: u64,
    /// Each wanted node (level, index) and the (path, slot) pairs it fills.
    wanted: std::collections::HashMap<(u32, u64), Vec<(usize, usize)>>,
    paths: Vec<Vec<Hash>>,
    /// A left child waiting for its right sibling, by level.
    pending: Vec<Option<Hash>>,
}

impl PathCollector {
    /// Collects the paths of `leaves` (indices below `size`) in a tree of `size` leaves.
    pub fn new(size: u64, leaves: &[u64]) -> PathCollector {
        let mut wanted: std::collections::HashMap<_, Vec<_>> = Default::default();
        let mut paths = Vec::with_capacity(leaves.len());
        for (n, &leaf) in leaves.iter().enumerate() {
            debug_assert!(leaf < size, "leaf {leaf} of a tree of {size}");
            let mut slots = 0;
            let (mut i, mut level) = (leaf, 0u32);
            while level_len(size, level) > 1 {
                let sibling = i ^ 1;
                if sibling < level_len(size, level) {
                    wanted.entry((level, sibling)).or_default().push((n, slots));
                    slots += 1;
                }
                i /= 2;
                level += 1;
            }
            paths.push(vec![[0u8; 32]; slots]);
        }
        PathCollector {
            size,
            pushed: 0,
            wanted,
            paths,
            pending: Vec::new(),
        }
    }

    /// Takes the next leaf hash, in index order.
    pub fn push(&mut self, leaf: Hash) {
        let (mut level, mut index, mut hash) = (0u32, self.pushed, leaf);
        self.pushed += 1;
        loop {
            if let Some(fills) = self.wanted.get(&(level, index)) {
                for &(path, slot) in fills {
                    self.paths[path][slot] = hash;
                }
            }
            let len = level_len(self.size, level);
            if len <= 1 {
                return;
            }
            if self.pending.len() <= level as usize {
                self.pending.resize(level as usize + 1, None);
            }
            if index % 2 == 1 {
                let left = self.pending[level as usize]
                    .take()
                    .expect("a right child follows its left sibling");
                hash = node_hash(&left, &hash);
            } else if index + 1 < len {
                self.pending[level as usize] = Some(hash);
                return;
            }
            level += 1;
            index /= 2;
        }
    }

    /// The paths, in the order the leaves were given; `None` unless exactly `size`
    /// leaves were pushed.
    pub fn finish(self) -> Option<Vec<Vec<Hash>>> {
        (self.pushed == self.size).then_some(self.paths)
    }
}

/// Nodes at `level` of a tree of `size` leaves.
fn level_len(size: u64, level: u32) -> u64 {
    if level >= 64 {
        return u64::from(size > 0);
    }
    size.div_ceil(1u64 << level)
}

/// RFC 9162 §2.1.3.2: whether `path` proves leaf `index` (hash `leaf`) in the tree of
/// `size` leaves with root `root`.
pub(crate) fn verify_inclusion(
    leaf: &Hash,
    index: u64,
    size: u64,
    path: &[Hash],
    root: &Hash,
) -> bool {
    if index >= size {
        return false;
    }
    let (mut fnode, mut snode) = (index, size - 1);
    let mut r = *leaf;
    for p in path {
        if snode == 0 {
            return false;
        }
        if fnode & 1 == 1 || fnode == snode {
            r = node_hash(p, &r);
            if fnode & 1 == 0 {
                while fnode & 1 == 0 && fnode != 0 {
                    fnode >>= 1;
                    snode >>= 1;
                }
            }
        } else {
            r = node_hash(&r, p);
        }
        fnode >>= 1;
        snode >>= 1;
    }
    snode == 0 && r == *root
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 9162's recursive definition, for comparison.
    fn mth(leaves: &[Hash]) -> Hash {
        match leaves.len() {
            0 => empty_root(),
            1 => leaves[0],
            n => {
                let k = n.next_power_of_two() / 2;
                node_hash(&mth(&leaves[..k]), &mth(&leaves[k..]))
            }
        }
    }

    fn leaves(n: usize) -> Vec<Hash> {
        (0..n).map(|i| leaf_hash(&i.to_be_bytes())).collect()
    }

    #[test]
    fn the_frontier_and_the_tree_agree_with_the_rfc_definition() {
        for n in 0..40 {
            let l = leaves(n);
            let mut f = Frontier::default();
            for h in &l {
                f.push(*h);
            }
            assert_eq!(f.root(), mth(&l), "frontier, n = {n}");
            assert_eq!(Tree::new(l.clone()).root(), mth(&l), "tree, n = {n}");
            let again = Frontier::from_hex(f.size(), &f.to_hex()).unwrap();
            assert_eq!(again, f);
        }
    }

    #[test]
    fn the_frontier_notes_each_block_it_completes_once() {
        for height in [0, 1, 2, 3] {
            let block = 1usize << height;
            let l = leaves(40);
            let mut f = Frontier::default();
            let noted: Vec<(u64, Hash)> =
                l.iter().filter_map(|h| f.push_noting(*h, height)).collect();
            let expected: Vec<(u64, Hash)> = l
                .chunks_exact(block)
                .enumerate()
                .map(|(i, chunk)| (i as u64, mth(chunk)))
                .collect();
            assert_eq!(noted, expected, "height {height}");
            assert_eq!(f.root(), mth(&l), "noting changes nothing else");
        }
    }

    #[test]
    fn streamed_paths_are_the_trees_paths() {
        for n in 1..70u64 {
            let l = leaves(n as usize);
            let tree = Tree::new(l.clone());
            // Every leaf at once, one leaf, and a repeated leaf.
            let sets: Vec<Vec<u64>> = vec![(0..n).collect(), vec![n - 1], vec![n / 2, n / 2]];
            for set in sets {
                let mut c = PathCollector::new(n, &set);
                for h in &l {
                    c.push(*h);
                }
                let paths = c.finish().expect("every leaf pushed");
                for (leaf, path) in set.iter().zip(&paths) {
                    assert_eq!(*path, tree.inclusion_proof(*leaf), "n {n} leaf {leaf}");
                }
            }
        }
        let mut short = PathCollector::new(4, &[1]);
        short.push(leaf_hash(b"only one"));
        assert!(
            short.finish().is_none(),
            "a tree with leaves missing has no paths"
        );
    }

    #[test]
    fn every_leaf_has_a_proof_and_no_other_leaf_fits_it() {
        for n in 1..34u64 {
            let l = leaves(n as usize);
            let tree = Tree::new(l.clone());
            let root = tree.root();
            for i in 0..n {
                let path = tree.inclusion_proof(i);
                assert!(
                    verify_inclusion(&l[i as usize], i, n, &path, &root),
                    "n {n} i {i}"
                );
                let other = leaf_hash(b"other");
                assert!(!verify_inclusion(&other, i, n, &path, &root));
                if n > 1 {
                    assert!(!verify_inclusion(
                        &l[i as usize],
                        (i + 1) % n,
                        n,
                        &path,
                        &root
                    ));
                }
            }
        }
    }
}
