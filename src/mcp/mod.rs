//! `idemwatch mcp-proxy` (docs/MCP.md): an MCP server in front of one upstream MCP
//! server that guards its side-effecting tools through the same guard as `serve`
//! (same tables, attempt kinds, metrics and pages). An edge like `web/`: the protocol
//! (`rmcp`, the official Rust SDK) stays in this module; below it the guard sees the
//! same domain calls as the HTTP guard.
//!
//! - `classify`: which tools are guarded, passed through or refused (tools file vs
//!   annotations);
//! - `intent`: the key's intent (client key, else the session's arguments);
//! - `call`: one guarded call (admit, execute, settle, reconcile), through `port`:
//!   the guard's engine on the database, or a remote `serve`'s guard API;
//! - `answer`: what the model reads; `status_tool`: `idemwatch_status`;
//! - `lookup`: the reconciliation query (the MCP call reaches the log as the attempt
//!   context, `guard::WithContext`);
//! - `upstream`: the server behind; `server`: the server in front, over stdio or
//!   Streamable HTTP (`http`); `sep3182`: the
//!   proposal's key and capability, which rmcp does not model, at the stdio boundary.

mod answer;
mod call;
mod classify;
mod http;
mod http_client;
mod intent;
mod lookup;
mod port;
mod sep3182;
mod server;
mod status_tool;
mod upstream;

pub use answer::KeyPages;
pub use classify::{Disagreement, Treatment};
pub use http_client::is_loopback;
pub use port::GuardPort;
pub use port::local::LocalGuard;
pub use port::remote::{GuardToken, RemoteGuard};
pub use upstream::{InProcessServer, UpstreamHeader, UpstreamSpec};

use crate::guard::{Clock, ToolPolicies};
pub use crate::metrics::mcp::McpMetrics;
use anyhow::Context;
use rmcp::ServiceExt;
use server::{Proxy, ProxyState, new_session_id};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How the proxy is set up (the CLI's flags).
#[derive(Debug, Clone)]
pub struct Settings {
    pub tools_file: PathBuf,
    /// The tenant of every key; else the tools file's `[mcp] tenant`.
    pub tenant: Option<String>,
    pub pages: KeyPages,
    pub passthrough_timeout: Duration,
}

/// A started proxy: the upstream is running and its tools are classified.
pub struct Started {
    shared: Arc<ProxyState>,
}

impl Started {
    /// Checks the guard, starts the upstream, lists its tools and classifies them
    /// against the tools file. Every reason not to start is an error a person can act
    /// on.
    pub async fn start(
        guard: Arc<dyn GuardPort>,
        clock: Arc<dyn Clock>,
        upstream: UpstreamSpec,
        settings: Settings,
    ) -> anyhow::Result<Started> {
        let shown = settings.tools_file.display().to_string();
        let (policies, file) =
            ToolPolicies::load_with_mcp(&settings.tools_file).map_err(anyhow::Error::msg)?;
        let tenant = settings
            .tenant
            .clone()
            .or(file.tenant.clone())
            .with_context(|| {
                format!("no tenant: pass --tenant or set `tenant` in the [mcp] table of {shown}")
            })?;
        guard.check(&tenant).await?;
        let upstream = Arc::new(upstream::Upstream::start(upstream).await?);
        let tools = upstream
            .list_tools()
            .await
            .context("the upstream MCP server did not list its tools")?;
        if tools.is_empty() {
            anyhow::bail!("the upstream MCP server lists no tools: nothing to proxy");
        }
        if let Some(clash) = tools.iter().find(|t| t.name == status_tool::NAME) {
            anyhow::bail!(
                "the upstream MCP server has a tool named {}: idemwatch's own status tool needs that name",
                clash.name
            );
        }
        let classification =
            classify::classify(&tools, &policies, &file, &shown).map_err(anyhow::Error::msg)?;
        for (name, treatment) in &classification.tools {
            let how = match treatment {
                Treatment::PassThrough => "passed through",
                Treatment::Guarded(_) => "guarded",
                Treatment::Refused(_) => "refused",
            };
            tracing::info!(tool = %name, treatment = how, "mcp-proxy tool");
        }
        let calls = call::Calls {
            guard,
            clock,
            upstream,
            pages: settings.pages.clone(),
        };
        Ok(Started {
            shared: Arc::new(ProxyState {
                calls,
                upstream_tools: tools,
                classification,
                tenant,
                passthrough_timeout: settings.passthrough_timeout,
            }),
        })
    }

    pub fn disagreements(&self) -> &[Disagreement] {
        &self.shared.classification.disagreements
    }

    /// The proxy's metrics (docs/METRICS.md), told what the start found.
    fn metrics(&self, metrics: Arc<McpMetrics>) -> Arc<McpMetrics> {
        let c = &self.shared.classification;
        metrics.started(
            c.disagreements
                .iter()
                .map(|d| (d.tool.as_str(), d.annotation)),
            c.tools
                .iter()
                .filter(|(_, t)| matches!(t, Treatment::Guarded(_)))
                .map(|(name, _)| name.as_str()),
        );
        metrics
    }

    /// Serves one host over an in-memory pipe until it disconnects (the demo's scripted
    /// host, the benchmark): a session of its own, as a host over stdio gets.
    pub async fn serve_in_process(&self, io: tokio::io::DuplexStream) -> anyhow::Result<()> {
        let proxy = Proxy::new(self.shared.clone(), new_session_id("local"));
        let running = proxy
            .serve(io)
            .await
            .context("the host did not complete initialize")?;
        running
            .waiting()
            .await
            .context("the MCP session ended abnormally")?;
        Ok(())
    }

    /// Serves one host over this process's stdin and stdout until it disconnects, and
    /// `metrics` at `http://<listener>/metrics` meanwhile, if given.
    pub async fn serve_stdio(
        self,
        metrics: Arc<McpMetrics>,
        listener: Option<tokio::net::TcpListener>,
    ) -> anyhow::Result<()> {
        if let Some(listener) = listener {
            let app = http::metrics_router(self.metrics(metrics));
            tokio::spawn(async move {
                if let Err(e) = axum::serve(listener, app).await {
                    tracing::error!(error = %e, "the metrics listener failed");
                }
            });
        }
        let proxy = Proxy::new(self.shared, new_session_id("stdio"));
        let running = proxy
            .serve(sep3182::stdio())
            .await
            .context("the host did not complete initialize over stdio")?;
        running
            .waiting()
            .await
            .context("the MCP session ended abnormally")?;
        Ok(())
    }

    /// Serves hosts over Streamable HTTP at `http://<listen>/mcp`, and `metrics` at
    /// `/metrics`, until `shutdown`.
    pub async fn serve_http(
        self,
        listener: tokio::net::TcpListener,
        auth: crate::auth::Authenticator,
        metrics: Arc<McpMetrics>,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let metrics = self.metrics(metrics);
        let app = http::router(self.shared, Arc::new(auth), metrics);
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
        )
        .with_graceful_shutdown(shutdown)
        .await
        .context("the MCP HTTP server failed")
    }
}
