//! Interleaved measurement: subject and baseline run in alternating short slices
//! (A B, B A, A B, …), so that a neighbour's build slowing the machine down for a few
//! seconds hits both sides alike. Throughput is the median of the per-slice rates;
//! latency quantiles come from all samples of a side.

use super::report::Latencies;
use std::future::Future;
use std::time::{Duration, Instant};

/// Slices per side and their length: `BENCH_ROUNDS` (default 10) × `BENCH_SLICE_MS`
/// (default 500).
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub rounds: usize,
    pub slice: Duration,
}

impl Plan {
    pub fn from_env() -> Plan {
        let get = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(default)
        };
        Plan {
            rounds: get("BENCH_ROUNDS", 10) as usize,
            slice: Duration::from_millis(get("BENCH_SLICE_MS", 500)),
        }
    }
}

/// One side's slices.
pub struct Side {
    pub rates: Vec<f64>,
    pub latencies: Latencies,
}

impl Side {
    pub fn median_rate(&self) -> f64 {
        median(&self.rates)
    }
}

pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let mid = v.len() / 2;
    if v.len().is_multiple_of(2) {
        (v[mid - 1] + v[mid]) / 2.0
    } else {
        v[mid]
    }
}

/// Runs `op` on `workers` tasks for `duration`; one latency per operation.
pub async fn drive<F, Fut>(workers: usize, duration: Duration, op: F) -> (Vec<Duration>, Duration)
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send,
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
    (all, started.elapsed())
}

/// Runs `op` on `workers` tasks for `duration` at `rate` operations/s in all (open
/// loop): each task has its own fixed schedule, staggered against the others, and
/// starts an operation when it is due whether or not the system kept up. A latency is
/// counted from when the operation was due if the task's previous one overran into it
/// (the wait is the system's), else from when it actually started: tokio's timer wakes
/// up to 1 ms late, which is the load generator's lateness, not the subject's.
pub async fn drive_paced<F, Fut>(
    workers: usize,
    duration: Duration,
    rate: f64,
    op: F,
) -> (Vec<Duration>, Duration)
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let started = Instant::now();
    let every = Duration::from_secs_f64(workers as f64 / rate);
    let mut set = tokio::task::JoinSet::new();
    for w in 0..workers {
        let op = op.clone();
        set.spawn(async move {
            let mut samples = Vec::new();
            let mut due = started + every.mul_f64(w as f64 / workers as f64);
            let mut overran = false;
            while due < started + duration {
                tokio::time::sleep_until(due.into()).await;
                let from = if overran { due } else { Instant::now() };
                op().await;
                let end = Instant::now();
                samples.push(end - from);
                due += every;
                overran = end > due;
            }
            samples
        });
    }
    let mut all = Vec::new();
    for samples in set.join_all().await {
        all.extend(samples);
    }
    (all, started.elapsed())
}

/// [`alternate`] at a fixed offered rate ([`drive_paced`]) instead of as fast as each
/// side goes: both sides get the same arrivals, so their latencies compare at a load
/// the system is not saturated by.
pub async fn alternate_paced<A, AF, B, BF>(
    plan: Plan,
    workers: usize,
    rate: f64,
    a: A,
    b: B,
) -> (Latencies, Latencies)
where
    A: Fn() -> AF + Clone + Send + 'static,
    AF: Future<Output = ()> + Send,
    B: Fn() -> BF + Clone + Send + 'static,
    BF: Future<Output = ()> + Send,
{
    warm_up(plan, workers, a.clone(), b.clone()).await;
    let (mut la, mut lb) = (Vec::new(), Vec::new());
    for round in 0..plan.rounds {
        for which in [round % 2, 1 - round % 2] {
            if which == 0 {
                la.extend(drive_paced(workers, plan.slice, rate, a.clone()).await.0);
            } else {
                lb.extend(drive_paced(workers, plan.slice, rate, b.clone()).await.0);
            }
        }
    }
    (Latencies::new(la), Latencies::new(lb))
}

/// Subject `a` and baseline `b`, `plan.rounds` slices each, alternating which goes first.
/// One unrecorded slice of each side comes first (see [`warm_up`]).
pub async fn alternate<A, AF, B, BF>(plan: Plan, workers: usize, a: A, b: B) -> (Side, Side)
where
    A: Fn() -> AF + Clone + Send + 'static,
    AF: Future<Output = ()> + Send,
    B: Fn() -> BF + Clone + Send + 'static,
    BF: Future<Output = ()> + Send,
{
    warm_up(plan, workers, a.clone(), b.clone()).await;
    let (mut ra, mut rb, mut la, mut lb) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..plan.rounds {
        for which in [round % 2, 1 - round % 2] {
            if which == 0 {
                let (s, wall) = drive(workers, plan.slice, a.clone()).await;
                ra.push(s.len() as f64 / wall.as_secs_f64());
                la.extend(s);
            } else {
                let (s, wall) = drive(workers, plan.slice, b.clone()).await;
                rb.push(s.len() as f64 / wall.as_secs_f64());
                lb.extend(s);
            }
        }
    }
    (
        Side {
            rates: ra,
            latencies: Latencies::new(la),
        },
        Side {
            rates: rb,
            latencies: Latencies::new(lb),
        },
    )
}

/// One slice of each side, not recorded, before a pair is measured. Without it the
/// first slice, always the subject's, paid for the pool growing to `workers`
/// connections (each a connect, a login and a `SET`) and for every statement's first
/// preparation on each of them, where the baseline found its connections open: the
/// baseline measured against itself came out 0.6–4.6 ms "slower" at p99 in 8 of 8
/// runs (docs/PERFORMANCE.md, "A warm start, the noise, and the pool").
async fn warm_up<A, AF, B, BF>(plan: Plan, workers: usize, a: A, b: B)
where
    A: Fn() -> AF + Clone + Send + 'static,
    AF: Future<Output = ()> + Send,
    B: Fn() -> BF + Clone + Send + 'static,
    BF: Future<Output = ()> + Send,
{
    drive(workers, plan.slice, a).await;
    drive(workers, plan.slice, b).await;
}

/// Times `op` once per call, `n` calls, alternating with `base`; returns the two sets
/// of durations (for one-shot work such as a backlog refresh or a render).
pub async fn alternate_each<A, AF, B, BF>(n: usize, a: A, b: B) -> (Latencies, Latencies)
where
    A: Fn() -> AF,
    AF: Future<Output = ()>,
    B: Fn() -> BF,
    BF: Future<Output = ()>,
{
    let (mut la, mut lb) = (Vec::new(), Vec::new());
    for i in 0..n {
        for which in [i % 2, 1 - i % 2] {
            let t = Instant::now();
            if which == 0 {
                a().await;
                la.push(t.elapsed());
            } else {
                b().await;
                lb.push(t.elapsed());
            }
        }
    }
    (Latencies::new(la), Latencies::new(lb))
}
