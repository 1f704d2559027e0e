//! Pages over HTTP with concurrent clients (the app served in-process on a loopback
//! port), each next to a baseline running the store calls behind the page — the same
//! SQL, no HTTP, no template — from a plain loop with the same concurrency.

use super::http::{self, Pool};
use super::report::Figure;
use super::seed::key_of;
use super::slices::{Plan, alternate};
use idemwatch::guard::IdempotencyKey;
use idemwatch::store::{Cursor, KeyFilter, Store};
use idemwatch::web::{self, AppState};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A spread of key numbers below `keys` (Fibonacci hashing of a counter).
fn pick(next: &AtomicU64, keys: u64) -> u64 {
    next.fetch_add(1, Ordering::Relaxed)
        .wrapping_mul(11_400_714_819_323_198_485)
        % keys
}

pub async fn run(store: &Store, keys: u64, plan: Plan, clients: usize, figures: &mut Vec<Figure>) {
    let addr = http::serve(web::app(AppState::new(store.clone()))).await;
    let pool = Pool::new(addr, clients).await;
    let next = Arc::new(AtomicU64::new(0));
    let deep = super::seed::cursor_at(store, 1000).await;
    let (at, key) = deep.rsplit_once('_').unwrap();
    let cursor = Cursor {
        at: chrono::DateTime::parse_from_rfc3339(at).unwrap().to_utc(),
        key: key.to_string(),
    };

    // Key detail: the record, its attempts, the keys with the same business ref.
    let (p, n) = (pool.clone(), next.clone());
    let page = move || {
        let (p, n) = (p.clone(), n.clone());
        async move {
            p.get(&format!("/keys/{}", key_of(pick(&n, keys))), 200)
                .await;
        }
    };
    let (s, n) = (store.clone(), next.clone());
    let sql = move || {
        let (s, n) = (s.clone(), n.clone());
        async move {
            let i = pick(&n, keys);
            let key = IdempotencyKey::parse(&key_of(i)).unwrap();
            let r = s.record(&key).await.unwrap().unwrap();
            s.attempts(&key).await.unwrap();
            s.keys_with_business_ref(r.business_ref.as_deref().unwrap(), 21)
                .await
                .unwrap();
        }
    };
    push(
        figures,
        "key detail /keys/{key}",
        alternate(plan, clients, page, sql).await,
        clients,
    );

    // Search by business ref, typed without its prefix, as the search box redirects.
    let (p, n) = (pool.clone(), next.clone());
    let page = move || {
        let (p, n) = (p.clone(), n.clone());
        async move {
            p.get(&format!("/keys?business_ref=B-{}", pick(&n, keys)), 200)
                .await;
        }
    };
    let (s, n) = (store.clone(), next.clone());
    let sql = move || {
        let (s, n) = (s.clone(), n.clone());
        async move {
            let f = KeyFilter {
                business_ref: Some(format!("B-{}", pick(&n, keys))),
                ..KeyFilter::default()
            };
            assert_eq!(s.list_keys(&f, None, 50).await.unwrap().keys.len(), 1);
        }
    };
    push(
        figures,
        "search by business ref /keys?business_ref=B-n",
        alternate(plan, clients, page, sql).await,
        clients,
    );

    // The keys list 1,000 rows deep (the cursor a "next page" link carries there).
    let p = pool.clone();
    let path = Arc::new(format!("/keys?after={deep}"));
    let page = move || {
        let (p, path) = (p.clone(), path.clone());
        async move {
            p.get(&path, 200).await;
        }
    };
    let s = store.clone();
    let sql = move || {
        let (s, c) = (s.clone(), cursor.clone());
        async move {
            assert_eq!(
                s.list_keys(&KeyFilter::default(), Some(&c), 50)
                    .await
                    .unwrap()
                    .keys
                    .len(),
                50
            );
        }
    };
    push(
        figures,
        "keys page 1,000 rows deep /keys?after=…",
        alternate(plan, clients, page, sql).await,
        clients,
    );
}

fn push(
    figures: &mut Vec<Figure>,
    what: &str,
    (page, sql): (super::slices::Side, super::slices::Side),
    clients: usize,
) {
    let p99 = page.latencies.p99_ms();
    let mut f = Figure::ratio(
        format!("{what}, {clients} clients (PostgreSQL)"),
        "ms p99",
        p99,
        sql.latencies.p99_ms(),
        Some(("<= 20 ms p99", p99 <= 20.0)),
    );
    f.note = format!(
        "HTTP {:.0} req/s, p50 {:.2} ms; store calls alone {:.0} /s, p50 {:.2} ms",
        page.median_rate(),
        page.latencies.p50_ms(),
        sql.median_rate(),
        sql.latencies.p50_ms()
    );
    figures.push(f);
}
