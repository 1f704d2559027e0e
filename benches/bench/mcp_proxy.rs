//! `mcp-proxy`: `tools/call` through `idemwatch mcp-proxy`'s own code against the same
//! upstream called directly, interleaved in one run (issue 52). The upstream is an rmcp
//! server in this process that answers at once (a Python server's own latency would
//! swamp the figure); hosts and the proxy talk over in-memory pipes on both legs, so
//! what is added is the proxy: one more JSON-RPC hop and, for a guarded call, the
//! guard's claim and settle on the database.
//!
//! Each worker is one host session (1 and 8). Guarded: `issue_refund` with a new order
//! each call (a new key: claim, upstream call, settle done). Passed through:
//! `get_order`, read-only, no database. Targets: a guarded call adds ≤ 2 ms p50 on
//! PostgreSQL at 8 sessions; a passed-through call adds ≤ 0.3 ms p50 (8 sessions).

use super::report::Figure;
use super::slices::{Plan, alternate, alternate_paced};
use idemwatch::guard::{GuardSettings, SystemClock};
use idemwatch::mcp::{InProcessServer, KeyPages, LocalGuard, Settings, Started, UpstreamSpec};
use idemwatch::store::Store;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
    Implementation, JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{Peer, RequestContext, RoleClient, RoleServer, RunningService};
use rmcp::{ErrorData as McpError, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const TOOLS_FILE: &str = r#"
[mcp]
tenant = "bench"

[tools.issue_refund]
kind = "non_idempotent"
key_retention = "24h"
call_timeout = "10s"

[tools.get_order]
kind = "read_only"
"#;

/// The upstream: answers at once and counts the refunds it made.
#[derive(Clone, Default)]
struct Upstream {
    refunds: Arc<AtomicU64>,
}

impl ServerHandler for Upstream {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("bench-refunds", "1"))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let schema = Arc::new(JsonObject::new());
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new("issue_refund", "Refunds an order.", schema.clone())
                .annotate(ToolAnnotations::new().read_only(false).destructive(true)),
            Tool::new("get_order", "An order.", schema)
                .annotate(ToolAnnotations::new().read_only(true)),
        ]))
    }

    async fn call_tool(
        &self,
        params: CallToolRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let order = params
            .arguments
            .as_ref()
            .and_then(|a| a.get("order"))
            .cloned();
        let body = match params.name.as_ref() {
            "issue_refund" => {
                let n = self.refunds.fetch_add(1, Ordering::Relaxed) + 1;
                json!({"refund_id": format!("rf_{n}"), "order": order})
            }
            _ => json!({"order": order, "refunded_p": 0}),
        };
        Ok(CallToolResult::structured(body).into())
    }
}

fn serve_upstream(server: Upstream, io: tokio::io::DuplexStream) {
    tokio::spawn(async move {
        if let Ok(running) = server.serve(io).await {
            let _ = running.waiting().await;
        }
    });
}

type Host = RunningService<RoleClient, ClientConfig>;

async fn host(io: tokio::io::DuplexStream) -> Host {
    let info = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("bench-host", "1"),
    );
    info.serve(io).await.expect("the host's initialize")
}

/// One host session per worker: a worker takes one for a call and gives it back.
#[derive(Clone)]
struct Sessions {
    peers: Arc<Mutex<Vec<Peer<RoleClient>>>>,
    _hosts: Arc<Vec<Host>>,
}

impl Sessions {
    async fn direct(upstream: &Upstream, n: usize) -> Sessions {
        let mut hosts = Vec::new();
        for _ in 0..n {
            let (ours, theirs) = tokio::io::duplex(64 * 1024);
            serve_upstream(upstream.clone(), theirs);
            hosts.push(host(ours).await);
        }
        Sessions::of(hosts)
    }

    async fn proxied(proxy: &Arc<Started>, n: usize) -> Sessions {
        let mut hosts = Vec::new();
        for _ in 0..n {
            let (ours, theirs) = tokio::io::duplex(64 * 1024);
            let proxy = proxy.clone();
            tokio::spawn(async move { proxy.serve_in_process(theirs).await });
            hosts.push(host(ours).await);
        }
        Sessions::of(hosts)
    }

    fn of(hosts: Vec<Host>) -> Sessions {
        let peers = hosts.iter().map(|h| h.peer().clone()).collect();
        Sessions {
            peers: Arc::new(Mutex::new(peers)),
            _hosts: Arc::new(hosts),
        }
    }

    async fn call(&self, tool: &'static str, arguments: Value) {
        let peer = self
            .peers
            .lock()
            .unwrap()
            .pop()
            .expect("one session per worker");
        let params = CallToolRequestParams::new(tool)
            .with_arguments(arguments.as_object().cloned().unwrap_or_default());
        let result = peer.call_tool(params).await.expect("tools/call");
        self.peers.lock().unwrap().push(peer);
        assert_ne!(result.is_error, Some(true), "{tool}: {result:?}");
    }
}

static ORDERS: AtomicU64 = AtomicU64::new(0);

