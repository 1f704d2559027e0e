//! Part of the demo's plain traffic goes through the demo's own guard API over HTTP
//! (`POST /api/v1/guard/admit`, `settle`, `reconcile`), as a Python or TypeScript worker
//! would (docs/GUARD.md): the server derives the key, takes the tool's policy from its
//! tools file and does every write; this worker only calls the provider. The rows are the
//! ones `Guard::run` writes, with the actor `local/<worker>` (no auth file).
//!
//! A deliberately small HTTP/1.1 client (one connection per request) keeps the library
//! free of an HTTP client dependency; the demo's server is on loopback.

use super::TrafficContext;
use super::provider::{Fault, ProviderClient};
use super::stats::Counters;
use crate::guard::{IdempotencyKey, Operation, ToolCall};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The tries an HTTP worker makes while the key is in flight (409).
const MAX_TRIES: u32 = 6;

/// POSTs `body` to `path` on `addr`: the status and the JSON body.
async fn post(addr: SocketAddr, path: &str, body: &Value) -> Result<(u16, Value), String> {
    let body = body.to_string();
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .await
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text.split_once("\r\n\r\n").ok_or("no HTTP head")?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or("no HTTP status")?;
    let json = serde_json::from_str(body).map_err(|e| format!("{path}: body: {e}"))?;
    Ok((status, json))
}

impl TrafficContext {
    /// One intent through the HTTP guard: admit, then whatever the answer asks for.
    pub(super) async fn deliver_over_http(self: &Arc<Self>, addr: SocketAddr, call: &ToolCall) {
        let admit = json!({
            "intent": call.intent,
            "business_ref": call.business_ref,
            "args": call.args,
            "worker": call.actor,
        });
        for _ in 0..MAX_TRIES {
            Counters::bump(&self.counters.guard_calls);
            Counters::bump(&self.counters.http_calls);
            let answer = match post(addr, "/api/v1/guard/admit", &admit).await {
                Ok((200, answer)) => answer,
                Ok((409, problem)) if problem["code"] == "in_flight" => {
                    let secs = problem["retry_after"].as_u64().unwrap_or(1).min(5);
                    if !self.wait(Duration::from_secs(secs)).await {
                        return;
                    }
                    continue;
                }
                Ok((status, problem)) => {
                    tracing::debug!(status, %problem, "demo: HTTP admit refused");
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "demo: HTTP admit failed");
                    return;
                }
            };
            match answer["decision"].as_str() {
                Some("execute") => self.execute_and_settle(addr, call, &answer).await,
                Some("reconcile") => self.reconcile(addr, call, &answer).await,
                // replay, failed, unknown: the stored outcome is the answer.
                _ => {}
            }
            return;
        }
    }

    /// The key an answer names (None: nothing to do) and a provider client for the call.
    fn key_and_client(
        &self,
        call: &ToolCall,
        answer: &Value,
    ) -> Option<(IdempotencyKey, ProviderClient)> {
        let key = IdempotencyKey::parse(answer["key"].as_str()?).ok()?;
        let client = ProviderClient::new(
            &self.provider,
            &call.intent.tool,
            self.config.provider_timeout(),
            Fault::None,
        );
        Some((key, client))
    }

    /// Calls the provider with the arguments admit sent back and settles the outcome.
    async fn execute_and_settle(&self, addr: SocketAddr, call: &ToolCall, answer: &Value) {
        let Some((key, client)) = self.key_and_client(call, answer) else {
            return;
        };
        let outcome = match tokio::time::timeout(
            self.config.provider_timeout(),
            client.execute(&key, &answer["args"]),
        )
        .await
        {
            Ok(Ok(result)) => json!({"outcome": "done", "result": result}),
            Ok(Err(e)) if e.definitive => json!({"outcome": "failed", "error": e.message}),
            Ok(Err(e)) => json!({"outcome": "unknown", "reason": e.message}),
            Err(_) => json!({"outcome": "unknown", "reason": "timeout"}),
        };
        let mut settle = fenced(&key, call, answer);
        merge(&mut settle, outcome);
        if let Err(e) = post(addr, "/api/v1/guard/settle", &settle).await {
            tracing::warn!(error = %e, "demo: HTTP settle failed");
        }
    }

    /// A takeover: asks the provider whether the effect happened and reports it; a
    /// resend the server allows is executed and settled.
    async fn reconcile(&self, addr: SocketAddr, call: &ToolCall, answer: &Value) {
        let Some((key, client)) = self.key_and_client(call, answer) else {
            return;
        };
        let mut report = fenced(&key, call, answer);
        let lookup = match client.find_by_key(&key).await {
            Ok(Some(result)) => json!({"lookup": "found", "result": result}),
            Ok(None) => json!({"lookup": "not_found"}),
            Err(e) => json!({"lookup": "failed", "error": e.message}),
        };
        merge(&mut report, lookup);
        match post(addr, "/api/v1/guard/reconcile", &report).await {
            Ok((200, next)) if next["decision"] == "execute" => {
                self.execute_and_settle(addr, call, &next).await;
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "demo: HTTP reconcile failed"),
        }
    }
}

/// The start of a fenced request (settle, reconcile): the key, the token admit gave,
/// the worker.
fn fenced(key: &IdempotencyKey, call: &ToolCall, answer: &Value) -> Value {
    json!({
        "key": key.as_str(),
        "fencing_token": answer["fencing_token"],
        "worker": call.actor,
    })
}

fn merge(into: &mut Value, from: Value) {
    if let (Value::Object(into), Value::Object(from)) = (into, from) {
        into.extend(from);
    }
}
