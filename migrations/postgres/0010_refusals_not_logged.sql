-- Issue 47: a run of identical refusals on one key appends one row (docs/GUARD.md, "What
-- the attempt log records"); the refusals answered without a row are counted here, in
-- the transaction that decides not to append. Rows plus this are the refusals answered.
-- Not part of the hash chain: no row says it. A constant default: no table rewrite.
ALTER TABLE idempotency_records
    ADD COLUMN refusals_not_logged bigint NOT NULL DEFAULT 0;
