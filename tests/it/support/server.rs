//! A real `idemwatch` process on a free loopback port, for life-cycle and browser
//! tests, and a minimal HTTP/1.1 GET over a plain TCP stream.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A loopback port for a server, outside the range outgoing connections use
/// ([`super::pg::free_port`]).
pub fn free_port() -> u16 {
    super::pg::free_port()
}

/// A child process that is killed when dropped.
pub struct Server {
    pub child: Child,
    pub addr: String,
}

impl Server {
    /// Starts `idemwatch <args> --listen 127.0.0.1:<port> --database-url <url>` and
    /// waits until `/healthz` answers.
    pub async fn start(subcommand: &str, database_url: &str, extra: &[&str]) -> Server {
        let addr = format!("127.0.0.1:{}", free_port());
        let child = Command::new(env!("CARGO_BIN_EXE_idemwatch"))
            .arg(subcommand)
            .args(["--listen", &addr, "--database-url", database_url])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start idemwatch");
        let server = Server { child, addr };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok((200, _)) = get(&server.addr, "/healthz").await {
                return server;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "idemwatch did not answer /healthz on {} within 30 s",
            server.addr
        );
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(mut self) -> std::process::Output {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let child = std::mem::replace(&mut self.child, Command::new("true").spawn().unwrap());
        child.wait_with_output().expect("wait for idemwatch")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes a tools file for `serve --tools-file` into `dir`: `issue_refund` with a 24 h
/// key retention, a 1 s call timeout and `reason` as free text. Returns its path.
pub fn refund_tools_file(dir: &Path) -> PathBuf {
    let tools = dir.join("tools.toml");
    std::fs::write(
        &tools,
        "[tools.issue_refund]\nkey_retention = \"24h\"\ncall_timeout = \"1s\"\nfree_text_fields = [\"reason\"]\n",
    )
    .unwrap();
    tools
}

/// GET `path` from `addr`; returns the status code and the body.
pub async fn get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    send_raw(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
    )
    .await
}

/// Sends `request` (the whole HTTP/1.1 text, with `Connection: close`) to `addr`;
/// returns the status code and the body.
pub async fn send_raw(addr: &str, request: &str) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    let text = String::from_utf8_lossy(&raw).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// The ports the harness hands to servers lie below the range the kernel gives
/// outgoing connections, so no connection can take one before its server binds it.
#[test]
fn server_ports_lie_below_the_ephemeral_range() {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .expect("Linux: /proc/sys/net/ipv4/ip_local_port_range");
    let lowest: u16 = range.split_whitespace().next().unwrap().parse().unwrap();
    for _ in 0..20 {
        let port = free_port();
        assert!(
            port < lowest,
            "port {port} is in the ephemeral range ({})",
            range.trim()
        );
        assert!(std::net::TcpListener::bind(("127.0.0.1", port)).is_ok());
    }
}
