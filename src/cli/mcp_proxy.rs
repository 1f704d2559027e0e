//! `idemwatch mcp-proxy` (docs/MCP.md).

use super::{AuthArgs, DatabaseArgs, parse_duration};
use crate::guard::{GuardSettings, SystemClock};
use crate::mcp::{
    GuardPort, GuardToken, KeyPages, LocalGuard, McpMetrics, RemoteGuard, Settings, Started,
    UpstreamHeader, UpstreamSpec,
};
use anyhow::Context;
use clap::{ArgGroup, Args};
use std::sync::Arc;

#[derive(Debug, Clone, Args)]
#[command(group(ArgGroup::new("upstream_server").required(true).args(["upstream_url", "upstream"])))]
pub struct McpProxyArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// Guard through a running `idemwatch serve` (its base URL, `http://HOST:PORT`, or
    /// `https://…` behind a TLS-terminating proxy) instead of opening the database:
    /// several proxies, one guard. Needs a token with the worker role when serve has
    /// an auth file.
    #[arg(long, env = "IDEMWATCH_GUARD_URL", conflicts_with = "database_url")]
    pub guard_url: Option<url::Url>,
    /// A PEM file of CA certificates an https --guard-url's certificate must chain to,
    /// instead of the system's trust store.
    #[arg(long, env = "IDEMWATCH_GUARD_CA_FILE", requires = "guard_url")]
    pub guard_ca_file: Option<std::path::PathBuf>,
    /// Let --guard-url be http:// to a host other than this one: the token and every
    /// call's arguments and results then cross the network in clear. Without it such
    /// a URL is refused at start (docs/MCP.md).
    #[arg(long, env = "IDEMWATCH_GUARD_ALLOW_HTTP", requires = "guard_url")]
    pub guard_allow_http: bool,
    /// The bearer token for --guard-url (`iw_…`, the worker role).
    #[arg(
        long,
        env = "IDEMWATCH_GUARD_TOKEN",
        hide_env_values = true,
        requires = "guard_url",
        conflicts_with = "guard_token_file"
    )]
    pub guard_token: Option<GuardToken>,
    /// A file holding the bearer token for --guard-url (its first line), so the token
    /// is in no process list.
    #[arg(long, env = "IDEMWATCH_GUARD_TOKEN_FILE", requires = "guard_url")]
    pub guard_token_file: Option<std::path::PathBuf>,
    /// The tools file (the same file as `serve --tools-file`): which upstream tools are
    /// guarded, under which policy, and their `kind`, `key_argument` and `lookup`.
    #[arg(long, env = "IDEMWATCH_TOOLS_FILE")]
    pub tools_file: std::path::PathBuf,
    /// The tenant of every key (else the tools file's `[mcp] tenant`).
    #[arg(long, env = "IDEMWATCH_TENANT")]
    pub tenant: Option<String>,
    /// The base URL of a `serve` on the same database: answers that need a person
    /// name the key's page (`<URL>/keys/<key>`).
    #[arg(long, env = "IDEMWATCH_PUBLIC_URL")]
    pub public_url: Option<url::Url>,
    /// Added to a tool's call timeout to make its lease (as `serve --lease-margin`).
    #[arg(long, env = "IDEMWATCH_LEASE_MARGIN", default_value = "30s")]
    pub lease_margin: crate::duration::HumanDuration,
    /// The deadline of a call of a read-only tool, which passes through unguarded.
    #[arg(long, env = "IDEMWATCH_MCP_PASSTHROUGH_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub passthrough_timeout: std::time::Duration,
    /// Serve hosts over Streamable HTTP at `http://ADDR/mcp` instead of stdio. A
    /// non-loopback address needs --auth-file: hosts then send a bearer token with the
    /// worker role (docs/MCP.md).
    #[arg(long, env = "IDEMWATCH_MCP_LISTEN")]
    pub listen: Option<std::net::SocketAddr>,
    /// Over stdio: serve the proxy's metrics at `http://ADDR/metrics` (with --listen
    /// they are on that address already).
    #[arg(long, env = "IDEMWATCH_MCP_METRICS_LISTEN", conflicts_with = "listen")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    #[command(flatten)]
    pub auth: AuthArgs,
    /// The upstream MCP server's Streamable HTTP endpoint (`http://HOST:PORT/mcp` or
    /// `https://…`), instead of a command after `--`.
    #[arg(long, env = "IDEMWATCH_MCP_UPSTREAM_URL")]
    pub upstream_url: Option<url::Url>,
    /// A PEM file of CA certificates an https --upstream-url's certificate must chain
    /// to, instead of the system's trust store.
    #[arg(
        long,
        env = "IDEMWATCH_MCP_UPSTREAM_CA_FILE",
        requires = "upstream_url"
    )]
    pub upstream_ca_file: Option<std::path::PathBuf>,
    /// A header sent to the `--upstream-url` server with every request, `Name: value`
    /// (repeatable; in the environment one per line), e.g. `Authorization: Bearer …`.
    #[arg(
        long = "upstream-header",
        env = "IDEMWATCH_MCP_UPSTREAM_HEADERS",
        value_delimiter = '\n',
        hide_env_values = true,
        value_name = "NAME: VALUE"
    )]
    pub upstream_headers: Vec<UpstreamHeader>,
    /// The upstream MCP server: a command and its arguments, after `--` (or
    /// `--upstream-url`).
    #[arg(last = true, value_name = "UPSTREAM COMMAND")]
    pub upstream: Vec<String>,
}

