//! The storage port: the operations the guard's steps need from a database, owned
//! here so that the guard never names the store above it. `crate::store::Store`
//! implements it for PostgreSQL and SQLite; [`super::Guard`] is generic over it, so
//! the calls are static (no `dyn`, no boxed futures on the hot path).
//!
//! The error type is the port's too: [`StoreError`] classifies every storage failure
//! the way the guard's callers must tell them apart (retry later, a standby, a lost
//! race…). The store produces it from sqlx's errors; nothing here knows sqlx.

use super::key::IdempotencyKey;
use super::record::{Attempt, AttemptDraft, Record};
use super::status::DuplicateVerdict;
use chrono::{DateTime, TimeDelta, Utc};
use std::future::Future;
use thiserror::Error;

/// What the storage layer reports. The guard and the web layer never see sqlx.
#[derive(Debug, Error)]
pub enum StoreError {
    #[error("not found")]
    NotFound,
    /// A write lost to a concurrent one (unique or fencing condition).
    #[error("conflict: {0}")]
    Conflict(String),
    /// The database cannot be reached now; retrying later may work.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// A write reached a read-only database: a PostgreSQL hot standby (SQLSTATE 25006,
    /// `read_only_sql_transaction`). Retrying here never helps; writes go to the primary.
    #[error("the database is a read-only standby: {0}")]
    ReadOnly(String),
    /// A stored value that this version cannot read (a status it does not know…).
    #[error("corrupt row: {0}")]
    Corrupt(String),
    #[error("database configuration: {0}")]
    Config(String),
    #[error("database error: {0}")]
    Other(String),
}

impl StoreError {
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }
}

/// What the claim found.
#[derive(Debug)]
pub enum Claim {
    /// This caller inserted the record and its `claimed` attempt; the record as
    /// written (its head included), for [`Storage::write_if_unchanged`].
    Created { record: Box<Record> },
    /// The key already existed; nothing was written.
    Exists,
    /// Another key holds the claim's natural key; nothing was written. The guard
    /// answers from that key.
    NaturalKeyHeld { key: IdempotencyKey },
}

/// What a claim checks besides its own key, inside its transaction.
#[derive(Debug, Clone, Copy)]
pub struct ClaimChecks<'a> {
    /// The natural key's hash ([`super::NaturalKey`]), if the tool names one.
    pub natural_key: Option<&'a str>,
    /// How far back to look for a suspected duplicate (same tenant, tool, business
    /// ref and fingerprint). Keys without a business ref are never probed.
    pub duplicate_window: TimeDelta,
}

/// A resolver's review of a suspected duplicate, as the pair row records it.
#[derive(Debug, Clone, PartialEq)]
pub struct PairReview {
    pub other_key: IdempotencyKey,
    pub verdict: DuplicateVerdict,
    pub reviewed_by: String,
    pub reviewed_at: DateTime<Utc>,
    pub reason: String,
}

/// The guard's storage. Every write is one transaction that seals its attempt rows
/// onto the key's hash chain ([`super::seal`]) and writes them with the record.
pub trait Storage: Clone + Send + Sync + 'static {
    /// Inserts the record that `build` makes (status IN_PROGRESS, its first fencing
    /// token) and its first attempt in one transaction, unless the key exists or
    /// another key holds its natural key. `build` runs once the transaction holds
    /// what it writes under, so the times it reads are not from before a wait (on
    /// PostgreSQL without a natural key the claim's write is one statement and `build`
    /// runs before it: that statement waits only for a concurrent claim of the same
    /// key, and then writes nothing). A
    /// claim matching an earlier key's business ref and fingerprint within the window
    /// is recorded as a suspected duplicate: on its `claimed` attempt
    /// (`suspected_duplicate_of`) and in `idempotency_suspected_duplicates`.
    fn claim(
        &self,
        build: impl FnOnce() -> (Record, AttemptDraft) + Send,
        checks: ClaimChecks<'_>,
    ) -> impl Future<Output = Result<Claim, StoreError>> + Send;

    /// Locks the record of `key`, lets `decide` change it and name the attempts that
    /// describe the change, then writes both and commits. `decide` is the guard's pure
    /// decision; it runs while the row is held, so nothing can change between what it
    /// read and what it writes (this is the compare-and-swap). A missing key is
    /// [`StoreError::NotFound`].
    fn with_locked<T: Send>(
        &self,
        key: &IdempotencyKey,
        decide: impl FnOnce(&mut Record) -> (Vec<AttemptDraft>, T) + Send,
    ) -> impl Future<Output = Result<T, StoreError>> + Send;

    /// The fenced write without the locked read, for a record this caller wrote
    /// itself (`expected`, e.g. from [`Claim::Created`]): `decide` runs on a copy of
    /// it, and its one attempt is written with the record only if the stored head
    /// (`log_seq`, `log_hash`) and token are still `expected`'s — every write of a
    /// record appends to its chain, so an unchanged head is an unchanged record.
    /// `Ok(None)`: something was written to the key since, it is gone, or the
    /// decision is not exactly one attempt; nothing was written, and the caller takes
    /// [`Storage::with_locked`]. A backend whose locked read costs no round trip
    /// (SQLite, in process) may always answer `None` without calling `decide`.
    fn write_if_unchanged<T: Send>(
        &self,
        expected: &Record,
        decide: impl FnOnce(&mut Record) -> (Vec<AttemptDraft>, T) + Send,
    ) -> impl Future<Output = Result<Option<T>, StoreError>> + Send;

    /// [`Storage::with_locked`] for a pair review: `decide` names the attempt row and
    /// the review, and the pair's state is written in the same transaction, only if
    /// the pair is still open with the other key the resolver saw (otherwise
    /// [`StoreError::Conflict`] and nothing is written).
    fn review_duplicate(
        &self,
        key: &IdempotencyKey,
        decide: impl FnOnce(&mut Record) -> (AttemptDraft, PairReview) + Send,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The record of `key`, if there is one.
    fn record(
        &self,
        key: &IdempotencyKey,
    ) -> impl Future<Output = Result<Option<Record>, StoreError>> + Send;

    /// The newest attempt of `key` (the highest `seq`), if any: one row, however long
    /// the key's history.
    fn newest_attempt(
        &self,
        key: &IdempotencyKey,
    ) -> impl Future<Output = Result<Option<Attempt>, StoreError>> + Send;
}
