//! `idemwatch demo`: the traffic generator in-process on both backends (every kind of
//! event, never a duplicate, the genuine repeat refunds), the incident switch, the
//! real binary over HTTP, and the worked examples of docs/GUARD.md.

use crate::both_backends;
use crate::support::TestDb;
use idemwatch::demo::{Demo, DemoConfig, IncidentSchedule, REPEAT_ORDER};
use idemwatch::guard::{AttemptKind, GENESIS_HASH, Status, chain_hash};
use idemwatch::store::Store;
use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

/// Every record as (key, status, business_ref, intent_id).
async fn records(store: &Store) -> Vec<(String, String, Option<String>, String)> {
    const SQL: &str =
        "SELECT key, status, business_ref, intent_id FROM idempotency_records ORDER BY key";
    match store {
        Store::Postgres(pool) => sqlx::query_as(SQL).fetch_all(pool).await,
        Store::Sqlite(pool) => sqlx::query_as(SQL).fetch_all(pool).await,
    }
    .expect("list records")
}

async fn kinds(store: &Store) -> BTreeMap<AttemptKind, i64> {
    store
        .attempt_kind_counts(None)
        .await
        .expect("count attempts")
        .into_iter()
        .collect()
}

/// The fast profile: 20x story time, a provider that forgets keys after 2 s.
fn fast(rate: f64) -> DemoConfig {
    let mut config = DemoConfig::new(rate, 20.0);
    config.provider_retention = Duration::from_secs(2);
    config
}

both_backends!(
    async fn the_demo_shows_every_kind_of_event_and_never_a_duplicate(db: TestDb) {
        let demo = Demo::new(db.store.clone(), fast(20.0));
        demo.run(tokio::time::sleep(Duration::from_secs(7))).await;
        let provider = demo.provider();

        // The provider's own count: one effect per intent, whatever happened.
        assert_eq!(provider.duplicates(), 0);
        let effects = provider.effects();
        assert!(effects.len() > 50, "only {} effects", effects.len());
        for e in &effects {
            assert_eq!(provider.effects_for_key(&e.key), 1, "{e:?}");
        }

        // The guard's records agree with the provider's books.
        let records = records(&db.store).await;
        let effect_keys: HashSet<&str> = effects.iter().map(|e| e.key.as_str()).collect();
        let mut statuses = BTreeMap::<String, usize>::new();
        for (key, status, _, _) in &records {
            *statuses.entry(status.clone()).or_default() += 1;
            match status.parse::<Status>().unwrap() {
                Status::Done => assert!(
                    effect_keys.contains(key.as_str()),
                    "DONE without effect: {key}"
                ),
                Status::Failed => assert!(
                    !effect_keys.contains(key.as_str()),
                    "FAILED with effect: {key}"
                ),
                Status::Unknown | Status::InProgress => {}
            }
        }
        assert!(
            statuses["UNKNOWN"] >= 1,
            "the forgotten key waits for a person: {statuses:?}"
        );

        // Every kind of event the guard writes on its own appeared in the log.
        let kinds = kinds(&db.store).await;
        for kind in [
            AttemptKind::Claimed,
            AttemptKind::Completed,
            AttemptKind::Replayed,
            AttemptKind::ReplayedFailure,
            AttemptKind::InFlightRejected,
            AttemptKind::PayloadMismatch,
            AttemptKind::Failed,
            AttemptKind::MarkedUnknown,
            AttemptKind::TakenOver,
            AttemptKind::ReconciledFound,
            AttemptKind::Resent,
            AttemptKind::Escalated,
        ] {
            assert!(
                kinds.get(&kind).copied().unwrap_or(0) > 0,
                "no {kind} in {kinds:?}"
            );
        }

        // Two genuine refunds on one order: two intents, two keys, two effects.
        let repeat = provider.effects_for_order(REPEAT_ORDER);
        assert_eq!(repeat.len(), 2, "{repeat:?}");
        assert_ne!(repeat[0].key, repeat[1].key);
        assert_eq!(repeat[0].amount_p, repeat[1].amount_p);
        let business_ref = format!("order:{REPEAT_ORDER}");
        let mut intents = HashSet::new();
        for e in &repeat {
            let (_, status, bref, intent) = records
                .iter()
                .find(|r| r.0 == e.key)
                .expect("a record per effect");
            assert_eq!(
                (status.as_str(), bref.as_deref()),
                ("DONE", Some(business_ref.as_str()))
            );
            intents.insert(intent.clone());
        }
        assert_eq!(intents.len(), 2);

        // Each key's log is contiguous and its hash chain verifies.
        for (key, _, _, _) in &records {
            let attempts = db.store.attempts(key).await.unwrap();
            let mut prev = GENESIS_HASH.to_string();
            for (i, a) in attempts.iter().enumerate() {
                assert_eq!(a.seq, i as i64 + 1);
                assert_eq!(a.prev_hash, prev);
                assert_eq!(chain_hash(&a.prev_hash, a.chain_fields()), a.hash);
                prev = a.hash.clone();
            }
        }

        // /demo/stats tells the same story.
        let snapshot = demo.snapshot().await.unwrap();
        assert_eq!(
            (snapshot.effects, snapshot.duplicates),
            (effects.len() as u64, 0)
        );
        assert!(snapshot.by_outcome["conflict"] >= 1);
        assert_eq!(snapshot.requests, snapshot.by_outcome.values().sum::<i64>());
    }
);

