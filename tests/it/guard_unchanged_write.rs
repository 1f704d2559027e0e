//! The settle's single conditional write (`Storage::write_if_unchanged`): on both
//! backends it applies only while the stored record is the one the writer knows
//! (same head, same token), and writes nothing otherwise, so the guard falls back to
//! the locked read.

use crate::both_backends;
use crate::support::fixture::refund;
use chrono::Utc;
use idemwatch::export::verify_database;
use idemwatch::guard::{
    Admission, AttemptDraft, AttemptKind, FencingToken, Guard, GuardSettings, Record, Status,
    Storage, SystemClock,
};
use std::sync::Arc;

/// The decision a settle makes: DONE under `token`, one `completed` row.
fn complete(token: FencingToken) -> impl FnOnce(&mut Record) -> (Vec<AttemptDraft>, ()) + Send {
    move |rec: &mut Record| {
        let now = Utc::now();
        rec.status = Status::Done;
        rec.result = Some(serde_json::json!({"refund_id": "rf_1"}));
        rec.updated_at = now;
        let draft = AttemptDraft::new(AttemptKind::Completed, token, "worker-1", now);
        (vec![draft], ())
    }
}

both_backends!(
    async fn a_conditional_write_applies_only_to_the_record_it_was_decided_on(db: TestDb) {
        let guard = Guard::new(
            db.store.clone(),
            Arc::new(SystemClock),
            GuardSettings::default(),
        );
        let call = refund("A-77", 4500, "1");
        let policy = crate::support::guard_api::tools().tools["issue_refund"].clone();
        let admitted = guard.admit_call(&call, &policy).await.unwrap();
        let Admission::New { token, .. } = admitted.admission else {
            panic!("a fresh intent is claimed: {:?}", admitted.admission);
        };
        let key = admitted.key;
        let claimed = Storage::record(&db.store, &key).await.unwrap().unwrap();

        // Another writer moves the head (a person's note, a takeover…): the record the
        // first writer knows is stale, so its write must not apply.
        db.store
            .with_locked(&key, |rec| {
                rec.updated_at = Utc::now();
                let note =
                    AttemptDraft::new(AttemptKind::Replayed, token, "worker-2", rec.updated_at);
                (vec![note], ())
            })
            .await
            .unwrap();
        let rows_before = db.store.attempts(&key).await.unwrap().len();
        let stale = db
            .store
            .write_if_unchanged(&claimed, complete(token))
            .await
            .unwrap();
        assert_eq!(stale, None, "a write decided on a stale record applied");
        let after = Storage::record(&db.store, &key).await.unwrap().unwrap();
        assert_eq!(after.status, Status::InProgress);
        assert_eq!(db.store.attempts(&key).await.unwrap().len(), rows_before);

        // On the record as stored now it writes: in one statement on PostgreSQL, in
        // one batch of two in a write transaction on SQLite.
        let fresh = db
            .store
            .write_if_unchanged(&after, complete(token))
            .await
            .unwrap();
        let stored = Storage::record(&db.store, &key).await.unwrap().unwrap();
        let attempts = db.store.attempts(&key).await.unwrap();
        assert_eq!(fresh, Some(()));
        assert_eq!(stored.status, Status::Done);
        assert_eq!(attempts.len(), rows_before + 1);
        let last = attempts.last().unwrap();
        assert_eq!(last.kind, AttemptKind::Completed);
        assert_eq!((stored.log_seq, &stored.log_hash), (last.seq, &last.hash));
        let report = verify_database(&db.store).await.unwrap();
        assert!(report.breaks.is_empty(), "{:#?}", report.breaks);
    }
);

both_backends!(
    async fn a_settle_after_a_takeover_is_still_rejected_as_stale(db: TestDb) {
        // The guard remembers the record it claimed; a takeover since must send the
        // first worker's settle down the locked path, which records the stale write.
        let guard = Guard::new(
            db.store.clone(),
            Arc::new(SystemClock),
            GuardSettings::default(),
        );
        let call = refund("A-78", 4500, "1");
        let policy = crate::support::guard_api::tools().tools["issue_refund"].clone();
        let admitted = guard.admit_call(&call, &policy).await.unwrap();
        let Admission::New { token, .. } = admitted.admission else {
            panic!("a fresh intent is claimed: {:?}", admitted.admission);
        };
        let key = admitted.key;
        db.store
            .with_locked(&key, |rec| {
                rec.fencing_token = FencingToken(token.0 + 1);
                rec.updated_at = Utc::now();
                let draft = AttemptDraft::new(
                    AttemptKind::TakenOver,
                    rec.fencing_token,
                    "worker-2",
                    rec.updated_at,
                );
                (vec![draft], ())
            })
            .await
            .unwrap();
        let settled = guard
            .settle_call(
                &key,
                token,
                idemwatch::guard::CallOutcome::Done {
                    result: serde_json::json!({"refund_id": "rf_late"}),
                },
                Some(5),
                "worker-1",
            )
            .await;
        assert!(settled.is_err(), "a stale settle was accepted: {settled:?}");
        let stored = Storage::record(&db.store, &key).await.unwrap().unwrap();
        assert_eq!(stored.status, Status::InProgress);
        assert_eq!(stored.result, None);
        let kinds: Vec<AttemptKind> = db
            .store
            .attempts(&key)
            .await
            .unwrap()
            .iter()
            .map(|a| a.kind)
            .collect();
        assert_eq!(
            kinds,
            [
                AttemptKind::Claimed,
                AttemptKind::TakenOver,
                AttemptKind::StaleWriteRejected
            ]
        );
        let report = verify_database(&db.store).await.unwrap();
        assert!(report.breaks.is_empty(), "{:#?}", report.breaks);
    }
);
