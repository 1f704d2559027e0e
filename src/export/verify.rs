//! Chain verification over a stream of rows sorted by (key, seq), in constant memory:
//! the same checks run over the database and over an export file.
//!
//! Per row: its `hash` must be what its content and `prev_hash` hash to (an edited
//! row fails here), and its key must derive from its intent (edited context fails). Per key: seq runs 1, 2, 3 … and each `prev_hash` is the hash of
//! the row before (a deleted, inserted or moved row fails here); the first row has
//! the genesis `prev_hash`. In the database the last row must also be the head the
//! record remembers (`log_seq`, `log_hash`), so a deleted or added last row fails.
//! An export filtered with `since` may start a key's chain after seq 1; that alone
//! is not a break (the manifest says the export was filtered).

use super::port::ExportRow;
pub use super::problem::{Break, Finding};
pub use crate::evidence::{Anchor, Authenticity};
use crate::guard::binding::{StateBinding, fingerprint_matches, value_sha256};
use crate::guard::{ChainFields, Detail, GENESIS_HASH, chain_hash, chain_hash_is};
use std::collections::HashMap;

/// What a verification found. Intact when `breaks` is empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub rows: u64,
    pub keys: u64,
    pub broken_keys: u64,
    /// Keys whose chain starts after seq 1 in a `since`-filtered export: checked from
    /// their first row in the file.
    pub partial_keys: u64,
    /// Keys whose head row predates state binding: their record's status, result …
    /// are not covered by the chain (reported, not a break).
    pub unbound_keys: u64,
    /// Keys whose head is covered by a signed checkpoint and was found intact.
    pub anchored_keys: u64,
    /// Rows that no signed checkpoint covers: a key's rows after the row its newest
    /// leaf records, and every row of a key no checkpoint holds (written since the
    /// newest checkpoint). Whoever can write the rows can rewrite these unseen.
    pub unsigned_rows: u64,
    /// Keys with at least one such row.
    pub unsigned_keys: u64,
    /// What a trusted key established about the checkpoints (database) or the
    /// file's checkpoint.
    pub checkpoint_signature: Authenticity,
    /// Files: what a trusted key established about the manifest's own signature,
    /// which makes its counts and digest (what the file claims to hold) the
    /// signer's.
    pub manifest_signature: Authenticity,
    /// Facts about the evidence that are not breaks (checkpoints read, signatures
    /// not checked for want of a public key, …).
    pub notes: Vec<String>,
    /// The first breaks, in stream order (at most [`MAX_BREAKS`]).
    pub breaks: Vec<Break>,
}

pub(crate) const MAX_BREAKS: usize = 20;

impl Report {
    pub fn is_intact(&self) -> bool {
        self.breaks.is_empty()
    }

    pub fn first_break(&self) -> Option<&Break> {
        self.breaks.first()
    }
}

/// Where a key's chain ends according to its record (`log_seq`, `log_hash`): the
/// anchor that makes a deleted or appended last row visible in the database.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ChainHead {
    pub seq: i64,
    pub hash: String,
}

struct KeyProgress {
    key: String,
    last_seq: i64,
    last_hash: String,
    broken: bool,
    head: Option<ChainHead>,
    last_id: i64,
    last_line: Option<u64>,
    /// Starts after seq 1.
    late: bool,
    anchor: Option<Anchor>,
    /// The intent fields of the last row whose key was derived and matched: a row
    /// with the same fields derives the same key, so it is not derived again (in
    /// the database every row of a key repeats its record's fields).
    derived: Option<[String; 5]>,
    /// Rows past what a signed checkpoint covers (see [`Report::unsigned_rows`]).
    unsigned: u64,
}

