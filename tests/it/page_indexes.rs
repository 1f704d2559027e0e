//! Every page query is served by an index, on both backends, checked from the plans the
//! planners choose for a table of realistic shape.

use crate::both_backends;
use idemwatch::store::Store;

/// `n` records (two per order, three per run, a few UNKNOWN) with one attempt each,
/// then ANALYZE. Raw SQL: the guard would take minutes for this many.
pub(crate) async fn fill(store: &Store, n: i64) {
    const PG: &str = "INSERT INTO idempotency_records (key, tenant, tool, workflow_id, step_id, \
        intent_id, business_ref, fingerprint, business_args, status, fencing_token, lease_until, \
        attempt_count, provider_retention_until, release_approved, created_at, updated_at, log_seq, log_hash) \
        SELECT lpad(to_hex(i), 64, '0'), 'tenant_' || (i % 3), 'tool_' || (i % 5), 'run-' || (i / 3), '1', \
        'intent-' || i, 'order:O-' || (i / 2), 'f', '{}'::jsonb, \
        CASE WHEN i % 100 = 0 THEN 'UNKNOWN' WHEN i % 100 = 1 THEN 'IN_PROGRESS' WHEN i % 50 = 2 THEN 'FAILED' ELSE 'DONE' END, \
        1, now() - i * interval '1 second', 1, now() + interval '1 day', false, \
        now() - i * interval '1 second', now() - i * interval '1 second', 1, 'h' \
        FROM generate_series(1, $1) AS i";
    const SQLITE: &str = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $1) \
        INSERT INTO idempotency_records (key, tenant, tool, workflow_id, step_id, \
        intent_id, business_ref, fingerprint, business_args, status, fencing_token, lease_until, \
        attempt_count, provider_retention_until, release_approved, created_at, updated_at, log_seq, log_hash) \
        SELECT printf('%064x', i), 'tenant_' || (i % 3), 'tool_' || (i % 5), 'run-' || (i / 3), '1', \
        'intent-' || i, 'order:O-' || (i / 2), 'f', '{}', \
        CASE WHEN i % 100 = 0 THEN 'UNKNOWN' WHEN i % 100 = 1 THEN 'IN_PROGRESS' WHEN i % 50 = 2 THEN 'FAILED' ELSE 'DONE' END, \
        1, strftime('%Y-%m-%dT%H:%M:%S+00:00', 'now', '-' || i || ' seconds'), 1, \
        strftime('%Y-%m-%dT%H:%M:%S+00:00', 'now', '+1 day'), 0, \
        strftime('%Y-%m-%dT%H:%M:%S+00:00', 'now', '-' || i || ' seconds'), \
        strftime('%Y-%m-%dT%H:%M:%S+00:00', 'now', '-' || i || ' seconds'), 1, 'h' FROM n";
    const ATTEMPTS: &str = "INSERT INTO idempotency_attempts (key, tenant, tool, seq, kind, \
        fencing_token, actor, detail, occurred_at, prev_hash, hash) \
        SELECT key, tenant, tool, 1, 'claimed', 1, 'w', business_args, created_at, 'p', 'h' \
        FROM idempotency_records";
    match store {
        Store::Postgres(pool) => {
            sqlx::query(PG).bind(n).execute(pool).await.unwrap();
            sqlx::query(ATTEMPTS).execute(pool).await.unwrap();
            sqlx::query("ANALYZE").execute(pool).await.unwrap();
        }
        Store::Sqlite(pool) => {
            sqlx::query(SQLITE).bind(n).execute(pool).await.unwrap();
            sqlx::query(ATTEMPTS).execute(pool).await.unwrap();
            sqlx::query("ANALYZE").execute(pool).await.unwrap();
        }
    }
}

both_backends!(
    async fn every_page_query_uses_an_index(db: TestDb) {
        // Plans depend on statistics: give the planners a table of realistic shape.
        fill(&db.store, 20_000).await;
        let plans = db.store.explain_page_queries().await.unwrap();
        let expected = [
            // Support's search box: one range of the terms' primary key (term, key).
            (
                "keys by search term",
                &["idempotency_search_terms_pkey|idempotency_search_terms USING PRIMARY KEY"][..],
            ),
            (
                "keys by business ref",
                &[
                    "idempotency_records_business_ref",
                    "idempotency_records_business_ref_id",
                ][..],
            ),
            (
                "keys by key prefix",
                &["PRIMARY KEY|idempotency_records_pkey"],
            ),
            ("keys by workflow id", &["idempotency_records_workflow_id"]),
            ("keys by intent id", &["idempotency_records_intent_id"]),
            // The undecided keys: either of the two small partial indexes over them.
            (
                "keys by undecided status",
                &["idempotency_records_undecided_updated_at|idempotency_records_backlog"],
            ),
            (
                "keys by tool and time",
                &["idempotency_records_tool_updated_at"],
            ),
            // What happened in a window: the attempts of those kinds, by kind.
            (
                "keys by attempt kind and time",
                &["idempotency_attempts_kind_occurred_at"],
            ),
            // A few records by business ref, each probing its own attempts by key (or,
            // for a kind the statistics say is rare, that kind's attempts read once).
            (
                "keys by business ref and attempt kind",
                &[
                    "idempotency_records_business_ref",
                    "idempotency_attempts_key_seq|sqlite_autoindex_idempotency_attempts_1|idempotency_attempts_kind_occurred_at",
                ][..],
            ),
            ("keys by last activity", &["idempotency_records_updated_at"]),
            // A tenant the statistics say is rare may be read from the tenant index instead.
            (
                "keys by last activity and tenant",
                &["idempotency_records_updated_at|idempotency_records_tenant_business_ref"],
            ),
            ("same business ref", &["idempotency_records_business_ref"]),
            (
                "backlog",
                &["idempotency_records_undecided_updated_at|idempotency_records_backlog"],
            ),
            (
                "backlog of a tool",
                &["idempotency_records_undecided_updated_at|idempotency_records_backlog"],
            ),
            (
                "backlog summary",
                &["idempotency_records_undecided_updated_at|idempotency_records_backlog"],
            ),
            (
                "attempt buckets",
                // The covering index, or (SQLite, on a connection that has loaded the
                // statistics ANALYZE wrote) the plain time index: a range scan over the
                // window either way, grouped in a temporary B-tree in the second case.
                &["idempotency_attempts_occurred_at_tool_kind|idempotency_attempts_occurred_at ("],
            ),
        ];
        assert_eq!(plans.len(), 11 * 2 + 5);
        for (name, plan) in &plans {
            let base = name.trim_end_matches(" (count)");
            let (_, indexes) = expected
                .iter()
                .find(|(n, _)| *n == base)
                .unwrap_or_else(|| panic!("{name}"));
            for index in *indexes {
                assert!(
                    index.split('|').any(|i| plan.contains(i)),
                    "{name} must use {index}:\n{plan}"
                );
            }
            assert!(!plan.contains("Seq Scan"), "{name}:\n{plan}");
            let full_scan = plan
                .lines()
                .any(|l| l.trim_start().starts_with("SCAN idempotency_") && !l.contains("USING"));
            assert!(!full_scan, "{name}:\n{plan}");
        }
    }
);