/// Replays over admissions, as the recording rule computes it.
async fn replay_ratio(store: &Store) -> (f64, i64) {
    let k = kinds(store).await;
    let n = |kind| k.get(&kind).copied().unwrap_or(0);
    let admissions: i64 = k
        .iter()
        .filter(|(kind, _)| kind.admission_outcome().is_some())
        .map(|(_, n)| n)
        .sum();
    let replays = n(AttemptKind::Replayed) + n(AttemptKind::ReplayedFailure);
    (replays as f64 / admissions as f64, admissions)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_incident_switch_takes_the_replay_ratio_from_a_trickle_to_a_fifth() {
    let run = |incident: bool| async move {
        let db = TestDb::sqlite().await;
        let mut config = DemoConfig::new(20.0, 10.0);
        config.showcase = false;
        if incident {
            config.incident = IncidentSchedule {
                start_now: true,
                length: Duration::from_secs(3600),
                ..IncidentSchedule::OFF
            };
        }
        let demo = Demo::new(db.store.clone(), config);
        demo.run(tokio::time::sleep(Duration::from_secs(6))).await;
        assert_eq!(demo.provider().duplicates(), 0);
        replay_ratio(&db.store).await
    };
    let (normal, n) = run(false).await;
    assert!(n > 60, "{n} admissions");
    assert!(normal < 0.05, "normal day: replay ratio {normal}");
    let (incident, n) = run(true).await;
    eprintln!("replay ratio: normal day {normal:.4}, incident {incident:.4} ({n} admissions)");
    assert!(n > 60, "{n} admissions");
    assert!(incident > 0.12, "incident: replay ratio {incident}");
}

mod binary {
    use std::process::Stdio;
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A plain HTTP/1.1 GET: (status, body).
    async fn get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await?;
        let status = response
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        Ok((status, body))
    }

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn idemwatch_demo_serves_stats_while_it_runs_and_ends_with_no_duplicates() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("demo.db");
        let addr = format!("127.0.0.1:{}", free_port());
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_idemwatch"))
            .args([
                "demo",
                "--duration",
                "5s",
                "--listen",
                &addr,
                "--database-url",
            ])
            .arg(format!("sqlite://{}", file.display()))
            .env_remove("IDEMWATCH_DEMO_DATABASE_URL")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start idemwatch demo");

        let started = Instant::now();
        loop {
            match get(&addr, "/healthz").await {
                Ok((200, _)) => break,
                _ if started.elapsed() > Duration::from_secs(4) => {
                    panic!("/healthz never answered")
                }
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (status, body) = get(&addr, "/demo/stats").await.unwrap();
        assert_eq!(status, 200, "{body}");
        let stats: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert!(stats["effects"].as_u64().unwrap() > 0, "{stats}");
        assert_eq!(stats["duplicates"], 0, "{stats}");
        assert!(stats["requests"].as_i64().unwrap() > 0, "{stats}");
        assert!(stats["by_outcome"]["new"].as_i64().unwrap() > 0, "{stats}");
        // The same service as `serve`: the UI and live metrics from the tailer.
        let (status, _) = get(&addr, "/").await.unwrap();
        assert_eq!(status, 200, "the UI");
        let (status, metrics) = get(&addr, "/metrics").await.unwrap();
        assert_eq!(status, 200);
        let new_refunds = metrics
            .lines()
            .find_map(|l| {
                l.strip_prefix(r#"idempotency_requests_total{outcome="new",tool="issue_refund"} "#)
            })
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0);
        assert!(
            new_refunds > 0.0,
            "/metrics has no live admissions:\n{metrics}"
        );

        let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
            .await
            .expect("the demo stops after --duration")
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains(&format!("http://{addr}/metrics")),
            "{stdout}"
        );
        let last = stdout.lines().last().unwrap_or_default();
        let (effects, duplicates) = last
            .strip_prefix("effects: ")
            .and_then(|rest| rest.split_once(", duplicates: "))
            .unwrap_or_else(|| panic!("last line {last:?}"));
        assert!(effects.parse::<u64>().unwrap() > 0);
        assert_eq!(duplicates, "0");
        assert!(file.exists(), "a given database file is kept");
    }

    /// Issue 15: with its defaults (10x, the built-in retention), the demo shows the
    /// human-review path within its first minute: a key the provider forgot before the
    /// retry, escalated, its page asking for a person; and part of the traffic went
    /// through the demo's own HTTP guard API.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_demo_escalates_a_forgotten_key_within_a_minute_and_uses_the_http_guard() {
        use idemwatch::store::Store;
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("demo.db").display());
        let addr = format!("127.0.0.1:{}", free_port());
        let _child = tokio::process::Command::new(env!("CARGO_BIN_EXE_idemwatch"))
            .args(["demo", "--duration", "70s", "--listen", &addr])
            .args(["--database-url", &url])
            .env_remove("IDEMWATCH_DEMO_DATABASE_URL")
            .env_remove("IDEMWATCH_DEMO_SPEED")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start idemwatch demo");
        let started = Instant::now();
        while !matches!(get(&addr, "/healthz").await, Ok((200, _))) {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "/healthz never answered"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let store = Store::connect(&url, &Default::default()).await.unwrap();
        let Store::Sqlite(pool) = &store else {
            unreachable!("the demo runs on SQLite")
        };
        let escalated = loop {
            let key: Option<String> = sqlx::query_scalar(
                "SELECT key FROM idempotency_attempts WHERE kind = 'escalated' LIMIT 1",
            )
            .fetch_optional(pool)
            .await
            .unwrap();
            if let Some(key) = key {
                break key;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "no key was escalated to a person within the demo's first minute"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        // The key page asks for a person.
        let (status, page) = get(&addr, &format!("/keys/{escalated}")).await.unwrap();
        assert_eq!(status, 200);
        assert!(
            page.contains("Needs a person"),
            "the key page asks for a person"
        );
        assert!(
            page.contains("escalated"),
            "the key page shows the escalation"
        );

        // Part of the traffic went through the demo's own HTTP guard API: rows written
        // by the server for a local HTTP worker, next to the in-process ones.
        let (status, body) = get(&addr, "/demo/stats").await.unwrap();
        assert_eq!(status, 200, "{body}");
        let stats: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert!(stats["http_guard_calls"].as_u64().unwrap() > 0, "{stats}");
        assert_eq!(stats["duplicates"], 0, "{stats}");
        const BY_ACTOR: &str = "SELECT COUNT(DISTINCT key) FROM idempotency_attempts \
            WHERE kind = 'completed' AND actor LIKE ?";
        let count = |pattern: &'static str| {
            sqlx::query_scalar::<_, i64>(BY_ACTOR)
                .bind(pattern)
                .fetch_one(pool)
        };
        let over_http = count("local/worker-%").await.unwrap();
        let in_process = count("worker-%").await.unwrap();
        assert!(over_http > 0, "no key completed over HTTP");
        assert!(in_process > 0, "no key completed in process");
    }
}

