//! The key page's one read (`/keys/{key}`): the record, its timeline, the other keys
//! of its business ref and the suspected pairs it is in, all from one moment.
//!
//! Read one by one, a write landing between two reads (a retry answered, a takeover, a
//! resolve) showed a record from before it beside a timeline from after it: "DONE"
//! above a timeline still ending in "No clear answer", or a tally one step off the
//! rows. So every read here runs in ONE read-only transaction: on PostgreSQL
//! `REPEATABLE READ` (one snapshot for all its statements, where READ COMMITTED takes
//! one per statement); on SQLite a deferred transaction on a reader, which in WAL mode
//! reads one snapshot from its first statement to its end.

use super::browse::SAME_BUSINESS_REF;
use super::duplicates::PAIRS_OF_KEY;
use super::timeline::{NEWEST, PAGE};
use super::{AttemptPage, KeySummary, Store, StoreError, SuspectedPair, on_pool, sql};
use crate::guard::{Attempt, AttemptKind, IdempotencyKey, Record, Status};
use std::collections::BTreeMap;

const KINDS: &str =
    "SELECT kind, count(*) AS n FROM idempotency_attempts WHERE key = $1 GROUP BY kind";

const BEGIN_POSTGRES: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY";
const BEGIN_SQLITE: &str = "BEGIN";

/// Which part of a key's history to read.
#[derive(Debug, Clone, Copy)]
pub struct HistoryRead {
    /// The timeline from the attempt after this `seq` (0: from the first).
    pub after: i64,
    /// Attempts on one page of the timeline.
    pub page: u32,
    /// How many keys of the same business ref to read (this key among them).
    pub siblings: u32,
}

/// The attempts shown: one page, or, on a long timeline's first view, its two ends.
#[derive(Debug, Clone)]
pub enum Shown {
    Page(AttemptPage),
    /// The first and the newest half page, oldest first each; the middle is left out.
    Ends {
        first: Vec<Attempt>,
        newest: Vec<Attempt>,
    },
}

/// One key's history as it stood at one moment.
#[derive(Debug, Clone)]
pub struct KeyHistory {
    pub record: Record,
    /// How many attempts of each kind the whole timeline holds.
    pub kinds: BTreeMap<AttemptKind, i64>,
    pub shown: Shown,
    /// The newest page of attempts, oldest first, when the key is decided (DONE,
    /// FAILED) and `shown` may not hold what decided it; else empty.
    pub newest: Vec<Attempt>,
    /// Keys of the record's business ref, newest first, up to [`HistoryRead::siblings`].
    pub siblings: Vec<KeySummary>,
    /// The suspected pairs the key is in, either side, newest first.
    pub pairs: Vec<SuspectedPair>,
}

impl Store {
    /// `None` when no key `key` is recorded.
    pub async fn key_history(
        &self,
        key: &IdempotencyKey,
        read: HistoryRead,
    ) -> Result<Option<KeyHistory>, StoreError> {
        let begin = self.backend().pick(BEGIN_POSTGRES, BEGIN_SQLITE);
        on_pool!(self, pool => {
            let mut tx = crate::store::pools::begin(pool, Some(begin)).await?;
            let k = key.as_str();
            let record: Option<Record> = sqlx::query_as(sql::GET_RECORD)
                .bind(k)
                .fetch_optional(&mut *tx)
                .await?;
            let Some(record) = record else {
                return Ok(None);
            };
            let rows: Vec<(String, i64)> =
                sqlx::query_as(KINDS).bind(k).fetch_all(&mut *tx).await?;
            let kinds = rows
                .into_iter()
                .map(|(kind, n)| {
                    kind.parse::<AttemptKind>()
                        .map(|k| (k, n))
                        .map_err(|e| StoreError::Corrupt(format!("attempt kind {kind:?}: {e}")))
                })
                .collect::<Result<BTreeMap<_, _>, _>>()?;
            let total: i64 = kinds.values().sum();
            let newest = |limit: u32| {
                sqlx::query_as::<_, Attempt>(NEWEST)
                    .bind(k)
                    .bind(i64::from(limit))
            };
            let page = |after: i64, limit: u32| {
                sqlx::query_as::<_, Attempt>(PAGE)
                    .bind(k)
                    .bind(after)
                    .bind(i64::from(limit))
            };
            // A long timeline opens on its two ends: how it started and where it
            // stands now, with the middle a page at a time on demand.
            let whole = read.after == 0 && total <= i64::from(read.page);
            let shown = if read.after == 0 && !whole {
                let half = read.page / 2;
                let first = page(0, half).fetch_all(&mut *tx).await?;
                let mut newest = newest(half).fetch_all(&mut *tx).await?;
                newest.reverse();
                Shown::Ends { first, newest }
            } else {
                let mut attempts = page(read.after, read.page + 1).fetch_all(&mut *tx).await?;
                let more = attempts.len() > read.page as usize;
                attempts.truncate(read.page as usize);
                Shown::Page(AttemptPage { attempts, more })
            };
            let decided = matches!(record.status, Status::Done | Status::Failed);
            let newest = if decided && !whole {
                let mut rows = newest(read.page).fetch_all(&mut *tx).await?;
                rows.reverse();
                rows
            } else {
                Vec::new()
            };
            let siblings = match &record.business_ref {
                Some(b) => {
                    sqlx::query_as(SAME_BUSINESS_REF)
                        .bind(b)
                        .bind(i64::from(read.siblings))
                        .fetch_all(&mut *tx)
                        .await?
                }
                None => Vec::new(),
            };
            let pairs = sqlx::query_as(PAIRS_OF_KEY).bind(k).fetch_all(&mut *tx).await?;
            tx.rollback().await?;
            Ok(Some(KeyHistory {
                record,
                kinds,
                shown,
                newest,
                siblings,
                pairs,
            }))
        })
    }
}
