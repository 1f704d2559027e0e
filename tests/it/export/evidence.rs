//! Issue 13: the chain covers the record's state, and signed checkpoints catch what
//! the chain alone cannot (a key deleted whole, a rollback, a checkpoint tampered
//! with); pruning is not tampering; exports check offline against a public key.

use super::*;
use crate::both_backends;
use crate::support::as_key;
use ed25519_dalek::SigningKey;
use idemwatch::evidence::port::EvidenceStore;
use idemwatch::evidence::{Checkpoint, Checkpointer, keys};
use idemwatch::export::{
    FileEvidence, Finding, Outside, Report, TrustedKeys, verify_csv_with, verify_database,
    verify_database_with, verify_ndjson_with,
};
use idemwatch::retention::{Pruner, RetentionSettings};
use std::sync::Arc;

/// `n` DONE keys (claimed, completed, replayed), in key order.
pub(super) async fn done_keys(f: &Fixture, n: usize) -> Vec<String> {
    let mut keys = Vec::new();
    for i in 0..n {
        let call = refund(&format!("E-{i}"), 100 + i as i64, "1");
        f.guard.run(&call, &f.client([])).await.unwrap();
        f.guard.run(&call, &f.client([])).await.unwrap();
        keys.push(call.intent.key().unwrap().to_string());
    }
    keys.sort();
    keys
}

fn signing_key() -> SigningKey {
    SigningKey::from_bytes(&[42; 32])
}

pub(super) fn checkpointer(f: &Fixture, dir: Option<&std::path::Path>) -> Checkpointer<Store> {
    Checkpointer::new(f.store.clone(), signing_key(), Arc::new(f.clock.clone()))
        .with_dir(dir.map(Into::into))
}