impl KeyProgress {
    /// Counts the row at `seq` if no signed checkpoint covers it: a checkpoint covers
    /// its key's chain up to the row its leaf records (the rows before it are bound by
    /// their hashes), and nothing of a key whose newest leaf is a tombstone.
    fn count_signed(&mut self, seq: i64) {
        let covered = self
            .anchor
            .as_ref()
            .is_some_and(|a| !a.pruned && seq <= a.seq);
        if !covered {
            self.unsigned += 1;
        }
    }
}

/// Feed rows with [`ChainCheck::push`], then [`ChainCheck::finish`].
#[derive(Default)]
pub struct ChainCheck {
    current: Option<KeyProgress>,
    report: Report,
    ordinal: u64,
    /// A chain starting after seq 1: a break unless the export was filtered by
    /// `since`, which for a file is known only from the manifest at its end.
    first_late_start: Option<Break>,
    /// Keys that start late and have no other break.
    late_starts: u64,
    /// Checkpointed heads by key, consumed as keys arrive.
    anchors: HashMap<String, Anchor>,
    /// Rows come from the database, where each carries its record's current head
    /// ([`ChainCheck::against_heads`]); a file's rows carry the head at export time,
    /// which later rows may have passed, so a file is not checked against it.
    heads: bool,
}

impl ChainCheck {
    pub fn new() -> Self {
        Self::default()
    }

    /// Checks each key's chain against where a signed checkpoint last saw it.
    pub(crate) fn with_anchors(anchors: HashMap<String, Anchor>) -> Self {
        ChainCheck {
            anchors,
            ..Self::default()
        }
    }

    /// Checks each key's last row against its record's head (`log_seq`, `log_hash`),
    /// so a deleted or added last row is found: for rows read from the database.
    pub(crate) fn against_heads(mut self) -> Self {
        self.heads = true;
        self
    }

    /// The anchored keys that never appeared in the stream (gone, or not exported).
    pub(crate) fn take_unseen_anchors(&mut self) -> Vec<(String, Anchor)> {
        let mut left: Vec<_> = self.anchors.drain().collect();
        left.sort_by(|a, b| a.0.cmp(&b.0));
        left
    }

    /// A finding about one key outside the row stream (e.g. a key gone).
    pub(crate) fn key_problem(&mut self, key: &str, seq: Option<i64>, problem: Finding) {
        self.ordinal += 1;
        self.report.broken_keys += 1;
        let b = Break {
            key: Some(key.to_string()),
            seq,
            attempt_id: None,
            line: None,
            problem,
            ordinal: self.ordinal,
        };
        self.add(b);
    }

    /// A fact worth printing that is not a break.
    pub fn note(&mut self, note: String) {
        self.report.notes.push(note);
    }

    /// What a trusted key established about the checkpoint(s) and the manifest.
    pub fn signatures(&mut self, checkpoint: Authenticity, manifest: Authenticity) {
        self.report.checkpoint_signature = checkpoint;
        self.report.manifest_signature = manifest;
    }

    /// Checks the next row; `line` is its line in a file.
    pub fn push(&mut self, row: &ExportRow, line: Option<u64>) {
        self.push_detail(row, Detail::Value(&row.detail), line);
    }

