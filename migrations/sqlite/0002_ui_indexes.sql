-- Indexes for the UI's pages (issue 4), one per page query that had none. Same names
-- and purposes as migrations/postgres/0002_ui_indexes.sql.

-- The part of business_ref after the first colon (the whole value when there is
-- none): "A-88214" finds "order:A-88214". SQLite spells strpos as instr.
CREATE INDEX IF NOT EXISTS idempotency_records_business_ref_id
    ON idempotency_records (substr(business_ref, instr(business_ref, ':') + 1));

CREATE INDEX IF NOT EXISTS idempotency_records_workflow_id ON idempotency_records (workflow_id);
CREATE INDEX IF NOT EXISTS idempotency_records_intent_id ON idempotency_records (intent_id);

-- "Every UNKNOWN key, newest activity first": the undecided keys in listing order,
-- small for the same reason as idempotency_records_backlog.
CREATE INDEX IF NOT EXISTS idempotency_records_undecided_updated_at
    ON idempotency_records (updated_at DESC, key DESC)
    WHERE status IN ('UNKNOWN', 'IN_PROGRESS');

CREATE INDEX IF NOT EXISTS idempotency_attempts_occurred_at_tool_kind
    ON idempotency_attempts (occurred_at, tool, kind);
