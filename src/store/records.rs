//! The guard's transactions: claim a key, or lock its record and apply a decision.

use super::{Backend, SqlitePools, Store, StoreError, WritePool, on_pool, sql};
use crate::guard::{
    Attempt, AttemptDraft, Claim, ClaimChecks, IdempotencyKey, PairReview, Record, Storage, seal,
};
use sqlx::types::Json;
use std::future::Future;

/// Binds a record's columns in the order of [`sql::CLAIM`].
macro_rules! bind_claim {
    ($q:expr, $r:expr) => {
        $q.bind($r.key.as_str())
            .bind(&$r.intent.tenant)
            .bind(&$r.intent.tool)
            .bind(&$r.intent.workflow_id)
            .bind(&$r.intent.step_id)
            .bind(&$r.intent.intent_id)
            .bind(&$r.business_ref)
            .bind(&$r.fingerprint)
            .bind(Json(&$r.business_args))
            .bind($r.status.as_str())
            .bind($r.fencing_token.0)
            .bind($r.lease_until)
            .bind($r.attempt_count)
            .bind($r.result.as_ref().map(Json))
            .bind(&$r.error)
            .bind($r.provider_retention_until)
            .bind($r.resend_safe_until)
            .bind($r.release_approved)
            .bind($r.created_at)
            .bind($r.updated_at)
            .bind($r.log_seq)
            .bind(&$r.log_hash)
    };
}

/// Binds the suspected-duplicate probe's `$1`–`$6` ([`sql::DUPLICATE_PROBE`]) for the
/// claim of `record`.
macro_rules! bind_probe {
    ($q:expr, $record:expr, $business_ref:expr, $checks:expr) => {
        $q.bind(&$record.intent.tenant)
            .bind(&$record.intent.tool)
            .bind($business_ref)
            .bind(&$record.fingerprint)
            .bind($record.created_at - $checks.duplicate_window)
            .bind($record.key.as_str())
    };
}

/// Inserts one sealed attempt row.
macro_rules! insert_attempt {
    ($tx:expr, $a:expr) => {
        bind_attempt!(sqlx::query(sql::INSERT_ATTEMPT), $a)
            .execute(&mut *$tx)
            .await?
    };
}

/// Binds a record change in the order of [`sql::UPDATE_RECORD`] (`$1`–`$12`).
macro_rules! bind_update {
    ($q:expr, $next:expr, $current_token:expr) => {
        $q.bind($next.key.as_str())
            .bind($current_token.0)
            .bind($next.status.as_str())
            .bind($next.fencing_token.0)
            .bind($next.lease_until)
            .bind($next.attempt_count)
            .bind($next.result.as_ref().map(Json))
            .bind(&$next.error)
            .bind($next.release_approved)
            .bind($next.updated_at)
            .bind($next.log_seq)
            .bind(&$next.log_hash)
    };
}

/// Binds an attempt after the record's columns (`$13`–`$24` of
/// [`sql::UPDATE_RECORD_AND_APPEND_POSTGRES`]).
macro_rules! bind_attempt {
    ($q:expr, $a:expr) => {
        $q.bind($a.key.as_str())
            .bind(&$a.tenant)
            .bind(&$a.tool)
            .bind($a.seq)
            .bind($a.kind.as_str())
            .bind($a.fencing_token.0)
            .bind(&$a.actor)
            .bind(Json(&$a.detail))
            .bind($a.duration_ms)
            .bind($a.occurred_at)
            .bind(&$a.prev_hash)
            .bind(&$a.hash)
    };
}

