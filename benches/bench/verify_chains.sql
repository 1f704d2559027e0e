-- Real hash chains for measuring `idemwatch verify` (docs/PERFORMANCE.md, "Making verify
-- faster"): :n keys × 10 attempts whose keys derive from their intents and whose hashes,
-- fingerprints and heads are correct, so verify checks (and hashes) every row and finds
-- every chain intact. Not wired into the bench; run on a migrated, empty database:
--   psql -v ON_ERROR_STOP=1 -v n=100000 $URL -f benches/bench/verify_chains.sql
-- then `idemwatch checkpoint --signing-key …` and `idemwatch verify --public-key …`.
CREATE TEMP TABLE k AS
SELECT i,
  'tenant-' || (i % 20) AS tenant,
  (ARRAY['issue_refund','send_sms','send_email','create_payout','charge_card'])[(1 + i % 5)::int] AS tool,
  'wf-' || i AS workflow_id, 'refund:' || i AS intent_id,
  timestamptz '2026-11-01 00:00:00+00' - make_interval(secs => i) AS base
FROM generate_series(0, :n - 1) i;
ALTER TABLE k ADD COLUMN key text;
UPDATE k SET key = encode(sha256(convert_to('{"intent_id":"' || intent_id || '","step_id":"1","tenant":"' || tenant || '","tool":"' || tool || '","workflow_id":"' || workflow_id || '"}', 'UTF8')), 'hex');
CREATE TEMP TABLE a (i bigint, s bigint, key text, tenant text, tool text, kind text, dur bigint, at timestamptz, prev text, hash text);
DO $$
DECLARE q int;
BEGIN
  FOR q IN 1..10 LOOP
    INSERT INTO a
    SELECT k.i, q, k.key, k.tenant, k.tool,
      CASE WHEN q = 1 THEN 'claimed' WHEN q < 10 THEN 'replayed' ELSE 'completed' END,
      CASE WHEN q = 10 THEN 120 END,
      k.base + make_interval(secs => q / 1000.0),
      COALESCE(p.hash, repeat('0', 64)), NULL
    FROM k LEFT JOIN a p ON p.i = k.i AND p.s = q - 1 AND q > 1
    WHERE q = 1 OR p.i IS NOT NULL;
    UPDATE a SET hash = encode(sha256(convert_to(prev || E'\n' ||
      '{"actor":"bench","detail":{},"duration_ms":' || COALESCE(dur::text, 'null') ||
      ',"fencing_token":1,"key":"' || key || '","kind":"' || kind ||
      '","occurred_at":"' || to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') ||
      '","seq":' || s || ',"tenant":"' || tenant || '","tool":"' || tool || '"}', 'UTF8')), 'hex')
    WHERE a.s = q;
    IF q = 1 THEN CREATE INDEX a_is ON a (i, s); END IF;
    ANALYZE a;
  END LOOP;
END $$;
INSERT INTO idempotency_records (key, tenant, tool, workflow_id, step_id, intent_id, business_ref,
  fingerprint, business_args, status, fencing_token, lease_until, attempt_count, result, error,
  provider_retention_until, created_at, updated_at, log_seq, log_hash)
SELECT k.key, k.tenant, k.tool, k.workflow_id, '1', k.intent_id, 'order:B-' || k.i,
  encode(sha256(convert_to('{"amount_p":4500,"order":"B-' || k.i || '"}', 'UTF8')), 'hex'),
  jsonb_build_object('order', 'B-' || k.i, 'amount_p', 4500), 'DONE', 1,
  k.base + interval '30 seconds', 10, '{"refund_id": "rf_bench"}'::jsonb, NULL,
  k.base - interval '1 hour', k.base, k.base + interval '1 second', 10, h.hash
FROM k JOIN a h ON h.i = k.i AND h.s = 10;
INSERT INTO idempotency_attempts (key, tenant, tool, seq, kind, fencing_token, actor, detail,
  duration_ms, occurred_at, prev_hash, hash)
SELECT key, tenant, tool, s, kind, 1, 'bench', '{}'::jsonb, dur, at, prev, hash FROM a ORDER BY i, s;
VACUUM ANALYZE idempotency_records;
VACUUM ANALYZE idempotency_attempts;
