//! Issues 47 and 50, the auditor: `verify` trusts only the keys it is given and never
//! contradicts itself; rows no checkpoint covers are counted and fail
//! `--require-signed`; a signed manifest shows an export is complete; a key rotation
//! verifies with both keys; a signing key others can read is refused. Driven through
//! the binary, as an auditor runs it.

use super::cli::{idemwatch, path, run_export};
use super::evidence::checkpoint_to;
use super::*;
use crate::both_backends;
use crate::support::{TestDb, as_key};
use ed25519_dalek::SigningKey;
use idemwatch::evidence::{Checkpoint, Checkpointer, keys};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A key made by `idemwatch new-signing-key` in `dir`: the private key file, the
/// public key file, and the key.
async fn new_key(dir: &Path, name: &str) -> (PathBuf, PathBuf, SigningKey) {
    let private = dir.join(format!("{name}.pem"));
    let (code, public, err) = idemwatch(&["new-signing-key", "--output", path(&private)]).await;
    assert_eq!(code, 0, "{err}");
    let public_file = dir.join(format!("{name}.pub.pem"));
    std::fs::write(&public_file, public).unwrap();
    let key = keys::parse_signing_key(&std::fs::read_to_string(&private).unwrap()).unwrap();
    (private, public_file, key)
}

/// Seeded keys (`seed`), a signing key made by the CLI, and a checkpoint with it that
/// covers every key's head.
struct Setup {
    f: Fixture,
    s: Seeded,
    dir: tempfile::TempDir,
    private: PathBuf,
    public: PathBuf,
}

async fn setup(db: &TestDb) -> Setup {
    let f = Fixture::new(db);
    let s = seed(&f, Utc::now() - TimeDelta::days(10)).await;
    let dir = tempfile::tempdir().unwrap();
    let (private, public, key) = new_key(dir.path(), "signing").await;
    checkpoint_to(&f.store, &writer(&f, &key), 6).await;
    Setup {
        f,
        s,
        dir,
        private,
        public,
    }
}

fn writer(f: &Fixture, key: &SigningKey) -> Checkpointer<Store> {
    Checkpointer::new(f.store.clone(), key.clone(), Arc::new(f.clock.clone()))
}

async fn verify(args: &[&str]) -> (i32, String, String) {
    idemwatch(&[&["verify"], args].concat()).await
}

/// `export --signing-key` into `file`, which then passes the auditor's check (its
/// output is returned).
async fn signed_export_passes(
    url: &str,
    format: &str,
    file: &Path,
    private: &Path,
    public: &Path,
) -> String {
    let signing = ["--output", path(file), "--signing-key", path(private)];
    let (code, _, err) = run_export(url, format, &signing).await;
    assert_eq!(code, 0, "{err}");
    let auditor = [
        "--file",
        path(file),
        "--public-key",
        path(public),
        "--require-signed",
    ];
    let (code, out, _) = verify(&auditor).await;
    assert_eq!(code, 0, "{out}");
    out
}

/// An NDJSON file's attempt rows and its manifest.
fn read_ndjson(file: &Path) -> (Vec<Value>, Value) {
    ndjson_lines(&std::fs::read(file).unwrap())
}

/// Writes rows and a manifest as an NDJSON file, the manifest's digest recomputed
/// and the `.sha256` sidecar gone, as someone editing the file would leave it.
fn write_ndjson(file: &Path, rows: &[Value], mut manifest: Value) {
    let body: String = rows.iter().map(|r| format!("{r}\n")).collect();
    manifest["sha256"] = json!(sha256_hex(body.as_bytes()));
    manifest["row_count"] = json!(rows.len());
    let mut keys: Vec<&str> = rows.iter().map(|r| r["key"].as_str().unwrap()).collect();
    keys.dedup();
    manifest["key_count"] = json!(keys.len());
    std::fs::write(file, format!("{body}{manifest}\n")).unwrap();
    let mut sums = file.as_os_str().to_owned();
    sums.push(".sha256");
    let _ = std::fs::remove_file(sums);
}

