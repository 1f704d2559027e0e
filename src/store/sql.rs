//! The guard's SQL statements, each written once, as plain text. Where PostgreSQL and
//! SQLite must differ the two versions stand next to each other.
//!
//! Parameters are bound by number in the order the `bind_*` macros of records.rs bind
//! them: a record as [`CLAIM`] lists its columns (`$1`–`$22`), an attempt as
//! [`INSERT_ATTEMPT`] lists its own (`$1`–`$12`, or `$13`–`$24` after a record
//! change, `$23`–`$34` after a whole record). The tests below check that every
//! statement names the same columns in the same order.

/// An attempt's columns as the writer binds them; the id is the database's.
macro_rules! attempt_columns {
    () => {
        "key, tenant, tool, seq, kind, fencing_token, actor, detail, duration_ms, occurred_at, \
         prev_hash, hash"
    };
}
pub(crate) use attempt_columns;

/// Every column of an attempt row, for a `WHERE` to follow.
macro_rules! select_attempts {
    () => {
        concat!(
            "SELECT id, ",
            $crate::store::sql::attempt_columns!(),
            " FROM idempotency_attempts "
        )
    };
}
pub(crate) use select_attempts;

/// The claim: one atomic statement. A concurrent claimer of the same key waits for
/// ours to commit and then inserts nothing, so exactly one caller gets a row back.
pub(crate) const CLAIM: &str = "\
    INSERT INTO idempotency_records (key, tenant, tool, workflow_id, step_id, intent_id, \
        business_ref, fingerprint, business_args, status, fencing_token, lease_until, \
        attempt_count, result, error, provider_retention_until, resend_safe_until, \
        release_approved, created_at, updated_at, log_seq, log_hash) \
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, \
        $19, $20, $21, $22) \
    ON CONFLICT (key) DO NOTHING RETURNING key";

/// A sealed attempt row.
pub(crate) const INSERT_ATTEMPT: &str = "\
    INSERT INTO idempotency_attempts (key, tenant, tool, seq, kind, fencing_token, actor, \
        detail, duration_ms, occurred_at, prev_hash, hash) \
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)";

/// The suspected-duplicate probe of a claim: the newest other key with the same
/// tenant (`$1`), tool (`$2`), business ref (`$3`) and fingerprint (`$4`) created
/// since `$5`, other than the claiming key (`$6`). One probe of
/// `idempotency_records_duplicate_probe`.
pub(crate) const DUPLICATE_PROBE: &str = "\
    SELECT key FROM idempotency_records \
    WHERE tenant = $1 AND tool = $2 AND business_ref = $3 AND fingerprint = $4 \
        AND created_at >= $5 AND key <> $6 AND business_ref IS NOT NULL \
    ORDER BY created_at DESC LIMIT 1";

/// The natural key of a claim, in the claim's transaction after its record. The
/// primary key (tenant, tool, natural_key) is the lock: on PostgreSQL a concurrent
/// claimer of the same natural key waits here for ours to commit and then inserts
/// nothing (or inserts, if ours rolled back); SQLite's BEGIN IMMEDIATE already
/// serialises the claims. No row back: another key holds the natural key.
pub(crate) const CLAIM_NATURAL_KEY: &str = "\
    INSERT INTO idempotency_natural_keys (tenant, tool, natural_key, key, created_at) \
    VALUES ($1, $2, $3, $4, $5) \
    ON CONFLICT (tenant, tool, natural_key) DO NOTHING RETURNING key";

/// The key that holds a natural key. Read in the same transaction right after
/// [`CLAIM_NATURAL_KEY`] found it taken: under READ COMMITTED this statement sees the
/// holder's committed row.
pub(crate) const NATURAL_KEY_HOLDER: &str = "\
    SELECT key FROM idempotency_natural_keys WHERE tenant = $1 AND tool = $2 AND natural_key = $3";

pub(crate) const INSERT_SUSPECTED_DUPLICATE: &str = "\
    INSERT INTO idempotency_suspected_duplicates (key, other_key, tenant, tool, detected_at) \
    VALUES ($1, $2, $3, $4, $5)";

