//! A throwaway PostgreSQL for the tests: `TEST_DATABASE_URL` when set, otherwise a
//! cluster started with initdb/pg_ctl in a temporary directory on a free loopback
//! port (as the `postgres` user when we run as root), stopped and removed when the
//! test process exits.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use tokio::sync::OnceCell;

/// The admin URL of the cluster, or why there is none.
static CLUSTER: OnceCell<Result<String, String>> = OnceCell::const_new();

pub async fn admin_url() -> Result<String, String> {
    CLUSTER
        .get_or_init(|| async {
            if let Ok(url) = std::env::var("TEST_DATABASE_URL") {
                return Ok(url);
            }
            tokio::task::spawn_blocking(start_cluster)
                .await
                .map_err(|e| format!("cluster start panicked: {e}"))?
        })
        .await
        .clone()
}

/// Whether a missing server must fail the run (CI) rather than skip.
pub fn required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

pub fn pg_bin_dir() -> Option<PathBuf> {
    if let Ok(dir) = std::env::var("PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let mut candidates: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|p| p.join("pg_ctl").exists())
        .collect();
    candidates.sort();
    if let Some(newest) = candidates.pop() {
        return Some(newest);
    }
    which("pg_ctl").and_then(|p| p.parent().map(Path::to_path_buf))
}

pub fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Runs a PostgreSQL binary, as `postgres` when we are root (initdb refuses root).
pub fn pg_command(bin: &Path, args: &[&str], as_postgres: bool) -> Command {
    if as_postgres {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(bin).args(args);
        c
    } else {
        let mut c = Command::new(bin);
        c.args(args);
        c
    }
}

fn start_cluster() -> Result<String, String> {
    let bin = pg_bin_dir().ok_or(
        "PostgreSQL server binaries (pg_ctl, initdb) not found; apt-get install postgresql",
    )?;
    let as_postgres = is_root();
    let dir = std::env::temp_dir().join(format!("idemwatch-pg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    if as_postgres {
        let status = Command::new("chown")
            .args(["postgres:postgres"])
            .arg(&dir)
            .status();
        if !status.is_ok_and(|s| s.success()) {
            return Err("cannot chown the cluster directory to postgres".into());
        }
    }
    let data = dir.join("data");
    let data_s = data.to_string_lossy().to_string();
    let out = pg_command(
        &bin.join("initdb"),
        &[
            "-D",
            &data_s,
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        ],
        as_postgres,
    )
    .stdout(Stdio::null())
    .output()
    .map_err(|e| format!("initdb: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let port = free_port();
    let opts = format!(
        "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300 -c shared_buffers=128MB",
        dir.display()
    );
    let log = dir.join("log").to_string_lossy().to_string();
    let out = pg_command(
        &bin.join("pg_ctl"),
        &["-D", &data_s, "-l", &log, "-o", &opts, "-w", "start"],
        as_postgres,
    )
    .stdout(Stdio::null())
    .output()
    .map_err(|e| format!("pg_ctl: {e}"))?;
    if !out.status.success() {
        let log_text = std::fs::read_to_string(&log).unwrap_or_default();
        return Err(format!(
            "pg_ctl start failed: {}{log_text}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    spawn_reaper(&bin, &data_s, &dir, as_postgres);
    Ok(format!("postgres://postgres@127.0.0.1:{port}/postgres"))
}

/// Stops and removes the cluster once this test process has exited: a small shell
/// loop outlives us, so no cluster is left behind even if the tests panic.
fn spawn_reaper(bin: &Path, data: &str, dir: &Path, as_postgres: bool) {
    static REAPER: OnceLock<()> = OnceLock::new();
    REAPER.get_or_init(|| watchdog(bin, data, dir, as_postgres));
}

/// Once this test process has exited, stops the cluster in `data` (`-m immediate`)
/// and removes `dir`.
pub fn watchdog(bin: &Path, data: &str, dir: &Path, as_postgres: bool) {
    let pg_ctl = bin.join("pg_ctl");
    let stop = if as_postgres {
        format!(
            "runuser -u postgres -- {} -D {data} -m immediate stop",
            pg_ctl.display()
        )
    } else {
        format!("{} -D {data} -m immediate stop", pg_ctl.display())
    };
    let script = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 0.5; done; {stop} >/dev/null 2>&1; rm -rf {dir}",
        pid = std::process::id(),
        dir = dir.display()
    );
    let _ = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
}

/// A loopback port for a server the tests start (PostgreSQL, `idemwatch serve`,
/// chromedriver, pgbouncer), taken *below* the kernel's ephemeral range.
///
/// A port from the ephemeral range (bind to port 0, close, hand the number to the
/// server) can be given by the kernel to any outgoing connection in the meantime, and
/// the tests open thousands of them; the server then fails with "Address already in
/// use" (a clean-clone CI run, 2026-12-02: a fault cluster's `pg_ctl start`). Below the
/// range no connection takes a port; only another listener can, so each candidate is
/// checked by binding it. Candidates are handed out in turn from a start that differs by
/// process, so two test processes do not walk the same ports. It lives here, not in
/// `server`, because the benches include this file alone (`benches/bench`);
/// `server::free_port` calls it.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const LOWEST: u32 = 10_000;
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    let span = ephemeral.saturating_sub(LOWEST).max(1_000);
    let start = std::process::id().wrapping_mul(7_919) % span;
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = LOWEST + (start + n) % span;
        let Ok(port) = u16::try_from(port) else {
            continue;
        };
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {LOWEST}..{}", LOWEST + span)
}
