//! The resolve workflow through `web::app` on both backends: the confirmation step,
//! the `resolved` attempt, conflicts, refusals, bulk resolve, the JSON API, and races
//! against another person and against a worker's takeover.

mod api;
mod bulk;
mod one_key;
mod races;

use crate::support::as_key;
use idemwatch::guard::{Attempt, AttemptKind};
use idemwatch::store::Store;

pub(super) async fn attempts(store: &Store, key: &str) -> Vec<Attempt> {
    store.attempts(&as_key(key)).await.unwrap()
}

pub(super) async fn kinds(store: &Store, key: &str) -> Vec<AttemptKind> {
    attempts(store, key).await.iter().map(|a| a.kind).collect()
}

/// The key's fencing token now: what a person's view of it carries.
pub(super) async fn token_of(store: &Store, key: &str) -> i64 {
    store
        .record(&as_key(key))
        .await
        .unwrap()
        .unwrap()
        .fencing_token
        .0
}
