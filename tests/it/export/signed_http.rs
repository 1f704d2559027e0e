//! Signed exports over HTTP: a server with a signing key signs every manifest and
//! takes a checkpoint for an export that asks (`?checkpoint=true`), so that nothing in
//! it is unsigned; a server without one refuses the parameter by name. The demo signs.

use super::*;
use crate::both_backends;
use crate::support::server::{Server, get as get_raw, send_raw};
use axum::body::{Body, to_bytes};
use axum::http::{Request, StatusCode};
use idemwatch::evidence::{Authenticity, Checkpointer, keys};
use idemwatch::export::{FileEvidence, Report, TrustedKeys, ndjson_manifest, verify_ndjson_with};
use idemwatch::web::{AppState, app};
use std::sync::Arc;
use tower::ServiceExt;

async fn get(state: AppState, uri: &str) -> (StatusCode, Vec<u8>) {
    let response = app(state)
        .oneshot(Request::get(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let body = to_bytes(response.into_body(), usize::MAX).await.unwrap();
    (status, body.to_vec())
}

/// An NDJSON export verified offline with `trusted`, as `verify --file` does.
fn verify_bytes(bytes: &[u8], trusted: &TrustedKeys) -> Report {
    let manifest = ndjson_manifest(bytes).unwrap();
    verify_ndjson_with(bytes, FileEvidence::of(manifest.as_ref(), trusted)).unwrap()
}

both_backends!(
    async fn an_export_over_http_can_carry_a_checkpoint_taken_for_it(db: TestDb) {
        let f = Fixture::new(&db);
        seed(&f, Utc::now() - TimeDelta::days(10)).await;
        let key = keys::generate();
        let trusted = TrustedKeys::new([key.verifying_key()]);
        let checkpointer =
            Checkpointer::new(f.store.clone(), key.clone(), Arc::new(f.clock.clone()));
        let state = AppState::new(f.store.clone()).with_checkpointer(Some(checkpointer));

        // No checkpoint yet and none asked for: the manifest is signed, every row is
        // unsigned, and verify says so.
        let (status, body) = get(state.clone(), "/export/attempts.ndjson").await;
        assert_eq!(status, StatusCode::OK);
        let report = verify_bytes(&body, &trusted);
        assert!(report.is_intact(), "{:#?}", report.breaks);
        assert_eq!(report.manifest_signature, Authenticity::Verified);
        assert_eq!(report.checkpoint_signature, Authenticity::Unsigned);
        assert_eq!(report.unsigned_rows, report.rows);

        // `checkpoint=true`: a checkpoint first, then nothing unsigned. (On PostgreSQL
        // another test's open transaction can hold a checkpoint back from the newest
        // rows: the request is repeated until one sees them.)
        let mut report = Report::default();
        for _ in 0..50 {
            let (status, body) =
                get(state.clone(), "/export/attempts.ndjson?checkpoint=true").await;
            assert_eq!(status, StatusCode::OK);
            report = verify_bytes(&body, &trusted);
            if report.unsigned_rows == 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert!(report.is_intact(), "{:#?}", report.breaks);
        assert_eq!(report.checkpoint_signature, Authenticity::Verified);
        assert_eq!(report.manifest_signature, Authenticity::Verified);
        assert_eq!(
            (report.unsigned_rows, report.rows > 0),
            (0, true),
            "{report:?}"
        );

        // The CSV's manifest, asked apart, is signed as well.
        let (status, body) = get(state.clone(), "/export/attempts.manifest?format=csv").await;
        assert_eq!(status, StatusCode::OK);
        let manifest: Manifest = serde_json::from_slice(&body).unwrap();
        assert_eq!(manifest.check_signature(&trusted), Some(Ok(())));

        // A server that signs nothing refuses the parameter, naming it.
        let unsigned = AppState::new(f.store.clone());
        let (status, body) = get(unsigned.clone(), "/export/attempts.ndjson?checkpoint=true").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        let problem: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(problem["field"], "checkpoint", "{problem}");
        let (status, _) = get(unsigned, "/export/attempts.ndjson?checkpoint=maybe").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
    }
);

/// Issue 50: the demo signs, so a new user sees the evidence path: the public key URL
/// answers, and an export taken from the demo verifies with that key.
#[tokio::test]
async fn the_demo_signs_and_serves_its_public_key() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("demo.db").display());
    let demo = Server::start("demo", &url, &["--rate", "5"]).await;
    let (status, pem) = get_raw(&demo.addr, "/api/v1/checkpoints/public-key")
        .await
        .unwrap();
    assert_eq!(status, 200, "{pem}");
    let served = keys::parse_public_key(&pem).expect("a PEM Ed25519 public key");

    // The demo's first calls land in its first second; until then there is nothing
    // to checkpoint.
    let trusted = TrustedKeys::new([served]);
    let mut report = Report::default();
    for _ in 0..100 {
        report = verify_bytes(ndjson_from(&demo.addr).await.as_bytes(), &trusted);
        if report.checkpoint_signature != Authenticity::Unsigned {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(report.is_intact(), "{:#?}", report.breaks);
    assert_eq!(report.manifest_signature, Authenticity::Verified);
    assert_eq!(report.checkpoint_signature, Authenticity::Verified);
}

/// `GET /export/attempts.ndjson?checkpoint=true` from a real server, the body as text
/// (asked in HTTP/1.0, so that it is not chunked).
async fn ndjson_from(addr: &str) -> String {
    let request =
        format!("GET /export/attempts.ndjson?checkpoint=true HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    let (status, body) = send_raw(addr, &request).await.unwrap();
    assert_eq!(status, 200, "{body}");
    body
}
