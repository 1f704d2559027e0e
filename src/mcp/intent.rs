//! The intent of a `tools/call`, from which the guard derives the key. Minted by the
//! proxy, never by the model (seed 000), from, in order:
//!
//! 1. the client's `idempotencyKey` (SEP-3182), scoped to the tenant, the tool and
//!    the client: the host decided what one action is;
//! 2. otherwise the arguments within the MCP session: a retry or re-issue in the same
//!    session collapses, and the tool's natural key (applied by the guard exactly as
//!    `serve` applies it, whatever the intent) collapses a re-issue across sessions and
//!    restarts of the host.
//!
//! A genuine second action with the same arguments needs either its own
//! `idempotencyKey` from the host or, under a natural key, other natural-key values.

use crate::guard::{Fingerprint, Intent};
use serde_json::{Value, json};

/// The longest text of each member of the attempt context: the client's name and a
/// JSON-RPC request id are the client's to choose, and `serve` takes a context of at
/// most 1 KiB (docs/GUARD.md).
const MAX_CONTEXT_TEXT: usize = 200;

/// Who is calling and in which session.
#[derive(Debug, Clone)]
pub struct Session {
    pub tenant: String,
    /// The client's name from `initialize` (`clientInfo.name`).
    pub client: String,
    /// The MCP session: the `Mcp-Session-Id` over HTTP, one per connection over stdio.
    pub id: String,
}

impl Session {
    /// `mcp:<client name>`: the attempt log's actor.
    pub fn actor(&self) -> String {
        format!("mcp:{}", self.client)
    }

    /// The call in the attempt log (`detail.context`): the session, the JSON-RPC
    /// request id and the client, each cut to [`MAX_CONTEXT_TEXT`] bytes.
    pub fn context(&self, request_id: &str) -> Value {
        json!({
            "session_id": cut(&self.id, MAX_CONTEXT_TEXT),
            "request_id": cut(request_id, MAX_CONTEXT_TEXT),
            "client": cut(&self.client, MAX_CONTEXT_TEXT),
        })
    }

    pub fn intent(&self, tool: &str, client_key: Option<&str>, args: &Fingerprint) -> Intent {
        let (workflow_id, step_id, intent_id) = match client_key {
            Some(key) => (
                format!("mcp-client:{}", self.client),
                "idempotencyKey".to_string(),
                key.to_string(),
            ),
            None => (
                format!("mcp-session:{}", self.id),
                "arguments".to_string(),
                format!("fingerprint:{}", args.0),
            ),
        };
        Intent {
            tenant: self.tenant.clone(),
            tool: tool.to_string(),
            workflow_id,
            step_id,
            intent_id,
        }
    }
}

/// `text`'s first `max` bytes at most, cut on a character boundary.
pub fn cut(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(session: &str) -> Session {
        Session {
            tenant: "acme".into(),
            client: "claude".into(),
            id: session.into(),
        }
    }

    #[test]
    fn the_same_arguments_share_a_key_within_a_session_only() {
        let fp = Fingerprint("ab".into());
        let a = caller("s1").intent("refund", None, &fp).key().unwrap();
        assert_eq!(a, caller("s1").intent("refund", None, &fp).key().unwrap());
        assert_ne!(a, caller("s2").intent("refund", None, &fp).key().unwrap());
    }

    #[test]
    fn a_client_key_holds_across_sessions_but_not_across_clients_or_tools() {
        let fp = Fingerprint("ab".into());
        let k = |c: Session, tool| c.intent(tool, Some("k-1"), &fp).key().unwrap();
        assert_eq!(k(caller("s1"), "refund"), k(caller("s2"), "refund"));
        assert_ne!(k(caller("s1"), "refund"), k(caller("s1"), "charge"));
        let mut other = caller("s1");
        other.client = "cursor".into();
        assert_ne!(k(caller("s1"), "refund"), k(other, "refund"));
    }

    #[test]
    fn the_attempt_context_stays_within_what_serve_takes() {
        let mut long = caller("s-1");
        long.client = "é".repeat(300);
        let context = long.context(&"9".repeat(500)).to_string();
        assert!(context.len() < 1024, "{}", context.len());
        assert_eq!(cut("aé", 2), "a");
        assert_eq!(caller("s-1").context("7")["session_id"], "s-1");
    }
}
