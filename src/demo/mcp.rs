//! The demo's MCP scenario (docs/DEMO.md): a scripted host, the "demo-assistant", calls
//! a simulated MCP refund server through `idemwatch mcp-proxy`'s own code, all in this
//! process (in-memory pipes stand in for stdio). The proxy's guard writes to the demo's
//! database, so its keys (actor `mcp:demo-assistant`) show on `/keys` beside the others.
//!
//! Each conversation looks the order up (read-only: passed through), refunds it, and on
//! a later turn, in a new session (the host restarted after a compaction), the model
//! re-issues the same refund with the reason rephrased: the tool's natural key makes it
//! a replay, and the provider's books show one effect.

use super::provider::{Fault, ProviderClient};
use super::{Provider, TrafficContext};
use crate::guard::{ErrorClass, GuardSettings, IdempotencyKey, Operation, SystemClock};
use crate::mcp::{InProcessServer, KeyPages, LocalGuard, Settings, Started, UpstreamSpec};
use anyhow::Context;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
    ContentBlock, Implementation, JsonObject, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// The host's `clientInfo.name`: its keys' actor is `mcp:demo-assistant`.
pub const MCP_CLIENT: &str = "demo-assistant";
/// The tenant of the proxy's keys.
const TENANT: &str = "acme";
/// A new conversation this often (story time).
const EVERY: Duration = Duration::from_secs(40);
/// From the refund to the model's re-issue on a later turn (story time).
const LATER_TURN: Duration = Duration::from_secs(20);

/// The simulated refund provider as an MCP server: `issue_refund` (dedupes by its
/// `idempotency_key`, which the proxy fills), `find_refund` (the lookup by key) and
/// `get_order`, all on the demo's provider, whose books count every effect.
#[derive(Clone)]
struct RefundServer {
    refunds: ProviderClient,
    provider: Provider,
}

fn schema(properties: Value, required: &[&str]) -> Arc<JsonObject> {
    let schema = json!({"type": "object", "properties": properties, "required": required});
    Arc::new(schema.as_object().cloned().unwrap_or_default())
}

fn tools() -> Vec<Tool> {
    let text = json!({"type": "string"});
    vec![
        Tool::new(
            "issue_refund",
            "Refund amount_p pence on an order; dedupes by idempotency_key.",
            schema(
                json!({"order": text, "amount_p": {"type": "integer"}, "reason": text, "idempotency_key": text}),
                &["order", "amount_p"],
            ),
        )
        .annotate(ToolAnnotations::new().read_only(false).destructive(true).idempotent(false)),
        Tool::new(
            "find_refund",
            "The refund made with this idempotency key, or null.",
            schema(json!({"idempotency_key": text}), &["idempotency_key"]),
        )
        .annotate(ToolAnnotations::new().read_only(true)),
        Tool::new(
            "get_order",
            "An order and the refunds made on it.",
            schema(json!({"order": text}), &["order"]),
        )
        .annotate(ToolAnnotations::new().read_only(true)),
    ]
}

fn answer(value: Value) -> CallToolResult {
    let mut r = CallToolResult::structured(value.clone());
    r.content = vec![ContentBlock::text(value.to_string())];
    r
}

impl RefundServer {
    fn key(args: &JsonObject) -> Result<IdempotencyKey, McpError> {
        let key = args.get("idempotency_key").and_then(Value::as_str);
        IdempotencyKey::parse(key.unwrap_or_default())
            .map_err(|e| McpError::invalid_params(format!("idempotency_key: {e}"), None))
    }

    async fn call(&self, name: &str, args: JsonObject) -> Result<CallToolResult, McpError> {
        match name {
            "issue_refund" => {
                let key = Self::key(&args)?;
                match self.refunds.execute(&key, &Value::Object(args)).await {
                    Ok(body) => Ok(answer(body)),
                    Err(e) if self.refunds.classify(&e) == ErrorClass::Definitive => Ok(
                        CallToolResult::error(vec![ContentBlock::text(e.to_string())]),
                    ),
                    // Ambiguous: the proxy settles the key UNKNOWN and reconciles.
                    Err(e) => Err(McpError::internal_error(e.to_string(), None)),
                }
            }
            "find_refund" => {
                let key = Self::key(&args)?;
                let found = self.refunds.find_by_key(&key).await;
                let found = found.map_err(|e| McpError::internal_error(e.to_string(), None))?;
                Ok(answer(json!({ "refund": found })))
            }
            "get_order" => {
                let order = args
                    .get("order")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let refunds = self.provider.effects_for_order(order);
                let refunded_p: i64 = refunds.iter().filter_map(|e| e.amount_p).sum();
                Ok(answer(
                    json!({"order": order, "refunds": refunds.len(), "refunded_p": refunded_p}),
                ))
            }
            other => Err(McpError::invalid_params(format!("no tool {other:?}"), None)),
        }
    }
}

impl ServerHandler for RefundServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_server_info(
            Implementation::new("demo-refunds", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        params: CallToolRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let args = params.arguments.unwrap_or_default();
        Ok(self.call(&params.name, args).await?.into())
    }
}

