-- "Which keys had a payload mismatch (an escalation, a takeover…) in this window?"
-- (/keys?outcome=…, /keys?attempt_kind=…, the Grafana data links): one range scan per
-- kind, index-only (attempts are append-only, so the visibility map stays set).
-- IF NOT EXISTS: on a large table, create it first with CREATE INDEX CONCURRENTLY (same
-- name and definition) so that this migration does not block writes.
CREATE INDEX IF NOT EXISTS idempotency_attempts_kind_occurred_at
    ON idempotency_attempts (kind, occurred_at, key);