impl Storage for Store {
    /// `build` runs once the transaction has begun (on SQLite: once BEGIN IMMEDIATE
    /// holds the write lock). Returning before the commit drops the transaction: it
    /// rolls back.
    #[tracing::instrument(skip_all, fields(key, tool))]
    async fn claim(
        &self,
        build: impl FnOnce() -> (Record, AttemptDraft) + Send,
        checks: ClaimChecks<'_>,
    ) -> Result<Claim, StoreError> {
        if let (Store::Postgres(pool), None) = (self, checks.natural_key) {
            return claim_in_one_statement(pool, build, checks).await;
        }
        if let (Store::Sqlite(pools), None) = (self, checks.natural_key) {
            return claim_sqlite(pools, build, checks).await;
        }
        on_pool!(self, pool => {
            let mut tx = pool.begin_write().await?;
            let (mut record, draft) = build();
            record_claim_span(&record);
            // The probe reads before the insert so that its finding is part of the
            // sealed `claimed` row; it excludes the key itself, so a retry of this
            // intent never suspects itself.
            let suspect: Option<String> = match &record.business_ref {
                Some(business_ref) => {
                    bind_probe!(sqlx::query_scalar(sql::DUPLICATE_PROBE), record, business_ref, checks)
                        .fetch_optional(&mut *tx)
                        .await?
                }
                None => None,
            };
            let attempt = seal(&mut record, with_suspect(draft, suspect.as_deref()));
            let inserted: Option<String> = bind_claim!(sqlx::query_scalar(sql::CLAIM), record)
                .fetch_optional(&mut *tx)
                .await?;
            if inserted.is_none() {
                // Rolled back explicitly, not dropped: on SQLite this waits until the
                // claim it found is committed (group_commit.rs).
                tx.rollback().await?;
                return Ok(Claim::Exists);
            }
            if let Some(natural_key) = checks.natural_key {
                let bind = |q| {
                    sqlx::query_scalar::<_, String>(q)
                        .bind(&record.intent.tenant)
                        .bind(&record.intent.tool)
                        .bind(natural_key)
                };
                let held: Option<String> = bind(sql::CLAIM_NATURAL_KEY)
                    .bind(record.key.as_str())
                    .bind(record.created_at)
                    .fetch_optional(&mut *tx)
                    .await?;
                if held.is_none() {
                    let holder: Option<String> = bind(sql::NATURAL_KEY_HOLDER)
                        .fetch_optional(&mut *tx)
                        .await?;
                    tx.rollback().await?;
                    return Ok(match holder {
                        Some(key) => Claim::NaturalKeyHeld {
                            key: key.parse().map_err(|e| {
                                StoreError::Corrupt(format!("natural key holder: {e}"))
                            })?,
                        },
                        // The holder was pruned between the two statements: nothing
                        // was written, and the guard's next look finds no key and
                        // claims again.
                        None => Claim::Exists,
                    });
                }
            }
            if let Some(other) = &suspect {
                sqlx::query(sql::INSERT_SUSPECTED_DUPLICATE)
                    .bind(record.key.as_str())
                    .bind(other)
                    .bind(&record.intent.tenant)
                    .bind(&record.intent.tool)
                    .bind(record.created_at)
                    .execute(&mut *tx)
                    .await?;
            }
            insert_attempt!(tx, attempt);
            tx.commit().await?;
            Ok(Claim::Created { record: Box::new(record) })
        })
    }

    #[tracing::instrument(skip_all, fields(key = %expected.key))]
    async fn write_if_unchanged<T: Send>(
        &self,
        expected: &Record,
        decide: impl FnOnce(&mut Record) -> (Vec<AttemptDraft>, T) + Send,
    ) -> Result<Option<T>, StoreError> {
        let mut next = expected.clone();
        let (drafts, value) = decide(&mut next);
        let Ok([draft]) = <[AttemptDraft; 1]>::try_from(drafts) else {
            return Ok(None);
        };
        let attempt = seal(&mut next, draft);
        let written = match self {
            Store::Postgres(pool) => {
                let q = bind_update!(
                    sqlx::query(sql::UPDATE_RECORD_IF_HEAD_AND_APPEND_POSTGRES),
                    next,
                    expected.fencing_token
                );
                let written = bind_attempt!(q, attempt)
                    .bind(expected.log_seq)
                    .bind(&expected.log_hash)
                    .execute(pool)
                    .await?;
                written.rows_affected() == 1
            }
            Store::Sqlite(pools) => {
                write_if_unchanged_sqlite(pools, expected, &next, &attempt).await?
            }
        };
        Ok(written.then_some(value))
    }

