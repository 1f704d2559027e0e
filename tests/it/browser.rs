//! The pages as a person sees them: a real `idemwatch serve` on a loopback port, over a
//! SQLite file seeded through the guard, loaded in headless Chromium. Checks what a
//! person looks for and saves screenshots; `IDEMWATCH_UPDATE_SCREENSHOTS=1` copies them
//! to docs/screenshots/ (commit the result).
//!
//! Without Chromium the test fails under `CI=true` and skips loudly elsewhere.

use crate::support::server::free_port;
use crate::support::webdriver::{chromium_or_skip, publish_screenshots};
use crate::ui_seed::{Seeded, seed};
use chrono::Utc;
use idemwatch::store::{Store, StoreOptions};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CHROMIUM_TIMEOUT: Duration = Duration::from_secs(120);

/// `idemwatch serve`, stopped when dropped.
struct Server {
    child: Child,
    base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Status line and body of a plain HTTP/1.0 GET, or None if nothing answers.
fn http_get(base: &str, path: &str) -> Option<String> {
    let addr = base.trim_start_matches("http://");
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut out = String::new();
    stream.read_to_string(&mut out).ok()?;
    Some(out)
}

fn start_server(database_url: &str, workdir: &Path) -> Server {
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let child = Command::new(env!("CARGO_BIN_EXE_idemwatch"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--database-url", database_url])
        // Another directory than the repository: the assets are in the binary.
        .current_dir(workdir)
        .env("IDEMWATCH_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("start idemwatch serve");
    let server = Server { child, base };
    let started = Instant::now();
    loop {
        if http_get(&server.base, "/healthz").is_some_and(|r| r.contains(" 200 ")) {
            return server;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "idemwatch serve did not answer /healthz"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Runs Chromium headless with `args` on `url`; returns stdout.
pub(crate) fn chromium_run(chromium: &Path, profile: &Path, args: &[&str], url: &str) -> String {
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let mut stdout = child.stdout.take().expect("chromium stdout");
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        let _ = stdout.read_to_string(&mut out);
        out
    });
    let started = Instant::now();
    loop {
        if child.try_wait().expect("chromium status").is_some() {
            break;
        }
        if started.elapsed() > CHROMIUM_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium took over {CHROMIUM_TIMEOUT:?} on {url}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    reader.join().expect("chromium output")
}

struct Browser {
    chromium: PathBuf,
    profile: tempfile::TempDir,
    base: String,
}

impl Browser {
    fn dom(&self, path: &str) -> String {
        let url = format!("{}{path}", self.base);
        let dom = chromium_run(&self.chromium, self.profile.path(), &["--dump-dom"], &url);
        assert!(dom.contains("</html>"), "no page from {url}: {dom}");
        dom
    }

    fn screenshot(&self, path: &str, file: &Path, width: u32, height: u32) {
        let url = format!("{}{path}", self.base);
        let shot = format!("--screenshot={}", file.display());
        let size = format!("--window-size={width},{height}");
        chromium_run(&self.chromium, self.profile.path(), &[&shot, &size], &url);
        let png = std::fs::read(file).unwrap_or_else(|e| panic!("no screenshot of {url}: {e}"));
        assert!(
            png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000,
            "{url}: not a real PNG"
        );
    }
}

fn assert_has(dom: &str, what: &str, needle: &str) {
    assert!(
        dom.contains(needle),
        "{what}: {needle:?} not in the page:\n{dom}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_sees_what_happened_in_a_real_browser() {
    let Some(chromium) = chromium_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("idemwatch.db").display()
    );
    let store = Store::connect(&url, &StoreOptions::default())
        .await
        .unwrap();
    store.migrate().await.unwrap();
    let s: Seeded = seed(&store, Utc::now(), 1200).await;
    store.close().await;

    let server = start_server(&url, dir.path());
    let browser = Browser {
        chromium,
        profile: tempfile::tempdir().unwrap(),
        base: server.base.clone(),
    };
    tokio::task::block_in_place(|| check_pages(&browser, &s));
    drop(server);
}

fn check_pages(b: &Browser, s: &Seeded) {
    // The timeline of a replayed key shows the replay.
    let dom = b.dom(&format!("/keys/{}", s.replayed));
    assert_has(&dom, "key page", "data-kind=\"replayed\"");
    assert_has(
        &dom,
        "key page",
        "<span class=\"badge badge-replay\">Retry answered</span>",
    );
    assert_has(&dom, "key page", "2 issue_refund calls on order:A-88214");
    assert_has(&dom, "key page", "class=\"copy\"");

    // The backlog lists the UNKNOWN key, and the one past retention stands out.
    let dom = b.dom("/backlog");
    assert_has(&dom, "backlog", &format!("href=\"/keys/{}\"", s.unknown));
    assert_has(&dom, "backlog", "<tr class=\"past-retention\">");
    assert_has(&dom, "backlog", "only a person can resolve it");

    // A Grafana data link opens the right list.
    let dom = b.dom("/keys?tool=issue_refund&from=now-1h&to=now");
    assert_has(
        &dom,
        "grafana link",
        &format!("href=\"/keys/{}\"", s.unknown),
    );
    assert_has(
        &dom,
        "grafana link",
        &format!("href=\"/keys/{}\"", s.expired),
    );
    assert!(
        !dom.contains(&s.replayed),
        "the replayed key is older than an hour"
    );

    // Support staff type the order id without its prefix.
    let dom = b.dom("/search?q=A-88214");
    assert_has(&dom, "search", "2 keys, newest activity first");

    let dom = b.dom(&format!("/keys/{}", s.mismatch));
    assert_has(&dom, "mismatch", "<code>amount_p</code>");

    let dom = b.dom("/");
    assert_has(&dom, "overview", ">issue_refund</h2>");
    assert_has(&dom, "overview", ">send_message</h2>");
    assert_has(&dom, "overview", "<path class=\"ratio\" d=\"M");

    let dom = b.dom(&format!("/keys/{}", "0".repeat(64)));
    assert_has(&dom, "unknown key", "is recorded");

    let shots = tempfile::tempdir().unwrap();
    let pages: [(&str, String, u32, u32); 8] = [
        // Tall enough for both charts: the last hour and the last 24 hours.
        ("overview", "/".into(), 1280, 1150),
        (
            "keys",
            "/keys?tool=issue_refund&from=now-1d".into(),
            1280,
            900,
        ),
        ("key-replayed", format!("/keys/{}", s.replayed), 1280, 1400),
        (
            "key-payload-mismatch",
            format!("/keys/{}#timeline-h", s.mismatch),
            1280,
            900,
        ),
        ("backlog", "/backlog".into(), 1280, 900),
        ("phone-overview", "/".into(), 360, 800),
        ("phone-key", format!("/keys/{}", s.escalated), 360, 800),
        ("phone-backlog", "/backlog".into(), 360, 800),
    ];
    for (name, path, width, height) in &pages {
        b.screenshot(
            path,
            &shots.path().join(format!("{name}.png")),
            *width,
            *height,
        );
    }
    publish_screenshots(
        shots.path(),
        pages.iter().map(|(name, ..)| format!("{name}.png")),
    );
}
