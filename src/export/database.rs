//! Verifying the database in place: the signed checkpoints against the stored leaves
//! and the copies kept outside, then every key's chain against its record and
//! against where the checkpoints last saw it ([`ChainCheck`], as for files).

use super::port::ExportStore;
use super::ranges::{Split, check_ranges};
use super::verify::{Finding, Report};
use crate::evidence::{Authenticity, Checkpoint, LeafLog, TrustedKeys, check_sequence};
use crate::guard::StoreError;
use futures::StreamExt;

/// What the database verification is given beyond the database.
#[derive(Debug, Default, Clone)]
pub struct Outside {
    /// The public keys that check checkpoint signatures (several across a key
    /// rotation); none: signatures are reported as unchecked.
    pub trusted: TrustedKeys,
    /// Checkpoints kept outside the database (`--checkpoint-dir`).
    pub checkpoints: Option<Vec<Checkpoint>>,
}

/// Checks every key's chain in the database against its record's head and its
/// record's state, the signed checkpoints (signatures, order, their Merkle roots
/// over the stored leaves, the copies kept outside), and every key against where the
/// checkpoints last saw it, streaming the attempt rows.
pub async fn verify_database(store: &impl ExportStore) -> Result<Report, StoreError> {
    verify_database_with(store, &Outside::default()).await
}

pub async fn verify_database_with(
    store: &impl ExportStore,
    outside: &Outside,
) -> Result<Report, StoreError> {
    verify_database_split(store, outside, Split::for_store(store)).await
}

/// [`verify_database_with`], reading and checking the log in the parts `split` says.
/// The report is the same however the log is split.
pub async fn verify_database_split(
    store: &impl ExportStore,
    outside: &Outside,
    split: Split,
) -> Result<Report, StoreError> {
    let checkpoints = store.checkpoints().await?;
    let (mut problems, signature) = check_sequence(&checkpoints, &outside.trusted, 1);
    let mut notes = Vec::new();
    if let Some(files) = &outside.checkpoints {
        problems.extend(compare_outside(&checkpoints, files));
    }
    // The leaves, in index order: each checkpoint's root must be theirs.
    let covered = checkpoints.last().map_or(0, |c| c.body.tree_size);
    let mut log = LeafLog::default();
    let mut next = checkpoints.iter().peekable();
    while next.next_if(|c| c.body.tree_size == 0).is_some() {}
    let mut beyond = 0u64;
    let mut leaves = store.checkpoint_leaves();
    while let Some(item) = leaves.next().await {
        let (idx, leaf) = item?;
        if idx >= covered {
            beyond += 1;
            continue;
        }
        if let Err(why) = log.push(idx, leaf) {
            problems.push(why);
            break;
        }
        while let Some(c) = next.next_if(|c| c.body.tree_size == log.size()) {
            if c.body.root_hash != log.root_hex() {
                problems.push(format!(
                    "checkpoint {}: its root is not the root of the stored leaves: leaves were altered or deleted",
                    c.body.seq
                ));
            }
        }
    }
    drop(leaves);
    if let Some(c) = next.next() {
        problems.push(format!(
            "checkpoint {} covers {} leaves but only {} are stored: leaves were deleted",
            c.body.seq,
            c.body.tree_size,
            log.size()
        ));
    }
    if beyond > 0 {
        problems.push(format!(
            "{beyond} leaves lie beyond the newest checkpoint: they were added by hand, or a newer checkpoint was deleted"
        ));
    }
    let ends: Vec<(u64, u64)> = checkpoints
        .iter()
        .map(|c| (c.body.tree_size, c.body.seq))
        .collect();
    let anchors = log.anchors(|idx| {
        let i = ends.partition_point(|(size, _)| *size <= idx);
        ends.get(i).map_or(0, |(_, seq)| *seq)
    });
    match checkpoints.last() {
        None => notes
            .push("no signed checkpoints yet: deletions and rollbacks cannot be detected".into()),
        Some(c) => notes.push(format!(
            "{} signed checkpoints, the newest {} at {} covering {} keys; {}",
            checkpoints.len(),
            c.body.seq,
            crate::base::time::rfc3339(c.body.created_at),
            anchors.len(),
            match signature {
                Authenticity::Verified => "signatures verified with a trusted key",
                Authenticity::Failed => "signatures do NOT all verify (see above)",
                _ => "signatures not checked: no --public-key given, and anyone can sign with a key of their own",
            }
        )),
    }

    let mut check = check_ranges(store, anchors, split).await?;
    for key in store.records_without_attempts().await? {
        check.record_without_attempts(&key);
    }
    for (key, anchor) in check.take_unseen_anchors() {
        if anchor.pruned {
            continue;
        }
        match store.pruning_receipt(&key).await? {
            Some((seq, _)) if seq >= anchor.seq => {}
            _ => check.key_problem(
                &key,
                Some(anchor.seq),
                Finding::KeyGone {
                    checkpoint: anchor.checkpoint,
                    seq: anchor.seq,
                },
            ),
        }
    }
    for p in problems {
        check.file_problem(None, Finding::Checkpoint(p));
    }
    for n in notes {
        check.note(n);
    }
    check.signatures(signature, Authenticity::Unsigned);
    Ok(check.finish(false))
}

/// Each checkpoint kept outside must be in the database, unchanged.
fn compare_outside(db: &[Checkpoint], files: &[Checkpoint]) -> Vec<String> {
    let mut problems = Vec::new();
    for f in files {
        match db.iter().find(|c| c.body.seq == f.body.seq) {
            None => problems.push(format!(
                "checkpoint {} (kept outside) is not in the database: it was deleted",
                f.body.seq
            )),
            Some(c) if c != f => problems.push(format!(
                "checkpoint {} in the database differs from the copy kept outside: it was replaced",
                f.body.seq
            )),
            Some(_) => {}
        }
    }
    problems
}
