//! Pages over HTTP with concurrent clients (the app served in-process on a loopback
//! port), each next to a baseline running the store calls behind the page — the same
//! SQL, no HTTP, no template — from a plain loop with the same concurrency.

use super::http::{self, Pool};
use super::report::Figure;
use super::seed::key_of;
use super::slices::{Plan, alternate};
use idemwatch::guard::IdempotencyKey;
use idemwatch::store::{Cursor, HistoryRead, KeyFilter, Store};
use idemwatch::web::{self, AppState};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The id support types for key number `i`.
type SearchTerm = fn(u64) -> String;

/// A spread of key numbers below `keys` (Fibonacci hashing of a counter).
fn pick(next: &AtomicU64, keys: u64) -> u64 {
    next.fetch_add(1, Ordering::Relaxed)
        .wrapping_mul(11_400_714_819_323_198_485)
        % keys
}

/// `unknown`: the key numbers below it are UNKNOWN, with no result (no provider id).
pub async fn run(
    store: &Store,
    keys: u64,
    unknown: u64,
    plan: Plan,
    clients: usize,
    figures: &mut Vec<Figure>,
) {
    let addr = http::serve(web::app(AppState::new(store.clone()))).await;
    let pool = Pool::new(addr, clients).await;
    let next = Arc::new(AtomicU64::new(0));
    let deep = super::seed::cursor_at(store, 1000).await;
    let (at, key) = deep.rsplit_once('_').unwrap();
    let cursor = Cursor {
        at: chrono::DateTime::parse_from_rfc3339(at).unwrap().to_utc(),
        key: key.to_string(),
    };

    // Key detail: the record, its attempts, the keys with the same business ref, in one
    // read transaction (`Store::key_history`, the page's one read).
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
            let read = HistoryRead {
                after: 0,
                page: 500,
                siblings: 21,
            };
            s.key_history(&key, read).await.unwrap().unwrap();
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

    // The search box (`/search?q=…`, issue 50) with each id support may have of key `i`
    // (seed.rs): the answer is the redirect to the one key found. The baseline is the
    // store call behind it, one probe of the search terms.
    let first = unknown.max(1000);
    let searches: [(&str, SearchTerm); 4] = [
        ("business ref in lower case b-n", |i| format!("b-{i}")),
        ("number alone n", |i| i.to_string()),
        ("provider id in the result RF_000000n", |i| {
            format!("RF_{i:07}")
        }),
        ("ticket in the intent id ticket-n", |i| {
            format!("ticket-{i}")
        }),
    ];
    for (what, term) in searches {
        let (p, n) = (pool.clone(), next.clone());
        let page = move || {
            let (p, n) = (p.clone(), n.clone());
            async move {
                let q = term(first + pick(&n, keys - first));
                p.get(&format!("/search?q={q}"), 303).await;
            }
        };
        let (s, n) = (store.clone(), next.clone());
        let sql = move || {
            let (s, n) = (s.clone(), n.clone());
            async move {
                let f = KeyFilter {
                    search: Some(term(first + pick(&n, keys - first))),
                    ..KeyFilter::default()
                };
                assert_eq!(s.list_keys(&f, None, 2).await.unwrap().keys.len(), 1);
            }
        };
        push(
            figures,
            &format!("search box: {what} /search?q=…"),
            alternate(plan, clients, page, sql).await,
            clients,
        );
    }

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
