//! Dedicated PostgreSQL clusters for the fault scenarios, separate from the shared test
//! cluster (which runs with fsync off): a primary with `fsync` and
//! `synchronous_commit` on and streaming replication enabled, a standby made with
//! `pg_basebackup -R`, and a small loopback TCP proxy that plays the part of a
//! virtual IP or a DNS name the operator repoints. Every cluster is stopped and
//! removed on drop, and by a watchdog if the test process dies.

use crate::support::pg;
use crate::support::server::free_port;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};

pub struct Cluster {
    bin: PathBuf,
    as_postgres: bool,
    dir: PathBuf,
    data: String,
    pub port: u16,
}

/// The primary's settings: durable commits, and what a standby needs.
const PRIMARY_SETTINGS: &[&str] = &[
    "fsync=on",
    "synchronous_commit=on",
    "full_page_writes=on",
    "wal_level=replica",
    "max_wal_senders=5",
    "hot_standby=on",
    "max_connections=100",
    "shared_buffers=32MB",
];

impl Cluster {
    /// A fresh primary, or `None` after a loud skip when PostgreSQL is not installed
    /// (under `CI=true`, a failure).
    pub fn primary() -> Option<Cluster> {
        let Some(bin) = pg::pg_bin_dir() else {
            let why = "PostgreSQL server binaries not found: apt-get install postgresql";
            assert!(!pg::required(), "{why} (required under CI=true)");
            eprintln!("\n*** SKIPPED ({why}) ***\n");
            return None;
        };
        let cluster = Cluster::new(bin);
        cluster.run(
            "initdb",
            &[
                "-D",
                &cluster.data,
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
            ],
        );
        cluster.start();
        Some(cluster)
    }

    /// A streaming standby of `primary` (`pg_basebackup -R`), started and in recovery.
    pub fn standby_of(primary: &Cluster) -> Cluster {
        if !primary.bin.join("pg_basebackup").exists() {
            super::tool("pg_basebackup", "postgresql-client");
        }
        let standby = Cluster::new(primary.bin.clone());
        let port = primary.port.to_string();
        standby.run(
            "pg_basebackup",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                "postgres",
                "-D",
                &standby.data,
                "-R",
                "-X",
                "stream",
                "--checkpoint=fast",
            ],
        );
        standby.start();
        standby
    }

    fn new(bin: PathBuf) -> Cluster {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let as_postgres = pg::is_root();
        let dir = std::env::temp_dir().join(format!(
            "idemwatch-dbf-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("cluster directory");
        if as_postgres {
            let chowned = Command::new("chown")
                .arg("postgres:postgres")
                .arg(&dir)
                .status();
            assert!(chowned.is_ok_and(|s| s.success()), "chown {dir:?}");
        }
        let data = dir.join("data").to_string_lossy().to_string();
        let cluster = Cluster {
            bin,
            as_postgres,
            dir,
            data,
            port: free_port(),
        };
        cluster.watchdog();
        cluster
    }

    fn command(&self, program: &str, args: &[&str]) -> Command {
        pg::pg_command(&self.bin.join(program), args, self.as_postgres)
    }

    fn run(&self, program: &str, args: &[&str]) {
        let out = self
            .command(program, args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{program}: {e}"));
        assert!(
            out.status.success(),
            "{program} {args:?}: {}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    /// `pg_ctl start -w`, on the cluster's own port, loopback only.
    pub fn start(&self) {
        let mut opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1",
            self.port,
            self.dir.display()
        );
        for s in PRIMARY_SETTINGS {
            opts.push_str(" -c ");
            opts.push_str(s);
        }
        let log = self.dir.join("log").to_string_lossy().to_string();
        self.run(
            "pg_ctl",
            &["-D", &self.data, "-l", &log, "-o", &opts, "-w", "start"],
        );
    }

    /// `pg_ctl stop -m immediate`: every server process is killed at once, with no
    /// checkpoint; the next start replays the WAL (a crash, as far as data goes).
    pub fn crash(&self) {
        self.run("pg_ctl", &["-D", &self.data, "-m", "immediate", "stop"]);
    }

    /// `pg_ctl promote -w`: the standby ends recovery and accepts writes.
    pub fn promote(&self) {
        self.run("pg_ctl", &["-D", &self.data, "-w", "promote"]);
    }

    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    fn watchdog(&self) {
        pg::watchdog(&self.bin, &self.data, &self.dir, self.as_postgres);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl", &["-D", &self.data, "-m", "immediate", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `sql` (simple protocol, several statements allowed) on `url`.
pub async fn execute(url: &str, sql: &str) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url)
        .await
        .unwrap_or_else(|e| panic!("connect {url}: {e}"));
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
        .execute(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// Waits until `url` accepts a connection and answers `SELECT 1`; returns how long.
pub async fn wait_until_up(url: &str, within: Duration) -> Duration {
    use sqlx::Connection;
    let started = Instant::now();
    loop {
        if let Ok(mut conn) = sqlx::PgConnection::connect(url).await
            && sqlx::query("SELECT 1").execute(&mut conn).await.is_ok()
        {
            return started.elapsed();
        }
        assert!(started.elapsed() < within, "{url} not up within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A loopback TCP forwarder: what a virtual IP, a DNS name or HAProxy is to a real
/// deployment. Repointing it sends new connections to another server; connections
/// already open to the old one are cut, as a failed primary would cut them.
#[derive(Clone)]
pub struct FrontAddress {
    pub port: u16,
    target: Arc<AtomicU16>,
    generation: Arc<AtomicU64>,
}

impl FrontAddress {
    pub async fn start(target: u16) -> FrontAddress {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let front = FrontAddress {
            port: listener.local_addr().unwrap().port(),
            target: Arc::new(AtomicU16::new(target)),
            generation: Arc::default(),
        };
        let f = front.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let f = f.clone();
                tokio::spawn(async move { f.forward(client).await });
            }
        });
        front
    }

    async fn forward(&self, mut client: TcpStream) {
        let generation = self.generation.load(Ordering::SeqCst);
        let target = self.target.load(Ordering::SeqCst);
        let Ok(mut server) = TcpStream::connect(("127.0.0.1", target)).await else {
            return;
        };
        let repointed = async {
            while self.generation.load(Ordering::SeqCst) == generation {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::select! {
            _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
            () = repointed => {}
        }
    }

    pub fn repoint(&self, target: u16) {
        self.target.store(target, Ordering::SeqCst);
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }
}