    #[tracing::instrument(skip_all, fields(key = %key))]
    async fn with_locked<T: Send>(
        &self,
        key: &IdempotencyKey,
        decide: impl FnOnce(&mut Record) -> (Vec<AttemptDraft>, T) + Send,
    ) -> Result<T, StoreError> {
        self.locked_write(key, decide, |_| None).await
    }

    #[tracing::instrument(skip_all, fields(key = %key))]
    async fn review_duplicate(
        &self,
        key: &IdempotencyKey,
        decide: impl FnOnce(&mut Record) -> (AttemptDraft, PairReview) + Send,
    ) -> Result<(), StoreError> {
        let decide = |rec: &mut Record| {
            let (draft, review) = decide(rec);
            (vec![draft], review)
        };
        self.locked_write(key, decide, |review| Some(review.clone()))
            .await
            .map(drop)
    }

    async fn record(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        Store::record(self, key).await
    }

    async fn newest_attempt(&self, key: &IdempotencyKey) -> Result<Option<Attempt>, StoreError> {
        Ok(self.attempts_newest(key, 1).await?.pop())
    }
}

/// The start of a locked write: a write transaction and the record read under its
/// lock ([`Store::locked_write`]).
trait LockRecord: WritePool {
    fn lock_record(
        &self,
        key: &IdempotencyKey,
    ) -> impl Future<Output = Result<(Self::Tx, Option<Record>), StoreError>> + Send;
}

impl LockRecord for sqlx::PgPool {
    async fn lock_record(
        &self,
        key: &IdempotencyKey,
    ) -> Result<(Self::Tx, Option<Record>), StoreError> {
        let mut tx = self.begin_write().await?;
        let current = sqlx::query_as(sql::LOCK_RECORD_POSTGRES)
            .bind(key.as_str())
            .fetch_optional(&mut *tx)
            .await?;
        Ok((tx, current))
    }
}

/// The write lock is held from the call's start, so the plain read is the locked read;
/// it is the call's first statement, with its savepoint when it joins the writer's
/// batch (group_commit.rs).
impl LockRecord for SqlitePools {
    async fn lock_record(
        &self,
        key: &IdempotencyKey,
    ) -> Result<(Self::Tx, Option<Record>), StoreError> {
        let (tx, answer) = self
            .begin_on_first_statement()
            .await?
            .execute(&sql::LOCK_RECORD_SQLITE, |text| {
                sqlx::query(text).bind(key.as_str())
            })
            .await?;
        let current = answer
            .rows
            .first()
            .map(sqlx::FromRow::from_row)
            .transpose()?;
        Ok((tx, current))
    }
}

/// Names the claimed key and tool on the `claim` span.
fn record_claim_span(record: &Record) {
    let span = tracing::Span::current();
    span.record("key", record.key.as_str());
    span.record("tool", record.intent.tool.as_str());
}

/// The `claimed` row with the probe's finding, sealed into the chain with it.
fn with_suspect(draft: AttemptDraft, suspect: Option<&str>) -> AttemptDraft {
    match suspect {
        Some(other) => draft.with("suspected_duplicate_of", serde_json::json!(other)),
        None => draft,
    }
}

