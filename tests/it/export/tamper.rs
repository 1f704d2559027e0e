//! verify catches an edited row, a deleted row, an inserted row and a reordering, in
//! the database (a DBA who dropped the append-only trigger) and in export files.

use super::*;
use crate::both_backends;
use crate::support::as_key;
use idemwatch::export::{Finding, Report, verify_csv, verify_database, verify_ndjson};
use idemwatch::guard::{ChainFields, Detail, chain_hash};
use std::collections::BTreeMap;

/// `n` DONE keys with three rows each (claimed, completed, replayed), sorted.
async fn three_row_keys(f: &Fixture, n: usize) -> Vec<String> {
    let mut keys = Vec::new();
    for i in 0..n {
        let call = refund(&format!("T-{i}"), 100 + i as i64, "1");
        f.guard.run(&call, &f.client([])).await.unwrap();
        f.guard.run(&call, &f.client([])).await.unwrap();
        keys.push(call.intent.key().unwrap().to_string());
    }
    keys.sort();
    keys
}

fn by_key(report: &Report) -> BTreeMap<String, (Option<i64>, Finding)> {
    report
        .breaks
        .iter()
        .map(|b| (b.key.clone().unwrap(), (b.seq, b.problem.clone())))
        .collect()
}

/// Appends a row that chains correctly onto `key`'s last row but that the record
/// does not know about: what a forger who recomputes hashes can do.
async fn insert_forged_row(store: &Store, key: &str) {
    let last = store.attempts(&as_key(key)).await.unwrap().pop().unwrap();
    let seq = last.seq + 1;
    let detail = json!({"note": "forged"});
    let fields = ChainFields {
        seq,
        kind: "replayed",
        detail: Detail::Value(&detail),
        duration_ms: None,
        ..last.chain_fields()
    };
    let hash = chain_hash(&last.hash, fields);
    let sql = "INSERT INTO idempotency_attempts (key, tenant, tool, seq, kind, fencing_token, \
        actor, detail, duration_ms, occurred_at, prev_hash, hash) \
        VALUES ($1, $2, $3, $4, 'replayed', $5, $6, $7, NULL, $8, $9, $10)";
    macro_rules! run {
        ($pool:expr) => {
            sqlx::query(sql)
                .bind(key)
                .bind(&last.tenant)
                .bind(&last.tool)
                .bind(seq)
                .bind(last.fencing_token.0)
                .bind(&last.actor)
                .bind(sqlx::types::Json(&detail))
                .bind(last.occurred_at)
                .bind(&last.hash)
                .bind(&hash)
                .execute($pool)
                .await
                .unwrap()
        };
    }
    match store {
        Store::Postgres(p) => {
            run!(p);
        }
        Store::Sqlite(p) => {
            run!(p);
        }
    }
}

both_backends!(
    async fn verify_catches_every_kind_of_tampering_in_the_database(db: TestDb) {
        let f = Fixture::new(&db);
        let keys = three_row_keys(&f, 8).await;
        assert!(verify_database(&f.store).await.unwrap().is_intact());
        let [
            edited,
            deleted,
            inserted,
            reordered,
            truncated,
            emptied,
            context,
            untouched,
        ] = <[String; 8]>::try_from(keys.clone()).unwrap();

        drop_append_only_trigger(&f.store).await;
        dba(&f.store, &format!("UPDATE idempotency_attempts SET actor = 'mallory' WHERE key = '{edited}' AND seq = 2")).await;
        dba(
            &f.store,
            &format!("DELETE FROM idempotency_attempts WHERE key = '{deleted}' AND seq = 2"),
        )
        .await;
        insert_forged_row(&f.store, &inserted).await;
        // Swap rows 2 and 3 (seq is unique, so through a spare number).
        for (from, to) in [(2, 100), (3, 2), (100, 3)] {
            dba(&f.store, &format!("UPDATE idempotency_attempts SET seq = {to} WHERE key = '{reordered}' AND seq = {from}")).await;
        }
        dba(
            &f.store,
            &format!("DELETE FROM idempotency_attempts WHERE key = '{truncated}' AND seq = 3"),
        )
        .await;
        dba(
            &f.store,
            &format!("DELETE FROM idempotency_attempts WHERE key = '{emptied}'"),
        )
        .await;

        // The record table has no trigger: its context can be edited, but the key is
        // derived from it.
        dba(
            &f.store,
            &format!(
                "UPDATE idempotency_records SET workflow_id = 'run-other' WHERE key = '{context}'"
            ),
        )
        .await;

        let report = verify_database(&f.store).await.unwrap();
        assert!(!report.is_intact());
        assert_eq!(report.broken_keys, 7, "{:#?}", report.breaks);
        let found = by_key(&report);
        assert!(
            matches!(&found[&edited], (Some(2), Finding::HashMismatch { .. })),
            "{:?}",
            found[&edited]
        );
        assert_eq!(
            found[&deleted],
            (
                Some(3),
                Finding::SeqGap {
                    expected: 2,
                    found: 3
                }
            )
        );
        assert!(
            matches!(
                &found[&inserted],
                (
                    Some(4),
                    Finding::HeadMismatch {
                        head_seq: 3,
                        last_seq: 4,
                        ..
                    }
                )
            ),
            "{:?}",
            found[&inserted]
        );
        assert!(
            matches!(&found[&reordered], (Some(2), Finding::BrokenLink { .. })),
            "{:?}",
            found[&reordered]
        );
        assert!(
            matches!(
                &found[&truncated],
                (
                    Some(2),
                    Finding::HeadMismatch {
                        head_seq: 3,
                        last_seq: 2,
                        ..
                    }
                )
            ),
            "{:?}",
            found[&truncated]
        );
        assert_eq!(found[&emptied], (None, Finding::NoAttempts));
        assert!(
            matches!(&found[&context], (Some(1), Finding::ContextMismatch { .. })),
            "{:?}",
            found[&context]
        );
        assert!(!found.contains_key(&untouched));
        // The first break reported is the first broken key in (key, seq) order.
        let first = report.first_break().unwrap();
        let first_key = keys.iter().find(|k| **k != untouched && **k != emptied);
        assert_eq!(first.key.as_ref(), first_key);
    }
);

