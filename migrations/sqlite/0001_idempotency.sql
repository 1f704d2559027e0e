-- idemwatch schema, embedded SQLite. Same tables and columns as PostgreSQL; times
-- are RFC 3339 UTC text (they sort as text), JSON is text.

CREATE TABLE idempotency_records (
    key                      TEXT    NOT NULL,
    tenant                   TEXT    NOT NULL,
    tool                     TEXT    NOT NULL,
    workflow_id              TEXT    NOT NULL,
    step_id                  TEXT    NOT NULL,
    intent_id                TEXT    NOT NULL,
    business_ref             TEXT,
    fingerprint              TEXT    NOT NULL,
    business_args            TEXT    NOT NULL,
    status                   TEXT    NOT NULL,
    fencing_token            INTEGER NOT NULL,
    lease_until              TEXT    NOT NULL,
    attempt_count            INTEGER NOT NULL,
    result                   TEXT,
    error                    TEXT,
    provider_retention_until TEXT    NOT NULL,
    release_approved         BOOLEAN NOT NULL DEFAULT 0,
    created_at               TEXT    NOT NULL,
    updated_at               TEXT    NOT NULL,
    log_seq                  INTEGER NOT NULL,
    log_hash                 TEXT    NOT NULL,
    CONSTRAINT idempotency_records_pkey PRIMARY KEY (key),
    CONSTRAINT idempotency_records_key_format CHECK (length(key) = 64 AND key NOT GLOB '*[^0-9a-f]*'),
    CONSTRAINT idempotency_records_status_check
        CHECK (status IN ('IN_PROGRESS', 'DONE', 'FAILED', 'UNKNOWN')),
    CONSTRAINT idempotency_records_fencing_token_positive CHECK (fencing_token > 0)
) WITHOUT ROWID;

CREATE INDEX idempotency_records_tenant_business_ref ON idempotency_records (tenant, business_ref);
CREATE INDEX idempotency_records_business_ref ON idempotency_records (business_ref, created_at DESC);
CREATE INDEX idempotency_records_backlog ON idempotency_records (tool, status, created_at)
    WHERE status IN ('UNKNOWN', 'IN_PROGRESS');
CREATE INDEX idempotency_records_updated_at ON idempotency_records (updated_at DESC, key DESC);
CREATE INDEX idempotency_records_tool_updated_at ON idempotency_records (tool, updated_at DESC, key DESC);

-- SQLite has one writer at a time, so id order is commit order: no txid column.
CREATE TABLE idempotency_attempts (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    key           TEXT    NOT NULL,
    tenant        TEXT    NOT NULL,
    tool          TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    kind          TEXT    NOT NULL,
    fencing_token INTEGER NOT NULL,
    actor         TEXT    NOT NULL,
    detail        TEXT    NOT NULL DEFAULT '{}',
    duration_ms   INTEGER,
    occurred_at   TEXT    NOT NULL,
    prev_hash     TEXT    NOT NULL,
    hash          TEXT    NOT NULL,
    CONSTRAINT idempotency_attempts_key_seq UNIQUE (key, seq),
    CONSTRAINT idempotency_attempts_key_fkey FOREIGN KEY (key) REFERENCES idempotency_records (key),
    CONSTRAINT idempotency_attempts_seq_positive CHECK (seq > 0),
    CONSTRAINT idempotency_attempts_kind_check CHECK (kind IN (
        'claimed', 'replayed', 'replayed_failure', 'in_flight_rejected', 'payload_mismatch',
        'completed', 'failed', 'marked_unknown', 'taken_over', 'reconciled_found', 'resent',
        'escalated', 'resolved', 'stale_write_rejected'))
);

CREATE INDEX idempotency_attempts_occurred_at ON idempotency_attempts (occurred_at, id);

CREATE TRIGGER idempotency_attempts_no_update
    BEFORE UPDATE ON idempotency_attempts
BEGIN
    SELECT RAISE(ABORT, 'idempotency_attempts is append-only: rows cannot be updated');
END;