/// Checkpoints until the tree holds `size` leaves and every key's newest leaf is its
/// current head. On PostgreSQL a checkpoint reads only transactions older than every
/// running one in the cluster, and other tests' transactions may hold it back for a
/// moment: a checkpoint can then see a key without its last row, and a later one adds
/// the head.
pub(super) async fn checkpoint_to(
    store: &Store,
    writer: &Checkpointer<Store>,
    size: u64,
) -> Checkpoint {
    let mut last = None;
    for _ in 0..100 {
        if let Some(c) = writer.checkpoint().await.unwrap() {
            last = Some(c);
        }
        if let Some(c) = last.as_ref().filter(|c| c.body.tree_size >= size)
            && heads_covered(store).await
        {
            return c.clone();
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("no checkpoint reached {size} leaves with every head: {last:?}");
}

/// Whether every record has a leaf, and each checkpointed key's newest leaf holds its
/// record's head. (A tree of the wanted size can hold two leaves of one key, one seen
/// without its last row, and none of another: that key is not covered yet.)
async fn heads_covered(store: &Store) -> bool {
    use futures::TryStreamExt;
    let mut newest = std::collections::HashMap::new();
    let leaves: Vec<_> = store.checkpoint_leaves().try_collect().await.unwrap();
    for (_, leaf) in leaves {
        newest.insert(leaf.key.clone(), leaf);
    }
    let mut covered = 0;
    for (key, leaf) in newest {
        if let Some(record) = store.record(&as_key(&key)).await.unwrap() {
            if record.log_seq != leaf.log_seq || leaf.pruned {
                return false;
            }
            covered += 1;
        }
    }
    covered == record_count(store).await
}

async fn record_count(store: &Store) -> i64 {
    const COUNT: &str = "SELECT count(*) FROM idempotency_records";
    match store {
        Store::Postgres(p) => sqlx::query_scalar(COUNT).fetch_one(p).await,
        Store::Sqlite(p) => sqlx::query_scalar(COUNT).fetch_one(p).await,
    }
    .unwrap()
}

fn with_key() -> Outside {
    Outside {
        trusted: TrustedKeys::new([signing_key().verifying_key()]),
        checkpoints: None,
    }
}

/// The one break of `key`, or a panic naming everything found.
fn break_of(report: &Report, key: &str) -> Finding {
    let found: Vec<_> = report
        .breaks
        .iter()
        .filter(|b| b.key.as_deref() == Some(key))
        .collect();
    assert_eq!(found.len(), 1, "{key}: {:#?}", report.breaks);
    found[0].problem.clone()
}

both_backends!(
    async fn a_done_records_result_changed_is_reported(db: TestDb) {
        let f = Fixture::new(&db);
        let [edited, untouched] = <[String; 2]>::try_from(done_keys(&f, 2).await).unwrap();
        dba(&f.store, &format!("UPDATE idempotency_records SET result = '{{\"refund_id\": \"rf_x\", \"amount_p\": 999999}}' WHERE key = '{edited}'")).await;
        let report = verify_database(&f.store).await.unwrap();
        assert_eq!(report.broken_keys, 1, "{:#?}", report.breaks);
        match break_of(&report, &edited) {
            Finding::StateMismatch(columns) => {
                let names: Vec<&str> = columns.iter().map(|c| c.0.as_str()).collect();
                assert_eq!(names, ["result"]);
            }
            other => panic!("{other}"),
        }
        assert!(
            report
                .breaks
                .iter()
                .all(|b| b.key.as_deref() != Some(&untouched))
        );
    }
);

both_backends!(
    async fn business_args_and_ref_changed_are_reported(db: TestDb) {
        let f = Fixture::new(&db);
        let [both, args_only] = <[String; 2]>::try_from(done_keys(&f, 2).await).unwrap();
        dba(&f.store, &format!("UPDATE idempotency_records SET business_args = '{{\"amount_p\": 1}}', business_ref = 'order:FORGED' WHERE key = '{both}'")).await;
        // A forger who also recomputes the fingerprint still differs from the chain.
        let forged = json!({"amount_p": 1});
        let fingerprint = sha256_hex(canonical_json(&forged).unwrap().as_bytes());
        dba(&f.store, &format!("UPDATE idempotency_records SET business_args = '{{\"amount_p\": 1}}', fingerprint = '{fingerprint}' WHERE key = '{args_only}'")).await;
        let report = verify_database(&f.store).await.unwrap();
        assert_eq!(report.broken_keys, 2, "{:#?}", report.breaks);
        assert!(
            matches!(
                break_of(&report, &both),
                Finding::FingerprintMismatch { .. }
            ),
            "{:?}",
            report.breaks
        );
        match break_of(&report, &args_only) {
            Finding::StateMismatch(columns) => {
                let names: Vec<&str> = columns.iter().map(|c| c.0.as_str()).collect();
                assert_eq!(names, ["fingerprint", "business_args"]);
            }
            other => panic!("{other}"),
        }
    }
);

both_backends!(
    async fn a_key_deleted_whole_after_a_checkpoint_is_reported(db: TestDb) {
        let f = Fixture::new(&db);
        let [gone, kept] = <[String; 2]>::try_from(done_keys(&f, 2).await).unwrap();
        let c = checkpoint_to(&f.store, &checkpointer(&f, None), 2).await;
        // 2, or 3 when a checkpoint held back on PostgreSQL saw a key before its last
        // row and the next one added its head (checkpoint_to).
        assert!((2..=3).contains(&c.body.tree_size), "{c:?}");
        assert!(
            verify_database_with(&f.store, &with_key())
                .await
                .unwrap()
                .is_intact()
        );
        dba(&f.store, &format!("DELETE FROM idempotency_attempts WHERE key = '{gone}'; DELETE FROM idempotency_records WHERE key = '{gone}'")).await;
        let report = verify_database_with(&f.store, &with_key()).await.unwrap();
        assert_eq!(
            break_of(&report, &gone),
            Finding::KeyGone {
                checkpoint: c.body.seq,
                seq: 3
            }
        );
        assert_eq!(report.broken_keys, 1, "{:#?}", report.breaks);
        assert!(
            report
                .breaks
                .iter()
                .all(|b| b.key.as_deref() != Some(&kept))
        );
    }
);

both_backends!(
    async fn a_rolled_back_last_attempt_is_reported(db: TestDb) {
        let f = Fixture::new(&db);
        let [rolled, _] = <[String; 2]>::try_from(done_keys(&f, 2).await).unwrap();
        let c = checkpoint_to(&f.store, &checkpointer(&f, None), 2).await;
        let before = f.store.attempts(&as_key(&rolled)).await.unwrap()[1].clone();
        dba(&f.store, &format!("DELETE FROM idempotency_attempts WHERE key = '{rolled}' AND seq = 3; UPDATE idempotency_records SET log_seq = 2, log_hash = '{}' WHERE key = '{rolled}'", before.hash)).await;
        let report = verify_database_with(&f.store, &with_key()).await.unwrap();
        assert_eq!(
            break_of(&report, &rolled),
            Finding::ShorterThanCheckpoint {
                checkpoint: c.body.seq,
                seq: 3,
                last_seq: 2
            }
        );
    }
);

both_backends!(
    async fn checkpoints_deleted_altered_or_reordered_are_reported(db: TestDb) {
        let f = Fixture::new(&db);
        let dir = tempfile::tempdir().unwrap();
        let writer = checkpointer(&f, Some(dir.path()));
        for i in 0..4 {
            let call = refund(&format!("C-{i}"), 100, "1");
            f.guard.run(&call, &f.client([])).await.unwrap();
            f.clock.advance(TimeDelta::minutes(1));
            checkpoint_to(&f.store, &writer, i + 1).await;
        }
        // Nothing changed: no checkpoint.
        assert!(writer.checkpoint().await.unwrap().is_none());
        let files = idemwatch::evidence::read_dir(dir.path()).unwrap();
        assert!(files.len() >= 4, "at least one checkpoint per key");
        let newest = files.last().unwrap().body.seq;
        let outside = Outside {
            checkpoints: Some(files),
            ..with_key()
        };
        let report = verify_database_with(&f.store, &outside).await.unwrap();
        assert!(report.is_intact(), "{:#?}", report.breaks);
        let checkpoint_problems = |r: &Report| -> Vec<String> {
            r.breaks
                .iter()
                .filter_map(|b| match &b.problem {
                    Finding::Checkpoint(why) => Some(why.clone()),
                    _ => None,
                })
                .collect()
        };

        // Altered: the root of checkpoint 2 changed (not re-signable without the key).
        dba(
            &f.store,
            "UPDATE evidence_checkpoints SET tree_size = tree_size + 3 WHERE seq = 2",
        )
        .await;
        let found = checkpoint_problems(&verify_database_with(&f.store, &outside).await.unwrap());
        assert!(
            found
                .iter()
                .any(|p| p.contains("checkpoint 2") && p.contains("altered")),
            "{found:#?}"
        );
        assert!(
            found
                .iter()
                .any(|p| p.contains("differs from the copy kept outside")),
            "{found:#?}"
        );
        dba(
            &f.store,
            "UPDATE evidence_checkpoints SET tree_size = tree_size - 3 WHERE seq = 2",
        )
        .await;
        assert!(
            verify_database_with(&f.store, &outside)
                .await
                .unwrap()
                .is_intact()
        );

        // Reordered: checkpoints 2 and 3 swap numbers.
        dba(&f.store, "UPDATE evidence_checkpoints SET seq = 100 WHERE seq = 2; UPDATE evidence_checkpoints SET seq = 2 WHERE seq = 3; UPDATE evidence_checkpoints SET seq = 3 WHERE seq = 100").await;
        let found = checkpoint_problems(&verify_database_with(&f.store, &outside).await.unwrap());
        assert!(!found.is_empty());
        dba(&f.store, "UPDATE evidence_checkpoints SET seq = 100 WHERE seq = 2; UPDATE evidence_checkpoints SET seq = 2 WHERE seq = 3; UPDATE evidence_checkpoints SET seq = 3 WHERE seq = 100").await;
        assert!(
            verify_database_with(&f.store, &outside)
                .await
                .unwrap()
                .is_intact()
        );

        // Deleted: a middle one (seen in the database alone), then the newest (seen
        // against the copies kept outside).
        dba(&f.store, "DELETE FROM evidence_checkpoints WHERE seq = 2").await;
        let found = checkpoint_problems(&verify_database(&f.store).await.unwrap());
        assert!(found.iter().any(|p| p.contains("missing")), "{found:#?}");
        dba(&f.store, "DELETE FROM evidence_checkpoints WHERE seq >= 2; DELETE FROM evidence_leaves WHERE idx >= (SELECT tree_size FROM evidence_checkpoints WHERE seq = 1)").await;
        assert!(
            verify_database(&f.store).await.unwrap().is_intact(),
            "the database alone cannot see a cut tail"
        );
        let found = checkpoint_problems(&verify_database_with(&f.store, &outside).await.unwrap());
        let expected = format!("checkpoint {newest} (kept outside) is not in the database");
        assert!(found.iter().any(|p| p.contains(&expected)), "{found:#?}");
    }
);

both_backends!(
    async fn pruning_is_not_reported_as_tampering(db: TestDb) {
        let f = Fixture::new(&db);
        f.clock.set(Utc::now() - TimeDelta::days(100));
        let keys = done_keys(&f, 3).await;
        let writer = checkpointer(&f, None);
        let before = checkpoint_to(&f.store, &writer, 3).await.body.tree_size;
        f.clock.set(Utc::now());
        let pruner = Pruner::new(
            f.store.clone(),
            RetentionSettings::default(),
            Arc::new(f.clock.clone()),
        );
        let summary = pruner.run_once().await.unwrap();
        assert_eq!(summary.counts.done, 3);
        for k in &keys {
            assert!(f.store.record(&as_key(k)).await.unwrap().is_none());
        }
        // Before the next checkpoint: the receipts tell pruned from deleted.
        let report = verify_database_with(&f.store, &with_key()).await.unwrap();
        assert!(report.is_intact(), "{:#?}", report.breaks);
        // After it: tombstone leaves do.
        let c = checkpoint_to(&f.store, &writer, before + 3).await;
        assert_eq!(c.body.tree_size, before + 3, "three tombstones");
        dba(&f.store, "DELETE FROM evidence_pruned").await;
        let report = verify_database_with(&f.store, &with_key()).await.unwrap();
        assert!(report.is_intact(), "{:#?}", report.breaks);
    }
);

fn verify_file(bytes: &[u8], key: &SigningKey) -> Report {
    let manifest = idemwatch::export::ndjson_manifest(bytes).unwrap();
    let trusted = TrustedKeys::new([key.verifying_key()]);
    let evidence = FileEvidence::of(manifest.as_ref(), &trusted);
    verify_ndjson_with(bytes, evidence).unwrap()
}

both_backends!(
    async fn an_export_verifies_offline_against_the_public_key(db: TestDb) {
        let f = Fixture::new(&db);
        let keys = done_keys(&f, 3).await;
        checkpoint_to(&f.store, &checkpointer(&f, None), 3).await;
        // A key changed after the checkpoint: its newest row is not covered yet.
        let call = refund("E-0", 100, "1");
        f.guard.run(&call, &f.client([])).await.unwrap();

        let (bytes, manifest) = export(&f.store, &ExportFilter::default(), Format::Ndjson).await;
        let evidence = manifest
            .evidence
            .as_ref()
            .expect("evidence in the manifest");
        assert_eq!(evidence.proofs.len(), 3);
        assert_eq!(evidence.uncovered_keys, 0);
        let report = verify_file(&bytes, &signing_key());
        assert!(report.is_intact(), "{:#?}", report.breaks);
        assert_eq!(report.anchored_keys, 3);
        let (rows, _) = ndjson_lines(&bytes);
        assert!(rows[0].get("business_args").is_some() && rows[0].get("result").is_some());

        // The wrong public key.
        let other = SigningKey::from_bytes(&[7; 32]);
        let report = verify_file(&bytes, &other);
        assert!(
            report
                .breaks
                .iter()
                .any(|b| matches!(&b.problem, Finding::Evidence(w) if w.contains("another key"))),
            "{:#?}",
            report.breaks
        );

        // Tampered: a key's rows removed, and the manifest recomputed to match.
        let original = lines(&bytes);
        let (attempts, manifest_line) = original.split_at(original.len() - 1);
        let mut cut: Vec<String> = attempts
            .iter()
            .filter(|l| !l.contains(&keys[1]))
            .cloned()
            .collect();
        cut.push(manifest_line[0].clone());
        let mut m: Value = serde_json::from_str(cut.last().unwrap()).unwrap();
        let body = join(&cut[..cut.len() - 1]);
        m["sha256"] = json!(sha256_hex(&body));
        m["row_count"] = json!(cut.len() - 1);
        m["key_count"] = json!(2);
        *cut.last_mut().unwrap() = m.to_string();
        let report = verify_file(&join(&cut), &signing_key());
        assert_eq!(report.broken_keys, 1, "{:#?}", report.breaks);
        assert!(
            matches!(break_of(&report, &keys[1]), Finding::Evidence(_)),
            "{:#?}",
            report.breaks
        );

        // Tampered: a result edited in the file.
        let mut edited = original.clone();
        let i = edited[..edited.len() - 1]
            .iter()
            .rposition(|l| l.contains(&keys[2]))
            .unwrap();
        let mut row: Value = serde_json::from_str(&edited[i]).unwrap();
        row["result"] = json!({"refund_id": "rf_forged"});
        edited[i] = row.to_string();
        let report = verify_file(&join(&edited), &signing_key());
        assert!(
            report
                .breaks
                .iter()
                .any(|b| matches!(b.problem, Finding::StateMismatch(_))),
            "{:#?}",
            report.breaks
        );

        // CSV, with its manifest: the same evidence.
        let (csv, csv_manifest) = export(&f.store, &ExportFilter::default(), Format::Csv).await;
        let pk = signing_key().verifying_key();
        let report = verify_csv_with(
            &csv[..],
            &csv_manifest,
            FileEvidence::of(Some(&csv_manifest), &TrustedKeys::new([pk])),
        )
        .unwrap();
        assert!(report.is_intact(), "{:#?}", report.breaks);
        assert_eq!(report.anchored_keys, 3);
        let _: Option<&Checkpoint> = None;
        let _ = keys::key_id(&pk);
    }
);

both_backends!(
    async fn each_exported_key_is_proved_by_its_newest_leaf_across_checkpoints(db: TestDb) {
        let f = Fixture::new(&db);
        let writer = checkpointer(&f, None);
        let keys = done_keys(&f, 5).await;
        // Five leaves, or more when another test's transaction held the snapshot back
        // and a key was first seen without its last row (`checkpoint_to`).
        let first = checkpoint_to(&f.store, &writer, 5).await.body.tree_size;
        // Two keys change after the first checkpoint: their newest leaves are in the
        // second one, and the tree (7 leaves when nothing held it back) is not a power
        // of two.
        let mut changed = Vec::new();
        for i in [1, 3] {
            let call = refund(&format!("E-{i}"), 100 + i as i64, "1");
            f.guard.run(&call, &f.client([])).await.unwrap();
            changed.push(call.intent.key().unwrap().to_string());
        }
        let second = checkpoint_to(&f.store, &writer, first + 2).await;
        assert!(second.body.tree_size >= first + 2, "{second:?}");

        // One key's export proves that key alone, by its newest leaf.
        for key in [&changed[0], &keys[0]] {
            let filter = ExportFilter {
                key: Some(as_key(key)),
                ..ExportFilter::default()
            };
            let (bytes, manifest) = export(&f.store, &filter, Format::Ndjson).await;
            let evidence = manifest.evidence.as_ref().expect("evidence");
            let proofs = evidence.proofs.to_vec().unwrap();
            assert_eq!(proofs.len(), 1, "{key}");
            assert_eq!(&proofs[0].leaf.key, key);
            let newest = f.store.record(&as_key(key)).await.unwrap().unwrap();
            assert_eq!(proofs[0].leaf.log_seq, newest.log_seq, "{key}");
            assert_eq!(
                proofs[0].leaf_index >= first,
                changed.contains(key),
                "{key}: a changed key is proved by its leaf in the second checkpoint"
            );
            let report = verify_file(&bytes, &signing_key());
            assert!(report.is_intact(), "{key}: {:#?}", report.breaks);
            assert_eq!(report.anchored_keys, 1);
        }

        // The whole export: every key proved, whatever the lookup batch.
        let (bytes, manifest) = export(&f.store, &ExportFilter::default(), Format::Ndjson).await;
        let evidence = manifest.evidence.clone().expect("evidence");
        assert_eq!(evidence.proofs.len(), 5);
        let report = verify_file(&bytes, &signing_key());
        assert!(report.is_intact(), "{:#?}", report.breaks);
        assert_eq!(report.anchored_keys, 5);
        let exported: Vec<(String, i64)> = evidence
            .proofs
            .to_vec()
            .unwrap()
            .iter()
            .map(|p| (p.leaf.key.clone(), p.leaf.log_seq))
            .collect();
        let exported = idemwatch::export::spool_exported(&exported).unwrap();
        let source = idemwatch::export::EvidenceSource::newest(&f.store)
            .await
            .unwrap()
            .expect("a checkpoint");
        for batch in [1, 2, 3, 1000] {
            assert_eq!(
                source.evidence_by(&exported, batch, 4096).await.unwrap(),
                evidence,
                "lookup batch {batch}"
            );
        }
    }
);

both_backends!(
    async fn an_export_whose_proofs_need_deleted_leaves_fails_and_says_so(db: TestDb) {
        let f = Fixture::new(&db);
        let keys = done_keys(&f, 3).await;
        checkpoint_to(&f.store, &checkpointer(&f, None), 3).await;
        // The head log's last leaf removed (by someone with the database's rights).
        dba(&f.store, "DELETE FROM evidence_leaves WHERE idx = 2").await;
        let filter = ExportFilter {
            key: Some(as_key(&keys[0])),
            ..ExportFilter::default()
        };
        let err = export_error(&f.store, &filter).await;
        assert!(err.contains("leaves were deleted"), "{err}");
    }
);

/// The error of an export that must fail.
async fn export_error(store: &Store, filter: &ExportFilter) -> String {
    let mut out = Vec::new();
    idemwatch::export::export_to(
        store,
        filter,
        Format::Ndjson,
        CsvCells::Neutralised,
        &mut out,
    )
    .await
    .unwrap_err()
    .to_string()
}

/// `n` DONE keys made through the guard, eight calls at a time (the block tests need
/// more than two blocks of leaves; they find the keys by leaf).
async fn many_done_keys(f: &Fixture, n: usize) {
    use futures::StreamExt;
    futures::stream::iter(0..n)
        .for_each_concurrent(8, |i| async move {
            let call = refund(&format!("B-{i}"), 100 + i as i64, "1");
            f.guard.run(&call, &f.client([])).await.unwrap();
        })
        .await
}

both_backends!(
    async fn one_keys_proof_reads_its_block_and_the_block_roots_not_every_leaf(db: TestDb) {
        use futures::TryStreamExt;
        use idemwatch::evidence::merkle::BLOCK_LEAVES;
        let f = Fixture::new(&db);
        let writer = checkpointer(&f, None);
        // Two complete blocks and a partial third.
        let size = 2 * BLOCK_LEAVES + 300;
        many_done_keys(&f, size as usize).await;
        checkpoint_to(&f.store, &writer, size).await;
        let leaves: Vec<_> = f.store.checkpoint_leaves().try_collect().await.unwrap();
        assert_eq!(leaves.len() as u64, size);
        let blocks = f.store.checkpoint_blocks(3).await.unwrap();
        assert_eq!(
            blocks.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
            [0, 1],
            "the checkpoint stores the roots of the blocks it completes"
        );
        let key_at = |idx: usize| leaves[idx].1.key.clone();
        let one = |key: String| ExportFilter {
            key: Some(as_key(&key)),
            ..ExportFilter::default()
        };

        // A key in each block: proved from the block roots, and the proof checks.
        let mut proofs = Vec::new();
        for idx in [5, 1500, size as usize - 1] {
            let (bytes, manifest) = export(&f.store, &one(key_at(idx)), Format::Ndjson).await;
            let evidence = manifest.evidence.expect("evidence");
            assert_eq!(evidence.proofs.len(), 1);
            assert_eq!(evidence.proofs.to_vec().unwrap()[0].leaf_index, idx as u64);
            let report = verify_file(&bytes, &signing_key());
            assert!(report.is_intact(), "leaf {idx}: {:#?}", report.breaks);
            assert_eq!(report.anchored_keys, 1);
            proofs.push(evidence.proofs);
        }

        // A wrong stored root is never used: the proofs come from every leaf instead,
        // and they are the same proofs.
        dba(
            &f.store,
            &format!(
                "UPDATE evidence_blocks SET hash = '{}' WHERE idx = 0",
                "0".repeat(64)
            ),
        )
        .await;
        for (n, idx) in [5, 1500, size as usize - 1].into_iter().enumerate() {
            let (_, manifest) = export(&f.store, &one(key_at(idx)), Format::Ndjson).await;
            assert_eq!(manifest.evidence.unwrap().proofs, proofs[n], "leaf {idx}");
        }

        // Roots lost (or never written: leaves from before the table) are written
        // again from the leaves by the next checkpoint.
        dba(&f.store, "DELETE FROM evidence_blocks").await;
        let call = refund("B-7", 107, "1");
        f.guard.run(&call, &f.client([])).await.unwrap();
        checkpoint_to(&f.store, &writer, size + 1).await;
        let again = f.store.checkpoint_blocks(3).await.unwrap();
        assert_eq!(again, blocks, "the roots are the leaves' again");

        // One key's proof reads its own block's leaves, not the others': a leaf of
        // the first block deleted does not stop the second block's key, whose proof
        // still checks; an export that needs every leaf says they were deleted.
        dba(&f.store, "DELETE FROM evidence_leaves WHERE idx = 700").await;
        let (bytes, _) = export(&f.store, &one(key_at(1500)), Format::Ndjson).await;
        let report = verify_file(&bytes, &signing_key());
        assert!(report.is_intact(), "{:#?}", report.breaks);
        let err = export_error(&f.store, &ExportFilter::default()).await;
        assert!(err.contains("leaves were deleted"), "{err}");
    }
);

both_backends!(
    async fn a_whole_exports_proofs_come_back_from_files_as_the_listed_ones_would(db: TestDb) {
        use futures::TryStreamExt;
        use idemwatch::evidence::Proofs;
        use idemwatch::evidence::merkle::{BLOCK_LEAVES, Tree};
        let f = Fixture::new(&db);
        let writer = checkpointer(&f, None);
        // One complete block and a partial second: each path is a path inside a block
        // and one among the block roots.
        let size = BLOCK_LEAVES + 77;
        many_done_keys(&f, size as usize).await;
        checkpoint_to(&f.store, &writer, size).await;
        let leaves: Vec<_> = f.store.checkpoint_leaves().try_collect().await.unwrap();
        let tree = Tree::new(leaves.iter().map(|(_, leaf)| leaf.hash()).collect());

        // The whole export proves every key through the files, and each path is the
        // one the whole tree gives.
        let (bytes, manifest) = export(&f.store, &ExportFilter::default(), Format::Ndjson).await;
        let evidence = manifest.evidence.expect("evidence");
        assert!(
            matches!(evidence.proofs, Proofs::Streamed(_)),
            "{:?}",
            evidence.proofs
        );
        let proofs = evidence.proofs.to_vec().unwrap();
        assert_eq!(proofs.len() as u64, size);
        for p in &proofs {
            assert_eq!(&leaves[p.leaf_index as usize].1, &p.leaf);
            assert_eq!(
                p.path.hashes().unwrap(),
                tree.inclusion_proof(p.leaf_index),
                "leaf {}",
                p.leaf_index
            );
        }
        let report = verify_file(&bytes, &signing_key());
        assert!(report.is_intact(), "{:#?}", report.breaks);
        assert_eq!(report.anchored_keys, size);
        // The NDJSON manifest line, written in chunks from the files, is the manifest.
        let last = bytes
            .trim_ascii_end()
            .rsplit(|b| *b == b'\n')
            .next()
            .unwrap();
        let line: serde_json::Value = serde_json::from_slice(last).unwrap();
        assert_eq!(line["type"], "manifest");
        assert_eq!(
            line["evidence"]["proofs"].as_array().map(Vec::len),
            Some(size as usize)
        );

        // A few keys spread over both blocks: held in memory from the block roots, or
        // (with nothing allowed in memory) through the files: the same proofs.
        let mut sample: Vec<(String, i64)> = leaves
            .iter()
            .step_by(37)
            .map(|(_, leaf)| (leaf.key.clone(), i64::MAX))
            .collect();
        sample.sort();
        let exported = idemwatch::export::spool_exported(&sample).unwrap();
        let source = idemwatch::export::EvidenceSource::newest(&f.store)
            .await
            .unwrap()
            .expect("a checkpoint");
        let listed = source.evidence_by(&exported, 10, 4096).await.unwrap();
        let spilled = source.evidence_by(&exported, 10, 0).await.unwrap();
        assert!(matches!(listed.proofs, Proofs::Listed(_)), "{listed:?}");
        assert!(matches!(spilled.proofs, Proofs::Streamed(_)));
        assert_eq!(listed.proofs.len(), sample.len() as u64);
        assert_eq!(
            listed.proofs.to_vec().unwrap(),
            spilled.proofs.to_vec().unwrap()
        );
        assert_eq!(
            serde_json::to_string(&listed).unwrap(),
            serde_json::to_string(&spilled).unwrap()
        );
    }
);

both_backends!(
    /// A minute at 1,000 keys/s is ~100,000 leaves, inserted 5,000 a statement on
    /// PostgreSQL (`LEAVES_PER_STATEMENT`, src/store/evidence.rs) so that no statement's
    /// JSON is built in one long go on a worker of the runtime, and 1,000 a statement on
    /// SQLite (`SQLITE_LEAVES_PER_STATEMENT`). Every leaf lands at its index,
    /// the roots verify, and the checkpoint's time is in its histogram, a checkpoint
    /// that finds nothing changed included.
    async fn a_checkpoint_larger_than_one_insert_statement_stores_every_leaf_in_place(db: TestDb) {
        use futures::TryStreamExt;
        use idemwatch::evidence::CheckpointMetrics;
        let f = Fixture::new(&db);
        let registry = prometheus::Registry::new();
        let writer =
            checkpointer(&f, None).with_metrics(CheckpointMetrics::register(&registry).unwrap());
        // One statement's worth and a partial second.
        let size = 5_000 + 1_500;
        many_done_keys(&f, size).await;
        let last = checkpoint_to(&f.store, &writer, size as u64).await;
        // `size` leaves, or a few more when a checkpoint held back on PostgreSQL by
        // another test's open transaction saw keys before their last row and the next
        // one added their heads (checkpoint_to; seen as 6,503 under a loaded machine).
        let tree = last.body.tree_size;
        assert!((size as u64..size as u64 + 100).contains(&tree), "{tree}");

        let leaves: Vec<_> = f.store.checkpoint_leaves().try_collect().await.unwrap();
        let indexes: Vec<u64> = leaves.iter().map(|(i, _)| *i).collect();
        assert_eq!(indexes, (0..tree).collect::<Vec<_>>());
        let report = verify_database_with(&f.store, &with_key()).await.unwrap();
        assert!(report.is_intact(), "{:#?}", report.breaks);
        assert_eq!(report.keys, size as u64);
        if matches!(f.store, Store::Sqlite(_)) {
            // No other writer's transaction can hold a SQLite checkpoint back: the
            // first one took every key, in seven statements. (On PostgreSQL another
            // test's open transaction may split the keys over several checkpoints.)
            let sizes: Vec<u64> = f
                .store
                .checkpoints()
                .await
                .unwrap()
                .iter()
                .map(|c| c.body.leaves_added)
                .collect();
            assert_eq!(sizes, [size as u64]);
        }

        let timed = |registry: &prometheus::Registry| {
            registry
                .gather()
                .iter()
                .find(|m| m.name() == "idemwatch_checkpoint_duration_seconds")
                .map(|m| m.get_metric()[0].get_histogram().get_sample_count())
                .unwrap()
        };
        let before = timed(&registry);
        assert!(before >= 1);
        assert!(writer.checkpoint().await.unwrap().is_none());
        assert_eq!(timed(&registry), before + 1);
    }
);

both_backends!(
    /// `idemwatch_checkpoint_last_timestamp_seconds` moves only when keys change, so a
    /// quiet service and a checkpointer that fails look alike there. The heartbeat moves
    /// on every success (one written, or nothing changed) and from the start, and not on
    /// a failure, which is counted; the interval beside it is what
    /// `IdemwatchCheckpointerStalled` divides by.
    async fn the_checkpointer_heartbeat_moves_on_success_only_and_counts_failures(db: TestDb) {
        use idemwatch::evidence::CheckpointMetrics;
        let f = Fixture::new(&db);
        let registry = prometheus::Registry::new();
        // A file where the checkpoint directory should be: a checkpoint that writes a
        // file fails after its transaction, one that finds nothing changed does not.
        let tmp = tempfile::tempdir().unwrap();
        let not_a_dir = tmp.path().join("not-a-dir");
        std::fs::write(&not_a_dir, "").unwrap();
        let writer = checkpointer(&f, Some(&not_a_dir))
            .with_metrics(CheckpointMetrics::register(&registry).unwrap());
        let value = |name: &str| -> f64 {
            let family = registry.gather();
            let m = family
                .iter()
                .find(|m| m.name() == name)
                .unwrap_or_else(|| panic!("{name} not registered"));
            let m = &m.get_metric()[0];
            if name.ends_with("_total") {
                m.get_counter().value()
            } else {
                m.get_gauge().value()
            }
        };
        let at = |t: chrono::DateTime<chrono::Utc>| t.timestamp_micros() as f64 / 1e6;
        assert_eq!(
            value("idemwatch_checkpoint_last_success_timestamp_seconds"),
            0.0
        );

        // Started: the interval, and a heartbeat from the start (the first checkpoint
        // is an interval away).
        let started = f.clock.now();
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let running = tokio::spawn(
            writer
                .clone()
                .run(std::time::Duration::from_secs(90), stopped),
        );
        for _ in 0..100 {
            if value("idemwatch_checkpoint_interval_seconds") > 0.0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(value("idemwatch_checkpoint_interval_seconds"), 90.0);
        assert_eq!(
            value("idemwatch_checkpoint_last_success_timestamp_seconds"),
            at(started)
        );
        stop.send(true).unwrap();
        running.await.unwrap();

        // A failure: counted, the heartbeat stays.
        done_keys(&f, 2).await;
        f.clock.advance(chrono::TimeDelta::seconds(60));
        let mut failed = None;
        for _ in 0..100 {
            // PostgreSQL: another test's open transaction may hold back the two keys'
            // rows for a moment; the checkpoint then finds nothing to write (a success
            // that moves the heartbeat), and no file to fail on.
            let before = value("idemwatch_checkpoint_last_success_timestamp_seconds");
            match writer.checkpoint().await {
                Err(err) => {
                    failed = Some((err, before));
                    break;
                }
                Ok(None) => {
                    // A new now, so that a failure moving the heartbeat would show.
                    f.clock.advance(chrono::TimeDelta::seconds(1));
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                Ok(Some(c)) => panic!("the directory is a file, yet checkpoint {c:?} succeeded"),
            }
        }
        let (err, before) = failed.expect("a checkpoint that cannot write its file");
        assert!(format!("{err:#}").contains("not-a-dir"), "{err:#}");
        assert_eq!(value("idemwatch_checkpoint_failures_total"), 1.0);
        assert_eq!(
            value("idemwatch_checkpoint_last_success_timestamp_seconds"),
            before
        );

        // Nothing changed since: a success, the heartbeat moves to now.
        f.clock.advance(chrono::TimeDelta::seconds(60));
        let mut quiet = None;
        for _ in 0..100 {
            // PostgreSQL: another test's open transaction may hold back the two keys'
            // last rows for a moment, and a checkpoint that finds them fails again.
            match writer.checkpoint().await {
                Ok(None) => {
                    quiet = Some(f.clock.now());
                    break;
                }
                Ok(Some(c)) => panic!("no file was written, yet checkpoint {c:?} succeeded"),
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
            }
        }
        let quiet = quiet.expect("a checkpoint that finds nothing changed");
        assert_eq!(
            value("idemwatch_checkpoint_last_success_timestamp_seconds"),
            at(quiet)
        );
        assert!(value("idemwatch_checkpoint_failures_total") >= 1.0);
    }
);

/// Runs `work` to its end from inside a checkpoint's `sign` (a plain function, called
/// between the checkpoint's read and its write), within `limit`.
fn meanwhile<T>(
    limit: std::time::Duration,
    work: impl std::future::Future<Output = T>,
) -> Option<T> {
    tokio::task::block_in_place(|| {
        tokio::runtime::Handle::current()
            .block_on(async { tokio::time::timeout(limit, work).await.ok() })
    })
}

/// A checkpoint of `writer` that runs `first` the first time it signs (between its
/// read and its write); returns it and how many times it signed.
async fn checkpoint_interleaved(
    f: &Fixture,
    writer: &Checkpointer<Store>,
    first: impl Fn() + Sync,
) -> (idemwatch::evidence::port::StoredCheckpoint, usize) {
    let signed = std::sync::atomic::AtomicUsize::new(0);
    let now = f.clock.now();
    let written = f
        .store
        .write_checkpoint(|last, leaves| {
            if signed.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                first();
            }
            writer.sign(now, last, leaves)
        })
        .await
        .unwrap()
        .expect("a checkpoint");
    (written, signed.into_inner())
}

/// On a SQLite file a checkpoint reads what changed in a snapshot on a reader, and
/// signs it, without the one writer that every guard call needs: a guard call made
/// while it signs completes (under the old code it waited for the checkpoint, here
/// forever). The call's key came after the snapshot: not in this checkpoint, in the
/// next, and the evidence verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_a_checkpoint_reads_and_signs_without_holding_the_writer() {
    let db = crate::support::TestDb::sqlite().await;
    let f = Fixture::new(&db);
    let writer = checkpointer(&f, None);
    done_keys(&f, 3).await;
    let late = refund("E-late", 999, "1");
    let (written, signed) = checkpoint_interleaved(&f, &writer, || {
        meanwhile(
            std::time::Duration::from_secs(5),
            f.guard.run(&late, &f.client([])),
        )
        .expect("a guard call completes while a checkpoint signs")
        .unwrap();
    })
    .await;
    assert_eq!(signed, 1, "signed once: nobody else appended");
    assert_eq!(written.checkpoint.body.leaves_added, 3);
    let late_key = late.intent.key().unwrap().to_string();
    let next = writer.checkpoint().await.unwrap().expect("the late key");
    assert_eq!(next.body.leaves_added, 1);
    let keys: Vec<String> = {
        use futures::TryStreamExt;
        let leaves: Vec<_> = f.store.checkpoint_leaves().try_collect().await.unwrap();
        leaves.into_iter().map(|(_, l)| l.key).collect()
    };
    assert_eq!(keys.last(), Some(&late_key));
    assert_eq!(keys.len(), 4);
    let report = verify_database_with(&f.store, &with_key()).await.unwrap();
    assert!(report.is_intact(), "{:#?}", report.breaks);
    assert_eq!(report.keys, 4);
}

/// An in-memory SQLite database has no snapshot beside the writer (shared cache: a
/// reader and the writer lock each other's tables), so its checkpoints read under the
/// writer as before: they still take every key, and verify.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_in_memory_checkpoints_read_under_the_writer_and_verify() {
    let db = crate::support::TestDb::at("sqlite::memory:").await;
    db.store.migrate().await.unwrap();
    let f = Fixture::new(&db);
    let writer = checkpointer(&f, None);
    done_keys(&f, 3).await;
    let first = writer.checkpoint().await.unwrap().expect("a checkpoint");
    assert_eq!(first.body.leaves_added, 3);
    assert!(
        writer.checkpoint().await.unwrap().is_none(),
        "nothing changed"
    );
    f.guard
        .run(&refund("E-new", 5, "1"), &f.client([]))
        .await
        .unwrap();
    let second = writer.checkpoint().await.unwrap().expect("a checkpoint");
    assert_eq!((second.body.seq, second.body.tree_size), (2, 4));
    let report = verify_database_with(&f.store, &with_key()).await.unwrap();
    assert!(report.is_intact(), "{:#?}", report.breaks);
    assert_eq!(report.keys, 4);
}

/// Two checkpoint writers on one SQLite file (two `serve`, or `idemwatch checkpoint`
/// beside `serve`): another appends a checkpoint between this one's read and its
/// write. This one then reads again, from the other's position, and appends after it:
/// every key once, in order, the chain of checkpoints intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_a_checkpoint_overtaken_by_another_writer_reads_again() {
    let db = crate::support::TestDb::sqlite().await;
    let f = Fixture::new(&db);
    let other_process = crate::support::TestDb::at(&db.url).await;
    let other = Checkpointer::new(
        other_process.store.clone(),
        signing_key(),
        Arc::new(f.clock.clone()),
    );
    let writer = checkpointer(&f, None);
    done_keys(&f, 2).await;
    let (written, signed) = checkpoint_interleaved(&f, &writer, || {
        // The other writer takes the same two keys, and a third comes after.
        let theirs = meanwhile(std::time::Duration::from_secs(5), other.checkpoint())
            .expect("the other writer is not held up")
            .unwrap()
            .expect("the other writer's checkpoint");
        assert_eq!(theirs.body.leaves_added, 2);
        meanwhile(
            std::time::Duration::from_secs(5),
            f.guard.run(&refund("E-third", 7, "1"), &f.client([])),
        )
        .unwrap()
        .unwrap();
    })
    .await;
    assert_eq!(signed, 2, "read and signed again after the other's");
    assert_eq!(written.checkpoint.body.seq, 2);
    assert_eq!(written.checkpoint.body.leaves_added, 1);
    assert_eq!(written.checkpoint.body.tree_size, 3);
    let report = verify_database_with(&f.store, &with_key()).await.unwrap();
    assert!(report.is_intact(), "{:#?}", report.breaks);
    assert_eq!(report.keys, 3);
    other_process.store.close().await;
}

