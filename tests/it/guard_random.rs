//! Randomized fault schedules on both backends: random crash points, dropped
//! responses, slow answers past the deadline, 503s, failing lookups, redeliveries,
//! concurrent workers and clock jumps past the lease and the provider's retention.
//! Whatever happens, each business operation ends with exactly one refund at the
//! provider, every key's log is contiguous and its hash chain intact.
//!
//! Seeded: a schedule's faults, workers, rephrasings and clock jumps follow from its
//! seed. Its interleavings do not: its workers race each other and the deadline in
//! real time, and other schedules move the shared clock. So a failure prints its seed
//! *and* what happened, round by round (each delivery's faults, each outcome, each
//! resolution and clock jump), with every key's record and attempt log as found.
//! `IDEMWATCH_SCHEDULES` sets the number of schedules (default 400 per backend; the
//! long mode is 10000, see docs/TESTING.md) and `IDEMWATCH_SEED` the first seed.

use crate::both_backends;
use crate::support::as_key;
use crate::support::fixture::{Fixture, refund};
use crate::support::provider::{Client, Fault};
use chrono::TimeDelta;
use idemwatch::guard::{
    AttemptKind, Clock, GuardError, Resolution, ResolveRequest, Status, ToolCall,
};
use std::sync::Arc;
use std::time::Duration;

const DEADLINE: Duration = Duration::from_millis(30);
const PARALLEL_SCHEDULES: usize = 4;

/// splitmix64: tiny, seedable, good enough to pick faults.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn random_fault(rng: &mut Rng) -> Fault {
    match rng.below(100) {
        0..=44 => Fault::Ok {
            delay: Duration::from_millis(rng.below(10)),
        },
        45..=59 => Fault::Ok {
            delay: DEADLINE + Duration::from_millis(5 + rng.below(20)),
        },
        60..=71 => Fault::DropResponse,
        72..=83 => Fault::Unavailable,
        _ => Fault::CrashAfterEffect,
    }
}

/// [`schedule`] for `seed`, a failure (an error or a panic in the schedule's own
/// checks) reported with what it did round by round and the log of each of its keys:
/// the schedules share one clock and run against real time (deadlines, concurrent
/// workers), so a seed replayed alone may take another path, and the report must say
/// what happened on its own.
async fn run_schedule(f: Arc<Fixture>, seed: u64) -> Result<Vec<AttemptKind>, String> {
    use futures::FutureExt;
    let (mut trace, mut keys) = (Vec::new(), Vec::new());
    let run = std::panic::AssertUnwindSafe(schedule(&f, seed, &mut trace, &mut keys))
        .catch_unwind()
        .await;
    let failure = match run {
        Ok(Ok(kinds)) => return Ok(kinds),
        Ok(Err(e)) => e,
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()));
            format!("panicked: {}", message.unwrap_or_default())
        }
    };
    Err(format!(
        "{failure}\n trace:\n  {}{}",
        trace.join("\n  "),
        logs_of(&f, &keys).await
    ))
}

/// Each key's record (status, token, log_seq, lease_until) and attempt rows, as
/// stored now.
async fn logs_of(f: &Fixture, keys: &[String]) -> String {
    let mut logs = String::new();
    for key in keys {
        let record = f.store.record(&as_key(key)).await;
        let record =
            record.map(|r| r.map(|r| (r.status, r.fencing_token.0, r.log_seq, r.lease_until)));
        logs.push_str(&format!("\n  key {key}: record {record:?}\n"));
        for a in f.store.attempts(&as_key(key)).await.unwrap_or_default() {
            logs.push_str(&format!(
                "    {} {} t{} {} {} {}\n",
                a.seq, a.kind, a.fencing_token.0, a.actor, a.occurred_at, a.detail
            ));
        }
    }
    logs
}

