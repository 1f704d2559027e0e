//! SQL statements, each written once. Where PostgreSQL and SQLite must differ the two
//! versions stand next to each other.

/// A record's columns, in the order [`CLAIM`] binds them
/// (`$1`–`$22`). A macro, so that statements can `concat!` it.
macro_rules! record_columns {
    () => {
        "key, tenant, tool, workflow_id, step_id, intent_id, business_ref, fingerprint, \
         business_args, status, fencing_token, lease_until, attempt_count, result, error, \
         provider_retention_until, resend_safe_until, release_approved, created_at, updated_at, \
         log_seq, log_hash"
    };
}

/// An attempt's columns as the writer binds them (`$1`–`$12`); the id is the
/// database's.
macro_rules! attempt_columns {
    () => {
        "key, tenant, tool, seq, kind, fencing_token, actor, detail, duration_ms, occurred_at, \
         prev_hash, hash"
    };
}
pub(crate) use attempt_columns;

/// Every column of a record, for a `WHERE` to follow.
macro_rules! select_record {
    () => {
        concat!("SELECT ", record_columns!(), " FROM idempotency_records ")
    };
}

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

/// The fenced write: it names the token the writer holds (`$2`). Inside a locked
/// transaction the condition always holds; it is kept so that no code path can write
/// a record without naming its token.
macro_rules! fenced_update {
    () => {
        "UPDATE idempotency_records SET status = $3, fencing_token = $4, \
         lease_until = $5, attempt_count = $6, result = $7, error = $8, release_approved = $9, \
         updated_at = $10, log_seq = $11, log_hash = $12 \
         WHERE key = $1 AND fencing_token = $2"
    };
}

/// The claim: one atomic statement. A concurrent claimer of the same key waits for
/// ours to commit and then inserts nothing, so exactly one caller gets a row back.
pub const CLAIM: &str = concat!(
    "INSERT INTO idempotency_records (",
    record_columns!(),
    ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, \
     $18, $19, $20, $21, $22) ON CONFLICT (key) DO NOTHING RETURNING key"
);

/// The natural key of a claim, in the claim's transaction after its record. The
/// primary key (tenant, tool, natural_key) is the lock: on PostgreSQL a concurrent
/// claimer of the same natural key waits here for ours to commit and then inserts
/// nothing (or inserts, if ours rolled back); SQLite's BEGIN IMMEDIATE already
/// serialises the claims. No row back: another key holds the natural key.
pub const CLAIM_NATURAL_KEY: &str = "INSERT INTO idempotency_natural_keys \
    (tenant, tool, natural_key, key, created_at) VALUES ($1, $2, $3, $4, $5) \
    ON CONFLICT (tenant, tool, natural_key) DO NOTHING RETURNING key";

/// The key that holds a natural key. Read in the same transaction right after
/// [`CLAIM_NATURAL_KEY`] found it taken: under READ COMMITTED this statement sees the
/// holder's committed row.
pub const NATURAL_KEY_HOLDER: &str = "SELECT key FROM idempotency_natural_keys \
    WHERE tenant = $1 AND tool = $2 AND natural_key = $3";

/// The suspected-duplicate probe of a claim: the newest other key with the same
/// tenant, tool, business ref and fingerprint created since `$5`. One probe of
/// `idempotency_records_duplicate_probe`.
/// The parameters are given as their placeholders (tenant, tool, business ref,
/// fingerprint, window start, the claiming key), so that the probe can also be a
/// part of a statement that binds these values at other places
/// ([`CLAIM_PROBED_POSTGRES`]).
macro_rules! duplicate_probe {
    () => {
        duplicate_probe!("$1", "$2", "$3", "$4", "$5", "$6")
    };
    ($tenant:literal, $tool:literal, $business_ref:literal, $fingerprint:literal, $since:literal, $key:literal) => {
        concat!(
            "SELECT key FROM idempotency_records WHERE tenant = ",
            $tenant,
            " AND tool = ",
            $tool,
            " AND business_ref = ",
            $business_ref,
            " AND fingerprint = ",
            $fingerprint,
            " AND created_at >= ",
            $since,
            " AND key <> ",
            $key,
            " AND business_ref IS NOT NULL ORDER BY created_at DESC LIMIT 1"
        )
    };
}

pub const DUPLICATE_PROBE: &str = duplicate_probe!();

/// PostgreSQL, before [`CLAIM_AND_APPEND_POSTGRES`]: the probe, and whether the key
/// `$6` already exists (then the claim is not sent at all: a retry of a known key costs
/// this one read before its locked decision). Read outside a transaction: under READ
/// COMMITTED the probe inside one saw no more than this does (each statement its own
/// snapshot).
pub const CLAIM_PROBE_POSTGRES: &str = concat!(
    "SELECT (",
    duplicate_probe!(),
    "), EXISTS (SELECT 1 FROM idempotency_records WHERE key = $6)"
);

