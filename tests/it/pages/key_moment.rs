//! The key page shows one moment (issue 48): its record, its timeline and its counts
//! come from one read, so a write landing while the page is read cannot show a record
//! from before it beside a timeline from after it.

use crate::both_backends;
use crate::support::app::TestApp;
use axum::http::StatusCode;
use idemwatch::store::{Store, WritePool};

/// How many writes land while the page is read again and again.
const WRITES: i64 = 300;

/// One attempt appended and the record's `attempt_count` raised, in one transaction:
/// in every committed state the count and the attempt rows move together.
async fn append(store: &Store, key: &str) {
    let insert = store.backend().pick(
        "INSERT INTO idempotency_attempts (key, tenant, tool, seq, kind, fencing_token, actor, \
         detail, occurred_at, prev_hash, hash) \
         SELECT key, tenant, tool, log_seq + 1, 'replayed', 1, 'w', '{}'::jsonb, now(), 'p', 'h' \
         FROM idempotency_records WHERE key = $1",
        "INSERT INTO idempotency_attempts (key, tenant, tool, seq, kind, fencing_token, actor, \
         detail, occurred_at, prev_hash, hash) \
         SELECT key, tenant, tool, log_seq + 1, 'replayed', 1, 'w', '{}', \
         strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), 'p', 'h' FROM idempotency_records WHERE key = $1",
    );
    let bump = "UPDATE idempotency_records SET attempt_count = attempt_count + 1, \
        log_seq = log_seq + 1 WHERE key = $1";
    macro_rules! tx {
        ($pool:expr) => {{
            let mut tx = $pool.begin_write().await.unwrap();
            sqlx::query(insert)
                .bind(key)
                .execute(&mut *tx)
                .await
                .unwrap();
            sqlx::query(bump).bind(key).execute(&mut *tx).await.unwrap();
            tx.commit().await.unwrap();
        }};
    }
    match store {
        Store::Postgres(pool) => tx!(pool),
        Store::Sqlite(pools) => tx!(pools),
    }
}

/// The record's `attempt_count` and the timeline's step count, as the page shows them.
fn calls_and_steps(body: &str) -> (i64, i64) {
    let number_after = |marker: &str| -> i64 {
        let at = body
            .find(marker)
            .unwrap_or_else(|| panic!("no {marker}: {body}"))
            + marker.len();
        body[at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .unwrap()
    };
    (
        number_after("<dt>Calls (attempt_count)</dt><dd>"),
        number_after("<p class=\"tally\">"),
    )
}

both_backends!(
    async fn the_key_page_shows_its_record_and_timeline_from_one_moment(db: TestDb) {
        let (app, s) = TestApp::open(&db).await;
        let uri = format!("/keys/{}", s.replayed);
        let first = app.get(&uri).await;
        assert_eq!(first.status, StatusCode::OK, "{}", first.body);
        let (calls, steps) = calls_and_steps(&first.body);
        // What the seed left: the same difference must hold in every page read later.
        let offset = steps - calls;

        let writer = {
            let (store, key) = (db.store.clone(), s.replayed.clone());
            tokio::spawn(async move {
                for _ in 0..WRITES {
                    append(&store, &key).await;
                }
            })
        };
        let mut reads = 0;
        while !writer.is_finished() || reads == 0 {
            let p = app.get(&uri).await;
            assert_eq!(p.status, StatusCode::OK, "{}", p.body);
            let (calls, steps) = calls_and_steps(&p.body);
            assert_eq!(
                steps - calls,
                offset,
                "read {reads}: the record says {calls} calls beside a timeline of {steps} steps"
            );
            let rows = i64::try_from(p.body.matches("id=\"attempt-").count()).unwrap();
            assert_eq!(
                rows, steps,
                "read {reads}: {steps} steps counted, {rows} shown"
            );
            reads += 1;
        }
        writer.await.unwrap();
        let (calls, steps) = calls_and_steps(&app.get(&uri).await.body);
        assert_eq!(calls, calls_and_steps(&first.body).0 + WRITES);
        assert_eq!(steps - calls, offset);
        assert!(reads > 1, "the page was read while the writes landed");
    }
);