/// PostgreSQL's claim of a call with a business ref and without a natural key, first
/// statement: [`DUPLICATE_PROBE`]'s finding and whether the key `$6` exists (then
/// nothing is sent after it). Read outside a
/// transaction: under READ COMMITTED a probe inside one sees no more than this does
/// (each statement its own snapshot).
pub(crate) const CLAIM_PROBE_POSTGRES: &str = "\
    SELECT (SELECT key FROM idempotency_records \
            WHERE tenant = $1 AND tool = $2 AND business_ref = $3 AND fingerprint = $4 \
                AND created_at >= $5 AND key <> $6 AND business_ref IS NOT NULL \
            ORDER BY created_at DESC LIMIT 1), \
        EXISTS (SELECT 1 FROM idempotency_records WHERE key = $6)";

/// PostgreSQL's claim without a natural key, second statement: the record (`$1`–`$22`,
/// as [`CLAIM`]), its `claimed` attempt sealed with the probe's finding (`$23`–`$34`,
/// as [`INSERT_ATTEMPT`]) and, when the probe found one, the suspected pair (`$35`,
/// the other key; NULL for none), in **one autocommit statement** where a transaction
/// takes BEGIN, three inserts and COMMIT.
///
/// Correctness:
/// - the record's row is the one contested write: `ON CONFLICT (key) DO NOTHING`
///   makes a concurrent claimer of the same key wait for ours and then insert
///   nothing, so exactly one caller gets the key back;
/// - the attempt and the pair are inserted `FROM claimed`: only with the record, and
///   never when the key existed; the whole statement commits or rolls back at once
///   (the attempts' foreign key is checked at the end of the statement);
/// - the clock was read before the statement rather than under a lock: the statement
///   waits only for a concurrent claim of the same key (then it writes nothing) and
///   the row is its key's first, so no `occurred_at` along `seq` can run backwards.
pub(crate) const CLAIM_AND_APPEND_POSTGRES: &str = "\
    WITH claimed AS ( \
        INSERT INTO idempotency_records (key, tenant, tool, workflow_id, step_id, intent_id, \
            business_ref, fingerprint, business_args, status, fencing_token, lease_until, \
            attempt_count, result, error, provider_retention_until, resend_safe_until, \
            release_approved, created_at, updated_at, log_seq, log_hash) \
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, \
            $18, $19, $20, $21, $22) \
        ON CONFLICT (key) DO NOTHING RETURNING key), \
    appended AS ( \
        INSERT INTO idempotency_attempts (key, tenant, tool, seq, kind, fencing_token, actor, \
            detail, duration_ms, occurred_at, prev_hash, hash) \
        SELECT $23, $24, $25, $26, $27, $28, $29, $30, $31, $32, $33, $34 FROM claimed), \
    suspected AS ( \
        INSERT INTO idempotency_suspected_duplicates (key, other_key, tenant, tool, detected_at) \
        SELECT key, $35, $2, $3, $19 FROM claimed WHERE $35 IS NOT NULL) \
    SELECT key FROM claimed";

/// A record by key.
pub(crate) const GET_RECORD: &str = "\
    SELECT key, tenant, tool, workflow_id, step_id, intent_id, business_ref, fingerprint, \
        business_args, status, fencing_token, lease_until, attempt_count, result, error, \
        provider_retention_until, resend_safe_until, release_approved, created_at, \
        updated_at, log_seq, log_hash, refusals_not_logged \
    FROM idempotency_records WHERE key = $1";

/// Reads a record and holds it until commit. PostgreSQL locks the row; on SQLite the
/// write transaction (`WritePool::begin_write`, BEGIN IMMEDIATE) already holds the one
/// write lock, so the plain read ([`GET_RECORD`]) is the locked read.
pub(crate) const LOCK_RECORD_POSTGRES: &str = "\
    SELECT key, tenant, tool, workflow_id, step_id, intent_id, business_ref, fingerprint, \
        business_args, status, fencing_token, lease_until, attempt_count, result, error, \
        provider_retention_until, resend_safe_until, release_approved, created_at, \
        updated_at, log_seq, log_hash, refusals_not_logged \
    FROM idempotency_records WHERE key = $1 FOR UPDATE";

