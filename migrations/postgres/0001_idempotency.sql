-- idemwatch schema, PostgreSQL. Native types on purpose: SREs and auditors query
-- these tables directly (timestamptz, jsonb, xid8).

CREATE TABLE idempotency_records (
    key                      text        NOT NULL,
    tenant                   text        NOT NULL,
    tool                     text        NOT NULL,
    workflow_id              text        NOT NULL,
    step_id                  text        NOT NULL,
    intent_id                text        NOT NULL,
    business_ref             text,
    fingerprint              text        NOT NULL,
    business_args            jsonb       NOT NULL,
    status                   text        NOT NULL,
    fencing_token            bigint      NOT NULL,
    lease_until              timestamptz NOT NULL,
    attempt_count            bigint      NOT NULL,
    result                   jsonb,
    error                    text,
    provider_retention_until timestamptz NOT NULL,
    release_approved         boolean     NOT NULL DEFAULT false,
    created_at               timestamptz NOT NULL,
    updated_at               timestamptz NOT NULL,
    log_seq                  bigint      NOT NULL,
    log_hash                 text        NOT NULL,
    CONSTRAINT idempotency_records_pkey PRIMARY KEY (key),
    CONSTRAINT idempotency_records_key_format CHECK (key ~ '^[0-9a-f]{64}$'),
    CONSTRAINT idempotency_records_status_check
        CHECK (status IN ('IN_PROGRESS', 'DONE', 'FAILED', 'UNKNOWN')),
    CONSTRAINT idempotency_records_fencing_token_positive CHECK (fencing_token > 0)
);

-- Support staff search by order id, with or without the tenant.
CREATE INDEX idempotency_records_tenant_business_ref ON idempotency_records (tenant, business_ref);
CREATE INDEX idempotency_records_business_ref ON idempotency_records (business_ref, created_at DESC);
-- The backlog: UNKNOWN keys and IN_PROGRESS keys whose lease may have expired. Small
-- by design (a healthy system has few), so the gauges never scan the whole table.
CREATE INDEX idempotency_records_backlog ON idempotency_records (tool, status, created_at)
    WHERE status IN ('UNKNOWN', 'IN_PROGRESS');
-- Listing, newest activity first, with keyset pagination on (updated_at, key).
CREATE INDEX idempotency_records_updated_at ON idempotency_records (updated_at DESC, key DESC);
CREATE INDEX idempotency_records_tool_updated_at ON idempotency_records (tool, updated_at DESC, key DESC);

-- The attempt log: append-only, one row per thing that happened to a key, written in
-- the same transaction as the record change it describes.
CREATE TABLE idempotency_attempts (
    id            bigint      GENERATED ALWAYS AS IDENTITY,
    key           text        NOT NULL,
    tenant        text        NOT NULL,
    tool          text        NOT NULL,
    seq           bigint      NOT NULL,
    kind          text        NOT NULL,
    fencing_token bigint      NOT NULL,
    actor         text        NOT NULL,
    detail        jsonb       NOT NULL DEFAULT '{}'::jsonb,
    duration_ms   bigint,
    occurred_at   timestamptz NOT NULL,
    prev_hash     text        NOT NULL,
    hash          text        NOT NULL,
    -- The writing transaction's id: ids become visible out of order, txids let a
    -- reader follow the log in commit order (see docs/METRICS.md, the tailer).
    txid          xid8        NOT NULL DEFAULT pg_current_xact_id(),
    CONSTRAINT idempotency_attempts_pkey PRIMARY KEY (id),
    CONSTRAINT idempotency_attempts_key_seq UNIQUE (key, seq),
    CONSTRAINT idempotency_attempts_key_fkey FOREIGN KEY (key) REFERENCES idempotency_records (key),
    CONSTRAINT idempotency_attempts_seq_positive CHECK (seq > 0),
    CONSTRAINT idempotency_attempts_kind_check CHECK (kind IN (
        'claimed', 'replayed', 'replayed_failure', 'in_flight_rejected', 'payload_mismatch',
        'completed', 'failed', 'marked_unknown', 'taken_over', 'reconciled_found', 'resent',
        'escalated', 'resolved', 'stale_write_rejected'))
);

CREATE INDEX idempotency_attempts_txid ON idempotency_attempts (txid, id);
CREATE INDEX idempotency_attempts_occurred_at ON idempotency_attempts (occurred_at, id);

-- Append-only: rows may be deleted by retention together with their record, never
-- edited. (A superuser can still drop the trigger; the hash chain shows it.)
CREATE FUNCTION idempotency_attempts_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'idempotency_attempts is append-only: rows cannot be updated';
END;
$$;

CREATE TRIGGER idempotency_attempts_no_update
    BEFORE UPDATE ON idempotency_attempts
    FOR EACH ROW EXECUTE FUNCTION idempotency_attempts_append_only();