/// One business operation (a refund on one order) driven to its end.
/// `trace` gets a line per delivery, outcome, resolution and clock jump; `keys` each
/// key the operation used.
async fn schedule(
    f: &Fixture,
    seed: u64,
    trace: &mut Vec<String>,
    keys: &mut Vec<String>,
) -> Result<Vec<AttemptKind>, String> {
    let mut rng = Rng(seed);
    let order = format!("R-{seed}");
    let mut call: ToolCall = refund(&order, 100 + (seed % 9000) as i64, "1");
    keys.push(call.intent.key().unwrap().to_string());
    let mut finished = false;
    for round in 0..14 {
        let calm = round >= 9; // late rounds converge: no more faults
        let workers = if rng.chance(25) { 2 + rng.below(3) } else { 1 };
        let mut handles = Vec::new();
        for w in 0..workers {
            let mut script = Vec::new();
            if !calm && rng.chance(15) {
                script.push(Fault::LookupFails);
            }
            script.push(if calm {
                Fault::Ok {
                    delay: Duration::ZERO,
                }
            } else {
                random_fault(&mut rng)
            });
            trace.push(format!(
                "round {round} w{w}: {script:?} clock {}",
                f.clock.now()
            ));
            let client = Client::new(&f.ledger, DEADLINE, script);
            let crashed = client.crashed.clone();
            let (guard, mut c) = (f.guard.clone(), call.clone());
            c.actor = format!("worker-{round}-{w}");
            if rng.chance(30) {
                c.args["reason"] =
                    serde_json::json!(format!("rephrased reason #{}", rng.below(1000)));
            }
            let task = tokio::spawn(async move { guard.run(&c, &client).await });
            handles.push((task, crashed));
        }
        let mut outcomes = Vec::new();
        for (w, (mut task, crashed)) in handles.into_iter().enumerate() {
            tokio::select! {
                joined = &mut task => {
                    let joined = joined.map_err(|e| format!("task failed: {e}"))?;
                    trace.push(format!("round {round} w{w}: {joined:?}"));
                    outcomes.push(joined)
                }
                () = crashed.notified() => {
                    // Finished already: the guard's deadline ended the call before the
                    // abort, and it settled as a timeout would.
                    let finished = task.is_finished();
                    trace.push(format!("round {round} w{w}: crashed after the effect (task finished: {finished})"));
                    task.abort();
                    let _ = task.await;
                }
            }
        }
        for outcome in &outcomes {
            match outcome {
                Ok(_) => finished = true,
                Err(GuardError::NeedsHumanReview { key, .. }) => {
                    // The person checks the provider's dashboard, which shows refunds
                    // whatever the provider remembers about keys.
                    let k = idemwatch::guard::IdempotencyKey::parse(key).unwrap();
                    let record = f
                        .store
                        .record(&as_key(key))
                        .await
                        .map_err(|e| e.to_string())?
                        .unwrap();
                    if record.status != Status::Unknown {
                        continue;
                    }
                    let found = f.ledger.dashboard_lookup(key);
                    let request = ResolveRequest {
                        resolution: if found.is_some() {
                            Resolution::Done
                        } else {
                            Resolution::Failed
                        },
                        reason: "checked the provider dashboard".into(),
                        evidence: found.as_ref().map(|e| e.refund_id.clone()),
                        result: None,
                        actor: "person".into(),
                        expected_token: Some(record.fencing_token),
                    };
                    let resolved = f.guard.resolve(&k, &request).await;
                    trace.push(format!(
                        "round {round} person: {:?} -> {resolved:?}",
                        request.resolution
                    ));
                    match resolved {
                        Ok(_) if found.is_some() => finished = true,
                        Ok(_) => {
                            // Confirmed never executed: the refund is still owed, as a
                            // new intent with its own key.
                            call.intent.intent_id =
                                format!("{}-again{round}", call.intent.intent_id);
                            keys.push(call.intent.key().unwrap().to_string());
                        }
                        Err(
                            GuardError::Conflict { .. }
                            | GuardError::NotResolvable { .. }
                            | GuardError::InFlight { .. },
                        ) => {}
                        Err(e) => return Err(format!("resolve failed: {e}")),
                    }
                }
                Err(GuardError::OperationFailed { error, .. }) => {
                    return Err(format!("unexpected definitive failure: {error}"));
                }
                Err(GuardError::Store(e)) => return Err(format!("store error: {e}")),
                Err(_) => {}
            }
        }
        if finished {
            break;
        }
        match rng.below(100) {
            0..=54 => {
                trace.push("clock +31s".into());
                f.clock.advance(TimeDelta::seconds(31))
            }
            55..=64 => {
                trace.push("clock +25h".into());
                f.clock.advance(TimeDelta::hours(25))
            }
            _ => {}
        }
    }
    if !finished {
        return Err("did not converge in 14 rounds".into());
    }
    let effects = f
        .ledger
        .effects()
        .into_iter()
        .filter(|e| e.args["order"] == order.as_str())
        .count();
    if effects != 1 {
        return Err(format!(
            "{effects} refunds for order {order}, keys {keys:?}"
        ));
    }
    let mut kinds = Vec::new();
    for key in keys.iter() {
        // `log` asserts contiguous seq and an intact chain.
        kinds.extend(f.log(key).await.into_iter().map(|(kind, _)| kind));
    }
    Ok(kinds)
}

