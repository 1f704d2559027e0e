-- Indexes for the UI's pages (issue 4), one per page query that had none. Each is
-- named after what it serves; docs/UI.md lists which query uses which index.
-- IF NOT EXISTS: on a large table, create these first with CREATE INDEX CONCURRENTLY
-- (same names and definitions) so that this migration does not block writes.

-- Support staff type the order id without its prefix: "A-88214" finds the key whose
-- business_ref is "order:A-88214". The expression is the part after the first colon
-- (the whole value when there is none); the search query repeats it exactly.
CREATE INDEX IF NOT EXISTS idempotency_records_business_ref_id
    ON idempotency_records ((substr(business_ref, strpos(business_ref, ':') + 1)));

-- "What did run 7f3a do?" and "which keys carry intent refund:order-8812?"
CREATE INDEX IF NOT EXISTS idempotency_records_workflow_id ON idempotency_records (workflow_id);
CREATE INDEX IF NOT EXISTS idempotency_records_intent_id ON idempotency_records (intent_id);

-- "Every UNKNOWN key, newest activity first": the undecided keys in listing order,
-- small for the same reason as idempotency_records_backlog.
CREATE INDEX IF NOT EXISTS idempotency_records_undecided_updated_at
    ON idempotency_records (updated_at DESC, key DESC)
    WHERE status IN ('UNKNOWN', 'IN_PROGRESS');

-- The overview counts attempts per tool and kind over the last day from this index
-- alone (an index-only scan: attempts are append-only, so the visibility map stays set).
CREATE INDEX IF NOT EXISTS idempotency_attempts_occurred_at_tool_kind
    ON idempotency_attempts (occurred_at, tool, kind);