/// [`Storage::claim`] on PostgreSQL without a natural key: one round trip, with
/// [`sql::CLAIM_PROBED_POSTGRES`] when the call names a business ref (the probe and
/// the claim together) or [`sql::CLAIM_AND_APPEND_POSTGRES`] when it does not. Only
/// when the probe finds another key does the claim go the long way
/// ([`claim_with_finding`]): the finding is sealed into the `claimed` row, so it must
/// be known before the row is written.
async fn claim_in_one_statement(
    pool: &sqlx::PgPool,
    build: impl FnOnce() -> (Record, AttemptDraft) + Send,
    checks: ClaimChecks<'_>,
) -> Result<Claim, StoreError> {
    let (mut record, draft) = build();
    record_claim_span(&record);
    let Some(business_ref) = record.business_ref.clone() else {
        return claim_and_append(pool, record, draft, None).await;
    };
    // The claim's row is the chain's first: sealing changes only the head, which a
    // long way below starts again from here.
    let unsealed = (record.log_seq, record.log_hash.clone(), draft.clone());
    let attempt = seal(&mut record, draft);
    let q = bind_claim!(sqlx::query_as(sql::CLAIM_PROBED_POSTGRES), record);
    let (inserted, found): (Option<String>, Option<String>) = bind_attempt!(q, attempt)
        .bind(record.created_at - checks.duplicate_window)
        .fetch_one(pool)
        .await?;
    match (inserted, found) {
        (Some(_), _) => Ok(Claim::Created {
            record: Box::new(record),
        }),
        (None, None) => Ok(Claim::Exists),
        (None, Some(_)) => {
            let (log_seq, log_hash, draft) = unsealed;
            record.log_seq = log_seq;
            record.log_hash = log_hash;
            claim_with_finding(pool, record, draft, &business_ref, checks).await
        }
    }
}

/// The long way of a claim whose probe found another key: the probe again (with
/// whether the key exists: then nothing is sent), and the claim with the finding.
async fn claim_with_finding(
    pool: &sqlx::PgPool,
    record: Record,
    draft: AttemptDraft,
    business_ref: &str,
    checks: ClaimChecks<'_>,
) -> Result<Claim, StoreError> {
    let (found, exists): (Option<String>, bool) = bind_probe!(
        sqlx::query_as(sql::CLAIM_PROBE_POSTGRES),
        record,
        business_ref,
        checks
    )
    .fetch_one(pool)
    .await?;
    if exists {
        return Ok(Claim::Exists);
    }
    claim_and_append(pool, record, draft, found).await
}

/// [`sql::CLAIM_AND_APPEND_POSTGRES`]: the record, its `claimed` row sealed with the
/// probe's finding `suspect`, and the suspected pair.
async fn claim_and_append(
    pool: &sqlx::PgPool,
    mut record: Record,
    draft: AttemptDraft,
    suspect: Option<String>,
) -> Result<Claim, StoreError> {
    let attempt = seal(&mut record, with_suspect(draft, suspect.as_deref()));
    let q = bind_claim!(sqlx::query_scalar(sql::CLAIM_AND_APPEND_POSTGRES), record);
    let inserted: Option<String> = bind_attempt!(q, attempt)
        .bind(&suspect)
        .fetch_optional(pool)
        .await?;
    Ok(match inserted {
        Some(_) => Claim::Created {
            record: Box::new(record),
        },
        None => Claim::Exists,
    })
}

impl Store {
    /// The one body of [`Storage::with_locked`] and [`Storage::review_duplicate`]: the
    /// locked read, `decide`, the fenced write of the record with its attempts, and the
    /// pair review `review` names from the decided value, in one transaction.
    async fn locked_write<T: Send>(
        &self,
        key: &IdempotencyKey,
        decide: impl FnOnce(&mut Record) -> (Vec<AttemptDraft>, T) + Send,
        review: impl FnOnce(&T) -> Option<PairReview> + Send,
    ) -> Result<T, StoreError> {
        // The record change and its first attempt sent together: one statement on
        // PostgreSQL (one row reported, the attempt's), one batch on SQLite (two).
        let (merged, merged_rows) = match self.backend() {
            Backend::Postgres => (sql::UPDATE_RECORD_AND_APPEND_POSTGRES, 1),
            Backend::Sqlite => (sql::UPDATE_RECORD_AND_APPEND_SQLITE, 2),
        };
        on_pool!(self, pool => {
            let (mut tx, current) = pool.lock_record(key).await?;
            let Some(current) = current else {
                return Err(StoreError::NotFound);
            };
            let mut next = current.clone();
            let (drafts, value) = decide(&mut next);
            let attempts: Vec<Attempt> =
                drafts.into_iter().map(|d| seal(&mut next, d)).collect();
            let mut rest = attempts.as_slice();
            if next != current {
                let (written, expected) = match attempts.first() {
                    Some(first) => {
                        rest = &attempts[1..];
                        let q = bind_update!(sqlx::query(merged), next, current.fencing_token);
                        (bind_attempt!(q, first).execute(&mut *tx).await?, merged_rows)
                    }
                    None => {
                        let q = bind_update!(sqlx::query(sql::UPDATE_RECORD), next, current.fencing_token);
                        (q.execute(&mut *tx).await?, 1)
                    }
                };
                if written.rows_affected() != expected {
                    return Err(StoreError::Conflict(format!(
                        "fenced write on {} matched no row",
                        next.key
                    )));
                }
            }
            // A duplicate review changes its pair in the same transaction, or nothing.
            if let Some(review) = review(&value) {
                let updated = sqlx::query(super::duplicates::REVIEW_PAIR)
                    .bind(next.key.as_str())
                    .bind(review.verdict.as_str())
                    .bind(&review.reviewed_by)
                    .bind(review.reviewed_at)
                    .bind(&review.reason)
                    .bind(review.other_key.as_str())
                    .execute(&mut *tx)
                    .await?;
                if updated.rows_affected() != 1 {
                    return Err(StoreError::Conflict(format!(
                        "the suspected duplicate {} is no longer open",
                        next.key
                    )));
                }
            }
            for a in rest {
                insert_attempt!(tx, a);
            }
            tx.commit().await?;
            Ok(value)
        })
    }

