-- The keys with an attempt of some kinds in a time window (/keys?outcome=…,
-- /keys?attempt_kind=…). Same name and purpose as
-- migrations/postgres/0005_attempt_kind_index.sql.
CREATE INDEX IF NOT EXISTS idempotency_attempts_kind_occurred_at
    ON idempotency_attempts (kind, occurred_at, key);
