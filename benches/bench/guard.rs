//! Guard throughput and latency against a plain-sqlx baseline issuing the same
//! minimal statements (claim insert + attempt insert; fenced update + attempt insert)
//! on the same pool.

use super::report::{Figure, Latencies};
use chrono::{TimeDelta, Utc};
use idemwatch::guard::{
    Guard, GuardSettings, IdempotencyKey, Intent, Operation, SystemClock, ToolCall,
};
use idemwatch::store::Store;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A provider that answers at once: the benchmark measures the guard, not a provider.
struct Instant0;

impl Operation for Instant0 {
    type Error = String;
    fn key_retention(&self) -> TimeDelta {
        TimeDelta::hours(24)
    }
    fn call_timeout(&self) -> Duration {
        Duration::from_secs(10)
    }
    async fn execute(&self, _: &IdempotencyKey, _: &Value) -> Result<Value, String> {
        Ok(json!({"refund_id": "rf_bench"}))
    }
    async fn find_by_key(&self, _: &IdempotencyKey) -> Result<Option<Value>, String> {
        Ok(None)
    }
}

static NEXT: AtomicU64 = AtomicU64::new(0);

fn call(tag: &str) -> ToolCall {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    ToolCall {
        intent: Intent {
            tenant: "bench".into(),
            tool: "issue_refund".into(),
            workflow_id: format!("{tag}-{n}"),
            step_id: "1".into(),
            intent_id: format!("refund:{n}"),
        },
        business_ref: Some(format!("order:B-{n}")),
        args: json!({"order": format!("B-{n}"), "amount_p": 4500}),
        actor: "bench".into(),
    }
}

/// Runs `op` on `workers` tasks for `duration`; returns one latency per operation.
async fn drive<F, Fut>(workers: usize, duration: Duration, op: F) -> (Latencies, Duration)
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let started = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..workers {
        let op = op.clone();
        set.spawn(async move {
            let mut samples = Vec::new();
            while started.elapsed() < duration {
                let t = Instant::now();
                op().await;
                samples.push(t.elapsed());
            }
            samples
        });
    }
    let mut all = Vec::new();
    for samples in set.join_all().await {
        all.extend(samples);
    }
    (Latencies::new(all), started.elapsed())
}

/// The baseline: the guard's minimal statements from a plain loop, no guard logic.
async fn baseline_op(store: &Store, c: &ToolCall) {
    let key = c.intent.key().unwrap();
    let now = Utc::now();
    let args = json!({"order": "x", "amount_p": 4500});
    macro_rules! body {
        ($pool:expr, $begin:expr) => {{
            let mut tx = $begin.await.unwrap();
            sqlx::query(
                "INSERT INTO idempotency_records (key, tenant, tool, workflow_id, step_id, intent_id, business_ref, \
                 fingerprint, business_args, status, fencing_token, lease_until, attempt_count, provider_retention_until, \
                 created_at, updated_at, log_seq, log_hash) VALUES ($1, 'bench', 'issue_refund', $2, '1', $3, $4, 'f', $5, \
                 'IN_PROGRESS', 1, $6, 1, $6, $6, $6, 1, 'h') ON CONFLICT (key) DO NOTHING",
            )
            .bind(key.as_str()).bind(&c.intent.workflow_id).bind(&c.intent.intent_id).bind(&c.business_ref)
            .bind(sqlx::types::Json(&args)).bind(now)
            .execute(&mut *tx).await.unwrap();
            sqlx::query(
                "INSERT INTO idempotency_attempts (key, tenant, tool, seq, kind, fencing_token, actor, detail, \
                 occurred_at, prev_hash, hash) VALUES ($1, 'bench', 'issue_refund', 1, 'claimed', 1, 'bench', $2, $3, 'p', 'h')",
            )
            .bind(key.as_str()).bind(sqlx::types::Json(json!({}))).bind(now)
            .execute(&mut *tx).await.unwrap();
            tx.commit().await.unwrap();
            let mut tx = $begin.await.unwrap();
            sqlx::query("UPDATE idempotency_records SET status = 'DONE', result = $2, log_seq = 2, updated_at = $3 WHERE key = $1 AND fencing_token = 1")
                .bind(key.as_str()).bind(sqlx::types::Json(json!({"refund_id": "rf_bench"}))).bind(now)
                .execute(&mut *tx).await.unwrap();
            sqlx::query(
                "INSERT INTO idempotency_attempts (key, tenant, tool, seq, kind, fencing_token, actor, detail, \
                 occurred_at, prev_hash, hash) VALUES ($1, 'bench', 'issue_refund', 2, 'completed', 1, 'bench', $2, $3, 'p', 'h')",
            )
            .bind(key.as_str()).bind(sqlx::types::Json(json!({}))).bind(now)
            .execute(&mut *tx).await.unwrap();
            tx.commit().await.unwrap();
        }};
    }
    match store {
        Store::Postgres(pool) => body!(pool, pool.begin()),
        Store::Sqlite(pool) => body!(pool, pool.begin_with("BEGIN IMMEDIATE")),
    }
}

pub async fn run(store: &Store, backend: &str, duration: Duration, figures: &mut Vec<Figure>) {
    let guard = Guard::new(
        store.clone(),
        Arc::new(SystemClock),
        GuardSettings::default(),
    );
    for workers in [1usize, 8, 32] {
        let s = store.clone();
        let (base, base_wall) = drive(workers, duration, move || {
            let s = s.clone();
            async move { baseline_op(&s, &call("base")).await }
        })
        .await;
        let g = guard.clone();
        let (wrapped, wrapped_wall) = drive(workers, duration, move || {
            let g = g.clone();
            async move {
                g.run(&call("guard"), &Instant0).await.unwrap();
            }
        })
        .await;
        let base_rate = base.count() as f64 / base_wall.as_secs_f64();
        let rate = wrapped.count() as f64 / wrapped_wall.as_secs_f64();
        figures.push(Figure::ratio(
            format!("guard claim+complete, {workers} workers ({backend})"),
            "ops/s",
            rate,
            base_rate,
            Some((">= 0.80 of baseline", rate / base_rate >= 0.8)),
        ));
        let added = wrapped.p99_ms() - base.p99_ms();
        figures.push(Figure::plain(
            format!("guard added p99, {workers} workers ({backend})"),
            "ms",
            added,
            format!(
                "guard p99 {:.2} ms, baseline p99 {:.2} ms",
                wrapped.p99_ms(),
                base.p99_ms()
            ),
            Some(("<= 1 ms", added <= 1.0)),
        ));
    }
    // The replay path: an existing DONE key.
    let c = call("replay");
    guard.run(&c, &Instant0).await.unwrap();
    let g = guard.clone();
    let (replay, _) = drive(8, duration, move || {
        let (g, c) = (g.clone(), c.clone());
        async move {
            assert!(g.run(&c, &Instant0).await.unwrap().replayed);
        }
    })
    .await;
    figures.push(Figure::plain(
        format!("guard replay of a DONE key, 8 workers ({backend})"),
        "ms p99",
        replay.p99_ms(),
        format!("p50 {:.2} ms, {} replays", replay.p50_ms(), replay.count()),
        None,
    ));
}