pub async fn mcp_proxy_command(args: McpProxyArgs) -> anyhow::Result<()> {
    let upstream = upstream_spec(&args)?;
    let metrics = Arc::new(McpMetrics::new().context("cannot register the proxy's metrics")?);
    let guard = guard_port(&args, metrics.clone()).await?;
    let settings = Settings {
        tools_file: args.tools_file.clone(),
        tenant: args.tenant.clone(),
        pages: KeyPages {
            public_url: args.public_url.as_ref().map(|u| u.to_string()),
        },
        passthrough_timeout: args.passthrough_timeout,
    };
    // Checked before the upstream starts: a refusal costs nothing.
    let listening = match args.listen {
        Some(addr) => {
            let auth = args.auth.authenticator(addr)?;
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr}"))?;
            Some((listener, auth))
        }
        None => None,
    };
    let metrics_listener = match args.metrics_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr} (--metrics-listen)"))?,
        ),
        None => None,
    };
    let started = Started::start(guard, Arc::new(SystemClock), upstream, settings).await?;
    match listening {
        None => started.serve_stdio(metrics, metrics_listener).await,
        Some((listener, auth)) => {
            tracing::info!(address = %listener.local_addr()?, "mcp-proxy: Streamable HTTP at /mcp");
            let shutdown = async {
                let _ = tokio::signal::ctrl_c().await;
            };
            started.serve_http(listener, auth, metrics, shutdown).await
        }
    }
}

/// The upstream server: exactly one of `--upstream-url` and a command after `--`
/// (clap's group enforces "one"; this says what a URL must look like).
fn upstream_spec(args: &McpProxyArgs) -> anyhow::Result<UpstreamSpec> {
    if let Some(url) = &args.upstream_url {
        return Ok(UpstreamSpec::Url {
            url: url.clone(),
            headers: args.upstream_headers.clone(),
            ca_file: args.upstream_ca_file.clone(),
        });
    }
    if args.upstream_ca_file.is_some() {
        anyhow::bail!(
            "--upstream-ca-file is for an https:// --upstream-url server; an upstream command is spoken to over stdio"
        );
    }
    if !args.upstream_headers.is_empty() {
        anyhow::bail!(
            "--upstream-header is sent to an --upstream-url server; an upstream command gets none"
        );
    }
    let (program, rest) = args
        .upstream
        .split_first()
        .context("name the upstream MCP server: a command after `--`, or --upstream-url")?;
    Ok(UpstreamSpec::Command {
        program: program.clone(),
        args: rest.to_vec(),
    })
}

/// The guard the proxy goes through: a remote `serve` (--guard-url), else the
/// database (--database-url), opened and migrated here.
async fn guard_port(
    args: &McpProxyArgs,
    metrics: Arc<McpMetrics>,
) -> anyhow::Result<Arc<dyn GuardPort>> {
    let Some(url) = &args.guard_url else {
        let store = super::serve::open_store(&args.database).await?;
        let settings = GuardSettings {
            lease_margin: args.lease_margin.0,
        };
        let guard = LocalGuard::new(store, Arc::new(SystemClock), settings);
        return Ok(Arc::new(guard.reporting_refusals_not_logged(metrics)));
    };
    let token = match (&args.guard_token, &args.guard_token_file) {
        (Some(token), _) => Some(token.clone()),
        (None, Some(file)) => {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("cannot read --guard-token-file {}", file.display()))?;
            let first = text.lines().next().unwrap_or_default();
            Some(
                first
                    .parse()
                    .map_err(|e| anyhow::anyhow!("--guard-token-file {}: {e}", file.display()))?,
            )
        }
        (None, None) => None,
    };
    // serve speaks plain HTTP; across a network it belongs behind TLS (docs/MCP.md).
    if url.scheme() == "http" && !crate::mcp::is_loopback(url) {
        if !args.guard_allow_http {
            anyhow::bail!(
                "--guard-url {url} is plain http:// to another host: the guard token and every call's arguments and results would cross the network in clear. Put serve behind a TLS-terminating proxy and use https://, or pass --guard-allow-http on a network you trust"
            );
        }
        tracing::warn!(url = %url, "--guard-url is plain http:// to another host (--guard-allow-http): the token crosses the network in clear");
    }
    Ok(Arc::new(RemoteGuard::new(
        url,
        token,
        args.guard_ca_file.as_deref(),
    )?))
}
