-- Real hash chains for measuring `idemwatch verify` (docs/PERFORMANCE.md, "Making verify
-- faster"): keys :from .. :to - 1, 10 attempts each, whose keys derive from their intents
-- and whose hashes, fingerprints and heads are correct, so verify checks (and hashes)
-- every row and finds every chain intact. Each row carries the guard's detail (the
-- claim's lease and policy, and on every row the state it binds: ~400-550 bytes as the
-- guard writes them), so verify also compares each record with its head's state. The `checkpoint` bench area seeds with this
-- statement (benches/bench/seed.rs, `chains`: 100 k keys a transaction, secondary
-- indexes dropped and the foreign-key trigger skipped meanwhile); by hand, on a
-- migrated database:
--   psql -v ON_ERROR_STOP=1 -v from=0 -v to=100000 $URL -f benches/bench/verify_chains.sql
-- then `idemwatch checkpoint --signing-key …` and `idemwatch verify --public-key …`.
--
-- One statement: the chain is built seq by seq by a recursive query whose row 0 is
-- the genesis hash, so the canonical JSON the hash covers is written once. It is the
-- guard's (JCS: members sorted, no spaces); a mismatch shows as every key broken.
WITH RECURSIVE k AS (
  SELECT i, 'tenant-' || (i % 20) AS tenant,
    (ARRAY['issue_refund','send_sms','send_email','create_payout','charge_card'])[(1 + i % 5)::int] AS tool,
    'wf-' || i AS workflow_id, 'refund:' || i AS intent_id,
    timestamptz '2026-11-01 00:00:00+00' - make_interval(secs => i) AS base
  FROM generate_series(:from::bigint, :to::bigint - 1) i
), keyed AS (
  SELECT k.*, encode(sha256(convert_to('{"intent_id":"' || intent_id || '","step_id":"1","tenant":"'
    || tenant || '","tool":"' || tool || '","workflow_id":"' || workflow_id || '"}', 'UTF8')), 'hex') AS key
  FROM k
), bound AS (
  -- The state each row binds (guard/binding.rs): digests of the record after it, JCS.
  SELECT keyed.*, '{"business_args_sha256":"' || fp || '","business_ref_sha256":"'
      || encode(sha256(convert_to('order:B-' || i, 'UTF8')), 'hex')
      || '","error_sha256":null,"fingerprint":"' || fp || '","result_sha256":' AS state_head
  FROM keyed, LATERAL (SELECT encode(sha256(convert_to('{"amount_p":4500,"order":"B-' || i
      || '"}', 'UTF8')), 'hex') AS fp) f
), c (i, s, key, tenant, tool, base, state_head, kind, dur, at, detail, prev, hash) AS (
  SELECT i, 0::bigint, key, tenant, tool, base, state_head, NULL, NULL::bigint, NULL::timestamptz,
    NULL, NULL, repeat('0', 64)
  FROM bound
  UNION ALL
  SELECT c.i, n.s, c.key, c.tenant, c.tool, c.base, c.state_head, n.kind, n.dur, n.at, d.detail, c.hash,
    encode(sha256(convert_to(c.hash || E'\n' ||
      '{"actor":"bench","detail":' || d.detail || ',"duration_ms":' || COALESCE(n.dur::text, 'null') ||
      ',"fencing_token":1,"key":"' || c.key || '","kind":"' || n.kind ||
      '","occurred_at":"' || to_char(n.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') ||
      '","seq":' || n.s || ',"tenant":"' || c.tenant || '","tool":"' || c.tool || '"}', 'UTF8')), 'hex')
  FROM c, LATERAL (SELECT c.s + 1 AS s,
      CASE WHEN c.s = 0 THEN 'claimed' WHEN c.s = 1 THEN 'completed' ELSE 'replayed' END AS kind,
      CASE WHEN c.s = 1 THEN 120 END::bigint AS dur,
      c.base + make_interval(secs => (c.s + 1) / 1000.0) AS at) n,
    -- The guard's details: the claim's lease, policy and state; every later row's state.
    LATERAL (SELECT CASE WHEN n.s = 1 THEN '{"lease_until":"'
        || to_char((n.at + interval '30 seconds') AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
        || '","policy":{"call_timeout_seconds":10,"duplicate_window_seconds":86400,'
        || '"free_text_fields":[],"key_retention_seconds":86400,"natural_key":[],"tool":"' || c.tool
        || '"},"state":' || c.state_head || 'null,"status":"IN_PROGRESS"}}'
      ELSE '{"state":' || c.state_head || '"' || encode(sha256(convert_to('{"refund_id":"rf_bench"}', 'UTF8')), 'hex')
        || '","status":"DONE"}}' END AS detail) d
  WHERE c.s < 10
), records AS (
  INSERT INTO idempotency_records (key, tenant, tool, workflow_id, step_id, intent_id, business_ref,
    fingerprint, business_args, status, fencing_token, lease_until, attempt_count, result, error,
    provider_retention_until, created_at, updated_at, log_seq, log_hash)
  SELECT k.key, k.tenant, k.tool, k.workflow_id, '1', k.intent_id, 'order:B-' || k.i,
    encode(sha256(convert_to('{"amount_p":4500,"order":"B-' || k.i || '"}', 'UTF8')), 'hex'),
    jsonb_build_object('order', 'B-' || k.i, 'amount_p', 4500), 'DONE', 1,
    k.base + interval '30 seconds', 10, '{"refund_id": "rf_bench"}'::jsonb, NULL,
    k.base - interval '1 hour', k.base, k.base + interval '1 second', 10, h.hash
  FROM keyed k JOIN c h ON h.i = k.i AND h.s = 10
)
INSERT INTO idempotency_attempts (key, tenant, tool, seq, kind, fencing_token, actor, detail,
  duration_ms, occurred_at, prev_hash, hash)
SELECT key, tenant, tool, s, kind, 1, 'bench', detail::jsonb, dur, at, prev, hash
FROM c WHERE s > 0 ORDER BY i, s;
