//! `idemwatch demo`: the traffic generator in-process on both backends (every kind of
//! event, never a duplicate, the genuine repeat refunds), the incident switch, the
//! real binary over HTTP, and the worked examples of docs/GUARD.md.

mod binary;
mod documented_examples;
mod mcp;
mod traffic;

use idemwatch::demo::DemoConfig;
use idemwatch::guard::{AttemptKind, GENESIS_HASH, chain_hash};
use idemwatch::store::Store;
use std::collections::BTreeMap;
use std::time::Duration;

/// Every record as (key, status, business_ref, intent_id).
pub(super) async fn records(store: &Store) -> Vec<(String, String, Option<String>, String)> {
    const SQL: &str =
        "SELECT key, status, business_ref, intent_id FROM idempotency_records ORDER BY key";
    match store {
        Store::Postgres(pool) => sqlx::query_as(SQL).fetch_all(pool).await,
        Store::Sqlite(pool) => sqlx::query_as(SQL).fetch_all(pool).await,
    }
    .expect("list records")
}

pub(super) async fn kinds(store: &Store) -> BTreeMap<AttemptKind, i64> {
    store
        .attempt_kind_counts(None)
        .await
        .expect("count attempts")
        .into_iter()
        .collect()
}

/// The fast profile: 20x story time, a provider that forgets keys after 2 s.
pub(super) fn fast(rate: f64) -> DemoConfig {
    let mut config = DemoConfig::new(rate, 20.0);
    config.provider_retention = Duration::from_secs(2);
    // Every showcase scenario at once, so that a short run sees them all.
    config.showcase_every = 1;
    config
}