    pub async fn record(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        Ok(
            on_pool!(self, pool => sqlx::query_as(sql::GET_RECORD).bind(key.as_str()).fetch_optional(pool).await)?,
        )
    }

    /// Every attempt of `key`, in `seq` order.
    pub async fn attempts(&self, key: &IdempotencyKey) -> Result<Vec<Attempt>, StoreError> {
        Ok(
            on_pool!(self, pool => sqlx::query_as(sql::ATTEMPTS_OF_KEY).bind(key.as_str()).fetch_all(pool).await)?,
        )
    }
}

/// [`Storage::claim`] on SQLite without a natural key: the probe and the claim's
/// writes as one batch ([`sql::CLAIM_PROBED_SQLITE`], or [`sql::CLAIM_AND_APPEND_SQLITE`]
/// for a call without a business ref), led by the call's savepoint when it joins the
/// writer's batch, then the commit — each statement a hop to the connection's thread
/// that every queued writer waits for. Only a claim whose probe found another key
/// sends more ([`claim_sqlite_with_finding`]).
async fn claim_sqlite(
    pools: &SqlitePools,
    build: impl FnOnce() -> (Record, AttemptDraft) + Send,
    checks: ClaimChecks<'_>,
) -> Result<Claim, StoreError> {
    let opening = pools.begin_deferred().await?;
    // Built under the write lock: the clock is read after the wait for it.
    let (mut record, draft) = build();
    record_claim_span(&record);
    // The claim's row is the chain's first: sealing changes only the head, which the
    // long way starts again from here.
    let unsealed = (record.log_seq, record.log_hash.clone(), draft.clone());
    let attempt = seal(&mut record, draft);
    if record.business_ref.is_none() {
        let (tx, answer) = opening
            .execute(&sql::CLAIM_AND_APPEND_SQLITE, |text| {
                let q = bind_claim!(sqlx::query(text), record);
                // `$35`: no suspected pair.
                bind_attempt!(q, attempt).bind(None::<String>)
            })
            .await?;
        return match answer.written {
            2 => commit_claim(tx, record).await,
            0 => claim_exists(tx).await,
            written => Err(claim_wrote(&record, written, 2)),
        };
    }
    let since = record.created_at - checks.duplicate_window;
    let (tx, answer) = opening
        .execute(&sql::CLAIM_PROBED_SQLITE, |text| {
            let q = bind_claim!(sqlx::query(text), record);
            bind_attempt!(q, attempt).bind(since)
        })
        .await?;
    let [row] = answer.rows.as_slice() else {
        return Err(StoreError::Corrupt(format!(
            "claim of {} answered {} rows, not 1",
            record.key,
            answer.rows.len()
        )));
    };
    let (claimed, found): (i64, Option<String>) = sqlx::FromRow::from_row(row)?;
    match (claimed, found) {
        (1, _) => commit_claim(tx, record).await,
        // The insert met the key: it exists.
        (0, None) => claim_exists(tx).await,
        (0, Some(found)) => {
            let (log_seq, log_hash, draft) = unsealed;
            record.log_seq = log_seq;
            record.log_hash = log_hash;
            claim_sqlite_with_finding(tx, record, draft, found).await
        }
        (claimed, _) => Err(claim_wrote(&record, claimed as u64, 1)),
    }
}

