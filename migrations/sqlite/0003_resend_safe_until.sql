-- One definition of "past the provider's retention": see
-- migrations/postgres/0003_resend_safe_until.sql. Times are RFC 3339 text; the
-- formula below keeps milliseconds (SQLite's date functions go no finer), the guard
-- writes microseconds. Both sort as text.
--
-- SQLite cannot fill a column before its NOT NULL check, so the column is nullable
-- here and the trigger fills it in the same statement as the insert.

ALTER TABLE idempotency_records ADD COLUMN resend_safe_until TEXT;

UPDATE idempotency_records SET resend_safe_until = strftime('%Y-%m-%dT%H:%M:%f+00:00',
    provider_retention_until,
    printf('%.3f seconds', -min(60.0,
        (julianday(provider_retention_until) - julianday(created_at)) * 86400.0 / 10)));

CREATE TRIGGER idempotency_records_resend_safe_until
    AFTER INSERT ON idempotency_records
    FOR EACH ROW WHEN NEW.resend_safe_until IS NULL
BEGIN
    UPDATE idempotency_records SET resend_safe_until = strftime('%Y-%m-%dT%H:%M:%f+00:00',
        NEW.provider_retention_until,
        printf('%.3f seconds', -min(60.0,
            (julianday(NEW.provider_retention_until) - julianday(NEW.created_at)) * 86400.0 / 10)))
    WHERE key = NEW.key;
END;
