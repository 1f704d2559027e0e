//! The binary: `export`, `verify` (exit 0 intact, 1 broken, 2 could not verify),
//! `prune`, and `serve`'s refusal of a retention that is too short.

use super::*;
use crate::both_backends;
use std::path::Path;

pub(super) async fn idemwatch(args: &[&str]) -> (i32, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_idemwatch"))
        .args(args)
        .env_remove("DATABASE_URL")
        .env("IDEMWATCH_LOG", "warn")
        .output()
        .await
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `idemwatch export --database-url <url> --format <format> <rest>`.
pub(super) async fn run_export(url: &str, format: &str, rest: &[&str]) -> (i32, String, String) {
    let args = [&["export", "--database-url", url, "--format", format], rest].concat();
    idemwatch(&args).await
}

pub(super) fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

both_backends!(
    async fn export_and_verify_from_the_command_line(db: TestDb) {
        let f = Fixture::new(&db);
        let s = seed(&f, Utc::now() - TimeDelta::days(10)).await;
        let dir = tempfile::tempdir().unwrap();
        let url = db.url.as_str();

        let csv = dir.path().join("attempts.csv");
        let (code, _, err) = run_export(url, "csv", &["--output", path(&csv)]).await;
        assert_eq!(code, 0, "{err}");
        let bytes = std::fs::read(&csv).unwrap();
        let sums = std::fs::read_to_string(dir.path().join("attempts.csv.sha256")).unwrap();
        assert_eq!(
            sums,
            format!("{}  attempts.csv\n", sha256_hex(&bytes)),
            "sha256sum -c format"
        );
        let manifest: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join("attempts.csv.manifest.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(manifest["sha256"], sha256_hex(&bytes));

        let (code, out, err) = idemwatch(&["verify", "--database-url", url]).await;
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.starts_with("OK: database "), "{out}");
        let (code, out, err) = idemwatch(&["verify", "--file", path(&csv)]).await;
        assert_eq!(code, 0, "{out}{err}");

        let nd = dir.path().join("attempts.ndjson");
        let (code, _, err) = run_export(url, "ndjson", &["-o", path(&nd)]).await;
        assert_eq!(code, 0, "{err}");
        let (code, out, err) = idemwatch(&["verify", "--file", path(&nd)]).await;
        assert_eq!(code, 0, "{out}{err}");

        // An edited file: exit 1, the first broken key and line named.
        let text = std::fs::read_to_string(&nd).unwrap();
        let mut lines: Vec<String> = text.lines().map(String::from).collect();
        let mut row: Value = serde_json::from_str(&lines[1]).unwrap();
        row["actor"] = json!("mallory");
        lines[1] = row.to_string();
        std::fs::write(
            &nd,
            lines.iter().map(|l| format!("{l}\n")).collect::<String>(),
        )
        .unwrap();
        let (code, out, _) = idemwatch(&["verify", "--file", path(&nd)]).await;
        assert_eq!(code, 1, "{out}");
        let key = row["key"].as_str().unwrap();
        assert!(
            out.starts_with(&format!(
                "BROKEN: {}: first break at key {key}, seq 2",
                path(&nd)
            )),
            "{out}"
        );
        assert!(out.contains("line 2"), "{out}");
        assert!(
            out.contains("attempts.ndjson.sha256 says sha256"),
            "the sidecar disagrees too: {out}"
        );

        // Nothing to verify: exit 2.
        let (code, _, err) =
            idemwatch(&["verify", "--file", path(&dir.path().join("missing.ndjson"))]).await;
        assert_eq!(code, 2, "{err}");
        // A bad flag names itself.
        let (code, _, err) = run_export(url, "csv", &["--since", "yesterday"]).await;
        assert_eq!(code, 1);
        assert!(err.contains("invalid --since"), "{err}");

        // A DBA edits the database: exit 1, the key and row named.
        drop_append_only_trigger(&f.store).await;
        dba(
            &f.store,
            &format!(
                "UPDATE idempotency_attempts SET detail = '{{}}' WHERE key = '{}' AND seq = 1",
                s.failed
            ),
        )
        .await;
        let (code, out, _) = idemwatch(&["verify", "--database-url", url]).await;
        assert_eq!(code, 1, "{out}");
        assert!(
            out.contains(&format!(
                "first break at key {}, seq 1, attempt id",
                s.failed
            )),
            "{out}"
        );
    }
);

both_backends!(
    async fn prune_and_serve_refuse_a_retention_shorter_than_a_workflow(db: TestDb) {
        let url = db.url.as_str();
        let short = ["--database-url", url, "--retain-done", "1d"];
        for command in ["prune", "serve"] {
            let mut args = vec![command];
            args.extend(short);
            if command == "serve" {
                // Refused before it listens; were it not, binding this non-local
                // address fails (the message check below tells which).
                args.extend(["--listen", "192.0.2.1:9"]);
            }
            let (code, _, err) = idemwatch(&args).await;
            assert_eq!(code, 1, "{command}: {err}");
            assert!(
                err.contains("--retain-done 1d is shorter than --max-workflow-duration 7d"),
                "{command}: {err}"
            );
        }
        let (code, out, err) = idemwatch(&["prune", "--database-url", url]).await;
        assert_eq!(code, 0, "{err}");
        assert!(out.starts_with("pruned 0 keys"), "{out}");
    }
);

both_backends!(
    async fn keys_checkpoints_and_offline_verify_from_the_command_line(db: TestDb) {
        let f = Fixture::new(&db);
        let s = seed(&f, Utc::now() - TimeDelta::days(10)).await;
        let dir = tempfile::tempdir().unwrap();
        let url = db.url.as_str();
        let key = dir.path().join("signing.pem");
        let (code, public, err) = idemwatch(&["new-signing-key", "--output", path(&key)]).await;
        assert_eq!(code, 0, "{err}");
        assert!(public.starts_with("-----BEGIN PUBLIC KEY-----"), "{public}");
        let (code, again, _) = idemwatch(&["public-key", "--signing-key", path(&key)]).await;
        assert_eq!((code, again.as_str()), (0, public.as_str()));
        let pub_pem = dir.path().join("pub.pem");
        std::fs::write(&pub_pem, &public).unwrap();
        // A key is never overwritten.
        let (code, _, _) = idemwatch(&["new-signing-key", "--output", path(&key)]).await;
        assert_ne!(code, 0);

        let checkpoints = dir.path().join("checkpoints");
        // On PostgreSQL a checkpoint sees only transactions older than every one still
        // running in the cluster: while another test holds one open it finds nothing
        // changed, writes none, and is run again.
        let mut out = String::new();
        for _ in 0..50 {
            let (code, printed, err) = idemwatch(&[
                "checkpoint",
                "--database-url",
                url,
                "--signing-key",
                path(&key),
                "--checkpoint-dir",
                path(&checkpoints),
            ])
            .await;
            assert_eq!(code, 0, "{err}");
            out = printed;
            if !out.trim().is_empty() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        let c: Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(c["seq"], 1);
        assert!(checkpoints.join("checkpoint-000000000001.json").exists());

        let (code, out, err) = idemwatch(&[
            "verify",
            "--database-url",
            url,
            "--public-key",
            path(&pub_pem),
            "--checkpoint-dir",
            path(&checkpoints),
        ])
        .await;
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains("signed checkpoints"), "{out}");

        let file = dir.path().join("all.ndjson");
        let (code, _, err) = run_export(url, "ndjson", &["--output", path(&file)]).await;
        assert_eq!(code, 0, "{err}");
        let (code, out, err) = idemwatch(&[
            "verify",
            "--file",
            path(&file),
            "--public-key",
            path(&pub_pem),
        ])
        .await;
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains("signature verified"), "{out}");

        // Another key's public half: the checkpoint does not verify.
        let other = dir.path().join("other.pem");
        let (_, other_public, _) = idemwatch(&["new-signing-key", "--output", path(&other)]).await;
        std::fs::write(&other, other_public).unwrap();
        let (code, out, _) = idemwatch(&[
            "verify",
            "--file",
            path(&file),
            "--public-key",
            path(&other),
        ])
        .await;
        assert_eq!(code, 1, "{out}");
        assert!(out.contains("another key"), "{out}");

        // The DONE key's result edited in the database: reported with the key.
        dba(&f.store, &format!("UPDATE idempotency_records SET result = '{{\"refund_id\": \"rf_forged\"}}' WHERE key = '{}'", s.done)).await;
        let (code, out, _) = idemwatch(&["verify", "--database-url", url]).await;
        assert_eq!(code, 1, "{out}");
        assert!(out.contains(&s.done) && out.contains("result"), "{out}");
    }
);