/// The fenced write of a record (`$1` its key, `$3`–`$12` what changes): it names the
/// token the writer holds (`$2`). Inside a locked transaction the condition always
/// holds; it is kept so that no code path can write a record without naming its token.
pub(crate) const UPDATE_RECORD: &str = "\
    UPDATE idempotency_records SET status = $3, fencing_token = $4, lease_until = $5, \
        attempt_count = $6, result = $7, error = $8, release_approved = $9, updated_at = $10, \
        log_seq = $11, log_hash = $12 \
    WHERE key = $1 AND fencing_token = $2";

/// [`UPDATE_RECORD`] only while the record's head is still the expected one (`$13`
/// `log_seq`, `$14` `log_hash`): the settle of a key this process claimed, without the
/// locked read. Every write of a record is a fenced update that moves its head (each
/// change appends an attempt, [`crate::guard::seal`]), so a record whose head is
/// still the expected one is, column for column, the record the decision was made
/// on. If anything was written since, or the key is gone, it matches no row and the
/// caller takes the locked path. SQLite runs it in a `BEGIN IMMEDIATE` transaction
/// with [`INSERT_ATTEMPT`] after it when it wrote the row.
pub(crate) const UPDATE_RECORD_IF_HEAD: &str = "\
    UPDATE idempotency_records SET status = $3, fencing_token = $4, lease_until = $5, \
        attempt_count = $6, result = $7, error = $8, release_approved = $9, updated_at = $10, \
        log_seq = $11, log_hash = $12 \
    WHERE key = $1 AND fencing_token = $2 AND log_seq = $13 AND log_hash = $14";

/// A key's count of refusals answered without a row (`$2`, the new total; `$1` the
/// key), in the locked transaction of the decision that skipped the row: the row lock
/// (PostgreSQL) or the one write lock (SQLite) holds the record, so the total is the
/// locked read's plus one. Apart from [`UPDATE_RECORD`]: only a repeated refusal moves
/// it, and the record's other columns stay as they were.
pub const COUNT_REFUSALS_NOT_LOGGED: &str =
    "UPDATE idempotency_records SET refusals_not_logged = $2 WHERE key = $1";

/// PostgreSQL: a record change (`$1`–`$12`, as [`UPDATE_RECORD`]) and its first attempt
/// (`$13`–`$24`) in **one statement**, one round trip fewer than the two apart. `$25`,
/// `$26`: the head the record must still have, or NULL for none (the locked path,
/// whose row lock already holds it). The attempt is inserted `FROM updated`: only if
/// the fenced update wrote the row, so a record is never written without its attempt
/// nor an attempt without its record change; both commit or roll back together. The
/// conditional form (a settle, outside a transaction) waits for a concurrent locker
/// and then re-checks the condition on the row as committed (READ COMMITTED).
pub(crate) const UPDATE_RECORD_AND_APPEND_POSTGRES: &str = "\
    WITH updated AS ( \
        UPDATE idempotency_records SET status = $3, fencing_token = $4, lease_until = $5, \
            attempt_count = $6, result = $7, error = $8, release_approved = $9, \
            updated_at = $10, log_seq = $11, log_hash = $12 \
        WHERE key = $1 AND fencing_token = $2 \
            AND ($25::bigint IS NULL OR (log_seq = $25 AND log_hash = $26)) \
        RETURNING key) \
    INSERT INTO idempotency_attempts (key, tenant, tool, seq, kind, fencing_token, actor, \
        detail, duration_ms, occurred_at, prev_hash, hash) \
    SELECT $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24 FROM updated";

pub(crate) const ATTEMPTS_OF_KEY: &str = concat!(select_attempts!(), "WHERE key = $1 ORDER BY seq");

