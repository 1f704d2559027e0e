//! `GET /api/v1/guard/keys/{key}`: a key's state, and the bounded long poll a run
//! parked on human review waits with. It returns as soon as the key's fencing token
//! differs from `after_token` (a person resolved or released it, or another worker took
//! it over), as soon as its status changes (the worker holding it settled: a second
//! delivery waits for the first this way), or when the wait is over. A change made in this process wakes it at once
//! (the guard's broadcast); one made by another replica is seen by re-reading the
//! record every second.
//!
//! It reads one record and the key's newest attempt, whatever the key's history; with
//! `attempts_after=SEQ` the answer also carries a page of at most [`ATTEMPT_PAGE`]
//! attempts after that `seq` and the URL of the next page (`next`), as the key API
//! pages do: a key retried thousands of times is never read whole.

use super::answer::{Answer, AttemptsAnswer};
use super::body::WaitQuery;
use super::limits::Permit;
use crate::guard::{IdempotencyKey, Record};
use crate::web::links::link;
use crate::web::{AppState, Error};
use std::time::Duration;
use tokio::sync::broadcast;
use tokio::time::Instant;

/// How often a waiter re-reads the record for changes made by other replicas.
const POLL: Duration = Duration::from_secs(1);

/// Attempts in one page of the answer.
pub(crate) const ATTEMPT_PAGE: u32 = 100;

pub async fn key_state(
    state: &AppState,
    key: &IdempotencyKey,
    query: WaitQuery,
    slot: Permit,
) -> Result<Answer, Error> {
    // Subscribe before the first read: a change between the read and the wait is
    // not missed.
    let mut changes = state.guard.subscribe();
    let deadline = Instant::now() + query.wait;
    let mut first_status = None;
    let mut slot = Some(slot);
    loop {
        let record = read(state, key).await?;
        let changed = query
            .after_token
            .is_some_and(|t| t != record.fencing_token.0);
        let settled = *first_status.get_or_insert(record.status) != record.status;
        if changed || settled || query.after_token.is_none() || Instant::now() >= deadline {
            let awaiting = state.store.awaiting_person(&record).await?;
            let page = match query.attempts_after {
                Some(after) => Some(page(state, key, after).await?),
                None => None,
            };
            return Ok(Answer::state(record, changed, awaiting, page));
        }
        // Waiting holds no slot.
        drop(slot.take());
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

/// The attempts after `after`, at most a page, and the URL of the next page.
async fn page(state: &AppState, key: &IdempotencyKey, after: i64) -> Result<AttemptsAnswer, Error> {
    let page = state.store.attempts_page(key, after, ATTEMPT_PAGE).await?;
    let next = match page.attempts.last() {
        Some(last) if page.more => Some(link(
            &format!("/api/v1/guard/keys/{key}"),
            &[("attempts_after", Some(&last.seq.to_string()))],
        )),
        _ => None,
    };
    Ok(AttemptsAnswer {
        attempts: page.attempts,
        next,
    })
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
