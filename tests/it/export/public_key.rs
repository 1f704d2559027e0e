//! `GET /api/v1/checkpoints/public-key` on a real `serve`: the key it returns verifies a
//! checkpoint that serve signed and wrote, offline (no database, no server), and another
//! key does not.

use super::*;
use crate::both_backends;
use crate::support::server::{Server, get};
use idemwatch::evidence::{Checkpoint, keys};
use std::time::{Duration, Instant};

both_backends!(
    async fn the_served_public_key_verifies_a_checkpoint_offline(db: TestDb) {
        let f = Fixture::new(&db);
        seed(&f, Utc::now() - TimeDelta::days(10)).await;
        let dir = tempfile::tempdir().unwrap();
        let signing = keys::generate();
        let key_file = dir.path().join("signing.pem");
        std::fs::write(&key_file, keys::signing_key_pem(&signing)).unwrap();
        let checkpoints = dir.path().join("checkpoints");
        let server = Server::start(
            "serve",
            &db.url,
            &[
                "--signing-key",
                key_file.to_str().unwrap(),
                "--checkpoint-dir",
                checkpoints.to_str().unwrap(),
                "--checkpoint-interval",
                "1s",
            ],
        )
        .await;

        let (status, pem) = get(&server.addr, "/api/v1/checkpoints/public-key")
            .await
            .unwrap();
        assert_eq!(status, 200, "{pem}");
        let served = keys::parse_public_key(&pem).expect("a PEM Ed25519 public key");
        assert_eq!(served, signing.verifying_key());

        // The first checkpoint serve writes, read from its directory as an auditor would.
        let file = checkpoints.join("checkpoint-000000000001.json");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !file.exists() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        drop(server);
        let text = std::fs::read_to_string(&file).expect("serve wrote a first checkpoint");
        let checkpoint: Checkpoint = serde_json::from_str(&text).unwrap();
        assert!(checkpoint.body.tree_size > 0, "{text}");
        checkpoint
            .verify(&served)
            .expect("the served key verifies the checkpoint");
        assert_eq!(checkpoint.body.key_id, keys::key_id(&served));

        let stranger = keys::generate().verifying_key();
        assert!(
            checkpoint.verify(&stranger).is_err(),
            "another key must not verify it"
        );
        let mut altered = checkpoint.clone();
        altered.body.tree_size += 1;
        assert!(
            altered.verify(&served).is_err(),
            "an altered body must not verify"
        );
    }
);
