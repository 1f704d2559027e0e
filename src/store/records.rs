//! The guard's transactions: claim a key, or lock its record and apply a decision.

use super::{Backend, Store, StoreError, WritePool, on_pool, sql};
use crate::guard::{
    Attempt, AttemptDraft, Claim, ClaimChecks, IdempotencyKey, PairReview, Record, Storage, seal,
};
use sqlx::types::Json;

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
    /// PostgreSQL without a natural key claims in two autocommit statements
    /// ([`claim_postgres`]); every other claim in one transaction
    /// ([`Store::claim_in_transaction`]).
    #[tracing::instrument(skip_all, fields(key, tool))]
    async fn claim(
        &self,
        build: impl FnOnce() -> (Record, AttemptDraft) + Send,
        checks: ClaimChecks<'_>,
    ) -> Result<Claim, StoreError> {
        match self {
            Store::Postgres(pool) if checks.natural_key.is_none() => {
                claim_postgres(pool, build, checks).await
            }
            _ => self.claim_in_transaction(build, checks).await,
        }
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
            // One autocommit statement: the update and its attempt, or nothing.
            Store::Postgres(pool) => {
                let q = bind_update!(
                    sqlx::query(sql::UPDATE_RECORD_AND_APPEND_POSTGRES),
                    next,
                    expected.fencing_token
                );
                bind_attempt!(q, attempt)
                    .bind(expected.log_seq)
                    .bind(&expected.log_hash)
                    .execute(pool)
                    .await?
                    .rows_affected()
                    == 1
            }
            Store::Sqlite(pools) => {
                let mut tx = pools.begin_write().await?;
                let updated = bind_update!(
                    sqlx::query(sql::UPDATE_RECORD_IF_HEAD),
                    next,
                    expected.fencing_token
                )
                .bind(expected.log_seq)
                .bind(&expected.log_hash)
                .execute(&mut *tx)
                .await?;
                // The head moved (or the key is gone): nothing is written (the
                // transaction rolls back as it drops), and the caller takes the
                // locked path.
                if updated.rows_affected() != 1 {
                    return Ok(None);
                }
                insert_attempt!(tx, attempt);
                tx.commit().await?;
                true
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

/// [`Storage::claim`] on PostgreSQL without a natural key, in two autocommit
/// statements where the transaction takes six (BEGIN, the probe, three inserts,
/// COMMIT): [`sql::CLAIM_PROBE_POSTGRES`] (the probe's finding, and whether the key
/// exists: then nothing is written), then [`sql::CLAIM_AND_APPEND_POSTGRES`] with the
/// `claimed` row sealed once, with the finding. `build` runs before both: the
/// statement waits only for a concurrent claim of the same key (then it writes
/// nothing), so no clock reading can be stale.
async fn claim_postgres(
    pool: &sqlx::PgPool,
    build: impl FnOnce() -> (Record, AttemptDraft) + Send,
    checks: ClaimChecks<'_>,
) -> Result<Claim, StoreError> {
    let (mut record, draft) = build();
    record_claim_span(&record);
    let suspect: Option<String> = match &record.business_ref {
        Some(business_ref) => {
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
            found
        }
        None => None,
    };
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
    /// [`Storage::claim`] in one transaction, on either backend: the probe, the
    /// `claimed` row sealed once with its finding, the record, its natural key, the
    /// suspected pair and the attempt. `build` runs once the transaction has begun (on
    /// SQLite: once BEGIN IMMEDIATE holds the write lock), so the times it reads are
    /// not from before a wait. Returning before the commit drops the transaction: it
    /// rolls back.
    async fn claim_in_transaction(
        &self,
        build: impl FnOnce() -> (Record, AttemptDraft) + Send,
        checks: ClaimChecks<'_>,
    ) -> Result<Claim, StoreError> {
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

    /// The one body of [`Storage::with_locked`] and [`Storage::review_duplicate`]: the
    /// locked read, `decide`, the fenced write of the record with its attempts, and the
    /// pair review `review` names from the decided value, in one transaction.
    async fn locked_write<T: Send>(
        &self,
        key: &IdempotencyKey,
        decide: impl FnOnce(&mut Record) -> (Vec<AttemptDraft>, T) + Send,
        review: impl FnOnce(&T) -> Option<PairReview> + Send,
    ) -> Result<T, StoreError> {
        // PostgreSQL locks the row; SQLite's BEGIN IMMEDIATE already holds the one
        // write lock, so the plain read is the locked read.
        let lock_record = self
            .backend()
            .pick(sql::LOCK_RECORD_POSTGRES, sql::GET_RECORD);
        on_pool!(self, pool => {
            let mut tx = pool.begin_write().await?;
            let current: Option<Record> = sqlx::query_as(lock_record)
                .bind(key.as_str())
                .fetch_optional(&mut *tx)
                .await?;
            let Some(current) = current else {
                return Err(StoreError::NotFound);
            };
            let mut next = current.clone();
            let (drafts, value) = decide(&mut next);
            let attempts: Vec<Attempt> =
                drafts.into_iter().map(|d| seal(&mut next, d)).collect();
            let mut rest = attempts.as_slice();
            // A repeated refusal's count has its own statement: a record change
            // writes the other columns (sql.rs).
            let not_logged = std::mem::replace(
                &mut next.refusals_not_logged,
                current.refusals_not_logged,
            );
            if not_logged != current.refusals_not_logged {
                sqlx::query(sql::COUNT_REFUSALS_NOT_LOGGED)
                    .bind(key.as_str())
                    .bind(not_logged)
                    .execute(&mut *tx)
                    .await?;
            }
            if next != current {
                // PostgreSQL sends the change with its first attempt, one round trip
                // to the server; SQLite, in process, sends the two apart.
                let merged = match (self.backend(), attempts.first()) {
                    (Backend::Postgres, Some(first)) => Some(first),
                    _ => None,
                };
                let update = if merged.is_some() { sql::UPDATE_RECORD_AND_APPEND_POSTGRES } else { sql::UPDATE_RECORD };
                let q = bind_update!(sqlx::query(update), next, current.fencing_token);
                let q = match merged {
                    Some(first) => {
                        rest = &attempts[1..];
                        // No head condition: the row lock holds the record.
                        bind_attempt!(q, first).bind(None::<i64>).bind(None::<String>)
                    }
                    None => q,
                };
                if q.execute(&mut *tx).await?.rows_affected() != 1 {
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
