//! The guard of a running `serve`, over its HTTP API (`--guard-url`, docs/GUARD.md):
//! several proxies, one guard, one database behind it. The proxy is a worker like the
//! Python and TypeScript clients: `serve` derives the key, applies its tools file's
//! policy and does every write; the proxy calls the upstream and reports.
//!
//! A 429 or 503 is the guard saying "the same request, later": it is sent again after
//! its `Retry-After`, while [`RETRY_BUDGET`] lasts. Everything else is answered at once.

use super::remote_steps::{self, Reply};
use super::{CallContext, GuardCall, GuardPort, KeyState, NaturalRef, PortError, Step};
use crate::guard::IdempotencyKey;
use crate::mcp::http_client::{self, error_chain};
use anyhow::Context;
use futures::FutureExt;
use futures::future::BoxFuture;
use reqwest::Method;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One request's deadline (the guard's steps answer at once; no long poll is used).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one step keeps honouring `Retry-After` before it gives up.
pub const RETRY_BUDGET: Duration = Duration::from_secs(30);

/// The guard's token: a secret, never printed.
#[derive(Clone)]
pub struct GuardToken(pub String);

impl std::str::FromStr for GuardToken {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "" => Err("the token is empty".into()),
            token => Ok(GuardToken(token.to_string())),
        }
    }
}

impl std::fmt::Debug for GuardToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GuardToken(***)")
    }
}

#[derive(Clone)]
pub struct RemoteGuard {
    inner: Arc<Inner>,
}

struct Inner {
    /// `http://host:port`, without a trailing slash.
    base: String,
    token: Option<GuardToken>,
    http: reqwest::Client,
}

impl RemoteGuard {
    /// The guard at `url`; an https one's certificate checked against `ca_file`'s CAs,
    /// else the system's (`http_client.rs`).
    pub fn new(
        url: &url::Url,
        token: Option<GuardToken>,
        ca_file: Option<&std::path::Path>,
    ) -> anyhow::Result<Self> {
        let http = http_client::client_builder(url, ca_file, http_client::GUARD)?
            .timeout(REQUEST_TIMEOUT)
            .build()
            .context("cannot build the HTTP client for --guard-url")?;
        Ok(Self {
            inner: Arc::new(Inner {
                base: url.as_str().trim_end_matches('/').to_string(),
                token,
                http,
            }),
        })
    }

    pub(super) fn failed(&self, why: impl Into<String>) -> PortError {
        PortError::Remote {
            url: self.inner.base.clone(),
            why: why.into(),
        }
    }

    /// One request to `/api/v1/guard{path}`, sent again after each 429 or 503's
    /// `Retry-After` while [`RETRY_BUDGET`] lasts.
    pub(super) async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Reply, PortError> {
        let url = format!("{}/api/v1/guard{path}", self.inner.base);
        let started = Instant::now();
        loop {
            let mut request = self.inner.http.request(method.clone(), &url);
            if let Some(token) = &self.inner.token {
                request = request.bearer_auth(&token.0);
            }
            if let Some(body) = body {
                request = request.json(body);
            }
            let response = request
                .send()
                .await
                .map_err(|e| self.failed(format!("cannot reach it: {}", error_chain(&e))))?;
            let status = response.status().as_u16();
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok());
            let bytes = response
                .bytes()
                .await
                .map_err(|e| self.failed(format!("its answer broke off: {}", error_chain(&e))))?;
            let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            if let (429 | 503, Some(seconds)) = (status, retry_after) {
                let pause = Duration::from_secs(seconds.max(1));
                if started.elapsed() + pause <= RETRY_BUDGET {
                    tracing::info!(status, seconds, path, "the guard asked to retry later");
                    tokio::time::sleep(pause).await;
                    continue;
                }
            }
            return Ok(Reply { status, body });
        }
    }
}

impl GuardPort for RemoteGuard {
    fn check<'a>(&'a self, tenant: &'a str) -> BoxFuture<'a, anyhow::Result<()>> {
        async move {
            // A read that needs the worker role and writes nothing.
            let path = remote_steps::keys_query(tenant, None, "idemwatch-mcp-proxy-start-check");
            let reply = self.send(Method::GET, &path, None).await?;
            remote_steps::checked(self, &reply).map_err(anyhow::Error::msg)
        }
        .boxed()
    }

    fn call(&self, context: CallContext) -> Box<dyn GuardCall> {
        Box::new(remote_steps::RemoteCall::new(self.clone(), context))
    }

    fn key_state<'a>(&'a self, key: &'a IdempotencyKey) -> Step<'a, Option<KeyState>> {
        async move {
            let reply = self
                .send(Method::GET, &format!("/keys/{key}"), None)
                .await?;
            remote_steps::key_state(self, key, reply)
        }
        .boxed()
    }

    fn holder_of<'a>(&'a self, natural: NaturalRef<'a>) -> Step<'a, Option<IdempotencyKey>> {
        async move {
            let path =
                remote_steps::keys_query(natural.tenant, Some(natural.tool), natural.reference);
            let reply = self.send(Method::GET, &path, None).await?;
            remote_steps::holder(self, reply)
        }
        .boxed()
    }
}
