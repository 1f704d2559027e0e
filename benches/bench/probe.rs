//! The suspected-duplicate probe's cost on the guard path (docs/PERFORMANCE.md,
//! "Suspected-duplicate probe"): the same guard `run` with a business ref (the claim
//! probes `idempotency_records_duplicate_probe`) against one without (no probe),
//! interleaved, after `keys` earlier claims have filled the index.

use super::guard::{Instant0, call};
use super::report::Figure;
use super::slices::{Plan, alternate};
use idemwatch::guard::{Guard, GuardSettings, SystemClock};
use idemwatch::store::Store;
use std::sync::Arc;

pub async fn run(store: &Store, backend: &str, keys: usize, plan: Plan, figures: &mut Vec<Figure>) {
    let guard = Guard::new(
        store.clone(),
        Arc::new(SystemClock),
        GuardSettings::default(),
    );
    for _ in 0..keys {
        guard.run(&call("fill"), &Instant0).await.unwrap();
    }
    for workers in [1usize, 8] {
        let g = guard.clone();
        let probed = move || {
            let g = g.clone();
            async move {
                g.run(&call("probed"), &Instant0).await.unwrap();
            }
        };
        let g = guard.clone();
        let unprobed = move || {
            let g = g.clone();
            async move {
                let mut c = call("unprobed");
                c.business_ref = None;
                g.run(&c, &Instant0).await.unwrap();
            }
        };
        let (with, without) = alternate(plan, workers, probed, unprobed).await;
        let (rate, base_rate) = (with.median_rate(), without.median_rate());
        figures.push(Figure::ratio(
            format!("guard with duplicate probe / without, {workers} workers ({backend})"),
            "ops/s",
            rate,
            base_rate,
            None,
        ));
        let (w, b) = (&with.latencies, &without.latencies);
        figures.push(Figure::plain(
            format!("duplicate probe added p50, {workers} workers ({backend})"),
            "ms",
            w.p50_ms() - b.p50_ms(),
            format!(
                "with p50 {:.2} / p99 {:.2} ms, without p50 {:.2} / p99 {:.2} ms",
                w.p50_ms(),
                w.p99_ms(),
                b.p50_ms(),
                b.p99_ms()
            ),
            None,
        ));
    }
}