    /// [`ChainCheck::push`] with the row's detail given apart (`row.detail` is not
    /// read): the database's rows bring it as JSON text, parsed only on a head row.
    pub(crate) fn push_detail(&mut self, row: &ExportRow, detail: Detail<'_>, line: Option<u64>) {
        let new_key = self.current.as_ref().is_none_or(|c| c.key != row.key);
        // The key before ends first, so its findings number before this row's: the
        // order of the findings depends only on the rows, which lets
        // [`ChainCheck::absorb`] join parts checked apart into the same report.
        let previous = if new_key { self.current.take() } else { None };
        if let Some(prev) = &previous {
            self.end_key(prev);
        }
        self.ordinal += 1;
        self.report.rows += 1;
        if new_key {
            self.report.keys += 1;
            let mut state = KeyProgress {
                key: row.key.clone(),
                last_seq: row.seq,
                last_hash: row.hash.clone(),
                broken: false,
                head: self.heads.then(|| ChainHead {
                    seq: row.log_seq,
                    hash: row.log_hash.clone(),
                }),
                last_id: row.attempt_id,
                last_line: line,
                late: false,
                anchor: self.anchors.remove(&row.key),
                derived: None,
                unsigned: 0,
            };
            state.count_signed(row.seq);
            if let Some(prev) = previous.filter(|p| p.key > row.key) {
                self.fail(
                    &mut state,
                    row,
                    line,
                    Finding::KeyOutOfOrder { previous: prev.key },
                );
            } else if row.seq == 1 {
                if row.prev_hash != GENESIS_HASH {
                    let problem = Finding::BadGenesis {
                        prev_hash: row.prev_hash.clone(),
                    };
                    self.fail(&mut state, row, line, problem);
                }
            } else if row.seq > 1 {
                state.late = true;
                if self.first_late_start.is_none() {
                    self.first_late_start =
                        Some(self.at(row, line, Finding::MissingStart { found: row.seq }));
                }
            } else {
                self.fail(
                    &mut state,
                    row,
                    line,
                    Finding::SeqNotIncreasing {
                        previous: 0,
                        found: row.seq,
                    },
                );
            }
            self.check_hash(&mut state, row, detail, line);
            self.check_anchor(&mut state, row, line);
            self.check_state(&mut state, row, detail, line);
            self.current = Some(state);
            return;
        }
        let mut state = self.current.take().expect("a current key");
        state.count_signed(row.seq);
        if !state.broken {
            if row.seq <= state.last_seq {
                let problem = Finding::SeqNotIncreasing {
                    previous: state.last_seq,
                    found: row.seq,
                };
                self.fail(&mut state, row, line, problem);
            } else if row.seq != state.last_seq + 1 {
                let problem = Finding::SeqGap {
                    expected: state.last_seq + 1,
                    found: row.seq,
                };
                self.fail(&mut state, row, line, problem);
            } else if row.prev_hash != state.last_hash {
                let problem = Finding::BrokenLink {
                    prev_hash: row.prev_hash.clone(),
                    expected: state.last_hash.clone(),
                };
                self.fail(&mut state, row, line, problem);
            } else {
                self.check_hash(&mut state, row, detail, line);
                self.check_anchor(&mut state, row, line);
                self.check_state(&mut state, row, detail, line);
            }
        }
        state.last_seq = row.seq;
        // Reuses the allocation: hashes all have one length.
        state.last_hash.clone_from(&row.hash);
        state.last_id = row.attempt_id;
        state.last_line = line;
        self.current = Some(state);
    }

    /// Appends `part`, the check of rows that come after all of this check's rows
    /// (the next key range): the report is what one check over both would give, in
    /// the same order. `part` must have been made the same way as `self`.
    pub(crate) fn absorb(&mut self, mut part: ChainCheck) {
        if part.report.rows > 0
            && let Some(last) = self.current.take()
        {
            self.end_key(&last);
        }
        let offset = self.ordinal;
        self.ordinal += part.ordinal;
        let r = &mut self.report;
        r.rows += part.report.rows;
        r.keys += part.report.keys;
        r.broken_keys += part.report.broken_keys;
        r.unbound_keys += part.report.unbound_keys;
        r.anchored_keys += part.report.anchored_keys;
        r.unsigned_rows += part.report.unsigned_rows;
        r.unsigned_keys += part.report.unsigned_keys;
        r.notes.append(&mut part.report.notes);
        for mut b in part.report.breaks {
            b.ordinal += offset;
            self.add(b);
        }
        if self.first_late_start.is_none() {
            self.first_late_start = part.first_late_start.map(|mut b| {
                b.ordinal += offset;
                b
            });
        }
        self.late_starts += part.late_starts;
        self.anchors.extend(part.anchors);
        if part.current.is_some() {
            self.current = part.current;
        }
    }

