//! The records this guard claimed and has not settled yet, as it wrote them: with
//! one, a settle is a single conditional write ([`Storage::write_if_unchanged`])
//! instead of a locked read and a write.
//!
//! Only an optimisation: an entry that is stale (a takeover, a resolution, a prune
//! since), evicted, or held by another replica costs the locked path and nothing
//! else, because the write checks the stored head before it applies.
//!
//! [`Storage::write_if_unchanged`]: super::Storage::write_if_unchanged

use super::key::{FencingToken, IdempotencyKey};
use super::record::Record;
use super::status::Status;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Enough for every call in flight on one busy process; beyond it the map starts
/// over (calls that never settle, e.g. a worker that died, must not grow it forever).
const CAPACITY: usize = 4096;

#[derive(Debug, Clone, Default)]
pub(super) struct Heads(Arc<Mutex<HashMap<IdempotencyKey, Record>>>);

impl Heads {
    /// `record` as just written by a claim.
    pub(super) fn remember(&self, record: Record) {
        let mut heads = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if heads.len() >= CAPACITY {
            heads.clear();
        }
        heads.insert(record.key.clone(), record);
    }

    /// The remembered record of `key` if it was written under `token` and is still
    /// in flight; forgotten either way (a settle is the last write under a token).
    pub(super) fn take(&self, key: &IdempotencyKey, token: FencingToken) -> Option<Record> {
        let record = self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key)?;
        (record.fencing_token == token && record.status == Status::InProgress).then_some(record)
    }
}
