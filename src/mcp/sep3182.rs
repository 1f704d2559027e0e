//! SEP-3182 (request idempotency) at the stdio boundary. The proposal carries the
//! client's key as `params.idempotencyKey` on `tools/call` (a sibling of `arguments`)
//! and the server's support as `capabilities.tools.idempotency`; rmcp 3.11 models
//! neither and would drop both. This adapter moves them across as lines pass: the
//! request member into `params._meta.idempotencyKey`, where the server reads it (a
//! client may also send it there), and the capability into the `initialize` result.
//! Everything else passes byte for byte; a line that is not JSON is left to rmcp.

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream};

const KEY: &str = "idempotencyKey";

/// A `tools/call` request's `params.idempotencyKey`, moved into `params._meta`.
pub fn incoming(line: &str) -> Option<String> {
    let mut message: Value = serde_json::from_str(line).ok()?;
    if message.get("method")?.as_str()? != "tools/call" {
        return None;
    }
    let params = message.get_mut("params")?.as_object_mut()?;
    let key = params.remove(KEY)?;
    let meta = params.entry("_meta").or_insert_with(|| json!({}));
    meta.as_object_mut()?.entry(KEY).or_insert(key);
    serde_json::to_string(&message).ok()
}

/// The proxy's `initialize` result, with `capabilities.tools.idempotency`.
pub fn outgoing(line: &str) -> Option<String> {
    let mut message: Value = serde_json::from_str(line).ok()?;
    let result = message.get_mut("result")?;
    result.get("serverInfo")?;
    let tools = result
        .get_mut("capabilities")?
        .get_mut("tools")?
        .as_object_mut()?;
    tools.insert(
        "idempotency".into(),
        json!({"scope": "tenant, tool and client"}),
    );
    serde_json::to_string(&message).ok()
}

/// The proxy's side of stdin and stdout, through the adapter.
pub fn stdio() -> (DuplexStream, DuplexStream) {
    const BUFFER: usize = 1 << 16;
    let (host_in, server_in) = tokio::io::duplex(BUFFER);
    let (server_out, host_out) = tokio::io::duplex(BUFFER);
    tokio::spawn(pump(tokio::io::stdin(), host_in, incoming));
    tokio::spawn(pump(host_out, tokio::io::stdout(), outgoing));
    (server_in, server_out)
}

/// Copies lines from `from` to `to`, rewriting those `rewrite` changes, until either
/// side closes (which closes the other: the session ends as the host's pipe does).
async fn pump(
    from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    rewrite: fn(&str) -> Option<String>,
) {
    let mut lines = BufReader::new(from).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let line = rewrite(&line).unwrap_or(line);
        let written = async {
            to.write_all(line.as_bytes()).await?;
            to.write_all(b"\n").await?;
            to.flush().await
        };
        if written.await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sibling_key_moves_into_meta_and_other_lines_pass_unchanged() {
        let call = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"refund","arguments":{"a":1},"idempotencyKey":"k-1","_meta":{"progressToken":3}}}"#;
        let moved: Value = serde_json::from_str(&incoming(call).unwrap()).unwrap();
        assert_eq!(moved["params"]["_meta"]["idempotencyKey"], "k-1");
        assert_eq!(moved["params"]["_meta"]["progressToken"], 3);
        assert!(moved["params"].get(KEY).is_none());
        assert_eq!(
            incoming(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#),
            None
        );
        assert_eq!(incoming("not json"), None);
    }

    #[test]
    fn the_initialize_result_declares_the_capability() {
        let init = r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"idemwatch-mcp-proxy","version":"0"}}}"#;
        let out: Value = serde_json::from_str(&outgoing(init).unwrap()).unwrap();
        assert!(out["result"]["capabilities"]["tools"]["idempotency"].is_object());
        assert_eq!(
            outgoing(r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}"#),
            None
        );
    }
}