    /// A record whose attempts are all gone (database only).
    pub(crate) fn record_without_attempts(&mut self, key: &str) {
        self.anchors.remove(key);
        self.ordinal += 1;
        self.report.keys += 1;
        self.report.broken_keys += 1;
        let b = Break {
            key: Some(key.to_string()),
            seq: None,
            attempt_id: None,
            line: None,
            problem: Finding::NoAttempts,
            ordinal: self.ordinal,
        };
        self.add(b);
    }

    /// A finding about the file rather than a row (unreadable line, manifest).
    pub(crate) fn file_problem(&mut self, line: Option<u64>, problem: Finding) {
        self.ordinal += 1;
        let b = Break {
            key: None,
            seq: None,
            attempt_id: None,
            line,
            problem,
            ordinal: self.ordinal,
        };
        self.add(b);
    }

    /// Ends the stream. `since_filtered`: whether the rows were selected with a
    /// `since` filter, so that chains may legitimately start after seq 1.
    pub fn finish(mut self, since_filtered: bool) -> Report {
        if let Some(state) = self.current.take() {
            self.end_key(&state);
        }
        if since_filtered {
            self.report.partial_keys = self.late_starts;
        } else if let Some(late) = self.first_late_start.take() {
            self.report.broken_keys += self.late_starts;
            self.add(late);
        }
        self.report.breaks.sort_by_key(|b| b.ordinal);
        self.report.breaks.truncate(MAX_BREAKS);
        self.report
    }

    fn end_key(&mut self, state: &KeyProgress) {
        if state.unsigned > 0 {
            self.report.unsigned_rows += state.unsigned;
            self.report.unsigned_keys += 1;
        }
        if state.broken {
            return;
        }
        if state.late {
            self.late_starts += 1;
        }
        if let Some(anchor) = &state.anchor
            && !anchor.pruned
        {
            if state.last_seq < anchor.seq {
                let problem = Finding::ShorterThanCheckpoint {
                    checkpoint: anchor.checkpoint,
                    seq: anchor.seq,
                    last_seq: state.last_seq,
                };
                self.fail_at_end(state, problem);
                return;
            }
            self.report.anchored_keys += 1;
        }
        if let Some(head) = &state.head
            && (head.seq != state.last_seq || head.hash != state.last_hash)
        {
            let problem = Finding::HeadMismatch {
                head_seq: head.seq,
                head_hash: head.hash.clone(),
                last_seq: state.last_seq,
                last_hash: state.last_hash.clone(),
            };
            self.fail_at_end(state, problem);
        }
    }

    /// A break found when a key's rows ended, placed at its last row.
    fn fail_at_end(&mut self, state: &KeyProgress, problem: Finding) {
        self.ordinal += 1;
        self.report.broken_keys += 1;
        let b = Break {
            key: Some(state.key.clone()),
            seq: Some(state.last_seq),
            attempt_id: Some(state.last_id),
            line: state.last_line,
            problem,
            ordinal: self.ordinal,
        };
        self.add(b);
    }

    /// The row's own checks: its hash, and its key against its intent.
    fn check_hash(
        &mut self,
        state: &mut KeyProgress,
        row: &ExportRow,
        detail: Detail<'_>,
        line: Option<u64>,
    ) {
        if state.broken {
            return;
        }
        let intent = [
            &row.intent.tenant,
            &row.intent.tool,
            &row.intent.workflow_id,
            &row.intent.step_id,
            &row.intent.intent_id,
        ];
        let known = state
            .derived
            .as_ref()
            .is_some_and(|d| d.iter().eq(intent.iter().copied()));
        if !known {
            let derived = row.derived_key();
            if derived != row.key {
                self.fail(state, row, line, Finding::ContextMismatch { derived });
                return;
            }
            state.derived = Some(intent.map(String::clone));
        }
        let fields = ChainFields {
            detail,
            ..row.chain_fields()
        };
        if !chain_hash_is(&row.hash, &row.prev_hash, fields) {
            let problem = Finding::HashMismatch {
                stored: row.hash.clone(),
                computed: chain_hash(&row.prev_hash, fields),
            };
            self.fail(state, row, line, problem);
        }
    }

