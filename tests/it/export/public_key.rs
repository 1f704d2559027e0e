//! `GET /api/v1/checkpoints/public-key` on a real `serve`: the key it returns verifies a
//! checkpoint that serve signed and wrote, offline (no database, no server), and another
//! key does not.

use super::*;
use crate::both_backends;
use crate::support::server::{Server, get, send_raw};
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
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
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

/// Without `--signing-key` the route still exists: an auditor who asks gets a 404 that
/// says why (no checkpoints are signed here), as a problem document, and an undeclared
/// method on it is a 405, not a "no such page".
#[tokio::test]
async fn a_server_without_a_signing_key_says_it_signs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("db.sqlite").display()
    );
    let server = Server::start("serve", &url, &[]).await;
    let (status, body) = get(&server.addr, "/api/v1/checkpoints/public-key")
        .await
        .unwrap();
    assert_eq!(status, 404, "{body}");
    // The body may arrive chunked: the JSON is between the first and last brace.
    let json = &body[body.find('{').unwrap_or(0)..body.rfind('}').map_or(0, |i| i + 1)];
    let problem: serde_json::Value = serde_json::from_str(json).expect("a problem document");
    assert_eq!(problem["status"], 404, "{body}");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("--signing-key")),
        "{body}"
    );
    let trace = format!(
        "TRACE /api/v1/checkpoints/public-key HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        server.addr
    );
    let (status, body) = send_raw(&server.addr, &trace).await.unwrap();
    assert_eq!(status, 405, "{body}");
}