mod documented_examples {
    use super::*;

    /// Splits a shell line: words, and 'single-quoted' strings taken literally.
    fn shell_words(line: &str) -> Vec<String> {
        let mut words = Vec::new();
        let mut word = String::new();
        let mut quoted = false;
        let mut in_word = false;
        for c in line.chars() {
            match c {
                '\'' => {
                    quoted = !quoted;
                    in_word = true;
                }
                c if c.is_whitespace() && !quoted => {
                    if in_word {
                        words.push(std::mem::take(&mut word));
                    }
                    in_word = false;
                }
                c => {
                    word.push(c);
                    in_word = true;
                }
            }
        }
        if in_word {
            words.push(word);
        }
        words
    }

    /// Each `$ idemwatch …` line in a console block of docs/GUARD.md, with the output
    /// printed under it up to the next command or the end of the block.
    fn examples(doc: &str) -> Vec<(String, String)> {
        let mut found = Vec::new();
        let mut in_console = false;
        let mut current: Option<(String, Vec<&str>)> = None;
        for line in doc.lines() {
            if line.starts_with("```console") {
                in_console = true;
                continue;
            }
            if !in_console {
                continue;
            }
            if line.starts_with("```") || line.starts_with("$ ") {
                if let Some((cmd, out)) = current.take() {
                    found.push((cmd, out.join("\n")));
                }
                if line.starts_with("```") {
                    in_console = false;
                    continue;
                }
            }
            if let Some(cmd) = line.strip_prefix("$ ") {
                current = Some((cmd.to_string(), Vec::new()));
            } else if let Some((_, out)) = current.as_mut() {
                out.push(line);
            }
        }
        found
    }

