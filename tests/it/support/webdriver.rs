//! A minimal W3C WebDriver client for chromedriver (headless Chromium), over a plain
//! TCP stream: enough to open pages, fill and submit forms, read the page source and
//! take screenshots. `--dump-dom` cannot fill forms; this can.

use base64::Engine;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The W3C name of an element reference in answers.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// Debian's Chromium, or `$CHROMIUM`.
pub fn chromium() -> Option<PathBuf> {
    if let Ok(path) = std::env::var("CHROMIUM") {
        return Some(PathBuf::from(path));
    }
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

pub fn chromedriver() -> Option<PathBuf> {
    if let Ok(path) = std::env::var("CHROMEDRIVER") {
        return Some(PathBuf::from(path));
    }
    ["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// Chromium and chromedriver, for a test that drives a browser. Without them the test
/// fails under `CI=true`, and elsewhere says loudly that it is skipped and gets `None`.
pub fn browser_or_skip() -> Option<(PathBuf, PathBuf)> {
    match (chromium(), chromedriver()) {
        (Some(chromium), Some(chromedriver)) => Some((chromium, chromedriver)),
        _ => {
            skip(
                "Chromium and chromedriver are required (apt-get install chromium chromium-driver)",
            );
            None
        }
    }
}

/// Chromium alone (`--dump-dom`, `--screenshot`), or `None` as [`browser_or_skip`].
pub fn chromium_or_skip() -> Option<PathBuf> {
    let found = chromium();
    if found.is_none() {
        skip("Chromium is required (apt-get install chromium)");
    }
    found
}

fn skip(why: &str) {
    if super::pg::required() {
        panic!("{why} under CI=true");
    }
    eprintln!("\n*** SKIPPED ({why}) ***\n");
}

/// Under `IDEMWATCH_UPDATE_SCREENSHOTS=1`: copies `files` from `dir` to
/// docs/screenshots/ (commit the result).
pub fn publish_screenshots<S: AsRef<str>>(dir: &Path, files: impl IntoIterator<Item = S>) {
    if !std::env::var("IDEMWATCH_UPDATE_SCREENSHOTS").is_ok_and(|v| v == "1") {
        return;
    }
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/screenshots");
    std::fs::create_dir_all(&docs).unwrap();
    for file in files {
        let file = file.as_ref();
        std::fs::copy(dir.join(file), docs.join(file)).unwrap();
    }
    eprintln!("screenshots written to {}", docs.display());
}

/// One chromedriver process with one browser session; both end when dropped.
pub struct Driver {
    child: Child,
    addr: String,
    session: String,
}

impl Driver {
    pub fn start(chromedriver: &Path, chromium: &Path, profile: &Path) -> Driver {
        let port = super::server::free_port();
        let child = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let mut driver = Driver {
            child,
            addr: format!("127.0.0.1:{port}"),
            session: String::new(),
        };
        let started = Instant::now();
        while driver.try_call("GET", "/status", None).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "chromedriver did not answer"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium.to_string_lossy(),
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--no-first-run", "--disable-background-networking", "--disable-sync",
                    "--hide-scrollbars", "--window-size=1280,1000",
                    format!("--user-data-dir={}", profile.display()),
                ],
            },
        }}});
        let answer = driver.call("POST", "/session", Some(caps));
        driver.session = answer["sessionId"]
            .as_str()
            .expect("a session id")
            .to_string();
        driver
    }

    fn try_call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let mut stream = TcpStream::connect(&self.addr).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(Duration::from_secs(120)))
            .map_err(|e| e.to_string())?;
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.addr,
            body.len()
        )
        .map_err(|e| e.to_string())?;
        // chromedriver keeps the connection open despite `Connection: close`: read
        // the head, then exactly Content-Length bytes.
        let mut raw = Vec::new();
        let mut buf = [0u8; 8192];
        let split = loop {
            if let Some(at) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                break at;
            }
            let n = stream.read(&mut buf).map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("no HTTP answer".into());
            }
            raw.extend_from_slice(&buf[..n]);
        };
        let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
        let mut body = raw[split + 4..].to_vec();
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok());
        match length {
            Some(len) => {
                while body.len() < len {
                    let n = stream.read(&mut buf).map_err(|e| e.to_string())?;
                    if n == 0 {
                        break;
                    }
                    body.extend_from_slice(&buf[..n]);
                }
            }
            None => {
                stream.read_to_end(&mut body).map_err(|e| e.to_string())?;
                if head.contains("transfer-encoding: chunked") {
                    body = dechunk(&body);
                }
            }
        }
        let body = String::from_utf8_lossy(&body).to_string();
        let value: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
        Ok(value.get("value").cloned().unwrap_or(Value::Null))
    }

    /// A command; a WebDriver error fails the test with its message.
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let value = self
            .try_call(method, path, body)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        if let Some(error) = value.get("error") {
            panic!("{method} {path}: {error}: {}", value["message"]);
        }
        value
    }

    fn session_path(&self, rest: &str) -> String {
        format!("/session/{}{rest}", self.session)
    }

    pub fn goto(&self, url: &str) {
        self.call(
            "POST",
            &self.session_path("/url"),
            Some(json!({ "url": url })),
        );
    }

    pub fn url(&self) -> String {
        self.call("GET", &self.session_path("/url"), None)
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    pub fn source(&self) -> String {
        self.call("GET", &self.session_path("/source"), None)
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// Waits until the page source contains `needle`, and returns the source.
    pub fn wait_for(&self, needle: &str) -> String {
        let started = Instant::now();
        loop {
            let source = self.source();
            if source.contains(needle) {
                return source;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{needle:?} never appeared at {}:\n{source}",
                self.url()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The first element matching a CSS selector.
    pub fn find(&self, css: &str) -> String {
        let v = self.call(
            "POST",
            &self.session_path("/element"),
            Some(json!({ "using": "css selector", "value": css })),
        );
        v[ELEMENT].as_str().expect("an element").to_string()
    }

    pub fn type_into(&self, css: &str, text: &str) {
        let el = self.find(css);
        self.call(
            "POST",
            &self.session_path(&format!("/element/{el}/value")),
            Some(json!({ "text": text })),
        );
    }

    pub fn click(&self, css: &str) {
        let el = self.find(css);
        self.call(
            "POST",
            &self.session_path(&format!("/element/{el}/click")),
            Some(json!({})),
        );
    }

    /// A PNG of the viewport.
    pub fn screenshot(&self, file: &Path) {
        let b64 = self.call("GET", &self.session_path("/screenshot"), None);
        let png = base64::engine::general_purpose::STANDARD
            .decode(b64.as_str().unwrap_or_default())
            .expect("base64 screenshot");
        assert!(
            png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000,
            "not a real PNG"
        );
        std::fs::write(file, png).unwrap();
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self.try_call("DELETE", &self.session_path(""), None);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = body.windows(2).position(|w| w == b"\r\n") {
        let size = String::from_utf8_lossy(&body[..eol]).trim().to_string();
        let Ok(n) = usize::from_str_radix(&size, 16) else {
            break;
        };
        let rest = &body[eol + 2..];
        if n == 0 || rest.len() < n {
            break;
        }
        out.extend_from_slice(&rest[..n]);
        body = rest[n..].strip_prefix(b"\r\n").unwrap_or(&rest[n..]);
    }
    out
}