/// The proxy's tools file: the same entries docs/MCP.md shows, with the simulated
/// provider's retention and timeout (compressed by the demo's speed).
fn tools_file(retention: Duration, call_timeout: Duration) -> String {
    let (retention, timeout) = (retention.as_millis(), call_timeout.as_millis());
    format!(
        r#"[mcp]
tenant = "{TENANT}"

[tools.issue_refund]
kind = "non_idempotent"
key_retention = "{retention}ms"
duplicate_window = "{retention}ms"
call_timeout = "{timeout}ms"
free_text_fields = ["reason"]
natural_key = ["order"]
key_argument = "idempotency_key"
lookup = {{ tool = "find_refund", arguments = {{ idempotency_key = "{{key}}" }}, found = "/refund" }}

[tools.find_refund]
kind = "read_only"

[tools.get_order]
kind = "read_only"
"#
    )
}

/// Starts the proxy in front of the simulated server, on the demo's database.
async fn start_proxy(shared: &TrafficContext, dir: &tempfile::TempDir) -> anyhow::Result<Started> {
    let config = &shared.config;
    let call_timeout = config.story(super::PROVIDER_TIMEOUT);
    let path = dir.path().join("mcp-tools.toml");
    std::fs::write(&path, tools_file(config.provider_retention, call_timeout))
        .context("cannot write the MCP scenario's tools file")?;
    let server = RefundServer {
        refunds: ProviderClient::new(&shared.provider, "issue_refund", call_timeout, Fault::None),
        provider: shared.provider.clone(),
    };
    let upstream = InProcessServer {
        name: "the demo's refund server".into(),
        serve: Arc::new(move |io| {
            let server = server.clone();
            tokio::spawn(async move {
                if let Ok(running) = server.serve(io).await {
                    let _ = running.waiting().await;
                }
            });
        }),
    };
    let settings = Settings {
        tools_file: path,
        tenant: None,
        pages: KeyPages::default(),
        passthrough_timeout: call_timeout,
    };
    let guard = Arc::new(LocalGuard::new(
        shared.guard.store().clone(),
        Arc::new(SystemClock),
        GuardSettings {
            lease_margin: chrono::TimeDelta::from_std(config.lease_margin())
                .unwrap_or(chrono::TimeDelta::MAX),
        },
    ));
    Started::start(
        guard,
        Arc::new(SystemClock),
        UpstreamSpec::InProcess(upstream),
        settings,
    )
    .await
}

type Host = rmcp::service::RunningService<rmcp::RoleClient, ClientConfig>;

/// A new host session through the proxy (a new MCP session id).
async fn connect(proxy: &Arc<Started>) -> anyhow::Result<Host> {
    let (host_io, proxy_io) = tokio::io::duplex(64 * 1024);
    let proxy = proxy.clone();
    tokio::spawn(async move { proxy.serve_in_process(proxy_io).await });
    let info = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new(MCP_CLIENT, env!("CARGO_PKG_VERSION")),
    );
    Ok(info.serve(host_io).await?)
}

async fn call(host: &Host, tool: &str, args: Value) -> anyhow::Result<CallToolResult> {
    let args = args.as_object().cloned().unwrap_or_default();
    let params = CallToolRequestParams::new(tool.to_string()).with_arguments(args);
    Ok(host.call_tool(params).await?)
}

/// One conversation: look the order up, refund it; on a later turn, in a new session,
/// the model re-issues the refund (a replay: no second effect).
async fn conversation(
    shared: Arc<TrafficContext>,
    proxy: Arc<Started>,
    n: u64,
) -> anyhow::Result<()> {
    let order = format!("M-{}{n:03}", shared.run_id);
    let amount_p = 500 + (n % 40) as i64 * 125;
    let host = connect(&proxy).await?;
    call(&host, "get_order", json!({ "order": order })).await?;
    let refund =
        json!({"order": order, "amount_p": amount_p, "reason": "The parcel never arrived"});
    call(&host, "issue_refund", refund).await?;
    host.cancel().await?;
    if !shared.wait(shared.config.story(LATER_TURN)).await {
        return Ok(());
    }
    let host = connect(&proxy).await?;
    let again = json!({"order": order, "amount_p": amount_p, "reason": "Refund the missing parcel, as agreed earlier"});
    let replay = call(&host, "issue_refund", again).await?;
    host.cancel().await?;
    let replayed = replay
        .meta
        .as_ref()
        .and_then(|m| m.0.get("io.idemwatch/guard"))
        .is_some_and(|g| g["replayed"] == json!(true));
    tracing::debug!(order, replayed, "demo: the model re-issued an MCP refund");
    Ok(())
}

/// Runs conversations until the demo stops.
pub(super) async fn run(shared: Arc<TrafficContext>) {
    let dir = match tempfile::tempdir() {
        Ok(dir) => dir,
        Err(e) => return tracing::warn!(error = %e, "demo: no MCP scenario"),
    };
    let proxy = match start_proxy(&shared, &dir).await {
        Ok(p) => Arc::new(p),
        Err(e) => return tracing::warn!(error = %e, "demo: the MCP scenario did not start"),
    };
    let mut conversations = tokio::task::JoinSet::new();
    let mut n = 0;
    loop {
        conversations.spawn(conversation(shared.clone(), proxy.clone(), n));
        n += 1;
        while let Some(done) = conversations.try_join_next() {
            if let Ok(Err(e)) = done {
                tracing::warn!(error = %e, "demo: an MCP conversation failed");
            }
        }
        if !shared.wait(shared.config.story(EVERY)).await {
            break;
        }
    }
    while conversations.join_next().await.is_some() {}
}
