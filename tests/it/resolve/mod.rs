//! The resolve workflow through `web::app` on both backends: the confirmation step,
//! the `resolved` attempt, conflicts, refusals, bulk resolve, the JSON API, and races
//! against another person and against a worker's takeover.

mod api;
mod bulk;
mod one_key;
mod races;

use crate::support::TestDb;
use crate::support::auth::*;
use crate::support::fixture::Fixture;
use crate::support::provider::{Client, Fault};
use crate::ui_seed::{Seeded, seed};
use axum::Router;
use chrono::Utc;
use idemwatch::guard::{Attempt, AttemptKind, GuardError, Status, ToolCall};
use idemwatch::store::Store;
use std::sync::Arc;
use std::time::Duration;

pub(super) async fn setup(db: &TestDb) -> (Router, Seeded) {
    let s = seed(&db.store, Utc::now(), 0).await;
    (builtin_app(&db.store, Arc::new(s.clock.clone())).await, s)
}

/// A worker's retry of `call` that takes the key over and waits in its provider lookup
/// until the gate opens. Its deadline is long: the HTTP steps of a test may take more
/// than the fixture's scaled-down 100 ms on a busy machine.
pub(super) async fn gated_retry(
    f: &Fixture,
    call: &ToolCall,
) -> (
    tokio::task::JoinHandle<Result<idemwatch::guard::Outcome, GuardError>>,
    Arc<tokio::sync::Notify>,
) {
    let worker = Client::new(&f.ledger, Duration::from_secs(30), [Fault::LookupGated]);
    let gate = worker.gate.clone();
    let (guard, c) = (f.guard.clone(), call.clone());
    let task = tokio::spawn(async move { guard.run(&c, &worker).await });
    let key = call.intent.key().unwrap();
    while f.status(key.as_str()).await != Status::InProgress {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    (task, gate)
}

pub(super) async fn attempts(store: &Store, key: &str) -> Vec<Attempt> {
    store.attempts(key).await.unwrap()
}

pub(super) async fn kinds(store: &Store, key: &str) -> Vec<AttemptKind> {
    attempts(store, key).await.iter().map(|a| a.kind).collect()
}

/// The resolve form as a browser posts it: step 1 (review) or 2 (`confirm`).
pub(super) fn resolve_form(resolution: &str, evidence: &str, token: i64, confirm: bool) -> String {
    let token = token.to_string();
    let csrf = csrf_token();
    let mut f = vec![
        ("resolution", resolution),
        ("reason", "checked the provider dashboard"),
        ("evidence", evidence),
        ("result", ""),
        ("expected_token", token.as_str()),
        ("csrf_token", csrf.as_str()),
    ];
    if confirm {
        f.push(("confirm", "yes"));
    }
    form(&f)
}