/// sqlx prepares a statement once per connection, with the parameter types of its
/// first use. The block roots' insert ran with two: JSON text from a checkpoint, a
/// `jsonb` value from the backfill of lost roots. On one connection the second use
/// sent jsonb's bytes to a statement prepared for text, failed, and the roots were
/// never written again (seen once on CI, where the pool happened to reuse the
/// connection). On a one-connection pool it happens every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_checkpoint_and_the_roots_backfill_on_one_connection() {
    use idemwatch::evidence::merkle::BLOCK_LEAVES;
    let Some(db) = crate::support::TestDb::postgres().await else {
        return;
    };
    let one = crate::support::TestDb::at_with_connections(&db.url, 1).await;
    let f = Fixture::new(&one);
    let writer = checkpointer(&f, None);
    many_done_keys(&f, BLOCK_LEAVES as usize).await;
    checkpoint_to(&f.store, &writer, BLOCK_LEAVES).await;
    let blocks = f.store.checkpoint_blocks(1).await.unwrap();
    assert_eq!(blocks.len(), 1, "the checkpoint completed block 0");

    dba(&f.store, "DELETE FROM evidence_blocks").await;
    f.guard
        .run(&refund("B-late", 1, "1"), &f.client([]))
        .await
        .unwrap();
    checkpoint_to(&f.store, &writer, BLOCK_LEAVES + 1).await;
    assert_eq!(
        f.store.checkpoint_blocks(1).await.unwrap(),
        blocks,
        "the backfill wrote the root again"
    );
    one.store.close().await;
}