fn first_problem(bytes: &[u8]) -> (Option<u64>, Finding) {
    let report = verify_ndjson(bytes).unwrap();
    let b = report.first_break().expect("a break").clone();
    (b.line, b.problem)
}

both_backends!(
    async fn verify_catches_every_kind_of_tampering_in_an_export_file(db: TestDb) {
        let f = Fixture::new(&db);
        three_row_keys(&f, 3).await;
        let (bytes, manifest) = export(&f.store, &ExportFilter::default(), Format::Ndjson).await;
        let original = lines(&bytes);
        assert_eq!(original.len(), 10);
        assert!(verify_ndjson(&bytes[..]).unwrap().is_intact());

        // Edited: line 2 (key 1, seq 2) gets another actor.
        let mut edited = original.clone();
        let mut row: Value = serde_json::from_str(&edited[1]).unwrap();
        row["actor"] = json!("mallory");
        edited[1] = row.to_string();
        let (line, problem) = first_problem(&join(&edited));
        assert_eq!(line, Some(2));
        assert!(matches!(problem, Finding::HashMismatch { .. }), "{problem}");

        // Deleted: line 5 (key 2, seq 2).
        let mut deleted = original.clone();
        deleted.remove(4);
        assert_eq!(
            first_problem(&join(&deleted)),
            (
                Some(5),
                Finding::SeqGap {
                    expected: 2,
                    found: 3
                }
            )
        );

        // Inserted: line 2 repeated.
        let mut inserted = original.clone();
        inserted.insert(2, original[1].clone());
        assert_eq!(
            first_problem(&join(&inserted)),
            (
                Some(3),
                Finding::SeqNotIncreasing {
                    previous: 2,
                    found: 2
                }
            )
        );

        // Reordered within a key: lines 2 and 3 swapped.
        let mut reordered = original.clone();
        reordered.swap(1, 2);
        assert_eq!(
            first_problem(&join(&reordered)),
            (
                Some(2),
                Finding::SeqGap {
                    expected: 2,
                    found: 3
                }
            )
        );

        // Reordered across keys: key 3's rows moved to the front.
        let mut moved = original[6..9].to_vec();
        moved.extend_from_slice(&original[..6]);
        moved.push(original[9].clone());
        let (line, problem) = first_problem(&join(&moved));
        assert_eq!(line, Some(4));
        assert!(
            matches!(problem, Finding::KeyOutOfOrder { .. }),
            "{problem}"
        );

        // A key's last row deleted: the chain cannot see it, the manifest can.
        let mut tail = original.clone();
        tail.remove(2);
        let (_, problem) = first_problem(&join(&tail));
        assert!(
            matches!(problem, Finding::ManifestMismatch(ref why) if why.contains("row_count 9")),
            "{problem}"
        );

        // Truncated: no manifest.
        let cut = join(&original[..9]);
        let report = verify_ndjson(&cut[..]).unwrap();
        assert!(
            report
                .breaks
                .iter()
                .any(|b| b.problem == Finding::ManifestMissing)
        );

        // CSV: one field edited (an actor) fails that row's hash.
        let (csv_bytes, csv_manifest) =
            export(&f.store, &ExportFilter::default(), Format::Csv).await;
        assert!(
            verify_csv(&csv_bytes[..], &csv_manifest)
                .unwrap()
                .is_intact()
        );
        let text = String::from_utf8(csv_bytes).unwrap();
        let edited = text.replacen(",worker-1,", ",worker-9,", 1);
        let report = verify_csv(edited.as_bytes(), &csv_manifest).unwrap();
        let b = report.first_break().unwrap();
        assert_eq!(b.line, Some(2));
        assert!(matches!(b.problem, Finding::HashMismatch { .. }), "{b}");
        assert_eq!(manifest.row_count, 9);
    }
);