    /// The row at the checkpointed seq must have the checkpointed hash.
    fn check_anchor(&mut self, state: &mut KeyProgress, row: &ExportRow, line: Option<u64>) {
        let Some(anchor) = &state.anchor else { return };
        if state.broken || anchor.pruned || row.seq != anchor.seq || row.hash == anchor.hash {
            return;
        }
        let problem = Finding::CheckpointMismatch {
            checkpoint: anchor.checkpoint,
            expected: anchor.hash.clone(),
            found: row.hash.clone(),
        };
        self.fail(state, row, line, problem);
    }

    /// On the record's head row: the record's state must be what the row bound, and
    /// the fingerprint the hash of the stored arguments.
    fn check_state(
        &mut self,
        state: &mut KeyProgress,
        row: &ExportRow,
        detail: Detail<'_>,
        line: Option<u64>,
    ) {
        if state.broken || !row.is_head() {
            return;
        }
        if !fingerprint_matches(&row.fingerprint, &row.business_args) {
            let problem = Finding::FingerprintMismatch {
                fingerprint: row.fingerprint.clone(),
                computed: value_sha256(&row.business_args),
            };
            self.fail(state, row, line, problem);
            return;
        }
        let parsed;
        let detail = match detail {
            Detail::Value(value) => value,
            Detail::Json(text) => {
                // Text no value holds hashed as a string (`chain_hash`), so its row
                // failed already; `null` binds nothing.
                parsed = serde_json::from_str(text).unwrap_or(serde_json::Value::Null);
                &parsed
            }
        };
        match StateBinding::from_detail(detail) {
            None => self.report.unbound_keys += 1,
            Some(Err(why)) => self.fail(state, row, line, Finding::BadState(why)),
            Some(Ok(binding)) => {
                let found = binding.mismatches(row.record_state());
                if !found.is_empty() {
                    let columns = found
                        .into_iter()
                        .map(|m| (m.column.to_string(), short(&m.bound), short(&m.stored)))
                        .collect();
                    self.fail(state, row, line, Finding::StateMismatch(columns));
                }
            }
        }
    }

    fn at(&self, row: &ExportRow, line: Option<u64>, problem: Finding) -> Break {
        Break {
            key: Some(row.key.clone()),
            seq: Some(row.seq),
            attempt_id: Some(row.attempt_id),
            line,
            problem,
            ordinal: self.ordinal,
        }
    }

    /// Records a break and stops checking the rest of this key (one finding per key).
    fn fail(
        &mut self,
        state: &mut KeyProgress,
        row: &ExportRow,
        line: Option<u64>,
        problem: Finding,
    ) {
        state.broken = true;
        self.report.broken_keys += 1;
        let b = self.at(row, line, problem);
        self.add(b);
    }

    fn add(&mut self, b: Break) {
        // Keep the earliest: late starts are added at the end with their own ordinal.
        self.report.breaks.push(b);
        if self.report.breaks.len() > MAX_BREAKS * 2 {
            self.report.breaks.sort_by_key(|b| b.ordinal);
            self.report.breaks.truncate(MAX_BREAKS);
        }
    }
}

