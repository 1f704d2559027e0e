-- One definition of "past the provider's retention" (issue 16): the instant after which
-- a resend with the same key is no longer safe, computed once at the claim and stored
-- with the record. Every guard decision, page, count and gauge reads this column;
-- provider_retention_until stays the provider's own deadline.
--
-- The formula (docs/GUARD.md, src/guard/deadline.rs): the provider's deadline less a
-- margin of a minute, or a tenth of the retention when that is shorter.
--
-- The UPDATE rewrites every record once: on a large table run it in a quiet hour
-- (docs/OPERATIONS.md, Upgrading).

ALTER TABLE idempotency_records ADD COLUMN resend_safe_until timestamptz;

UPDATE idempotency_records SET resend_safe_until = provider_retention_until
    - LEAST(interval '1 minute', (provider_retention_until - created_at) / 10);

ALTER TABLE idempotency_records ALTER COLUMN resend_safe_until SET NOT NULL;

-- A claim row written without the column (a guard that predates it) gets it from the
-- same formula.
CREATE FUNCTION idempotency_records_resend_safe_until() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.resend_safe_until IS NULL THEN
        NEW.resend_safe_until := NEW.provider_retention_until
            - LEAST(interval '1 minute', (NEW.provider_retention_until - NEW.created_at) / 10);
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER idempotency_records_resend_safe_until
    BEFORE INSERT ON idempotency_records
    FOR EACH ROW EXECUTE FUNCTION idempotency_records_resend_safe_until();
