//! The release binary as a child process: `idemwatch export --format csv` (stdout to
//! /dev/null) next to `psql` running `COPY (the same query) TO STDOUT CSV`, with the
//! exporter's peak RSS; then the footprint of `idemwatch serve`.

use super::http::Client;
use super::report::Figure;
use super::seed;
use idemwatch::store::Store;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Builds the release binary (a no-op when it is current) and returns its path.
pub fn release_binary() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--release", "--bin", "idemwatch"])
        .status()
        .unwrap();
    assert!(status.success(), "cargo build --release failed");
    let dir = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    Path::new(&dir).join("release/idemwatch")
}

/// A `/proc/<pid>/status` field in kB, e.g. `VmHWM`.
pub fn proc_kb(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Runs `cmd` to completion; wall time and the peak RSS (VmHWM, polled every 5 ms;
/// it only grows, so the last reading before exit is the peak up to 5 ms before).
/// Also the child's CPU time (utime + stime from /proc/<pid>/stat, polled likewise;
/// clock ticks of 1/100 s, Linux's USER_HZ).
fn run_measured(mut cmd: Command) -> (Duration, u64, f64) {
    let started = Instant::now();
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Drained as it comes: a CSV export writes its manifest to stderr (one proof a
    // key: hundreds of MB for a whole export), and a pipe nobody reads stops the
    // child once 64 KiB are waiting. Until 2026-12-02 this read stderr only after
    // exit, and the whole export with proofs hung. The tail is kept for a failure.
    let mut stderr = child.stderr.take().unwrap();
    let drain = std::thread::spawn(move || {
        use std::io::Read;
        let (mut tail, mut buf) = (Vec::new(), [0u8; 64 * 1024]);
        while let Ok(n @ 1..) = stderr.read(&mut buf) {
            tail.extend_from_slice(&buf[..n]);
            if tail.len() > 128 * 1024 {
                tail.drain(..tail.len() - 64 * 1024);
            }
        }
        String::from_utf8_lossy(&tail).into_owned()
    });
    let pid = child.id();
    let (mut peak, mut cpu) = (0, 0.0);
    loop {
        if let Some(kb) = proc_kb(pid, "VmHWM") {
            peak = peak.max(kb);
        }
        if let Some(s) = cpu_seconds(pid) {
            cpu = s;
        }
        if let Some(status) = child.try_wait().unwrap() {
            let err = drain.join().unwrap();
            if !status.success() {
                panic!("{cmd:?} failed: {err}");
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    (started.elapsed(), peak, cpu)
}

fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

/// The export's query (src/store/export.rs, unfiltered) for psql's COPY: every one of
/// the file's 24 columns. Until 2026-12-01 this left out the record's state
/// (`fingerprint`, `business_args`, `result`, `error`: two of the row's three JSON
/// documents), so psql was timed doing less than the export it was compared with.
const EXPORT_SQL: &str = "SELECT a.id, a.key, a.seq, a.occurred_at, a.tenant, a.tool, r.workflow_id, r.step_id, \
    r.intent_id, r.business_ref, r.status, a.kind, a.actor, a.fencing_token, a.duration_ms, \
    a.detail, a.prev_hash, a.hash, r.fingerprint, r.business_args, r.result, r.error, \
    r.log_seq, r.log_hash \
    FROM idempotency_attempts a JOIN idempotency_records r ON r.key = a.key";

/// Exports of the newest `rows` attempt rows (via `--since`), alternating with psql.
pub async fn run(store: &Store, url: &str, bin: &Path, sizes: &[u64], figures: &mut Vec<Figure>) {
    let total: i64 = sqlx::query_scalar("SELECT count(*) FROM idempotency_attempts")
        .fetch_one(seed::pg(store))
        .await
        .unwrap();
    for &rows in sizes {
        let since: Option<String> = if rows as i64 >= total {
            None
        } else {
            let t: chrono::DateTime<chrono::Utc> = sqlx::query_scalar(
                "SELECT occurred_at FROM idempotency_attempts ORDER BY occurred_at DESC OFFSET $1 LIMIT 1",
            )
            .bind(rows as i64 - 1)
            .fetch_one(seed::pg(store))
            .await
            .unwrap();
            Some(idemwatch::guard::rfc3339(t))
        };
        let n: i64 = match &since {
            Some(s) => sqlx::query_scalar(
                "SELECT count(*) FROM idempotency_attempts WHERE occurred_at >= $1::timestamptz",
            )
            .bind(s)
            .fetch_one(seed::pg(store))
            .await
            .unwrap(),
            None => total,
        };
        // A run of 100 k rows takes about a second, where a start-up's or the VM's jitter
        // moves one run by 20 %: small sizes get more alternated pairs.
        let repeats = match n {
            n if n > 2_000_000 => 1,
            n if n > 200_000 => 3,
            _ => 9,
        };
        let (mut ours, mut theirs, mut peak, mut cpu_share) =
            (Vec::new(), Vec::new(), 0, Vec::new());
        for i in 0..repeats * 2u32 {
            if i.is_multiple_of(2) == (i / 2).is_multiple_of(2) {
                let mut cmd = Command::new(bin);
                cmd.args(["export", "--format", "csv", "--database-url", url]);
                if let Some(s) = &since {
                    cmd.args(["--since", s]);
                }
                let (t, kb, cpu) = run_measured(cmd);
                ours.push(n as f64 / t.as_secs_f64());
                cpu_share.push(cpu / t.as_secs_f64());
                peak = peak.max(kb);
            } else {
                let filter = since
                    .as_ref()
                    .map(|s| format!(" WHERE a.occurred_at >= '{s}'"))
                    .unwrap_or_default();
                let sql = format!(
                    "COPY ({EXPORT_SQL}{filter} ORDER BY a.key, a.seq) TO STDOUT (FORMAT csv, HEADER)"
                );
                let mut cmd = Command::new("psql");
                // The same session settings as idemwatch's pool (src/store/mod.rs).
                cmd.args(["-X", "-q", url, "-c", &sql])
                    .env("PGOPTIONS", "-c jit=off");
                let (t, _, _) = run_measured(cmd);
                theirs.push(n as f64 / t.as_secs_f64());
            }
        }
        let (rate, base) = (super::slices::median(&ours), super::slices::median(&theirs));
        // Each of our runs against psql's next to it in time: drift (a neighbour, the
        // page cache) moves both of a pair alike.
        let paired: Vec<f64> = ours.iter().zip(&theirs).map(|(o, t)| o / t).collect();
        let mut f = Figure::ratio(
            format!("export --format csv, {n} rows (PostgreSQL)"),
            "rows/s",
            rate,
            base,
            Some((">= 200,000 rows/s", rate >= 200_000.0)),
        );
        f.note = format!(
            "baseline: psql COPY (same query, jit off as ours) TO STDOUT CSV; whole-process wall time; \
             idemwatch busy {:.0}% of one core",
            100.0 * super::slices::median(&cpu_share)
        );
        figures.push(f);
        figures.push(Figure::plain(
            format!("export ÷ psql COPY, {n} rows (PostgreSQL)"),
            "ratio",
            rate / base,
            format!(
                "medians of the {repeats} alternated runs a side above; the median of the {} \
                 pairs' own ratios is {:.2} (each pair: {})",
                paired.len(),
                super::slices::median(&paired),
                paired
                    .iter()
                    .map(|r| format!("{r:.2}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Some((">= 0.95", rate / base >= 0.95)),
        ));
        figures.push(Figure::plain(
            format!("export peak RSS, {n} rows"),
            "MiB",
            peak as f64 / 1024.0,
            "VmHWM of the child process".into(),
            Some(("< 64 MiB", (peak as f64 / 1024.0) < 64.0)),
        ));
    }
}

/// One key's export (what support runs for "what happened to order A-88214?") before
/// and after the first signed checkpoint over every key, alternated runs: with
/// checkpoints on, the manifest carries that key's inclusion proof, gathered from an
/// index lookup and one streamed pass over the leaf hashes, so peak RSS must not grow
/// with the head log. Then the whole export with evidence, whose manifest holds a proof
/// per key, in both formats, against the same export before the checkpoint: its peak
/// RSS must not grow with the keys either (the proofs go through temporary files).
/// Leaves the checkpoint in the database.
pub async fn with_evidence(store: &Store, url: &str, bin: &Path, figures: &mut Vec<Figure>) {
    let key: String = sqlx::query_scalar(
        "SELECT key FROM idempotency_records ORDER BY key OFFSET (SELECT count(*) / 2 FROM idempotency_records) LIMIT 1",
    )
    .fetch_one(seed::pg(store))
    .await
    .unwrap();
    let one_key = || {
        let mut cmd = Command::new(bin);
        cmd.args([
            "export",
            "--format",
            "csv",
            "--database-url",
            url,
            "--key",
            &key,
        ]);
        cmd
    };
    let whole = |format: &str| {
        let mut cmd = Command::new(bin);
        cmd.args(["export", "--format", format, "--database-url", url]);
        cmd
    };
    let (_, unproved_kb, _) = run_measured(whole("csv"));
    let runs = 5;
    let (mut before, mut before_kb) = (Vec::new(), 0);
    for _ in 0..runs {
        let (t, kb, _) = run_measured(one_key());
        before.push(t.as_secs_f64() * 1000.0);
        before_kb = before_kb.max(kb);
    }
    let writer = idemwatch::evidence::Checkpointer::new(
        store.clone(),
        ed25519_dalek::SigningKey::from_bytes(&[3; 32]),
        std::sync::Arc::new(idemwatch::guard::SystemClock),
    );
    let leaves = writer
        .checkpoint()
        .await
        .unwrap()
        .expect("a first checkpoint")
        .body
        .tree_size;
    let (mut after, mut after_kb) = (Vec::new(), 0);
    for _ in 0..runs {
        let (t, kb, _) = run_measured(one_key());
        after.push(t.as_secs_f64() * 1000.0);
        after_kb = after_kb.max(kb);
    }
    let (base, with) = (
        super::slices::median(&before),
        super::slices::median(&after),
    );
    let mut f = Figure::ratio(
        format!("one key's export with its proof, {leaves} leaves (PostgreSQL)"),
        "ms",
        with,
        base,
        Some(("≤ 2 (its block, not the log)", with <= 2.0 * base)),
    );
    f.note = format!(
        "baseline: the same export before the first checkpoint; medians of {runs}; the proof \
         reads the key's block of 1,024 leaves and the stored block roots"
    );
    figures.push(f);
    let ratio = after_kb as f64 / before_kb as f64;
    figures.push(Figure::plain(
        format!("one key's export, peak RSS with {leaves} leaves ÷ without"),
        "ratio",
        ratio,
        format!(
            "{:.1} MiB against {:.1} MiB (VmHWM)",
            after_kb as f64 / 1024.0,
            before_kb as f64 / 1024.0
        ),
        Some(("≤ 1.2 (flat)", ratio <= 1.2)),
    ));
    let (t, kb, _) = run_measured(whole("csv"));
    let (t_nd, kb_nd, _) = run_measured(whole("ndjson"));
    let mib = |kb: u64| kb as f64 / 1024.0;
    figures.push(Figure::plain(
        format!("whole export with a proof per key, {leaves} keys, peak RSS"),
        "MiB",
        mib(kb),
        format!(
            "CSV {:.1} s; NDJSON (the manifest as its last line) {:.1} MiB, {:.1} s; the same \
             CSV export before the checkpoint {:.1} MiB; the manifest holds one inclusion \
             proof per key (~1.7 kB of JSON), read back from temporary files as it is written",
            t.as_secs_f64(),
            mib(kb_nd),
            t_nd.as_secs_f64(),
            mib(unproved_kb)
        ),
        Some(("< 64 MiB (flat)", mib(kb.max(kb_nd)) < 64.0)),
    ));
}

/// `serve` against the seeded database: idle RSS once /readyz answers and it has
/// been idle 5 s (tailer, backlog refresher and pruner running), and the binary size.
pub async fn footprint(url: &str, bin: &Path, figures: &mut Vec<Figure>) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(bin)
        .args([
            "serve",
            "--database-url",
            url,
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    let started = Instant::now();
    let ready = loop {
        if let Ok(Ok(_)) =
            tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(addr)).await
        {
            let mut c = Client::connect(addr).await;
            if c.get("/readyz").await.0 == 200 {
                break started.elapsed();
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "serve did not become ready"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rss = proc_kb(child.id(), "VmRSS").unwrap_or(0) as f64 / 1024.0;
    let mut c = Client::connect(addr).await;
    for path in ["/", "/keys", "/backlog", "/metrics"] {
        c.get(path).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = proc_kb(child.id(), "VmRSS").unwrap_or(0) as f64 / 1024.0;
    child.kill().unwrap();
    child.wait().unwrap();
    figures.push(Figure::plain(
        "serve idle RSS (PostgreSQL)".into(),
        "MiB",
        rss,
        format!(
            "ready in {:.2} s; {after:.1} MiB after one request to each of /, /keys, /backlog, /metrics",
            ready.as_secs_f64()
        ),
        Some(("< 40 MiB", rss < 40.0)),
    ));
    let size = std::fs::metadata(bin).unwrap().len() as f64 / (1024.0 * 1024.0);
    figures.push(Figure::plain(
        "release binary size".into(),
        "MiB",
        size,
        bin.display().to_string(),
        None,
    ));
}
