//! Signed checkpoints: the first over every key, then one after 1,000 changed keys
//! (target ≤ 50 ms at 1 M keys), and `verify` of the whole database against its
//! checkpoints (target ≤ 60 s at 1 M keys / 10 M attempts). PostgreSQL.
//!
//! The data are real chains (`seed::chains`): verify hashes and checks every row, and
//! every figure is taken only from a run whose report says every chain intact and
//! every key anchored. Verify is timed both ways in the same run, interleaved: in key
//! ranges, several at once (what `idemwatch verify` does) against one pass over the
//! whole log (how it was before), `BENCH_VERIFY_ROUNDS` rounds each (default 3).

use crate::report::Figure;
use crate::seed;
use ed25519_dalek::SigningKey;
use idemwatch::evidence::Checkpointer;
use idemwatch::export::{Outside, Report, Split, verify_database_split};
use idemwatch::guard::SystemClock;
use idemwatch::store::Store;
use std::sync::Arc;
use std::time::Instant;

pub async fn run(store: &Store, keys: u64, figures: &mut Vec<Figure>) {
    let writer = Checkpointer::new(
        store.clone(),
        SigningKey::from_bytes(&[1; 32]),
        Arc::new(SystemClock),
    );
    let started = Instant::now();
    let first = writer
        .checkpoint()
        .await
        .unwrap()
        .expect("a first checkpoint");
    figures.push(Figure::plain(
        format!("first checkpoint over {keys} keys"),
        "s",
        started.elapsed().as_secs_f64(),
        format!(
            "{} leaves; once, when checkpoints are turned on",
            first.body.leaves_added
        ),
        None,
    ));
    let mut samples = Vec::new();
    let rounds = 5;
    for round in 0..rounds {
        let from = keys + round * 1000;
        seed::chains(store, from, from + 1000, false).await;
        let started = Instant::now();
        let c = writer.checkpoint().await.unwrap().expect("a checkpoint");
        samples.push(started.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(c.body.leaves_added, 1000);
    }
    samples.sort_by(f64::total_cmp);
    let median = samples[samples.len() / 2];
    figures.push(Figure::plain(
        format!("checkpoint after 1,000 changed keys at {keys} keys"),
        "ms",
        median,
        format!("median of 5; all {samples:.1?}"),
        Some(("≤ 50 ms", median <= 50.0)),
    ));
    verify(store, keys + rounds * 1000, figures).await;
}

/// Times verify split into ranges against one pass, alternating which goes first.
async fn verify(store: &Store, keys: u64, figures: &mut Vec<Figure>) {
    let rounds: usize = std::env::var("BENCH_VERIFY_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let split = Split::for_store(store);
    let (mut ranged, mut one_pass) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [split, Split::ONE_PASS]
        } else {
            [Split::ONE_PASS, split]
        };
        for s in order {
            let started = Instant::now();
            let report = verify_database_split(store, &Outside::default(), s)
                .await
                .unwrap();
            let took = started.elapsed().as_secs_f64();
            assert_all_intact(&report, keys);
            eprintln!("verify round {round}, {s:?}: {took:.2} s");
            if s == Split::ONE_PASS {
                one_pass.push(took);
            } else {
                ranged.push(took);
            }
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (new, old) = (median(&mut ranged), median(&mut one_pass));
    let mut figure = Figure::ratio(
        format!(
            "verify {keys} keys / {} attempts against checkpoints",
            keys * 10
        ),
        "s",
        new,
        old,
        Some(("≤ 60 s", new <= 60.0)),
    );
    figure.note = format!(
        "median of {rounds}; {} key ranges, {} at once (all {ranged:.1?}); baseline: one pass \
         (all {one_pass:.1?}); ratio < 1 is faster; every chain hashed, all intact",
        split.ranges, split.at_once
    );
    figures.push(figure);
}

/// The figure counts only if verify checked every chain and found it whole: seeded
/// rows that verify skipped as broken would time reading, not verifying.
fn assert_all_intact(report: &Report, keys: u64) {
    assert!(
        report.is_intact(),
        "seeded chains broken: {:#?}",
        report.breaks
    );
    assert_eq!(report.keys, keys, "every key verified");
    assert_eq!(report.rows, keys * 10, "every attempt verified");
    assert_eq!(
        report.anchored_keys, keys,
        "every key against its checkpoint"
    );
    assert_eq!(report.broken_keys, 0);
}
