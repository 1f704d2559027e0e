//! `GET /api/v1/guard/keys/{key}`: a key's state, and the bounded long poll a run
//! parked on human review waits with. It returns as soon as the key's fencing token
//! differs from `after_token` (a person resolved or released it, or another worker took
//! it over), as soon as its status changes (the worker holding it settled: a second
//! delivery waits for the first this way), or when the wait is over. A change made in this process wakes it at once
//! (the guard's broadcast); one made by another replica is seen by re-reading the
//! record every second.

use super::answer::Answer;
use super::body::WaitQuery;
use crate::guard::{AttemptKind, IdempotencyKey, Record, Status};
use crate::web::{AppState, Error};
use std::time::Duration;
use tokio::sync::broadcast;
use tokio::time::Instant;

/// How often a waiter re-reads the record for changes made by other replicas.
const POLL: Duration = Duration::from_secs(1);

pub async fn key_state(
    state: &AppState,
    key: &IdempotencyKey,
    query: WaitQuery,
) -> Result<Answer, Error> {
    // Subscribe before the first read: a change between the read and the wait is
    // not missed.
    let mut changes = state.guard.subscribe();
    let deadline = Instant::now() + query.wait;
    let mut first_status = None;
    loop {
        let record = read(state, key).await?;
        let changed = query
            .after_token
            .is_some_and(|t| t != record.fencing_token.0);
        let settled = *first_status.get_or_insert(record.status) != record.status;
        if changed || settled || query.after_token.is_none() || Instant::now() >= deadline {
            let awaiting = awaiting_person(state, &record).await?;
            return Ok(Answer::state(record, changed, awaiting));
        }
        let next_poll = (Instant::now() + POLL).min(deadline);
        tokio::select! {
            () = changed_here(&mut changes, key) => {}
            () = tokio::time::sleep_until(next_poll) => {}
        }
    }
}

async fn read(state: &AppState, key: &IdempotencyKey) -> Result<Record, Error> {
    state.store.record(key).await?.ok_or_else(|| {
        Error::guard(
            crate::guard::GuardError::NotFound(key.to_string()),
            state.clock.now(),
        )
    })
}

/// UNKNOWN, escalated, and nobody has released it: a person must decide. A refused
/// write after the escalation (a resolve refused with 422, a stale worker) changed
/// nothing, so it does not end the wait: the last attempt that wrote is what counts.
async fn awaiting_person(state: &AppState, record: &Record) -> Result<bool, Error> {
    if record.status != Status::Unknown || record.release_approved {
        return Ok(false);
    }
    let attempts = state.store.attempts(&record.key).await?;
    Ok(attempts
        .iter()
        .rev()
        .find(|a| a.kind != AttemptKind::StaleWriteRejected)
        .is_some_and(|a| a.kind == AttemptKind::Escalated))
}

/// Resolves when this process moves `key`'s token, or may have (the receiver lagged).
async fn changed_here(changes: &mut broadcast::Receiver<IdempotencyKey>, key: &IdempotencyKey) {
    loop {
        match changes.recv().await {
            Ok(k) if &k == key => return,
            Ok(_) => continue,
            Err(broadcast::error::RecvError::Lagged(_)) => return,
            Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
        }
    }
}