    #[test]
    fn every_worked_example_in_guard_md_is_what_the_binary_prints() {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/GUARD.md"))
            .expect("docs/GUARD.md");
        let examples = examples(&doc);
        assert!(examples.len() >= 4, "too few examples found: {examples:?}");
        for (cmd, expected) in examples {
            let words = shell_words(&cmd);
            assert_eq!(words[0], "idemwatch", "{cmd}");
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_idemwatch"))
                .args(&words[1..])
                .output()
                .unwrap();
            let printed = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(printed.trim_end(), expected.trim_end(), "$ {cmd}");
        }
    }

    #[test]
    fn the_documented_hash_chain_example_verifies() {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/GUARD.md"))
            .expect("docs/GUARD.md");
        let occurred_at = chrono::DateTime::parse_from_rfc3339("2026-11-29T14:02:11.402000Z")
            .unwrap()
            .to_utc();
        // What the guard writes in a claim's detail: the lease, serialised by serde.
        let lease_until = occurred_at + chrono::TimeDelta::seconds(40);
        let detail = serde_json::json!({ "lease_until": lease_until });
        assert_eq!(detail["lease_until"], "2026-11-29T14:02:51.402Z");
        let intent = idemwatch::guard::Intent {
            tenant: "acme".into(),
            tool: "issue_refund".into(),
            workflow_id: "run-7f3a".into(),
            step_id: "4".into(),
            intent_id: "refund:order-A-88214:ticket-5521".into(),
        };
        let key = intent.key().unwrap();
        let key = key.as_str();
        let fields = idemwatch::guard::ChainFields {
            key,
            tenant: "acme",
            tool: "issue_refund",
            seq: 1,
            kind: "claimed",
            fencing_token: 1,
            actor: "worker-1",
            detail: &detail,
            duration_ms: None,
            occurred_at,
        };
        let hash = chain_hash(GENESIS_HASH, fields);
        assert!(doc.contains(&hash), "docs/GUARD.md should show hash {hash}");
        let second = idemwatch::guard::ChainFields {
            seq: 2,
            kind: "completed",
            detail: &serde_json::json!({}),
            duration_ms: Some(1180),
            occurred_at: occurred_at + chrono::TimeDelta::milliseconds(1205),
            ..fields
        };
        let hash2 = chain_hash(&hash, second);
        assert!(
            doc.contains(&hash2),
            "docs/GUARD.md should show hash {hash2}"
        );
    }
}
