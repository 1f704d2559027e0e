//! `verify` reads the database in key ranges, several at once, and joins the parts:
//! the report must be the one a single pass gives, finding for finding, in the same
//! order, however the log is split, including which 20 findings are kept.

use super::evidence::{checkpoint_to, checkpointer, done_keys};
use super::*;
use crate::both_backends;
use idemwatch::export::{Outside, Report, Split, verify_database_split, verify_database_with};

both_backends!(
    async fn any_split_of_the_log_gives_the_single_pass_report(db: TestDb) {
        let f = Fixture::new(&db);
        let keys = done_keys(&f, 36).await;
        checkpoint_to(&f.store, &checkpointer(&f, None), keys.len() as u64).await;
        drop_append_only_trigger(&f.store).await;
        // Every kind of finding, spread over the key space; the last key loses its
        // last row, a finding made only when its rows end, after every other key's.
        let last = keys.len() - 1;
        for (i, key) in keys.iter().enumerate() {
            let sql = match i % 6 {
                _ if i == last => "DELETE FROM idempotency_attempts WHERE key = $k AND seq = 3",
                0 => "UPDATE idempotency_attempts SET actor = 'mallory' WHERE key = $k AND seq = 2",
                1 => "DELETE FROM idempotency_attempts WHERE key = $k AND seq = 3",
                2 => "DELETE FROM idempotency_attempts WHERE key = $k AND seq = 1",
                3 => "DELETE FROM idempotency_attempts WHERE key = $k",
                4 => "UPDATE idempotency_records SET workflow_id = 'run-other' WHERE key = $k",
                _ => continue,
            };
            dba(&f.store, &sql.replace("$k", &format!("'{key}'"))).await;
        }

        let outside = Outside::default();
        let one_pass = verify_database_split(&f.store, &outside, Split::ONE_PASS)
            .await
            .unwrap();
        assert!(
            one_pass.broken_keys > 20,
            "more findings than are kept: {one_pass:#?}"
        );
        let splits = [
            Split {
                ranges: 2,
                at_once: 2,
            },
            Split {
                ranges: 16,
                at_once: 3,
            },
            Split {
                ranges: 256,
                at_once: 4,
            },
        ];
        for split in splits {
            let parts = verify_database_split(&f.store, &outside, split)
                .await
                .unwrap();
            assert_same(&one_pass, &parts, split);
        }
        let default = verify_database_with(&f.store, &outside).await.unwrap();
        assert_same(&one_pass, &default, Split::for_store(&f.store));
    }
);

fn assert_same(one_pass: &Report, parts: &Report, split: Split) {
    let text = |r: &Report| r.breaks.iter().map(ToString::to_string).collect::<Vec<_>>();
    assert_eq!(text(one_pass), text(parts), "{split:?}");
    assert_eq!(one_pass, parts, "{split:?}");
}
