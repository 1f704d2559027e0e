-- Issue 50: support staff find a key by whatever id they have. See the PostgreSQL
-- migration of the same name for what the terms of a key are; the view below is the
-- same definition in SQLite's words. A trigger cannot hold a WITH clause in SQLite,
-- hence a view both triggers read.
CREATE TABLE idempotency_search_terms (
    term TEXT NOT NULL,
    key  TEXT NOT NULL,
    CONSTRAINT idempotency_search_terms_pkey PRIMARY KEY (term, key),
    CONSTRAINT idempotency_search_terms_key_fkey FOREIGN KEY (key)
        REFERENCES idempotency_records (key) ON DELETE CASCADE
) WITHOUT ROWID;
CREATE INDEX idempotency_search_terms_key ON idempotency_search_terms (key);

-- The colon-separated parts of both ids as one JSON array: json_quote escapes each id,
-- and a colon is never part of an escape, so replacing it keeps the array valid.
CREATE VIEW idempotency_record_search_terms AS
SELECT key, term FROM (
    SELECT r.key, lower(r.business_ref) AS term FROM idempotency_records AS r
    UNION ALL
    SELECT r.key, lower(r.intent_id) FROM idempotency_records AS r
    UNION ALL
    SELECT r.key, p.value
    FROM idempotency_records AS r,
         json_each('[' || replace(json_quote(lower(r.business_ref)), ':', '","') || ','
                   || replace(json_quote(lower(r.intent_id)), ':', '","') || ']') AS p
    WHERE p.type = 'text' AND p.value GLOB '*[0-9]*'
    UNION ALL
    SELECT r.key, substr(p.value, length(rtrim(p.value, '0123456789')) + 1)
    FROM idempotency_records AS r,
         json_each('[' || replace(json_quote(lower(r.business_ref)), ':', '","') || ','
                   || replace(json_quote(lower(r.intent_id)), ':', '","') || ']') AS p
    WHERE p.type = 'text' AND p.value GLOB '*[0-9][0-9][0-9]'
    UNION ALL
    SELECT r.key, lower(t.atom)
    FROM idempotency_records AS r, json_tree(coalesce(r.result, 'null')) AS t
    WHERE t.type = 'text' AND t.atom GLOB '*[0-9]*'
)
WHERE term IS NOT NULL AND term <> '' AND length(term) <= 200;

CREATE TRIGGER idempotency_search_terms_insert
AFTER INSERT ON idempotency_records
BEGIN
    INSERT OR IGNORE INTO idempotency_search_terms (term, key)
    SELECT term, key FROM idempotency_record_search_terms WHERE key = NEW.key;
END;

-- Only when what the terms come from changed (the result, once, when the call completes).
CREATE TRIGGER idempotency_search_terms_update
AFTER UPDATE OF business_ref, intent_id, result ON idempotency_records
WHEN NEW.business_ref IS NOT OLD.business_ref OR NEW.intent_id IS NOT OLD.intent_id
     OR NEW.result IS NOT OLD.result
BEGIN
    DELETE FROM idempotency_search_terms WHERE key = NEW.key;
    INSERT OR IGNORE INTO idempotency_search_terms (term, key)
    SELECT term, key FROM idempotency_record_search_terms WHERE key = NEW.key;
END;

INSERT OR IGNORE INTO idempotency_search_terms (term, key)
SELECT term, key FROM idempotency_record_search_terms;