both_backends!(
    async fn random_fault_schedules_end_with_exactly_one_effect_per_operation(db: TestDb) {
        let schedules = env_u64("IDEMWATCH_SCHEDULES").unwrap_or(400);
        let first = env_u64("IDEMWATCH_SEED").unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs()
                % 1_000_000
                * 1000
        });
        eprintln!(
            "random fault schedules: {schedules} from seed {first} (IDEMWATCH_SEED={first} to repeat)"
        );
        let f = Arc::new(Fixture::new(&db));
        let started = std::time::Instant::now();
        let mut set = tokio::task::JoinSet::new();
        let mut failures = Vec::new();
        let mut seen = std::collections::BTreeMap::<AttemptKind, usize>::new();
        let mut tally =
            |done: Result<Vec<AttemptKind>, String>, failures: &mut Vec<String>| match done {
                Ok(kinds) => kinds
                    .into_iter()
                    .for_each(|k| *seen.entry(k).or_default() += 1),
                Err(e) => failures.push(e),
            };
        for seed in first..first + schedules {
            if set.len() >= PARALLEL_SCHEDULES
                && let Some(done) = set.join_next().await
            {
                tally(done.unwrap(), &mut failures);
            }
            let f = f.clone();
            set.spawn(async move {
                run_schedule(f, seed).await.map_err(|e| {
                    format!("seed {seed}: {e} (rerun: IDEMWATCH_SEED={seed} IDEMWATCH_SCHEDULES=1)")
                })
            });
        }
        for done in set.join_all().await {
            tally(done, &mut failures);
        }
        let effects = f.ledger.effects().len();
        eprintln!(
            "random fault schedules: {schedules} operations, {effects} effects, {} failures, {:.1} s",
            failures.len(),
            started.elapsed().as_secs_f64()
        );
        assert!(
            failures.is_empty(),
            "{} schedules failed:\n{}",
            failures.len(),
            failures.join("\n")
        );
        assert_eq!(effects as u64, schedules);
        eprintln!("attempt kinds seen: {seen:?}");
        if schedules >= 100 {
            // The schedules must actually reach the paths they are meant to test.
            use AttemptKind::*;
            for kind in [
                Claimed,
                Completed,
                MarkedUnknown,
                TakenOver,
                ReconciledFound,
                Resent,
                InFlightRejected,
                Escalated,
                Resolved,
            ] {
                assert!(
                    seen.contains_key(&kind),
                    "no schedule produced {kind}: {seen:?}"
                );
            }
        }
    }
);