/// PostgreSQL: the claim in **one autocommit statement** — the record (`$1`–`$22`, as
/// [`CLAIM`]), its sealed `claimed` attempt (`$23`–`$34`) and, when the probe found
/// one, the suspected-duplicate pair (`$35`, the other key; NULL for none). One round
/// trip where BEGIN, insert, insert, COMMIT were four.
///
/// Correctness:
/// - the record's row is the one contested write: `ON CONFLICT (key) DO NOTHING`
///   makes a concurrent claimer of the same key wait for ours and then insert
///   nothing, so exactly one caller gets the key back;
/// - the attempt and the pair are inserted `FROM claimed`: only with the record, and
///   never when the key existed; the whole statement commits or rolls back at once
///   (the attempts' foreign key is checked at the end of the statement, when the
///   record is there);
/// - everything sealed into the attempt (the head it starts, the probe's finding) is
///   known before the statement, since a claim starts the key's chain at the genesis
///   hash. The clock was read before the statement rather than under a lock: the
///   statement waits only for a concurrent claim of the same key (then it writes
///   nothing) and the row is its key's first, so no `occurred_at` along `seq` can run
///   backwards; a claim with a natural key keeps the transaction (its second insert
///   can refuse the first).
pub const CLAIM_AND_APPEND_POSTGRES: &str = concat!(
    "WITH claimed AS (INSERT INTO idempotency_records (",
    record_columns!(),
    ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, \
     $18, $19, $20, $21, $22) ON CONFLICT (key) DO NOTHING RETURNING key), \
     appended AS (INSERT INTO idempotency_attempts (",
    attempt_columns!(),
    ") SELECT $23, $24, $25, $26, $27, $28, $29, $30, $31, $32, $33, $34 FROM claimed), \
     suspected AS (INSERT INTO idempotency_suspected_duplicates \
     (key, other_key, tenant, tool, detected_at) \
     SELECT key, $35, $2, $3, $19 FROM claimed WHERE $35 IS NOT NULL) \
     SELECT key FROM claimed"
);

/// PostgreSQL, a claim that names a business ref: the probe and the claim in **one
/// autocommit statement**, written for the common case, where the probe finds no
/// other key. The record (`$1`–`$22`, as [`CLAIM`]) and its sealed `claimed` attempt
/// (`$23`–`$34`) are inserted only if the probe (on the record's own tenant, tool,
/// business ref, fingerprint and key, from `$35`) finds nothing. Returns the claimed
/// key (NULL when nothing was inserted) and the probe's finding.
///
/// Correctness (beside [`CLAIM_AND_APPEND_POSTGRES`]'s, which holds for the insert):
/// - the attempt was sealed without a `suspected_duplicate_of`, and is written only
///   when the probe, in the same statement, found no other key: what the row says
///   is what the probe saw. The probe sees the statement's snapshot, taken no earlier
///   than the separate probe of [`CLAIM_PROBE_POSTGRES`] would have been;
/// - when the probe finds a key, nothing is written and the caller goes the long
///   way: [`CLAIM_PROBE_POSTGRES`], then [`CLAIM_AND_APPEND_POSTGRES`] with the
///   finding sealed in. A finding is the rare case (a second key for the same
///   business action), so it pays the extra round trip;
/// - a key that already exists makes the insert do nothing (`ON CONFLICT`), as the
///   `EXISTS` of [`CLAIM_PROBE_POSTGRES`] did: the caller gets "exists" either way.
pub const CLAIM_PROBED_POSTGRES: &str = concat!(
    "WITH probe AS (",
    duplicate_probe!("$2", "$3", "$7", "$8", "$35", "$1"),
    "), claimed AS (INSERT INTO idempotency_records (",
    record_columns!(),
    ") SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, \
     $18, $19, $20, $21, $22 WHERE NOT EXISTS (SELECT 1 FROM probe) \
     ON CONFLICT (key) DO NOTHING RETURNING key), \
     appended AS (INSERT INTO idempotency_attempts (",
    attempt_columns!(),
    ") SELECT $23, $24, $25, $26, $27, $28, $29, $30, $31, $32, $33, $34 FROM claimed) \
     SELECT (SELECT key FROM claimed), (SELECT key FROM probe)"
);

pub const INSERT_SUSPECTED_DUPLICATE: &str = "INSERT INTO idempotency_suspected_duplicates \
    (key, other_key, tenant, tool, detected_at) VALUES ($1, $2, $3, $4, $5)";

/// Reads a record and holds it until commit. PostgreSQL locks the row; on SQLite the
/// write transaction (`WritePool::begin_write`, BEGIN IMMEDIATE) already holds the one
/// write lock, so the plain read ([`GET_RECORD`]) is the locked read.
pub const LOCK_RECORD_POSTGRES: &str = concat!(select_record!(), "WHERE key = $1 FOR UPDATE");

pub const GET_RECORD: &str = concat!(select_record!(), "WHERE key = $1");

pub const UPDATE_RECORD: &str = fenced_update!();

/// PostgreSQL: [`UPDATE_RECORD`] and the first attempt row in **one statement**, sent
/// after the record's row lock is taken (`LOCK_RECORD_POSTGRES`, same transaction).
/// One round trip fewer than the update and the insert apart: the guard's
/// transaction is then BEGIN, the locked read, this, COMMIT — the statements of the
/// plain fenced update + insert baseline (docs/PERFORMANCE.md).
///
/// Correctness, the same argument as the two statements apart:
/// - the row is locked by the `SELECT … FOR UPDATE` of this transaction, so nothing
///   changed it since the decision read it; the chain's head (`log_seq`, `log_hash`)
///   the attempt was sealed on is the head the update replaces;
/// - the update is still fenced (`fencing_token = $2`, the token read under the lock):
///   if it matched no row the CTE yields no row, nothing is inserted, the statement
///   reports 0 rows and the store answers `Conflict` and rolls back — a record is
///   never written without its attempt, nor an attempt without its record change;
/// - a data-modifying CTE runs exactly once and both writes belong to the one
///   statement and transaction: they commit or roll back together.
pub const UPDATE_RECORD_AND_APPEND_POSTGRES: &str = concat!(
    "WITH updated AS (",
    fenced_update!(),
    " RETURNING key) INSERT INTO idempotency_attempts (",
    attempt_columns!(),
    ") SELECT $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24 FROM updated"
);

/// PostgreSQL: the fenced write of a record **without the locked read**, for a writer
/// that knows the record as it last wrote it (the guard, settling a key it claimed).
/// [`UPDATE_RECORD_AND_APPEND_POSTGRES`] with the expected head in the condition
/// (`$25` `log_seq`, `$26` `log_hash`), in one autocommit statement.
///
/// Correctness: every write of a record is a fenced update that moves its head
/// (`log_seq`, `log_hash`: each change appends an attempt, [`crate::guard::seal`]), so
/// a record whose head is still the expected one is, column for column, the record the
/// decision was made on; the decision is the same pure function the locked path runs.
/// If anything was written since (a takeover, a resolution, a stale writer's rejected
/// row) or the key is gone, the update matches no row, the CTE inserts nothing, the
/// statement reports 0 rows, and the caller takes the locked path, which decides again
/// on what is stored. A concurrent locker makes this statement wait and then re-check
/// the condition on the row as committed (READ COMMITTED's re-check of an updated row).
pub const UPDATE_RECORD_IF_HEAD_AND_APPEND_POSTGRES: &str = concat!(
    "WITH updated AS (",
    fenced_update!(),
    " AND log_seq = $25 AND log_hash = $26 RETURNING key) INSERT INTO idempotency_attempts (",
    attempt_columns!(),
    ") SELECT $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24 FROM updated"
);

/// SQLite: the fenced update of [`UPDATE_RECORD_IF_HEAD_AND_APPEND_POSTGRES`] with the
/// expected head (`$13` `log_seq`, `$14` `log_hash`), in a `BEGIN IMMEDIATE`
/// transaction; the attempt is inserted after it only if it wrote the row.
pub const UPDATE_RECORD_IF_HEAD_SQLITE: &str =
    concat!(fenced_update!(), " AND log_seq = $13 AND log_hash = $14");

pub const INSERT_ATTEMPT: &str = concat!(
    "INSERT INTO idempotency_attempts (",
    attempt_columns!(),
    ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
);

pub const ATTEMPTS_OF_KEY: &str = concat!(select_attempts!(), "WHERE key = $1 ORDER BY seq");

/// The SQL of [`crate::guard::LeaseState::Expired`] at `$1`: the one spelling of an
/// expired lease in every count, page and gauge.
macro_rules! lease_expired {
    () => {
        "(status = 'IN_PROGRESS' AND lease_until <= $1)"
    };
}
pub(crate) use lease_expired;

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

    /// `$1` … `$n` in order, each once, as many as the statement's column list names.
    fn placeholders_match_columns(sql: &str, columns: &str) {
        let n = columns.split(',').count();
        let values = sql.rsplit_once("VALUES (").unwrap().1;
        let want: Vec<String> = (1..=n).map(|i| format!("${i}")).collect();
        let got: Vec<&str> = values
            .split(')')
            .next()
            .unwrap()
            .split(',')
            .map(str::trim)
            .collect();
        assert_eq!(got, want, "{sql}");
    }

    #[test]
    fn every_insert_binds_each_column_of_its_list_once() {
        placeholders_match_columns(CLAIM, record_columns!());
        placeholders_match_columns(INSERT_ATTEMPT, attempt_columns!());
    }

    #[test]
    fn the_merged_write_is_the_fenced_update_and_the_attempt_insert() {
        let columns = INSERT_ATTEMPT.split(" VALUES").next().unwrap();
        let merged = UPDATE_RECORD_AND_APPEND_POSTGRES;
        assert!(merged.contains(UPDATE_RECORD), "{merged}");
        assert!(merged.contains(columns), "{merged}");
    }
}
