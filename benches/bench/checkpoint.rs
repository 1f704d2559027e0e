//! Signed checkpoints: the first over every key, then one after 1,000 changed keys
//! (target ≤ 50 ms at 1 M keys), and `verify` of the whole database against its
//! checkpoints (target ≤ 60 s at 1 M keys / 10 M attempts). PostgreSQL.
//!
//! The seeded rows carry synthetic hashes, so verify finds every chain "broken"; it
//! still reads, hashes and compares every row, which is what is timed.

use crate::report::Figure;
use crate::seed;
use ed25519_dalek::SigningKey;
use idemwatch::evidence::Checkpointer;
use idemwatch::export::verify_database;
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
    for round in 0..5 {
        let from = keys + round * 1000;
        seed::append(store, from, from + 1000, 1).await;
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
    let started = Instant::now();
    let report = verify_database(store).await.unwrap();
    let took = started.elapsed().as_secs_f64();
    figures.push(Figure::plain(
        format!(
            "verify {} keys / {} attempts against checkpoints",
            report.keys, report.rows
        ),
        "s",
        took,
        "one pass over the log in (key, seq) order, leaves recomputed".into(),
        Some(("≤ 60 s", took <= 60.0)),
    ));
}