/// What an attacker holding the file does to `key`'s last row, a person's
/// resolution: another actor and another result, bound into the row's state, the row
/// resealed, the record's columns and head changed on every row of the key.
fn forge_resolution(rows: &mut [Value], key: &str) {
    let last = rows.iter().rposition(|r| r["key"] == key).unwrap();
    let forged = json!({"refund_id": "rf_attacker"});
    let row = &mut rows[last];
    assert_eq!(row["kind"], "resolved", "{row}");
    row["actor"] = json!("mallory");
    row["detail"]["result"] = forged.clone();
    row["detail"]["state"]["result_sha256"] =
        json!(sha256_hex(canonical_json(&forged).unwrap().as_bytes()));
    let fields = [
        "actor",
        "detail",
        "duration_ms",
        "fencing_token",
        "key",
        "kind",
        "occurred_at",
        "seq",
        "tenant",
        "tool",
    ];
    let content: serde_json::Map<String, Value> = fields
        .iter()
        .map(|f| (f.to_string(), row[*f].clone()))
        .collect();
    let text = format!(
        "{}\n{}",
        row["prev_hash"].as_str().unwrap(),
        canonical_json(&Value::Object(content)).unwrap()
    );
    let hash = json!(sha256_hex(text.as_bytes()));
    row["hash"] = hash.clone();
    for row in rows.iter_mut().filter(|r| r["key"] == key) {
        row["result"] = forged.clone();
        row["log_hash"] = hash.clone();
    }
}

fn resolve_done(actor: &str) -> ResolveRequest {
    ResolveRequest {
        resolution: Resolution::Done,
        reason: "the provider's dashboard shows the refund".into(),
        evidence: Some("rf_3".into()),
        result: Some(json!({"refund_id": "rf_3"})),
        actor: actor.into(),
        expected_token: None,
    }
}

both_backends!(
    async fn verify_trusts_only_the_keys_it_is_given_and_never_contradicts_itself(db: TestDb) {
        let Setup {
            dir,
            private,
            public,
            ..
        } = setup(&db).await;
        let url = db.url.as_str();
        let (_, other, _) = new_key(dir.path(), "other").await;
        let file = dir.path().join("all.ndjson");
        let (code, _, err) = run_export(url, "ndjson", &["--output", path(&file)]).await;
        assert_eq!(code, 0, "{err}");

        // No trusted key: intact chains, but never "verified", and the line scripts
        // read says the signatures were not checked.
        let (code, out, _) = verify(&["--file", path(&file)]).await;
        assert_eq!(code, 0, "{out}");
        assert!(!out.contains("verified"), "{out}");
        let first = out.lines().next().unwrap();
        assert!(first.contains("signatures NOT checked"), "{out}");
        // An auditor's flag without a trusted key cannot pass: a usage error.
        let (code, _, err) = verify(&["--file", path(&file), "--require-signed"]).await;
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("--public-key"), "{err}");

        // The wrong key: broken, and never "verified" beside it.
        let (code, out, _) = verify(&["--file", path(&file), "--public-key", path(&other)]).await;
        assert_eq!(code, 1, "{out}");
        assert!(out.contains("another key"), "{out}");
        assert!(!out.contains("verified"), "{out}");

        // Re-signed by an attacker with a fresh key, naming it: without a trusted key
        // nothing calls it genuine; with the real key it is refused.
        let (rows, mut manifest) = read_ndjson(&file);
        let genuine: Checkpoint =
            serde_json::from_value(manifest["evidence"]["checkpoint"].clone()).unwrap();
        let attacker = keys::generate();
        let mut body = genuine.body.clone();
        body.key_id = keys::key_id(&attacker.verifying_key());
        manifest["evidence"]["checkpoint"] = serde_json::to_value(body.sign(&attacker)).unwrap();
        let forged = dir.path().join("forged.ndjson");
        write_ndjson(&forged, &rows, manifest);
        let (code, out, _) = verify(&["--file", path(&forged)]).await;
        assert_eq!(code, 0, "{out}");
        assert!(
            out.contains("signatures NOT checked") && !out.contains("verified"),
            "{out}"
        );
        let (code, out, _) =
            verify(&["--file", path(&forged), "--public-key", path(&public)]).await;
        assert_eq!(code, 1, "{out}");
        assert!(out.contains("which is not a trusted key"), "{out}");
        assert!(!out.contains("verified"), "{out}");

        // The private key given as the public one: it works, and says so plainly.
        let (code, out, err) =
            verify(&["--file", path(&file), "--public-key", path(&private)]).await;
        assert_eq!(code, 0, "{out}{err}");
        assert!(
            err.contains("is a PRIVATE signing key, not a public key"),
            "{err}"
        );
        assert!(out.contains("checkpoint signatures verified"), "{out}");
    }
);

