//! The review's attack of issue 47: admit bodies of a chosen size whose arguments are
//! `[0]` cells (every 4 bytes a value and a vector: what grows most when read as a
//! tree, the review's 3.3 GiB), each POSTed on a fresh connection with a worker token.
//! Shared by `tests/it/guard_memory.rs` and `benches/bench/attack.rs` (by `#[path]`),
//! so the bound the test asserts and the figure the bench measures are one attack.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// An admit body of about `bytes`, for tenant `acme`, with `cells` arguments that are
/// `[0]` padded with strings to the size (cells of `["xx…"]` when `bytes` allows).
pub fn admit_body(bytes: usize, cells: usize, n: usize) -> String {
    // Each cell and its comma: `[0],` (4 bytes), or `["xx…"],` padded to the size.
    let cell = match (bytes / cells.max(1)).saturating_sub(6) {
        0 => "[0]".to_string(),
        pad => format!("[\"{}\"]", "x".repeat(pad + 1)),
    };
    let list = vec![cell.as_str(); cells].join(",");
    format!(
        r#"{{"intent":{{"tenant":"acme","tool":"issue_refund","workflow_id":"w","step_id":"1","intent_id":"mem-{n}"}},"args":{{"order":"M-{n}","cells":[{list}]}}}}"#
    )
}

/// POSTs `body` to the admit route at `addr` as `bearer`: the status, or 0 when the
/// server closed the connection before answering (it may refuse a body it will not
/// read before the client has sent it).
pub async fn post_admit(addr: &str, bearer: &str, body: &[u8]) -> u16 {
    let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else {
        return 0;
    };
    let head = format!(
        "POST /api/v1/guard/admit HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {bearer}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body).await;
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw).await;
    String::from_utf8_lossy(&raw)
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}
