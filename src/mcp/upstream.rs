//! The upstream MCP server the proxy fronts: a command over stdio (everything after
//! `--`) or a URL over Streamable HTTP (`--upstream-url`), connected once and again
//! after the connection dies, so one crash of the server does not end the host's
//! session.

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ErrorCode,
    Implementation, ProtocolVersion, Tool,
};
use rmcp::service::{RoleClient, RunningService, ServiceError, ServiceExt};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Mutex;

/// Where the upstream server is.
#[derive(Debug, Clone)]
pub enum UpstreamSpec {
    /// A program and its arguments, spoken to over its stdin and stdout.
    Command { program: String, args: Vec<String> },
    /// An MCP endpoint spoken to over Streamable HTTP, with headers sent on every
    /// request (a bearer token a remote server needs).
    Url {
        url: url::Url,
        headers: Vec<UpstreamHeader>,
        /// The CA certificates an https server's must chain to, instead of the
        /// system's (`--upstream-ca-file`, `http_client.rs`).
        ca_file: Option<std::path::PathBuf>,
    },
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

/// One `--upstream-header "Name: value"`. Its value is a secret (a bearer token, an
/// API key): never printed.
#[derive(Clone)]
pub struct UpstreamHeader {
    pub name: axum::http::HeaderName,
    pub value: axum::http::HeaderValue,
}

impl std::fmt::Debug for UpstreamHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: ***", self.name)
    }
}

/// Headers the Streamable HTTP transport sets itself; rmcp refuses a custom one.
const TRANSPORT_HEADERS: [&str; 4] = [
    "accept",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];

impl std::str::FromStr for UpstreamHeader {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (name, value) = s
            .split_once(':')
            .ok_or_else(|| format!("{s:?} is not `Name: value`"))?;
        let name = axum::http::HeaderName::try_from(name.trim())
            .map_err(|_| format!("{:?} is not a header name", name.trim()))?;
        if TRANSPORT_HEADERS.contains(&name.as_str()) {
            return Err(format!(
                "{name} is set by the MCP transport itself and cannot be given"
            ));
        }
        let mut value = axum::http::HeaderValue::try_from(value.trim())
            .map_err(|_| format!("the value of {name} is not a valid header value"))?;
        value.set_sensitive(true);
        Ok(UpstreamHeader { name, value })
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
            UpstreamSpec::Url { url, .. } => write!(f, "at {url}"),
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
    let info = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("idemwatch-mcp-proxy", env!("CARGO_PKG_VERSION")),
    );
    let not_initialized = |e: rmcp::service::ClientInitializeError| {
        use rmcp::service::ClientInitializeError as E;
        // rmcp's own text names its transport's Rust type: say what happened instead.
        let why = match e {
            E::TransportError { error, .. } => transport_error(&*error.error),
            E::ConnectionClosed(_) => "it closed the connection before answering".into(),
            other => other.to_string(),
        };
        format!(
            "the upstream MCP server {spec} did not complete initialize (it exited, or is not an MCP server): {why}"
        )
    };
    match spec {
        UpstreamSpec::InProcess(server) => {
            let (ours, theirs) = tokio::io::duplex(64 * 1024);
            (server.serve)(theirs);
            known_version(spec, info.serve(ours).await.map_err(not_initialized)?)
        }
        UpstreamSpec::Command { program, args } => {
            let mut command = tokio::process::Command::new(program);
            command.args(args);
            let transport = TokioChildProcess::new(command)
                .map_err(|e| format!("cannot start the upstream MCP server {spec}: {e}"))?;
            known_version(spec, info.serve(transport).await.map_err(not_initialized)?)
        }
        UpstreamSpec::Url {
            url,
            headers,
            ca_file,
        } => {
            let headers: HashMap<_, _> = headers
                .iter()
                .map(|h| (h.name.clone(), h.value.clone()))
                .collect();
            let config =
                StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(headers);
            let http = super::http_client::client_builder(
                url,
                ca_file.as_deref(),
                super::http_client::UPSTREAM,
            )
            .and_then(|b| Ok(b.build()?))
            .map_err(|e| format!("{e:#}"))?;
            let transport = StreamableHttpClientTransport::with_client(http, config);
            known_version(spec, info.serve(transport).await.map_err(not_initialized)?)
        }
    }
}

/// A transport's error with its causes: rmcp's HTTP client error names only the URL
/// and keeps reqwest's error (the refused certificate, the refused connection) out of
/// its chain.
fn transport_error(e: &(dyn std::error::Error + Send + Sync + 'static)) -> String {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    match e.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
        Some(StreamableHttpError::Client(inner)) => super::http_client::error_chain(inner),
        _ => super::http_client::error_chain(e),
    }
}

/// rmcp accepts whatever version the server answers `initialize` with; the proxy
/// speaks only versions it knows, so it refuses another rather than guess at its
/// messages.
fn known_version(spec: &UpstreamSpec, client: Client) -> Result<Client, String> {
    let answered = client.peer_info().map(|p| p.protocol_version.clone());
    match answered {
        Some(v) if !ProtocolVersion::KNOWN_VERSIONS.contains(&v) => {
            let known: Vec<&str> = ProtocolVersion::KNOWN_VERSIONS
                .iter()
                .map(|k| k.as_str())
                .collect();
            Err(format!(
                "the upstream MCP server {spec} speaks MCP protocol version {}, which this proxy does not (it speaks {})",
                v.as_str(),
                known.join(", ")
            ))
        }
        _ => Ok(client),
    }
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