both_backends!(
    /// `--checkpoint-dir` keeps a copy of every checkpoint where the database's writers
    /// cannot reach. A file that could not be written (a full or unmounted volume) is
    /// written by the next checkpoint that succeeds; after a restart, from the
    /// directory's newest file; and replicas sharing the directory skip each other's
    /// files. Before, the file of a checkpoint whose write failed never appeared.
    async fn checkpoint_files_that_could_not_be_written_are_written_later(db: TestDb) {
        use idemwatch::evidence::read_dir;
        let f = Fixture::new(&db);
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("checkpoints");
        // The volume is not there: a file stands where the directory goes.
        std::fs::write(&dir, "").unwrap();
        let writer = checkpointer(&f, Some(&dir));
        done_keys(&f, 2).await;
        let mut failed = false;
        for _ in 0..100 {
            // PostgreSQL: another test's transaction may hold the keys back a moment.
            match writer.checkpoint().await {
                Err(_) => {
                    failed = true;
                    break;
                }
                Ok(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
            }
        }
        assert!(failed, "a checkpoint whose file cannot be written fails");
        let stored = f.store.checkpoints().await.unwrap();
        assert!(!stored.is_empty(), "the checkpoint itself is stored");

        // The volume is back: the next checkpoint writes the missing file before its own.
        std::fs::remove_file(&dir).unwrap();
        let call = refund("F-1", 1, "1");
        f.guard.run(&call, &f.client([])).await.unwrap();
        checkpoint_to(&f.store, &writer, 3).await;
        let all = f.store.checkpoints().await.unwrap();
        assert!(all.len() > stored.len());
        assert_eq!(
            read_dir(&dir).unwrap(),
            all,
            "every checkpoint has its file"
        );

        // Files lost in a failure just before a restart: a new process writes them from
        // the directory's newest file.
        for c in &all[1..] {
            std::fs::remove_file(dir.join(idemwatch::evidence::file_name(c.body.seq))).unwrap();
        }
        let restarted = checkpointer(&f, Some(&dir));
        f.guard
            .run(&refund("F-2", 2, "1"), &f.client([]))
            .await
            .unwrap();
        checkpoint_to(&f.store, &restarted, 4).await;
        let all = f.store.checkpoints().await.unwrap();
        assert_eq!(
            read_dir(&dir).unwrap(),
            all,
            "written again after a restart"
        );

        // Two replicas, one directory: each skips the files the other wrote.
        for (n, replica) in [&writer, &restarted, &writer].into_iter().enumerate() {
            f.guard
                .run(&refund(&format!("F-3{n}"), 3, "1"), &f.client([]))
                .await
                .unwrap();
            checkpoint_to(&f.store, replica, 5 + n as u64).await;
        }
        let all = f.store.checkpoints().await.unwrap();
        assert_eq!(read_dir(&dir).unwrap(), all, "shared by two writers");
    }
);

/// Receipts are read by id, and PostgreSQL hands out ids when a row is inserted, not
/// when it commits. Two pruners (two replicas, or `idemwatch prune` beside `serve`):
/// A inserts its receipt (id 1) and is held up before it commits; B inserts id 2 and
/// commits; a checkpoint reads up to id 2 and stores that position. A's receipt then
/// commits below the position and never became a tombstone leaf. The pruners now take
/// the checkpoint's lock in shared mode for their receipts, so a checkpoint waits for
/// receipts already numbered to commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_a_receipt_committed_after_a_later_one_still_becomes_a_tombstone() {
    use futures::TryStreamExt;
    use idemwatch::store::PruneCutoffs;
    use std::collections::BTreeSet;
    let Some(db) = crate::support::TestDb::postgres().await else {
        return;
    };
    let f = Fixture::new(&db);
    let Store::Postgres(pool) = &f.store else {
        unreachable!()
    };
    let t0 = chrono::Utc::now() - chrono::TimeDelta::days(200);
    let mut keys = Vec::new();
    for (i, at) in [t0, t0 + chrono::TimeDelta::hours(1)]
        .into_iter()
        .enumerate()
    {
        f.clock.set(at);
        let call = refund(&format!("P-{i}"), 100, "1");
        f.guard.run(&call, &f.client([])).await.unwrap();
        keys.push(call.intent.key().unwrap().to_string());
    }
    let (key_a, key_b) = (keys[0].clone(), keys[1].clone());
    let writer = checkpointer(&f, None);
    checkpoint_to(&f.store, &writer, 2).await;
    let now = chrono::Utc::now();
    let cutoffs = PruneCutoffs {
        done_before: now - chrono::TimeDelta::days(30),
        failed_before: now - chrono::TimeDelta::days(90),
        now,
    };

    // Hold pruner A between its receipt and its commit: its delete of the attempt
    // rows waits for a row lock held here.
    let mut holder = pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM idempotency_attempts WHERE key = $1 FOR UPDATE")
        .bind(&key_a)
        .fetch_all(&mut *holder)
        .await
        .unwrap();
    let a = {
        let (store, key_a) = (f.store.clone(), key_a.clone());
        tokio::spawn(async move {
            let batch = store.prune_begin(&cutoffs, 1).await.unwrap();
            assert_eq!(batch.keys(), [key_a]);
            batch.delete_and_commit().await
        })
    };
    let waiting = "SELECT count(*) FROM pg_stat_activity \
        WHERE datname = current_database() AND wait_event_type = 'Lock'";
    for _ in 0..200 {
        let n: i64 = sqlx::query_scalar(waiting).fetch_one(pool).await.unwrap();
        if n > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    // Pruner B skips A's locked key, takes the other and commits.
    let b = f.store.prune_begin(&cutoffs, 1).await.unwrap();
    assert_eq!(b.keys(), std::slice::from_ref(&key_b));
    b.delete_and_commit().await.unwrap();
    // A checkpoint now (before: it read B's receipt and moved past A's).
    let c = {
        let writer = writer.clone();
        tokio::spawn(async move { writer.checkpoint().await.map(|_| ()) })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    holder.commit().await.unwrap();
    a.await.unwrap().unwrap();
    c.await.unwrap().unwrap();
    writer.checkpoint().await.unwrap();

    let leaves: Vec<_> = f.store.checkpoint_leaves().try_collect().await.unwrap();
    let tombstones: BTreeSet<String> = leaves
        .into_iter()
        .filter(|(_, l)| l.pruned)
        .map(|(_, l)| l.key)
        .collect();
    assert_eq!(tombstones, BTreeSet::from([key_a, key_b]));
}