/// The SQL of [`crate::guard::LeaseState::Expired`] at `$1`: the one spelling of an
/// expired lease in every count, page and gauge.
macro_rules! lease_expired {
    () => {
        "(status = 'IN_PROGRESS' AND lease_until <= $1)"
    };
}
pub(crate) use lease_expired;

/// The condition of an undecided key: UNKNOWN, or IN_PROGRESS with a lease that ran out
/// at `$1`. The IN list is the partial index idempotency_records_backlog's predicate.
macro_rules! undecided {
    () => {
        concat!(
            "status IN ('UNKNOWN', 'IN_PROGRESS') AND (status = 'UNKNOWN' OR ",
            $crate::store::sql::lease_expired!(),
            ")"
        )
    };
}
pub(crate) use undecided;

/// The SQL of "past retention" at `$1`: an UNKNOWN key a resend is no longer safe for,
/// the negation of [`crate::guard::resend_safe`] on the stored `resend_safe_until`.
macro_rules! past_retention {
    () => {
        "(status = 'UNKNOWN' AND resend_safe_until <= $1)"
    };
}
pub(crate) use past_retention;

#[cfg(test)]
mod tests {
    use super::*;

    /// The column list after `INSERT INTO <table> (` or `SELECT `, up to `)` or ` FROM`.
    fn columns(sql: &str, after: &str, until: &str) -> Vec<String> {
        let list = sql.split_once(after).unwrap().1;
        let list = list.split_once(until).unwrap().0;
        list.split(',').map(|c| c.trim().to_owned()).collect()
    }

    /// `$from` … `$to` in order, each once.
    fn numbered(from: usize, to: usize) -> Vec<String> {
        (from..=to).map(|i| format!("${i}")).collect()
    }

    #[test]
    fn every_statement_names_a_records_columns_in_one_order() {
        let record = columns(CLAIM, "idempotency_records (", ")");
        assert_eq!(record.len(), 22);
        assert_eq!(columns(CLAIM, "VALUES (", ")"), numbered(1, 22));
        assert_eq!(
            columns(CLAIM_AND_APPEND_POSTGRES, "idempotency_records (", ")"),
            record
        );
        // The reads add the one column no claim writes (it starts at 0).
        let read_columns = [record.clone(), vec!["refusals_not_logged".to_string()]].concat();
        for read in [GET_RECORD, LOCK_RECORD_POSTGRES] {
            assert_eq!(columns(read, "SELECT ", " FROM"), read_columns, "{read}");
        }
    }

    #[test]
    fn every_statement_names_an_attempts_columns_in_one_order() {
        let attempt = columns(INSERT_ATTEMPT, "idempotency_attempts (", ")");
        let declared: Vec<&str> = attempt_columns!().split(',').map(str::trim).collect();
        assert_eq!(attempt, declared);
        assert_eq!(columns(INSERT_ATTEMPT, "VALUES (", ")"), numbered(1, 12));
        let merged = UPDATE_RECORD_AND_APPEND_POSTGRES;
        assert_eq!(columns(merged, "idempotency_attempts (", ")"), attempt);
        assert_eq!(columns(merged, "hash) SELECT ", " FROM"), numbered(13, 24));
        let claim = CLAIM_AND_APPEND_POSTGRES;
        assert_eq!(columns(claim, "idempotency_attempts (", ")"), attempt);
        assert_eq!(columns(claim, "hash) SELECT ", " FROM"), numbered(23, 34));
    }

    #[test]
    fn the_record_changes_set_the_same_columns() {
        let set = |sql: &str| columns(sql, " SET ", " WHERE");
        assert_eq!(set(UPDATE_RECORD_IF_HEAD), set(UPDATE_RECORD));
        assert_eq!(set(UPDATE_RECORD_AND_APPEND_POSTGRES), set(UPDATE_RECORD));
        assert!(UPDATE_RECORD_IF_HEAD.starts_with(UPDATE_RECORD));
    }
}
