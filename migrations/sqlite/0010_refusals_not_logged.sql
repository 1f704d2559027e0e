-- See migrations/postgres/0010_refusals_not_logged.sql: refusals answered on a key
-- without a row of their own, counted in the transaction that decides not to append.
ALTER TABLE idempotency_records
    ADD COLUMN refusals_not_logged INTEGER NOT NULL DEFAULT 0;
