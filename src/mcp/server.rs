//! The MCP server the host talks to: the upstream's tools plus `idemwatch_status`,
//! every `tools/call` through its tool's treatment.

use super::answer;
use super::call::{Calls, Request};
use super::classify::{Classification, Treatment};
use super::intent::Session;
use super::status_tool;
use super::upstream::UpstreamError;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// Where SEP-3182's `idempotencyKey` arrives: the `tools/call` parameter (a sibling
/// of `arguments`, carried into `_meta` by [`super::sep3182`], since rmcp models only
/// the specified members), or `_meta` itself.
pub const CLIENT_KEY: &str = "idempotencyKey";

/// What every session of one proxy shares.
pub struct ProxyState {
    pub calls: Calls,
    pub upstream_tools: Vec<Tool>,
    pub classification: Classification,
    pub tenant: String,
    /// The deadline of a call that passes through unguarded.
    pub passthrough_timeout: Duration,
}

/// One MCP session of the proxy.
#[derive(Clone)]
pub struct Proxy {
    shared: Arc<ProxyState>,
    session: String,
}

impl Proxy {
    pub fn new(shared: Arc<ProxyState>, session: String) -> Self {
        Self { shared, session }
    }

    fn caller(&self, ctx: &RequestContext<RoleServer>) -> Session {
        let client = ctx
            .peer
            .peer_info()
            .map(|info| info.client_info.name.clone())
            .filter(|name| !name.trim().is_empty())
            .unwrap_or_else(|| "unnamed-client".to_string());
        Session {
            tenant: self.shared.tenant.clone(),
            client,
            id: session_id(ctx).unwrap_or_else(|| self.session.clone()),
        }
    }

    async fn pass_through(
        &self,
        params: CallToolRequestParams,
    ) -> Result<CallToolResult, McpError> {
        let name = params.name.to_string();
        match self
            .shared
            .calls
            .upstream
            .call(params, self.shared.passthrough_timeout)
            .await
        {
            Ok(result) => Ok(result),
            Err(UpstreamError::Refused(why)) => Err(McpError::invalid_params(why, None)),
            Err(e) => Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "{name} (read-only, not guarded) did not answer: {e}"
            ))])),
        }
    }

    /// With no question: what the proxy guards and where the server disagrees.
    fn overview(&self) -> CallToolResult {
        let c = &self.shared.classification;
        let of = |want: fn(&Treatment) -> bool| -> Vec<&String> {
            c.tools
                .iter()
                .filter(|(_, t)| want(t))
                .map(|(n, _)| n)
                .collect()
        };
        let body = json!({
            "guarded": of(|t| matches!(t, Treatment::Guarded(_))),
            "passed_through": of(|t| matches!(t, Treatment::PassThrough)),
            "refused": of(|t| matches!(t, Treatment::Refused(_))),
            "annotation_disagreements": c.disagreements,
            "next": "Give `key`, or `tool` and `arguments`, to ask about one call.",
        });
        let mut r = CallToolResult::success(vec![ContentBlock::text(body.to_string())]);
        r.structured_content = Some(body);
        r
    }
}

fn client_key(params: &CallToolRequestParams, ctx: &RequestContext<RoleServer>) -> Option<String> {
    let from = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
    from(ctx.meta.get(CLIENT_KEY)).or_else(|| from(params.meta.as_ref()?.get(CLIENT_KEY)))
}

impl ServerHandler for Proxy {
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder().enable_tools().build();
        // SEP-3182's capability; the `tools` member has no room for it in rmcp's
        // model, so it is also declared here (and in `tools` by super::sep3182).
        capabilities.experimental = Some(
            serde_json::from_value(json!({"idempotency": {"scope": "tenant, tool and client"}}))
                .unwrap_or_default(),
        );
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("idemwatch-mcp-proxy", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Side-effecting tools are guarded by idemwatch: a repeated call returns the first result instead of acting twice. If a tool answers that its outcome is UNKNOWN, call idemwatch_status before anything else.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let mut tools = self.shared.upstream_tools.clone();
        tools.push(status_tool::definition());
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        params: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let caller = self.caller(&ctx);
        let name = params.name.to_string();
        let arguments = params.arguments.clone().unwrap_or_default();
        if name == status_tool::NAME {
            if arguments.get("key").is_none() && arguments.get("tool").is_none() {
                return Ok(self.overview().into());
            }
            let c = &self.shared.classification;
            return Ok(
                status_tool::answer(&self.shared.calls, &c.tools, &caller, &arguments)
                    .await
                    .into(),
            );
        }
        let result = match self.shared.classification.tools.get(&name) {
            None => {
                return Err(McpError::invalid_params(
                    format!("the upstream server has no tool {name:?}"),
                    None,
                ));
            }
            Some(Treatment::PassThrough) => self.pass_through(params).await?,
            Some(Treatment::Refused(why)) => answer::refused(why),
            Some(Treatment::Guarded(_))
                if principal(&ctx)
                    .is_some_and(|p| p.scope.check(&caller.tenant, &name).is_err()) =>
            {
                answer::refused(&format!(
                    "the bearer token may not call the guard for tenant {:?} and tool {name:?} (its scope in the auth file)",
                    caller.tenant
                ))
            }
            Some(Treatment::Guarded(tool)) => {
                let request = Request {
                    caller: &caller,
                    tool: &name,
                    client_key: client_key(&params, &ctx),
                    arguments,
                    request_id: ctx.id.to_string(),
                };
                self.shared.calls.call(request, tool).await
            }
        };
        Ok(result.into())
    }
}

/// A session id where the transport has none (stdio: one per connection), or before
/// the HTTP transport has named the session.
pub fn new_session_id(transport: &str) -> String {
    format!("{transport}-{:016x}", rand::random::<u64>())
}

/// The principal of an HTTP session's request, if the request came over HTTP.
pub fn principal(
    ctx: &rmcp::service::RequestContext<rmcp::RoleServer>,
) -> Option<crate::auth::Principal> {
    ctx.extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<crate::auth::Principal>().cloned())
}

/// The `Mcp-Session-Id` of an HTTP session's request.
pub fn session_id(ctx: &rmcp::service::RequestContext<rmcp::RoleServer>) -> Option<String> {
    ctx.extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.headers.get("mcp-session-id"))
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}
