//! The database misbehaving under idemwatch (issue 18): killed processes and live
//! backups on SQLite; PostgreSQL crashed and restarted, failed over to a standby,
//! behind PgBouncer, and read from a hot standby. Each scenario starts its own
//! servers, prints what it measured (`cargo test … -- --nocapture`), and those figures
//! are the ones in docs/OPERATIONS.md, "When the database fails".

mod sqlite;

use crate::support::pg;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A program a scenario needs, or `None` after a loud skip message; under `CI=true`
/// a missing program fails the run instead (`.ci/run` installs `package`).
pub fn tool(name: &str, package: &str) -> Option<PathBuf> {
    let found = pg::which(name).or_else(|| {
        ["/usr/sbin", "/usr/bin", "/sbin"]
            .iter()
            .map(|d| Path::new(d).join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        let why = format!("{name} not found: apt-get install {package}");
        assert!(!pg::required(), "{why} (required under CI=true)");
        eprintln!("\n*** SKIPPED ({why}) ***\n");
    }
    found
}

/// `idemwatch verify` on `url`, as a separate process; panics unless every chain is
/// intact (exit 0).
pub fn assert_verifies(url: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_idemwatch"))
        .args(["verify", "--database-url", url])
        .output()
        .expect("run idemwatch verify");
    assert!(
        out.status.success(),
        "idemwatch verify {url}: {:?}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
