//! The upstream MCP server the proxy fronts: a command over stdio (everything after
//! `--`), started once and started again after it dies, so one crash of the server does
//! not end the host's session.

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ErrorCode,
    Implementation, Tool,
};
use rmcp::service::{RoleClient, RunningService, ServiceError, ServiceExt};
use rmcp::transport::TokioChildProcess;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Mutex;

/// Where the upstream server is.
#[derive(Debug, Clone)]
pub enum UpstreamSpec {
    /// A program and its arguments, spoken to over its stdin and stdout.
    Command { program: String, args: Vec<String> },
    /// An MCP server in this process (the demo's simulated server, the benchmark's),
    /// spoken to over an in-memory pipe.
    InProcess(InProcessServer),
}

/// Serves one fresh instance of an in-process MCP server on the given end of a pipe
/// (each connect, and each reconnect after it ended, makes a new pipe).
#[derive(Clone)]
pub struct InProcessServer {
    pub name: String,
    pub serve: Arc<dyn Fn(tokio::io::DuplexStream) + Send + Sync>,
}

impl std::fmt::Debug for InProcessServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "InProcessServer({})", self.name)
    }
}

impl std::fmt::Display for UpstreamSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UpstreamSpec::Command { program, args } => {
                write!(f, "`{program}")?;
                for a in args {
                    write!(f, " {a}")?;
                }
                write!(f, "`")
            }
            UpstreamSpec::InProcess(server) => write!(f, "{} (in process)", server.name),
        }
    }
}

/// How a call to the upstream failed, as the guard must tell the cases apart.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// No answer within the deadline: the effect may have happened.
    #[error("no answer within {} ms", .0.as_millis())]
    Timeout(Duration),
    /// The server refused the request itself (unknown tool, invalid parameters): the
    /// tool did not run.
    #[error("the server refused the request: {0}")]
    Refused(String),
    /// The connection broke, the server died or answered something else: the effect
    /// may have happened.
    #[error("{0}")]
    Broken(String),
}

type Client = RunningService<RoleClient, ClientConfig>;

pub struct Upstream {
    spec: UpstreamSpec,
    client: Mutex<Option<Arc<Client>>>,
}

impl Upstream {
    /// Starts the upstream server and completes its `initialize`; an error says why in
    /// words a person can act on.
    pub async fn start(spec: UpstreamSpec) -> anyhow::Result<Upstream> {
        let upstream = Upstream {
            spec,
            client: Mutex::new(None),
        };
        upstream.client().await.map_err(anyhow::Error::msg)?;
        Ok(upstream)
    }

    async fn client(&self) -> Result<Arc<Client>, String> {
        let mut held = self.client.lock().await;
        if let Some(client) = held.as_ref()
            && !client.is_transport_closed()
        {
            return Ok(client.clone());
        }
        let client = Arc::new(connect(&self.spec).await?);
        *held = Some(client.clone());
        Ok(client)
    }

    /// Every tool the upstream lists (all pages).
    pub async fn list_tools(&self) -> Result<Vec<Tool>, UpstreamError> {
        let client = self.client().await.map_err(UpstreamError::Broken)?;
        client.list_all_tools().await.map_err(classify)
    }

    /// One `tools/call`, abandoned (and cancelled at the upstream) after `timeout`.
    pub async fn call(
        &self,
        params: CallToolRequestParams,
        timeout: Duration,
    ) -> Result<CallToolResult, UpstreamError> {
        let client = self.client().await.map_err(UpstreamError::Broken)?;
        match tokio::time::timeout(timeout, client.call_tool(params)).await {
            Ok(answer) => answer.map_err(classify),
            Err(_) => Err(UpstreamError::Timeout(timeout)),
        }
    }
}

async fn connect(spec: &UpstreamSpec) -> Result<Client, String> {
    let (program, args) = match spec {
        UpstreamSpec::Command { program, args } => (program, args),
        UpstreamSpec::InProcess(server) => return connect_in_process(server).await,
    };
    let mut command = tokio::process::Command::new(program);
    command.args(args);
    let transport = TokioChildProcess::new(command)
        .map_err(|e| format!("cannot start the upstream MCP server {spec}: {e}"))?;
    let info = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("idemwatch-mcp-proxy", env!("CARGO_PKG_VERSION")),
    );
    info.serve(transport).await.map_err(|e| {
        format!("the upstream MCP server {spec} did not complete initialize (not an MCP server, or another protocol version?): {e}")
    })
}

async fn connect_in_process(server: &InProcessServer) -> Result<Client, String> {
    let (ours, theirs) = tokio::io::duplex(64 * 1024);
    (server.serve)(theirs);
    let info = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("idemwatch-mcp-proxy", env!("CARGO_PKG_VERSION")),
    );
    info.serve(ours).await.map_err(|e| {
        format!(
            "the in-process MCP server {} did not complete initialize: {e}",
            server.name
        )
    })
}

/// A JSON-RPC error that says the request was not carried out; anything else may have
/// had an effect.
fn classify(e: ServiceError) -> UpstreamError {
    match e {
        ServiceError::McpError(data)
            if [
                ErrorCode::METHOD_NOT_FOUND,
                ErrorCode::INVALID_PARAMS,
                ErrorCode::INVALID_REQUEST,
            ]
            .contains(&data.code) =>
        {
            UpstreamError::Refused(data.message.to_string())
        }
        ServiceError::Timeout { timeout } => UpstreamError::Timeout(timeout),
        other => UpstreamError::Broken(other.to_string()),
    }
}
