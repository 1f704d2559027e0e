//! Outside servers started by a test (Prometheus, Alertmanager, `idemwatch serve`) on
//! free loopback ports, logging to a file that is printed if the test fails.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A child process, killed when the test ends however it ends. If the test is
/// failing, its log is printed.
pub struct Running(pub Child, &'static str, PathBuf);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.2).unwrap_or_default();
            eprintln!("--- {} log ---\n{log}", self.1);
        }
    }
}

/// Starts `program args…` with stdout and stderr in `dir/<name>.log`.
pub fn start(name: &'static str, program: &str, args: &[&str], dir: &Path) -> Running {
    let log = dir.join(format!("{name}.log"));
    let out = std::fs::File::create(&log).unwrap();
    let child = Command::new(program)
        .args(args)
        .env("IDEMWATCH_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
    Running(child, name, log)
}

/// A loopback address with a port that was free a moment ago.
pub fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
}

/// Whether `program --version` runs and succeeds.
pub fn installed(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A program a test needs, or `None` after a loud skip message; under `CI=true`
/// a missing program fails the run instead (`.ci/run` installs `package`).
pub fn tool(name: &str, package: &str) -> Option<PathBuf> {
    let found = super::pg::which(name).or_else(|| {
        ["/usr/sbin", "/usr/bin", "/sbin"]
            .iter()
            .map(|d| Path::new(d).join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        let why = format!("{name} not found: apt-get install {package}");
        assert!(!super::pg::required(), "{why} (required under CI=true)");
        eprintln!("\n*** SKIPPED ({why}) ***\n");
    }
    found
}
