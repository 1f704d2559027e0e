//! `verify` over the database in key ranges, several at once: the chains of two keys
//! are independent, so each range is read on a connection of its own and checked on
//! a thread of its own, and the parts are joined in key order into the report one
//! pass would give ([`ChainCheck::absorb`]). Hashing every row is most of the
//! client's work (docs/PERFORMANCE.md, "Making verify faster"); one range at a time
//! leaves it on one core while the others wait.

use super::port::{ExportStore, KeyRange};
use super::verify::ChainCheck;
use crate::evidence::Anchor;
use crate::guard::{Detail, StoreError};
use futures::{StreamExt, TryStreamExt};
use std::collections::HashMap;

/// How the log is split: `ranges` key ranges, `at_once` of them read and checked at a
/// time. Memory grows with `at_once` (a few batches of rows each), not with rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    pub ranges: usize,
    pub at_once: usize,
}

impl Split {
    /// One pass over the whole log, as `verify` did before ranges.
    pub const ONE_PASS: Split = Split {
        ranges: 1,
        at_once: 1,
    };

    /// A range at a time per core, as many as the store's pool lets read at once.
    /// Four ranges per reader, so that one range richer in rows than the others does
    /// not leave the other cores idle at the end.
    pub fn for_store(store: &impl ExportStore) -> Split {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let at_once = cores.min(store.read_connections()).max(1);
        if at_once == 1 {
            return Split::ONE_PASS;
        }
        Split {
            ranges: at_once * 4,
            at_once,
        }
    }
}

/// Checks every key's chain, `split.at_once` ranges at a time, against `anchors` and
/// each record's head; returns the joined check, ready for the findings outside the
/// rows (records without attempts, keys gone).
pub(crate) async fn check_ranges(
    store: &impl ExportStore,
    anchors: HashMap<String, Anchor>,
    split: Split,
) -> Result<ChainCheck, StoreError> {
    // Each anchor is moved once, into its range's map: partitioning the rest again
    // for every range hashed each key about `ranges / 2` times (a key a checkpoint
    // covers: at 1 M keys and 8 ranges, 4.5 M inserts for 1 M anchors).
    let mut parts: Vec<(KeyRange, HashMap<String, Anchor>)> = KeyRange::split(split.ranges)
        .into_iter()
        .map(|range| (range, HashMap::new()))
        .collect();
    for (key, anchor) in anchors {
        if let Some((_, mine)) = parts.iter_mut().find(|(range, _)| range.contains(&key)) {
            mine.insert(key, anchor);
        }
    }
    let mut checked: Vec<(usize, ChainCheck)> =
        futures::stream::iter(parts.into_iter().enumerate())
            .map(|(i, (range, anchors))| async move {
                check_range(store, range, anchors).await.map(|c| (i, c))
            })
            .buffer_unordered(split.at_once.max(1))
            .try_collect()
            .await?;
    checked.sort_by_key(|(i, _)| *i);
    let mut all = ChainCheck::new().against_heads();
    for (_, part) in checked {
        all.absorb(part);
    }
    Ok(all)
}

/// One range: read by the store's reader task, checked on a blocking thread so that
/// hashing never holds up the runtime's workers (which run the other ranges' reads).
async fn check_range(
    store: &impl ExportStore,
    range: KeyRange,
    anchors: HashMap<String, Anchor>,
) -> Result<ChainCheck, StoreError> {
    let mut batches = store.verify_rows(range);
    let checking = tokio::task::spawn_blocking(move || {
        let mut check = ChainCheck::with_anchors(anchors).against_heads();
        while let Some(batch) = batches.next_blocking() {
            let batch = batch?;
            for read in &batch {
                check.push_detail(&read.row, Detail::Json(&read.detail), None);
            }
            batches.give_back(batch);
        }
        Ok(check)
    });
    match checking.await {
        Ok(result) => result,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}