both_backends!(
    async fn rows_after_the_newest_checkpoint_are_counted_and_fail_require_signed(db: TestDb) {
        let Setup {
            f,
            s,
            dir,
            private,
            public,
        } = setup(&db).await;
        let url = db.url.as_str();
        // After the newest checkpoint a person resolves the UNKNOWN key: no signature
        // covers that row yet.
        f.guard
            .resolve(&as_key(&s.unknown), &resolve_done("ana"))
            .await
            .unwrap();
        let file = dir.path().join("all.ndjson");
        let (code, _, err) = run_export(url, "ndjson", &["--output", path(&file)]).await;
        assert_eq!(code, 0, "{err}");
        let (mut rows, manifest) = read_ndjson(&file);
        forge_resolution(&mut rows, &s.unknown);
        write_ndjson(&file, &rows, manifest);

        // The forgery is consistent: every chain intact, the checkpoint genuine. What
        // verify must say is that the row is covered by no signature.
        let (code, out, _) = verify(&["--file", path(&file), "--public-key", path(&public)]).await;
        assert_eq!(code, 0, "{out}");
        assert!(
            out.lines()
                .next()
                .unwrap()
                .contains("1 rows in 1 keys covered by no signed checkpoint"),
            "{out}"
        );
        let auditor = [
            "--file",
            path(&file),
            "--public-key",
            path(&public),
            "--require-signed",
        ];
        let (code, out, _) = verify(&auditor).await;
        assert_eq!(code, 1, "{out}");
        assert!(out.starts_with("NOT SIGNED: "), "{out}");
        assert!(
            out.contains("1 rows in 1 keys are covered by no signed checkpoint"),
            "{out}"
        );

        // Exported with a checkpoint taken for it, nothing is unsigned and the auditor's
        // check passes. (On PostgreSQL a checkpoint may be held back by another test's
        // open transaction and miss the newest row: the export is then taken again.)
        let signed = dir.path().join("signed.ndjson");
        let export_args = [
            "--output",
            path(&signed),
            "--signing-key",
            path(&private),
            "--checkpoint",
        ];
        let auditor = [
            "--file",
            path(&signed),
            "--public-key",
            path(&public),
            "--require-signed",
        ];
        let mut last = String::new();
        for _ in 0..50 {
            let (code, _, err) = run_export(url, "ndjson", &export_args).await;
            assert_eq!(code, 0, "{err}");
            let (code, out, _) = verify(&auditor).await;
            last = out;
            if code == 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert!(last.starts_with("OK: "), "{last}");
        assert!(last.contains("every row covered by a checkpoint"), "{last}");
        // The same edit to that file: its manifest's signature no longer holds.
        let (mut rows, manifest) = read_ndjson(&signed);
        forge_resolution(&mut rows, &s.unknown);
        write_ndjson(&signed, &rows, manifest);
        let (code, out, _) = verify(&auditor[..4]).await;
        assert_eq!(code, 1, "{out}");
        assert!(
            out.contains("the manifest: the signature does not verify"),
            "{out}"
        );
    }
);

both_backends!(
    async fn a_key_removed_from_a_signed_export_fails_with_its_manifest_recomputed(db: TestDb) {
        let t = setup(&db).await;
        let (dir, private, public) = (&t.dir, &t.private, &t.public);
        let url = db.url.as_str();
        let file = dir.path().join("all.ndjson");
        let out = signed_export_passes(url, "ndjson", &file, private, public).await;
        assert!(out.contains("the manifest is signed by key"), "{out}");

        // One key's rows and its proof removed; counts and digest recomputed.
        let (mut rows, mut manifest) = read_ndjson(&file);
        let before = rows.len();
        rows.retain(|r| r["key"] != t.s.failed.as_str());
        assert!(rows.len() < before);
        let proofs = manifest["evidence"]["proofs"].as_array_mut().unwrap();
        proofs.retain(|p| p["key"] != t.s.failed.as_str());
        let cut = dir.path().join("cut.ndjson");
        write_ndjson(&cut, &rows, manifest.clone());
        let (code, out, _) = verify(&["--file", path(&cut), "--public-key", path(public)]).await;
        assert_eq!(code, 1, "{out}");
        assert!(
            out.contains("the manifest: the signature does not verify"),
            "{out}"
        );
        assert!(!out.contains("the manifest is signed by key"), "{out}");

        // Its signature removed too: a plain verify sees intact chains and says the
        // manifest is unsigned; the auditor's check fails.
        manifest.as_object_mut().unwrap().remove("signature");
        write_ndjson(&cut, &rows, manifest);
        let (code, out, _) = verify(&["--file", path(&cut), "--public-key", path(public)]).await;
        assert_eq!(code, 0, "{out}");
        assert!(out.contains("the manifest is not signed"), "{out}");
        let (code, out, _) = verify(&[
            "--file",
            path(&cut),
            "--public-key",
            path(public),
            "--require-signed",
        ])
        .await;
        assert_eq!(code, 1, "{out}");
        assert!(
            out.contains("the manifest is not signed, so nothing shows the file is complete"),
            "{out}"
        );

        // CSV: the sidecar manifest is signed the same way.
        let csv = dir.path().join("all.csv");
        signed_export_passes(url, "csv", &csv, private, public).await;
    }
);

both_backends!(
    async fn checkpoints_verify_across_a_key_rotation_with_both_keys(db: TestDb) {
        let f = Fixture::new(&db);
        seed(&f, Utc::now() - TimeDelta::days(10)).await;
        let dir = tempfile::tempdir().unwrap();
        let url = db.url.as_str();
        let (_, old_public, old) = new_key(dir.path(), "old").await;
        let (new_private, new_public, new) = new_key(dir.path(), "new").await;
        checkpoint_to(&f.store, &writer(&f, &old), 6).await;
        // The key is rotated: what follows is signed by the new key.
        f.guard
            .run(&refund("R-1", 100, "9"), &f.client([]))
            .await
            .unwrap();
        checkpoint_to(&f.store, &writer(&f, &new), 7).await;

        let both = [
            "--database-url",
            url,
            "--public-key",
            path(&old_public),
            "--public-key",
            path(&new_public),
        ];
        let (code, out, _) = verify(&both).await;
        assert_eq!(code, 0, "{out}");
        assert!(out.contains("checkpoint signatures verified"), "{out}");
        let (code, out, _) =
            verify(&["--database-url", url, "--public-key", path(&new_public)]).await;
        assert_eq!(code, 1, "{out}");
        let old_id = keys::key_id(&old.verifying_key());
        assert!(
            out.contains(&format!(
                "checkpoint 1 is signed by key {old_id}, which is not a trusted key"
            )),
            "{out}"
        );
        // The auditor's flag on the database: every row is covered until the next call.
        let auditor = [&both[..], &["--require-signed"]].concat();
        let (code, out, _) = verify(&auditor).await;
        assert_eq!(code, 0, "{out}");
        assert!(out.contains("every row covered by a checkpoint"), "{out}");
        f.guard
            .run(&refund("R-2", 100, "9"), &f.client([]))
            .await
            .unwrap();
        let (code, out, _) = verify(&auditor).await;
        assert_eq!(code, 1, "{out}");
        assert!(
            out.starts_with("NOT SIGNED: database ")
                && out.contains("2 rows in 1 keys are covered by no signed checkpoint"),
            "{out}"
        );
        // The environment takes both, separated by a comma.
        let env = format!("{},{}", path(&old_public), path(&new_public));
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_idemwatch"))
            .args(["verify", "--database-url", url])
            .env("IDEMWATCH_PUBLIC_KEY", env)
            .env("IDEMWATCH_LOG", "warn")
            .output()
            .await
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");

        // An export signed with the new key, after it checkpointed that call, checks
        // with the auditor's flag.
        checkpoint_to(&f.store, &writer(&f, &new), 8).await;
        let file = dir.path().join("all.ndjson");
        let signing = ["--output", path(&file), "--signing-key", path(&new_private)];
        let (code, _, err) = run_export(url, "ndjson", &signing).await;
        assert_eq!(code, 0, "{err}");
        let (_, manifest) = read_ndjson(&file);
        assert_eq!(
            manifest["signature"]["key_id"],
            keys::key_id(&new.verifying_key())
        );
        let (code, out, _) = verify(&[
            "--file",
            path(&file),
            "--public-key",
            path(&old_public),
            "--public-key",
            path(&new_public),
            "--require-signed",
        ])
        .await;
        assert_eq!(code, 0, "{out}");
    }
);

/// As ssh refuses a private key others can read: whoever read it can sign any history.
#[tokio::test]
async fn a_signing_key_others_can_read_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let (private, _, _) = new_key(dir.path(), "signing").await;
    let mode = std::fs::metadata(&private).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "new-signing-key writes 0600");
    for open in [0o666, 0o644, 0o640] {
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(open)).unwrap();
        let (code, out, err) = idemwatch(&["public-key", "--signing-key", path(&private)]).await;
        assert_eq!(code, 1, "{open:o}: {out}");
        assert!(
            err.contains(&format!("permissions {open:04o} are too open"))
                && err.contains("chmod 600"),
            "{err}"
        );
    }
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o400)).unwrap();
    let (code, out, err) = idemwatch(&["public-key", "--signing-key", path(&private)]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("-----BEGIN PUBLIC KEY-----"), "{out}");
}
