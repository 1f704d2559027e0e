-- Issue 15: duplicates the intent key cannot see (docs/GUARD.md, "Natural keys" and
-- "Suspected duplicates").

-- Natural keys: one business action (one refund per invoice) per tenant and tool,
-- whatever intent key a caller mints. The claim inserts the record and this row in
-- one transaction; the primary key makes a second intent with the same natural key
-- wait for the first claim and then find it (see src/store/sql.rs, CLAIM_NATURAL_KEY).
-- `natural_key` is the SHA-256 of the canonical JSON of the named argument fields.
-- The row lives as long as its record: retention's delete cascades here.
CREATE TABLE idempotency_natural_keys (
    tenant      text        NOT NULL,
    tool        text        NOT NULL,
    natural_key text        NOT NULL,
    key         text        NOT NULL,
    created_at  timestamptz NOT NULL,
    CONSTRAINT idempotency_natural_keys_pkey PRIMARY KEY (tenant, tool, natural_key),
    CONSTRAINT idempotency_natural_keys_key_fkey FOREIGN KEY (key)
        REFERENCES idempotency_records (key) ON DELETE CASCADE
);
CREATE INDEX idempotency_natural_keys_key ON idempotency_natural_keys (key);

-- Suspected duplicates: the claim looks for an earlier key with the same tenant, tool,
-- business ref and fingerprint inside the tool's window. One index probe, newest first.
CREATE INDEX idempotency_records_duplicate_probe
    ON idempotency_records (tenant, tool, business_ref, fingerprint, created_at DESC)
    WHERE business_ref IS NOT NULL;

-- One row per suspected key (`key`, the later claim) and the earlier key it matched.
-- `state`: open until a resolver marks it intended (a genuine repeat) or confirmed (a
-- real duplicate); the review is also an attempt row (`duplicate_reviewed`) on `key`.
CREATE TABLE idempotency_suspected_duplicates (
    key         text        NOT NULL,
    other_key   text        NOT NULL,
    tenant      text        NOT NULL,
    tool        text        NOT NULL,
    detected_at timestamptz NOT NULL,
    state       text        NOT NULL DEFAULT 'open',
    reviewed_by text,
    reviewed_at timestamptz,
    reason      text,
    CONSTRAINT idempotency_suspected_duplicates_pkey PRIMARY KEY (key),
    CONSTRAINT idempotency_suspected_duplicates_key_fkey FOREIGN KEY (key)
        REFERENCES idempotency_records (key) ON DELETE CASCADE,
    CONSTRAINT idempotency_suspected_duplicates_other_key_fkey FOREIGN KEY (other_key)
        REFERENCES idempotency_records (key) ON DELETE CASCADE,
    CONSTRAINT idempotency_suspected_duplicates_state_check
        CHECK (state IN ('open', 'intended', 'confirmed'))
);
CREATE INDEX idempotency_suspected_duplicates_other_key
    ON idempotency_suspected_duplicates (other_key);
CREATE INDEX idempotency_suspected_duplicates_state
    ON idempotency_suspected_duplicates (state, detected_at DESC, key);

-- A resolver's review of a suspected pair is recorded in the attempt log.
ALTER TABLE idempotency_attempts DROP CONSTRAINT idempotency_attempts_kind_check;
ALTER TABLE idempotency_attempts ADD CONSTRAINT idempotency_attempts_kind_check CHECK (kind IN (
    'claimed', 'replayed', 'replayed_failure', 'in_flight_rejected', 'payload_mismatch',
    'completed', 'failed', 'marked_unknown', 'taken_over', 'reconciled_found', 'resent',
    'escalated', 'resolved', 'stale_write_rejected', 'duplicate_reviewed'));