/// A call on `sessions`: a new order (a new key) for the guarded tool.
fn op(
    sessions: &Sessions,
    tool: &'static str,
) -> impl Fn() -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> + Clone + Send + 'static {
    let sessions = sessions.clone();
    move || {
        let sessions = sessions.clone();
        Box::pin(async move {
            let order = format!("B-{}", ORDERS.fetch_add(1, Ordering::Relaxed));
            sessions
                .call(tool, json!({"order": order, "amount_p": 4500}))
                .await;
        })
    }
}

async fn start_proxy(store: &Store, upstream: &Upstream, dir: &tempfile::TempDir) -> Arc<Started> {
    let path = dir.path().join("mcp-tools.toml");
    std::fs::write(&path, TOOLS_FILE).unwrap();
    let server = upstream.clone();
    let spec = UpstreamSpec::InProcess(InProcessServer {
        name: "the benchmark's upstream".into(),
        serve: Arc::new(move |io| serve_upstream(server.clone(), io)),
    });
    let settings = Settings {
        tools_file: path,
        tenant: None,
        pages: KeyPages::default(),
        passthrough_timeout: Duration::from_secs(10),
    };
    let guard = Arc::new(LocalGuard::new(
        store.clone(),
        Arc::new(SystemClock),
        GuardSettings::default(),
    ));
    let started = Started::start(guard, Arc::new(SystemClock), spec, settings);
    Arc::new(started.await.expect("the proxy starts"))
}

/// Proxy against direct for one tool at `workers` sessions: the figures, and the
/// proxy's median rate (for the paced leg).
#[expect(
    clippy::too_many_arguments,
    reason = "one call site per leg, all named"
)]
async fn pair(
    label: &str,
    proxied: &Sessions,
    direct: &Sessions,
    tool: &'static str,
    workers: usize,
    plan: Plan,
    target_ms: Option<f64>,
    figures: &mut Vec<Figure>,
) -> f64 {
    let (p, d) = alternate(plan, workers, op(proxied, tool), op(direct, tool)).await;
    figures.push(Figure::ratio(
        format!("mcp-proxy {label} tools/call, {workers} sessions"),
        "ops/s",
        p.median_rate(),
        d.median_rate(),
        None,
    ));
    let (pl, dl) = (&p.latencies, &d.latencies);
    let added = pl.p50_ms() - dl.p50_ms();
    let target = target_ms.map(|t| (format!("<= {t} ms"), added <= t));
    figures.push(Figure::plain(
        format!("mcp-proxy {label} added p50, {workers} sessions"),
        "ms",
        added,
        format!(
            "proxy p50 {:.2} / p99 {:.2} ms, direct p50 {:.2} / p99 {:.2} ms; added p99 {:.2} ms",
            pl.p50_ms(),
            pl.p99_ms(),
            dl.p50_ms(),
            dl.p99_ms(),
            pl.p99_ms() - dl.p99_ms()
        ),
        target.as_ref().map(|(t, met)| (t.as_str(), *met)),
    ));
    p.median_rate()
}

/// `pass_through`: also measure the read-only tool (it touches no database, so one
/// backend's run is enough).
pub async fn run(
    store: &Store,
    backend: &str,
    plan: Plan,
    pass_through: bool,
    figures: &mut Vec<Figure>,
) {
    let upstream = Upstream::default();
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy(store, &upstream, &dir).await;
    for workers in [1usize, 8] {
        let proxied = Sessions::proxied(&proxy, workers).await;
        let direct = Sessions::direct(&upstream, workers).await;
        let gated = backend == "PostgreSQL" && workers == 8;
        let label = format!("guarded ({backend})");
        let target = gated.then_some(2.0);
        let rate = pair(
            &label,
            &proxied,
            &direct,
            "issue_refund",
            workers,
            plan,
            target,
            figures,
        )
        .await;
        if workers == 8 {
            // At half the proxy's closed-loop rate, offered to both legs: the latency a
            // caller sees at a load the service is run at, not the queue of 8 callers
            // on 2 cores shared with the database.
            let (p, d) = alternate_paced(
                plan,
                workers,
                rate * 0.5,
                op(&proxied, "issue_refund"),
                op(&direct, "issue_refund"),
            )
            .await;
            figures.push(Figure::plain(
                format!("mcp-proxy guarded ({backend}) added p50 at half its capacity, {workers} sessions"),
                "ms",
                p.p50_ms() - d.p50_ms(),
                format!(
                    "{:.0} calls/s offered to each; proxy p50 {:.2} / p99 {:.2} ms, direct p50 {:.2} / p99 {:.2} ms",
                    rate * 0.5,
                    p.p50_ms(),
                    p.p99_ms(),
                    d.p50_ms(),
                    d.p99_ms()
                ),
                None,
            ));
        }
        if pass_through {
            let target = (workers == 8).then_some(0.3);
            pair(
                "read-only pass-through",
                &proxied,
                &direct,
                "get_order",
                workers,
                plan,
                target,
                figures,
            )
            .await;
        }
    }
    let refunds = upstream.refunds.load(Ordering::Relaxed);
    println!("mcp-proxy ({backend}): {refunds} refunds at the upstream");
}