/// A digest shortened for a message (statuses and "none" stay whole).
fn short(text: &str) -> String {
    if text.len() == 64 {
        format!("{}…", &text[..12])
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::tests::sample;

    /// Three chained rows of one key.
    fn chain() -> Vec<ExportRow> {
        let mut rows = vec![sample()];
        for seq in 2..=3 {
            let mut next = rows.last().unwrap().clone();
            next.attempt_id += 1;
            next.seq = seq;
            next.prev_hash = next.hash.clone();
            next.actor = format!("worker-{seq}");
            next.hash = next.computed_hash();
            rows.push(next);
        }
        rows
    }

    fn check(rows: &[ExportRow], since: bool) -> Report {
        let mut c = ChainCheck::new();
        for (i, r) in rows.iter().enumerate() {
            c.push(r, Some(i as u64 + 1));
        }
        c.finish(since)
    }

    #[test]
    fn an_untouched_chain_is_intact() {
        let report = check(&chain(), false);
        assert!(report.is_intact(), "{:?}", report.breaks);
        assert_eq!((report.rows, report.keys), (3, 1));
    }

    #[test]
    fn an_edited_row_fails_its_own_hash() {
        let mut rows = chain();
        rows[1].actor = "mallory".into();
        let report = check(&rows, false);
        let b = report.first_break().unwrap();
        assert_eq!((b.seq, b.line), (Some(2), Some(2)));
        assert!(matches!(b.problem, Finding::HashMismatch { .. }), "{b}");
    }

    #[test]
    fn a_deleted_middle_row_is_a_gap() {
        let mut rows = chain();
        rows.remove(1);
        let b = check(&rows, true).breaks[0].clone();
        assert_eq!(
            b.problem,
            Finding::SeqGap {
                expected: 2,
                found: 3
            }
        );
    }

    #[test]
    fn swapped_rows_are_out_of_order() {
        let mut rows = chain();
        rows.swap(1, 2);
        let b = check(&rows, false).breaks[0].clone();
        assert_eq!(
            b.problem,
            Finding::SeqGap {
                expected: 2,
                found: 3
            }
        );
        let mut rows = chain();
        rows.swap(0, 1);
        let b = check(&rows, false).breaks[0].clone();
        assert!(
            matches!(b.problem, Finding::MissingStart { found: 2 }),
            "{b}"
        );
    }

    #[test]
    fn a_missing_start_is_a_break_only_without_since() {
        let rows = chain()[1..].to_vec();
        let filtered = check(&rows, true);
        assert!(filtered.is_intact());
        assert_eq!(filtered.partial_keys, 1);
        let b = check(&rows, false).breaks[0].clone();
        assert_eq!(b.problem, Finding::MissingStart { found: 2 });
    }

    #[test]
    fn the_record_head_catches_a_deleted_last_row() {
        let rows = chain();
        let mut c = ChainCheck::new().against_heads();
        for r in &rows[..2] {
            let mut r = r.clone();
            (r.log_seq, r.log_hash) = (3, rows[2].hash.clone());
            c.push(&r, None);
        }
        let b = c.finish(false).breaks[0].clone();
        assert!(
            matches!(
                b.problem,
                Finding::HeadMismatch {
                    head_seq: 3,
                    last_seq: 2,
                    ..
                }
            ),
            "{b}"
        );
    }

    #[test]
    fn keys_must_come_in_order() {
        let mut other = chain();
        let mut prev = GENESIS_HASH.to_string();
        for r in &mut other {
            r.intent.intent_id = "refund:order-B-2".into();
            r.key = r.derived_key();
            r.prev_hash = prev.clone();
            r.hash = r.computed_hash();
            prev = r.hash.clone();
        }
        let (low, high) = if other[0].key < chain()[0].key {
            (other, chain())
        } else {
            (chain(), other)
        };
        let mut rows = high.clone();
        rows.extend(low.clone());
        let b = check(&rows, false).breaks[0].clone();
        assert!(matches!(b.problem, Finding::KeyOutOfOrder { .. }), "{b}");
        let mut rows = low;
        rows.extend(high);
        assert!(check(&rows, false).is_intact());
    }

    #[test]
    fn a_head_written_before_state_binding_is_not_bound_and_not_broken() {
        let mut rows = chain();
        let last = rows.len() - 1;
        rows[last].log_seq = rows[last].seq;
        rows[last].log_hash = rows[last].hash.clone();
        let report = check(&rows, false);
        assert!(report.is_intact(), "{:?}", report.breaks);
        assert_eq!(report.unbound_keys, 1);
    }

    #[test]
    fn an_anchor_catches_a_shorter_chain_and_a_rewritten_row() {
        let rows = chain();
        let anchor = |seq: i64, hash: &str| Anchor {
            seq,
            hash: hash.to_string(),
            checkpoint: 7,
            pruned: false,
        };
        let run = |rows: &[ExportRow], a: Anchor| {
            let mut c = ChainCheck::with_anchors([(rows[0].key.clone(), a)].into());
            for r in rows {
                c.push(r, None);
            }
            c.finish(false)
        };
        let intact = run(&rows, anchor(2, &rows[1].hash));
        assert!(intact.is_intact());
        assert_eq!(intact.anchored_keys, 1);
        let shorter = run(&rows[..1], anchor(2, &rows[1].hash));
        assert!(matches!(
            shorter.breaks[0].problem,
            Finding::ShorterThanCheckpoint {
                checkpoint: 7,
                seq: 2,
                last_seq: 1
            }
        ));
        assert_eq!(
            (intact.unsigned_rows, intact.unsigned_keys),
            (1, 1),
            "seq 3 is after it"
        );
        let all = run(&rows, anchor(3, &rows[2].hash));
        assert_eq!((all.unsigned_rows, all.unsigned_keys), (0, 0));
        let none = check(&rows, false);
        assert_eq!(
            (none.unsigned_rows, none.unsigned_keys),
            (3, 1),
            "no checkpoint at all"
        );
        let rewritten = run(&rows, anchor(2, "f00"));
        assert!(matches!(
            rewritten.breaks[0].problem,
            Finding::CheckpointMismatch { .. }
        ));
    }

    /// The database's rows bring `detail` as JSON text: the same rows checked that way
    /// give the same report as with the value, intact or broken, head row included.
    #[test]
    fn a_detail_given_as_text_checks_as_its_value_does() {
        let with_head = |mut rows: Vec<ExportRow>, head_detail: Option<serde_json::Value>| {
            let last = rows.len() - 1;
            if let Some(detail) = head_detail {
                rows[last].detail = detail;
                rows[last].hash = rows[last].computed_hash();
            }
            let (seq, hash) = (rows[last].seq, rows[last].hash.clone());
            for r in &mut rows {
                (r.log_seq, r.log_hash) = (seq, hash.clone());
            }
            rows
        };
        let mut edited = chain();
        edited[1].detail["n"] = 4501.into();
        let cases = [
            with_head(chain(), None),
            with_head(chain(), Some(serde_json::json!({"state": 5, "x": 1.5}))),
            with_head(
                chain(),
                Some(serde_json::json!({"state": {"status": "DONE"}, "n": [1e21, -0.0]})),
            ),
            with_head(edited, None),
        ];
        for rows in cases {
            let mut by_value = ChainCheck::new().against_heads();
            let mut by_text = ChainCheck::new().against_heads();
            for r in &rows {
                by_value.push(r, None);
                let text = serde_json::to_string_pretty(&r.detail).unwrap();
                let blank = ExportRow {
                    detail: serde_json::Value::Null,
                    ..r.clone()
                };
                by_text.push_detail(&blank, Detail::Json(&text), None);
            }
            let (by_value, by_text) = (by_value.finish(false), by_text.finish(false));
            assert_eq!(by_value, by_text);
        }
    }

    #[test]
    fn edited_context_no_longer_derives_the_key() {
        let mut rows = chain();
        rows[2].intent.workflow_id = "run-other".into();
        let b = check(&rows, false).breaks[0].clone();
        assert_eq!(b.seq, Some(3));
        assert!(matches!(b.problem, Finding::ContextMismatch { .. }), "{b}");
    }
}