/// A claim whose rows are written: committed, it is the caller's.
async fn commit_claim(
    tx: <SqlitePools as WritePool>::Tx,
    record: Record,
) -> Result<Claim, StoreError> {
    tx.commit().await?;
    Ok(Claim::Created {
        record: Box::new(record),
    })
}

/// A claim that met its key, and wrote nothing.
async fn claim_exists(tx: <SqlitePools as WritePool>::Tx) -> Result<Claim, StoreError> {
    // Ended, not dropped: this waits until the claim it found is committed.
    tx.end_unwritten().await?;
    Ok(Claim::Exists)
}

/// A probed SQLite claim that wrote nothing because its probe found another key:
/// whether the key exists is read in the same transaction, under the write lock, so
/// nothing has changed since the claim's statement; if it does not, the finding is
/// sealed into the `claimed` row and sent with the claim's writes
/// ([`sql::CLAIM_AND_APPEND_SQLITE`]).
async fn claim_sqlite_with_finding(
    mut tx: <SqlitePools as WritePool>::Tx,
    mut record: Record,
    draft: AttemptDraft,
    found: String,
) -> Result<Claim, StoreError> {
    let exists: bool = sqlx::query_scalar(sql::KEY_EXISTS)
        .bind(record.key.as_str())
        .fetch_one(&mut *tx)
        .await?;
    if exists {
        return claim_exists(tx).await;
    }
    let attempt = seal(&mut record, with_suspect(draft, Some(&found)));
    let q = bind_claim!(sqlx::query(sql::CLAIM_AND_APPEND_SQLITE.alone()), record);
    let written = bind_attempt!(q, attempt)
        .bind(&found)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    // The record, its attempt and the pair.
    if written != 3 {
        return Err(claim_wrote(&record, written, 3));
    }
    commit_claim(tx, record).await
}

/// A claim whose statements wrote neither all their rows nor none.
fn claim_wrote(record: &Record, written: u64, created: u64) -> StoreError {
    StoreError::Corrupt(format!(
        "claim of {} wrote {written} rows, not {created}",
        record.key
    ))
}

/// [`Storage::write_if_unchanged`]'s write on SQLite (the decision is made before,
/// as on PostgreSQL, outside the write lock): the conditional update and its attempt
/// as one batch ([`sql::UPDATE_RECORD_IF_HEAD_AND_APPEND_SQLITE`], led by the call's
/// savepoint when it joins the writer's batch), then the commit — where the locked
/// path also reads the record and sends the update and the insert apart. Whether both
/// rows were written.
async fn write_if_unchanged_sqlite(
    pools: &SqlitePools,
    expected: &Record,
    next: &Record,
    attempt: &Attempt,
) -> Result<bool, StoreError> {
    let opening = pools.begin_on_first_statement().await?;
    let (tx, answer) = opening
        .execute(&sql::UPDATE_RECORD_IF_HEAD_AND_APPEND_SQLITE, |text| {
            let q = bind_update!(sqlx::query(text), next, expected.fencing_token);
            bind_attempt!(q, attempt)
                .bind(expected.log_seq)
                .bind(&expected.log_hash)
        })
        .await?;
    // Both rows, or none: the head moved (or the key is gone), nothing was written,
    // and the caller takes the locked path.
    match answer.written {
        2 => tx.commit().await?,
        0 => {
            tx.end_unwritten().await?;
            return Ok(false);
        }
        _ => {
            tx.rollback().await?;
            return Ok(false);
        }
    }
    Ok(true)
}
