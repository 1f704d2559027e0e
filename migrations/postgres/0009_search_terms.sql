-- Issue 50: support staff find a key by whatever id the customer or the agent has
-- (docs/UI.md, "Search"). Each key's ids, lower-cased, one row each, written by a
-- trigger in the transaction that writes the record, so the search box is one probe of
-- the primary key (term, key) and no write path in the code has to remember it.
--
-- The terms of a key (one definition, the view below):
--   * its business ref and its intent id, whole;
--   * each colon-separated part of them that holds a digit (`order:A-28261` gives
--     `a-28261`; `refund:order-A-28261:ticket-1934` gives `ticket-1934`; the bare verb
--     `refund`, shared by every key, is left out);
--   * the number a part ends with, of 3 digits or more (`28261`, `1934`);
--   * every string in the stored result that holds a digit (the provider's refund id
--     `rf_002202`, wherever it sits in the result).
-- Terms longer than 200 characters are left out (the whole value stays searchable
-- through the intent id and business ref filters).
-- The rows live as long as their record: retention's delete cascades here.
CREATE TABLE idempotency_search_terms (
    term text NOT NULL,
    key  text NOT NULL,
    CONSTRAINT idempotency_search_terms_pkey PRIMARY KEY (term, key),
    CONSTRAINT idempotency_search_terms_key_fkey FOREIGN KEY (key)
        REFERENCES idempotency_records (key) ON DELETE CASCADE
);
-- For the cascade and for rewriting one key's terms.
CREATE INDEX idempotency_search_terms_key ON idempotency_search_terms (key);

CREATE VIEW idempotency_record_search_terms AS
SELECT r.key, t.term
FROM idempotency_records AS r
CROSS JOIN LATERAL (
    SELECT p.v AS term
    FROM unnest(ARRAY[lower(r.business_ref), lower(r.intent_id)]) AS p(v)
    UNION ALL
    SELECT p.v
    FROM unnest(string_to_array(lower(r.business_ref), ':')
                || string_to_array(lower(r.intent_id), ':')) AS p(v)
    WHERE p.v ~ '[0-9]'
    UNION ALL
    SELECT substr(p.v, length(rtrim(p.v, '0123456789')) + 1)
    FROM unnest(string_to_array(lower(r.business_ref), ':')
                || string_to_array(lower(r.intent_id), ':')) AS p(v)
    WHERE p.v ~ '[0-9]{3}$'
    UNION ALL
    SELECT lower(s #>> '{}')
    FROM jsonb_path_query(coalesce(r.result, 'null'::jsonb), 'strict $.**') AS s
    WHERE jsonb_typeof(s) = 'string' AND (s #>> '{}') ~ '[0-9]'
) AS t
WHERE t.term IS NOT NULL AND t.term <> '' AND length(t.term) <= 200;

-- Rewrites a key's terms when what they come from changed (the result, once, when the
-- call completes; a claim inserts them). Unchanged updates (leases, statuses) cost a
-- comparison.
CREATE FUNCTION idempotency_search_terms_write() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF NEW.business_ref IS NOT DISTINCT FROM OLD.business_ref
           AND NEW.intent_id = OLD.intent_id
           AND NEW.result IS NOT DISTINCT FROM OLD.result THEN
            RETURN NULL;
        END IF;
        DELETE FROM idempotency_search_terms WHERE key = NEW.key;
    END IF;
    INSERT INTO idempotency_search_terms (term, key)
    SELECT term, key FROM idempotency_record_search_terms WHERE key = NEW.key
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END;
$$;

CREATE TRIGGER idempotency_search_terms_write
    AFTER INSERT OR UPDATE OF business_ref, intent_id, result ON idempotency_records
    FOR EACH ROW EXECUTE FUNCTION idempotency_search_terms_write();

-- The keys recorded before this migration. On a large table this reads every record
-- once (about a minute per million keys).
INSERT INTO idempotency_search_terms (term, key)
SELECT term, key FROM idempotency_record_search_terms
ON CONFLICT DO NOTHING;
