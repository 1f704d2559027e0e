//! `attack` (only when named): the High finding of issue 47 against a real release
//! `serve` on PostgreSQL. One worker token sends 32 concurrent admits of 1.9 MB, again and
//! again, while 4 connections of the same token hammer one key with stale settles (a
//! worker stuck in a loop). A reader, with a token of its own, measures `GET /keys` and
//! `GET /api/v1/guard/keys/K` (K: the hammered key) in slices with the attack running,
//! interleaved with slices of the same reads without it. Targets: `/keys` p99 < 100 ms
//! during the attack, serve's peak RSS < 300 MiB.
//!
//! `BENCH_ATTACK_ROUNDS` (default 5) × `BENCH_ATTACK_SLICE_SECS` (default 8) per side,
//! `BENCH_ATTACK_KEYS` (default 20,000) seeded keys for `/keys` to list.

use super::export::{proc_kb, release_binary};
use super::http::Client;
use super::report::{Figure, Latencies};
use super::seed;
use super::shared_attack::{admit_body, post_admit};
use idemwatch::auth::secrets;
use idemwatch::guard::IdempotencyKey;
use idemwatch::store::Store;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const WORKER: &str = "iw_attack_worker";
const READER: &str = "iw_attack_reader";

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The release `serve` with the shipped guard bounds, a tools file with `issue_refund`
/// (1 s call timeout, so a lease runs out in 2 s) and two tokens: the attacker's worker
/// token limited to `acme`, and the reader's admin token.
fn start(url: &str, dir: &std::path::Path) -> (Child, SocketAddr) {
    let tools = dir.join("tools.toml");
    std::fs::write(
        &tools,
        "[tools.issue_refund]\nkey_retention = \"24h\"\ncall_timeout = \"1s\"\n",
    )
    .unwrap();
    let auth = dir.join("auth.toml");
    std::fs::write(
        &auth,
        format!(
            "mode = \"builtin\"\n\
             [[tokens]]\nname = \"bots\"\nsha256 = \"{}\"\nroles = [\"worker\"]\ntenants = [\"acme\"]\n\
             [[tokens]]\nname = \"reader\"\nsha256 = \"{}\"\nroles = [\"admin\"]\n",
            secrets::hash_token(WORKER),
            secrets::hash_token(READER)
        ),
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(release_binary())
        .args(["serve", "--database-url", url, "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--tools-file")
        .arg(&tools)
        .arg("--auth-file")
        .arg(&auth)
        .args(["--lease-margin", "1s"])
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    (child, format!("127.0.0.1:{port}").parse().unwrap())
}

async fn ready(addr: SocketAddr) {
    let started = Instant::now();
    loop {
        if tokio::net::TcpStream::connect(addr).await.is_ok()
            && Client::connect(addr).await.get("/readyz").await.0 == 200
        {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "serve did not become ready"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Claims K, lets its lease run out and takes it over: K's token is 2, so a settle under
/// token 1 is refused as stale.
async fn hammered_key(addr: SocketAddr) -> String {
    let mut c = Client::connect(addr).await.bearer(WORKER);
    let admit = br#"{"intent":{"tenant":"acme","tool":"issue_refund","workflow_id":"attack","step_id":"1","intent_id":"hammered"},"args":{"order":"A-1"},"worker":"w1"}"#;
    let (status, body) = c.post_json("/api/v1/guard/admit", admit.to_vec()).await;
    assert_eq!(status, 200, "{body:?}");
    let d: serde_json::Value = serde_json::from_slice(&body).unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (status, again) = c.post_json("/api/v1/guard/admit", admit.to_vec()).await;
    let again: serde_json::Value = serde_json::from_slice(&again).unwrap();
    assert_eq!(
        (status, again["decision"].as_str()),
        (200, Some("reconcile"))
    );
    d["key"].as_str().unwrap().to_string()
}

type Counts = Arc<Mutex<BTreeMap<(&'static str, u16), u64>>>;

fn count(counts: &Counts, what: &'static str, status: u16) {
    *counts.lock().unwrap().entry((what, status)).or_default() += 1;
}

/// The attack until `stop`: 32 big admits at once, each sent again when answered, and 4
/// keep-alive connections sending stale settles to K.
fn attack(
    addr: SocketAddr,
    key: &str,
    stop: &Arc<AtomicBool>,
    counts: &Counts,
) -> tokio::task::JoinSet<()> {
    let mut tasks = tokio::task::JoinSet::new();
    // The test's body (tests/it/guard_memory.rs): `[0]` cells, 1.9 MB.
    let body = Arc::new(admit_body(1_900_000, 1_900_000 / 4 - 100, 0).into_bytes());
    for _ in 0..32 {
        let (stop, counts, body) = (stop.clone(), counts.clone(), body.clone());
        tasks.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                count(
                    &counts,
                    "big admit",
                    post_admit(&addr.to_string(), WORKER, &body).await,
                );
            }
        });
    }
    let settle = format!(
        r#"{{"key":"{key}","fencing_token":1,"outcome":"done","result":{{"id":1}},"worker":"w1"}}"#
    );
    for _ in 0..4 {
        let (stop, counts, settle) = (stop.clone(), counts.clone(), settle.clone());
        tasks.spawn(async move {
            let mut c = Client::connect(addr).await.bearer(WORKER);
            while !stop.load(Ordering::Relaxed) {
                let (status, _) = c
                    .post_json("/api/v1/guard/settle", settle.clone().into_bytes())
                    .await;
                count(&counts, "stale settle", status);
            }
        });
    }
    tasks
}

/// What the reader saw in the slices of one side.
#[derive(Default)]
struct Reads {
    keys: Vec<Duration>,
    key_state: Vec<Duration>,
    /// Reads answered other than 200.
    failed: u64,
}

/// Reads `/keys` and K's state in turn for `slice`, timing each whole request.
async fn read(c: &mut Client, key_path: &str, slice: Duration, into: &mut Reads) {
    let until = Instant::now() + slice;
    while Instant::now() < until {
        for (path, samples) in [("/keys", &mut into.keys), (key_path, &mut into.key_state)] {
            let started = Instant::now();
            let (status, _) = c.get(path).await;
            samples.push(started.elapsed());
            into.failed += u64::from(status != 200);
        }
    }
}

pub async fn run(store: &Store, url: &str, figures: &mut Vec<Figure>) {
    let rounds = env("BENCH_ATTACK_ROUNDS", 5);
    let slice = Duration::from_secs(env("BENCH_ATTACK_SLICE_SECS", 8));
    let keys = env("BENCH_ATTACK_KEYS", 20_000);
    seed::seed(store, 0, keys, 10, 1_000, true).await;
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr) = start(url, dir.path());
    ready(addr).await;
    let pid = child.id();
    let key = hammered_key(addr).await;
    let key_path = format!("/api/v1/guard/keys/{key}");
    let mut reader = Client::connect(addr).await.bearer(READER);
    // Unrecorded: the pool's connections and statements, the pages' first render.
    read(
        &mut reader,
        &key_path,
        Duration::from_secs(2),
        &mut Reads::default(),
    )
    .await;
    let idle_peak = proc_kb(pid, "VmHWM").unwrap_or(0) as f64 / 1024.0;

    let (mut quiet, mut attacked) = (Reads::default(), Reads::default());
    let counts: Counts = Arc::default();
    for round in 0..rounds * 2 {
        // A B, B A, …: a neighbour's compile hits both sides alike.
        let under_attack = (round % 2 == 0) == (round / 2 % 2 == 0);
        if under_attack {
            let stop = Arc::new(AtomicBool::new(false));
            let mut tasks = attack(addr, &key, &stop, &counts);
            read(&mut reader, &key_path, slice, &mut attacked).await;
            stop.store(true, Ordering::Relaxed);
            while tasks.join_next().await.is_some() {}
        } else {
            read(&mut reader, &key_path, slice, &mut quiet).await;
        }
    }
    let peak = proc_kb(pid, "VmHWM").unwrap_or(0) as f64 / 1024.0;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let held = proc_kb(pid, "VmRSS").unwrap_or(0) as f64 / 1024.0;
    child.kill().unwrap();
    child.wait().unwrap();

    let k = IdempotencyKey::parse(&key).unwrap();
    let rows = store.attempts(&k).await.unwrap().len();
    let record = store.record(&k).await.unwrap().unwrap();
    let counted: Vec<String> = counts
        .lock()
        .unwrap()
        .iter()
        .map(|((what, status), n)| format!("{what} {status}: {n}"))
        .collect();
    let note = format!(
        "{rounds} × {} s a side; {} (0: closed before an answer); K: {rows} rows, refusals_not_logged {}; reads not 200: {} attacked, {} quiet",
        slice.as_secs(),
        counted.join(", "),
        record.refusals_not_logged,
        attacked.failed,
        quiet.failed
    );
    for (route, a, q) in [
        ("GET /keys", attacked.keys, quiet.keys),
        (
            "GET /api/v1/guard/keys/K",
            attacked.key_state,
            quiet.key_state,
        ),
    ] {
        let (a, q) = (Latencies::new(a), Latencies::new(q));
        let target = (route == "GET /keys").then(|| ("< 100 ms", a.p99_ms() < 100.0));
        figures.push(Figure::ratio(
            format!(
                "{route} p99 during the attack ({} reads) vs without",
                a.len()
            ),
            "ms",
            a.p99_ms(),
            q.p99_ms(),
            target,
        ));
        figures.push(Figure::ratio(
            format!("{route} p50 during the attack vs without"),
            "ms",
            a.p50_ms(),
            q.p50_ms(),
            None,
        ));
    }
    figures.push(Figure::plain(
        "serve peak RSS through the attack (VmHWM)".into(),
        "MiB",
        peak,
        format!("{idle_peak:.1} MiB before it; {held:.1} MiB resident 2 s after; {note}"),
        Some(("< 300 MiB", peak < 300.0)),
    ));
}
