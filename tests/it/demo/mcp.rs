//! The demo's MCP scenario: a scripted host through the proxy's code to a simulated MCP
//! refund server, in process. Its keys carry the actor `mcp:demo-assistant`, and the
//! model's re-issue of a refund on a later turn (a new session) is a replay: one effect.

use super::fast;
use crate::both_backends;
use idemwatch::demo::{Demo, MCP_CLIENT};
use idemwatch::store::Store;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Every attempt row of the proxy's host: (key, kind, business_ref, MCP session id).
async fn mcp_attempts(store: &Store) -> Vec<(String, String, Option<String>, String)> {
    const SQL: &str = "SELECT a.key, a.kind, r.business_ref, CAST(a.detail AS TEXT) FROM idempotency_attempts a \
        JOIN idempotency_records r ON r.key = a.key WHERE a.actor = $1 ORDER BY a.id";
    let actor = format!("mcp:{MCP_CLIENT}");
    let rows: Vec<(String, String, Option<String>, String)> = match store {
        Store::Postgres(pool) => sqlx::query_as(SQL).bind(&actor).fetch_all(pool).await,
        Store::Sqlite(pool) => sqlx::query_as(SQL).bind(&actor).fetch_all(pool).await,
    }
    .expect("list the MCP host's attempts");
    rows.into_iter()
        .map(|(key, kind, business_ref, detail)| {
            let detail: serde_json::Value = serde_json::from_str(&detail).expect("detail is JSON");
            let session = detail["context"]["session_id"]
                .as_str()
                .unwrap_or("")
                .to_string();
            (key, kind, business_ref, session)
        })
        .collect()
}

both_backends!(
    async fn the_demo_shows_mcp_keys_and_a_reissued_refund_has_one_effect(db: TestDb) {
        // At 20x a conversation starts every 2 s and its re-issue comes 1 s later.
        let demo = Demo::new(db.store.clone(), fast(5.0));
        demo.run(tokio::time::sleep(Duration::from_secs(6))).await;
        let provider = demo.provider();
        assert_eq!(provider.duplicates(), 0);

        let rows = mcp_attempts(&db.store).await;
        let mut kinds_by_key = BTreeMap::<String, Vec<String>>::new();
        let mut sessions_by_key = BTreeMap::<String, BTreeSet<String>>::new();
        for (key, kind, business_ref, session) in &rows {
            let order = business_ref
                .as_deref()
                .and_then(|r| r.strip_prefix("issue_refund order="))
                .unwrap_or_else(|| panic!("an MCP key without its order: {business_ref:?}"));
            assert!(order.starts_with("M-"), "{order}");
            // Exactly one refund at the provider for the order, tagged with the key.
            let effects = provider.effects_for_order(order);
            assert_eq!(effects.len(), 1, "{order}: {effects:?}");
            assert_eq!(&effects[0].key, key);
            assert!(session.starts_with("local-"), "{session}");
            kinds_by_key
                .entry(key.clone())
                .or_default()
                .push(kind.clone());
            sessions_by_key
                .entry(key.clone())
                .or_default()
                .insert(session.clone());
        }
        assert!(
            kinds_by_key.len() >= 2,
            "too few MCP conversations: {kinds_by_key:?}"
        );
        // The model's re-issue on a later turn, in a new session: replayed, no new effect.
        let reissued: Vec<_> = kinds_by_key
            .iter()
            .filter(|(_, kinds)| kinds.as_slice() == ["claimed", "completed", "replayed"])
            .map(|(key, _)| key)
            .collect();
        assert!(
            !reissued.is_empty(),
            "no re-issue replayed: {kinds_by_key:?}"
        );
        for key in reissued {
            assert_eq!(
                sessions_by_key[key].len(),
                2,
                "the re-issue came in a new session"
            );
            assert_eq!(provider.effects_for_key(key), 1);
        }
    }
);
