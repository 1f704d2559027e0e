-- Issue 15: natural keys and suspected duplicates. Same tables and purpose as
-- migrations/postgres/0007_natural_keys_duplicates.sql; times are RFC 3339 text.

CREATE TABLE idempotency_natural_keys (
    tenant      TEXT NOT NULL,
    tool        TEXT NOT NULL,
    natural_key TEXT NOT NULL,
    key         TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    CONSTRAINT idempotency_natural_keys_pkey PRIMARY KEY (tenant, tool, natural_key),
    CONSTRAINT idempotency_natural_keys_key_fkey FOREIGN KEY (key)
        REFERENCES idempotency_records (key) ON DELETE CASCADE
) WITHOUT ROWID;
CREATE INDEX idempotency_natural_keys_key ON idempotency_natural_keys (key);

CREATE INDEX idempotency_records_duplicate_probe
    ON idempotency_records (tenant, tool, business_ref, fingerprint, created_at DESC)
    WHERE business_ref IS NOT NULL;

CREATE TABLE idempotency_suspected_duplicates (
    key         TEXT NOT NULL,
    other_key   TEXT NOT NULL,
    tenant      TEXT NOT NULL,
    tool        TEXT NOT NULL,
    detected_at TEXT NOT NULL,
    state       TEXT NOT NULL DEFAULT 'open',
    reviewed_by TEXT,
    reviewed_at TEXT,
    reason      TEXT,
    CONSTRAINT idempotency_suspected_duplicates_pkey PRIMARY KEY (key),
    CONSTRAINT idempotency_suspected_duplicates_key_fkey FOREIGN KEY (key)
        REFERENCES idempotency_records (key) ON DELETE CASCADE,
    CONSTRAINT idempotency_suspected_duplicates_other_key_fkey FOREIGN KEY (other_key)
        REFERENCES idempotency_records (key) ON DELETE CASCADE,
    CONSTRAINT idempotency_suspected_duplicates_state_check
        CHECK (state IN ('open', 'intended', 'confirmed'))
) WITHOUT ROWID;
CREATE INDEX idempotency_suspected_duplicates_other_key
    ON idempotency_suspected_duplicates (other_key);
CREATE INDEX idempotency_suspected_duplicates_state
    ON idempotency_suspected_duplicates (state, detected_at DESC, key);

-- A new attempt kind, `duplicate_reviewed`: SQLite cannot alter a CHECK, so the
-- attempt log is rebuilt with the same columns, ids and indexes. The id sequence is
-- carried over, so ids are never reused (the tailer follows the log by id).
CREATE TABLE idempotency_attempts_0007 (
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
        'escalated', 'resolved', 'stale_write_rejected', 'duplicate_reviewed'))
);
INSERT INTO idempotency_attempts_0007 (id, key, tenant, tool, seq, kind, fencing_token, actor,
    detail, duration_ms, occurred_at, prev_hash, hash)
    SELECT id, key, tenant, tool, seq, kind, fencing_token, actor, detail, duration_ms,
        occurred_at, prev_hash, hash FROM idempotency_attempts;
-- sqlite_sequence has no unique name: update the row the copy made, or add one.
UPDATE sqlite_sequence
    SET seq = (SELECT seq FROM sqlite_sequence WHERE name = 'idempotency_attempts')
    WHERE name = 'idempotency_attempts_0007'
      AND EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'idempotency_attempts');
INSERT INTO sqlite_sequence (name, seq)
    SELECT 'idempotency_attempts_0007', seq FROM sqlite_sequence WHERE name = 'idempotency_attempts'
      AND NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'idempotency_attempts_0007');
DROP TABLE idempotency_attempts;
ALTER TABLE idempotency_attempts_0007 RENAME TO idempotency_attempts;

CREATE INDEX idempotency_attempts_occurred_at ON idempotency_attempts (occurred_at, id);
CREATE INDEX idempotency_attempts_kind_occurred_at ON idempotency_attempts (kind, occurred_at, key);
CREATE INDEX idempotency_attempts_occurred_at_tool_kind ON idempotency_attempts (occurred_at, tool, kind);

CREATE TRIGGER idempotency_attempts_no_update
    BEFORE UPDATE ON idempotency_attempts
BEGIN
    SELECT RAISE(ABORT, 'idempotency_attempts is append-only: rows cannot be updated');
END;
