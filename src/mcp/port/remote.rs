//! The guard of a running `serve`, over its HTTP API (`--guard-url`, docs/GUARD.md):
//! several proxies, one guard, one database behind it. The proxy is a worker like the
//! Python and TypeScript clients: `serve` derives the key, applies its tools file's
//! policy and does every write; the proxy calls the upstream and reports.
//!
//! This file is the connection (the client, the token, the retries); the guard port's
//! steps over it are `remote_steps.rs`.
//!
//! A 429 or 503 is the guard saying "the same request, later": it is sent again after
//! its `Retry-After`, while [`RETRY_BUDGET`] lasts. Everything else is answered at once.

use super::PortError;
use crate::guard::FencingToken;
use crate::mcp::http_client::{self, error_chain};
use anyhow::Context;
use chrono::{DateTime, Utc};
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

/// An answer of the guard: its status and its JSON body (`null` if it sent none).
pub struct Reply {
    pub status: u16,
    pub body: Value,
}

impl Reply {
    pub(super) fn text(&self, member: &str) -> Option<&str> {
        self.body.get(member).and_then(Value::as_str)
    }

    pub(super) fn time(&self, member: &str) -> Option<DateTime<Utc>> {
        self.text(member)
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&Utc))
    }

    pub(super) fn token(&self, member: &str) -> Option<FencingToken> {
        self.body
            .get(member)
            .and_then(Value::as_i64)
            .map(FencingToken)
    }
}
