//! The guard as the proxy's call path sees it: one port, two ends, chosen once at
//! start. [`local::LocalGuard`] runs the engine on the database (`--database-url`);
//! [`remote::RemoteGuard`] speaks the guard's HTTP API of a running `serve`
//! (`--guard-url`: several proxies, one guard), with the same JSON bodies the Python
//! and TypeScript clients send. Both answer in the same terms, so every answer the
//! model reads is made the same way whichever end decided.

pub mod local;
pub mod remote;
mod remote_steps;

use crate::guard::{
    CallOutcome, FencingToken, GuardError, IdempotencyKey, Lookup, Status, ToolCall, ToolPolicy,
};
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use serde_json::Value;
use std::time::Duration;

/// A step's answer, later.
pub type Step<'a, T> = BoxFuture<'a, Result<T, PortError>>;

/// The key and fencing token a settle or a lookup report writes under, and how long
/// the upstream call took.
#[derive(Debug, Clone, Copy)]
pub struct Fenced<'a> {
    pub key: &'a IdempotencyKey,
    pub token: FencingToken,
    pub duration_ms: Option<i64>,
}

/// A natural key's values as a business ref (`issue_refund order=A-1`), of one tenant
/// and tool.
#[derive(Debug, Clone, Copy)]
pub struct NaturalRef<'a> {
    pub tenant: &'a str,
    pub tool: &'a str,
    pub reference: &'a str,
}

/// The guard, for the proxy.
pub trait GuardPort: Send + Sync {
    /// Checks at start that the guard can be used (the remote guard reachable and the
    /// token accepted): a proxy that cannot guard must not start.
    fn check<'a>(&'a self, tenant: &'a str) -> BoxFuture<'a, anyhow::Result<()>>;
    /// The steps of one `tools/call`, recorded with `context`.
    fn call(&self, context: CallContext) -> Box<dyn GuardCall>;
    /// A key's state, `None` if no such key is recorded.
    fn key_state<'a>(&'a self, key: &'a IdempotencyKey) -> Step<'a, Option<KeyState>>;
    /// The key holding a natural key's values, if any.
    fn holder_of<'a>(&'a self, natural: NaturalRef<'a>) -> Step<'a, Option<IdempotencyKey>>;
}

/// The guard's steps for one `tools/call` (the steps of `/api/v1/guard/*`).
pub trait GuardCall: Send + Sync {
    fn admit<'a>(&'a self, call: &'a ToolCall, policy: &'a ToolPolicy) -> Step<'a, PortAdmitted>;
    fn settle<'a>(&'a self, at: Fenced<'a>, outcome: CallOutcome) -> Step<'a, ()>;
    /// After a takeover: what the lookup found. A forgotten key with no effect is
    /// `Err(PortError::Guard(GuardError::NeedsHumanReview { .. }))`.
    fn report_lookup<'a>(&'a self, at: Fenced<'a>, lookup: Lookup) -> Step<'a, AfterLookup>;
}

/// Who makes a call, for the attempt log: the actor (`mcp:<client>`) and the MCP
/// call's context (session id, request id, client). The local guard writes both; over
/// HTTP the actor is the worker id (`serve` records `token:NAME/mcp:<client>`).
#[derive(Debug, Clone)]
pub struct CallContext {
    pub actor: String,
    pub detail: Value,
}

/// What an admission decided.
#[derive(Debug)]
pub struct PortAdmitted {
    /// The key acted on: the call's own, or the one holding its natural key.
    pub key: IdempotencyKey,
    pub admission: PortAdmission,
}

#[derive(Debug)]
pub enum PortAdmission {
    /// Claimed: call the upstream under `token` within `call_timeout` (the policy of
    /// the guard that holds the lease), then settle.
    Execute {
        token: FencingToken,
        call_timeout: Duration,
    },
    /// The key's outcome was unknown (or its lease ran out) and this call took it
    /// over: look the effect up before anything else.
    Reconcile {
        token: FencingToken,
        call_timeout: Duration,
    },
    Replay {
        result: Value,
    },
    Failed {
        error: String,
    },
    /// Same key, other business arguments. `natural`: the call reached the key
    /// through its natural key.
    Mismatch {
        differing_fields: Vec<String>,
        natural: bool,
        /// The key's outcome is unknown (issue 51): under this token the caller may
        /// report a lookup by key, never resend.
        lookup_token: Option<FencingToken>,
    },
    InFlight {
        lease_until: DateTime<Utc>,
    },
}

/// What a reported lookup led to.
#[derive(Debug, PartialEq)]
pub enum AfterLookup {
    Found {
        result: Value,
    },
    /// Not found while the upstream still remembers the key: resend under the same
    /// token and settle.
    Resend,
    Unknown {
        reason: String,
    },
}

/// A key as the status tool and the in-flight wait read it.
#[derive(Debug, Clone)]
pub struct KeyState {
    pub key: IdempotencyKey,
    /// The key's tool (the remote guard's key state does not name it).
    pub tool: Option<String>,
    pub status: Status,
    pub result: Option<Value>,
    pub error: Option<String>,
    /// The lease's end while in progress (the remote guard's key state does not say).
    pub lease_until: Option<DateTime<Utc>>,
    /// UNKNOWN, escalated and not released: a person decides.
    pub awaiting_person: bool,
}

/// Why the guard did not answer a step.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    /// The guard's own answer (an invalid call, a lost lease, a person needed, its
    /// database unavailable).
    #[error(transparent)]
    Guard(#[from] GuardError),
    /// The remote guard could not be reached, refused the proxy (its token), or
    /// answered something this version does not understand.
    #[error("the guard at {url}: {why}")]
    Remote { url: String, why: String },
}
