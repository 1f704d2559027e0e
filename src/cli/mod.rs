//! The command line: every flag has an environment fallback (12-factor).

mod auth;
mod checkpoint;
mod demo;
mod export;
mod inspect;
mod mcp_proxy;
mod metrics;
mod retention;
mod serve;

use clap::{Args, Parser, Subcommand};
use std::fmt;
use std::net::SocketAddr;

pub use auth::{
    AuthArgs, EndSessionsArgs, NewTokenArgs, TokensArgs, end_sessions_command,
    hash_password_command, new_token_command, tokens_command,
};
pub use checkpoint::{
    CheckpointArgs, CheckpointNowArgs, NewSigningKeyArgs, PublicKeyArgs, checkpoint_command,
    new_signing_key_command, public_key_command,
};
pub use demo::{DemoArgs, demo_command};
pub use export::{ExportArgs, VerifyArgs, export_command, verify_command};
pub use inspect::{fingerprint_command, key_command};
pub use mcp_proxy::{McpProxyArgs, mcp_proxy_command};
pub use metrics::{MetricsArgs, parse_duration};
pub use retention::{PruneArgs, RetentionArgs, prune_command};
pub use serve::{migrate_command, run_server, serve_command};

#[derive(Debug, Parser)]
#[command(
    name = "idemwatch",
    version,
    about = "Makes retried side effects safe and visible."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log format: `text` for people, `json` for log pipelines.
    #[arg(long, env = "IDEMWATCH_LOG_FORMAT", default_value = "text", global = true, value_parser = ["text", "json"])]
    pub log_format: String,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the UI, /metrics, /healthz and /readyz; applies migrations first.
    Serve(ServeArgs),
    /// Apply database migrations and exit.
    Migrate(DatabaseArgs),
    /// Print the idempotency key the guard derives for an intent.
    Key(KeyArgs),
    /// Print the fingerprint the guard derives for business arguments.
    Fingerprint(FingerprintArgs),
    /// Export attempt rows with their key's context as CSV or NDJSON, with a manifest.
    Export(ExportArgs),
    /// Check every hash chain in the database or an export file (exit 0 intact, 1 broken, 2 error).
    Verify(VerifyArgs),
    /// Delete expired DONE / FAILED keys now (the pruner of `serve`, once).
    Prune(PruneArgs),
    /// Write a signed checkpoint of every key head changed since the last one, now.
    Checkpoint(CheckpointNowArgs),
    /// Write a new Ed25519 checkpoint signing key (PEM) and print its public key.
    NewSigningKey(NewSigningKeyArgs),
    /// Print the public key (PEM) of a checkpoint signing key.
    PublicKey(PublicKeyArgs),
    /// Serve the app with synthetic traffic through the real guard (a first look).
    Demo(DemoArgs),
    /// Read a password from standard input and print its argon2 hash for the auth file.
    HashPassword,
    /// Print a new API token (once) and the `[[tokens]]` entry that stores its hash.
    NewToken(NewTokenArgs),
    /// List the auth file's API tokens: roles, scope and expiry (hashes not shown).
    Tokens(TokensArgs),
    /// End every sign-in session of a built-in user now, on every replica.
    EndSessions(EndSessionsArgs),
    /// An MCP server in front of another that guards its side-effecting tools (docs/MCP.md).
    McpProxy(McpProxyArgs),
}

#[derive(Clone, Args)]
pub struct DatabaseArgs {
    /// `sqlite://FILE?mode=rwc` (embedded, the default) or `postgres://USER:PASS@HOST/DB`.
    /// (`hide_env_values`: `--help` must not print the password from the environment.)
    #[arg(
        long,
        env = "DATABASE_URL",
        hide_env_values = true,
        default_value = "sqlite://idemwatch.db?mode=rwc"
    )]
    pub database_url: String,
    /// Connection pool size.
    #[arg(long, env = "IDEMWATCH_DB_MAX_CONNECTIONS", default_value_t = 16)]
    pub db_max_connections: u32,
    /// Do not apply migrations at start; refuse to start unless the schema is current.
    /// For a least-privilege role that cannot create tables, and for read replicas.
    /// (`idemwatch migrate` always migrates.)
    #[arg(long, env = "IDEMWATCH_NO_MIGRATE")]
    pub no_migrate: bool,
}

/// The URL may carry a password: never print it.
impl fmt::Debug for DatabaseArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DatabaseArgs")
            .field("database_url", &redact_url(&self.database_url))
            .field("db_max_connections", &self.db_max_connections)
            .field("no_migrate", &self.no_migrate)
            .finish()
    }
}

/// A database URL fit to print: the password in the user info
/// (`postgres://user:***@host/db`, a password with `@` in it included) and any
/// `password`/`sslpassword` query parameter (`?password=***`) are replaced. The URL is
/// read as the `url` crate (WHATWG) reads it: the last `@` ends the user info. A URL
/// without a secret is printed as given; one that cannot be parsed but has an `@` shows
/// no user info at all.
pub(crate) fn redact_url(url: &str) -> String {
    const HIDDEN: &str = "***";
    let Ok(mut parsed) = url::Url::parse(url) else {
        return match (url.split_once("://"), url.rfind('@')) {
            (Some((scheme, _)), Some(at)) => format!("{scheme}://{HIDDEN}{}", &url[at..]),
            _ => url.to_string(),
        };
    };
    let mut redacted = false;
    if parsed.password().is_some() {
        redacted = parsed.set_password(Some(HIDDEN)).is_ok();
    }
    let secret =
        |k: &str| k.eq_ignore_ascii_case("password") || k.eq_ignore_ascii_case("sslpassword");
    if parsed.query_pairs().any(|(k, _)| secret(&k)) {
        let pairs: Vec<(String, String)> = parsed
            .query_pairs()
            .map(|(k, v)| {
                let v = if secret(&k) {
                    HIDDEN.into()
                } else {
                    v.into_owned()
                };
                (k.into_owned(), v)
            })
            .collect();
        parsed.query_pairs_mut().clear().extend_pairs(pairs);
        redacted = true;
    }
    if redacted {
        parsed.to_string()
    } else {
        url.to_string()
    }
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// Address to listen on. A non-loopback address needs --auth-file (or
    /// --insecure-no-auth): see docs/AUTH.md.
    #[arg(long, env = "IDEMWATCH_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    #[command(flatten)]
    pub auth: AuthArgs,
    #[command(flatten)]
    pub retention: RetentionArgs,
    #[command(flatten)]
    pub metrics: MetricsArgs,
    #[command(flatten)]
    pub guard: GuardArgs,
    #[command(flatten)]
    pub checkpoints: CheckpointArgs,
    #[command(flatten)]
    pub timeouts: TimeoutArgs,
}

/// How long a client may take to send a request (docs/OPERATIONS.md).
#[derive(Debug, Clone, Args)]
pub struct TimeoutArgs {
    /// Close a new connection that sends nothing for this long, and one whose request
    /// head (request line and headers) has not fully arrived this long after its first
    /// byte.
    #[arg(long, env = "IDEMWATCH_HEADER_READ_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub header_read_timeout: std::time::Duration,
    /// Answer 408 (and close the connection) when a request body has not fully
    /// arrived this long after its request's head, however steadily it trickles.
    #[arg(long, env = "IDEMWATCH_REQUEST_BODY_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub request_body_timeout: std::time::Duration,
    /// Close a connection whose client has taken no byte of the response for this
    /// long while more was waiting (a stalled download): its export's database
    /// connection and slot are freed. Progress, however slow, resets it.
    #[arg(long, env = "IDEMWATCH_WRITE_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub write_timeout: std::time::Duration,
    /// Request bodies still arriving from the network at once (each holds a
    /// connection until it is complete or its --request-body-timeout passes); one more
    /// is answered 503 with Retry-After, unread.
    #[arg(long, env = "IDEMWATCH_MAX_SLOW_BODIES", default_value_t = crate::web::server::MAX_SLOW_BODIES)]
    pub max_slow_bodies: usize,
}

impl TimeoutArgs {
    pub fn timeouts(&self) -> crate::web::server::Timeouts {
        crate::web::server::Timeouts {
            header_read: self.header_read_timeout,
            request_body: self.request_body_timeout,
            write: self.write_timeout,
            slow_bodies: self.max_slow_bodies,
        }
    }
}

/// The guard over HTTP (`/api/v1/guard/*`).
#[derive(Debug, Clone, Args)]
pub struct GuardArgs {
    /// The tools file (TOML): each guarded tool's key retention, call timeout and
    /// free-text fields, and an optional default policy (docs/OPERATIONS.md). Without
    /// it, every tool is refused over HTTP (400 unknown_tool).
    #[arg(long, env = "IDEMWATCH_TOOLS_FILE")]
    pub tools_file: Option<std::path::PathBuf>,
    /// Added to a tool's call timeout to make its lease: the lease must outlive the
    /// provider call, or a slow success looks like a dead worker.
    #[arg(long, env = "IDEMWATCH_LEASE_MARGIN", default_value = "30s")]
    pub lease_margin: crate::duration::HumanDuration,
    /// The largest guard request body, in bytes (413 `too_large` past it).
    #[arg(long, env = "IDEMWATCH_GUARD_MAX_BODY_BYTES", default_value_t = crate::web::GuardLimits::default().max_body_bytes, value_parser = clap::value_parser!(u32).range(1024..))]
    pub guard_max_body_bytes: u32,
    /// Guard requests one token (or the local caller) may have in progress at once
    /// (429 with `Retry-After` past it).
    #[arg(long, env = "IDEMWATCH_GUARD_CONCURRENCY_PER_TOKEN", default_value_t = crate::web::GuardLimits::default().concurrency, value_parser = clap::value_parser!(u32).range(1..))]
    pub guard_concurrency_per_token: u32,
    /// Guard requests one token (or the local caller) may send a second, with a burst
    /// of as many (429 with `Retry-After` past it).
    #[arg(long, env = "IDEMWATCH_GUARD_RATE_PER_TOKEN", default_value_t = crate::web::GuardLimits::default().rate, value_parser = clap::value_parser!(u32).range(1..))]
    pub guard_rate_per_token: u32,
}

impl GuardArgs {
    /// The tools file, checked whole: an error names the tool and the field.
    pub fn tools(&self) -> anyhow::Result<crate::guard::ToolPolicies> {
        match &self.tools_file {
            Some(path) => crate::guard::ToolPolicies::load(path).map_err(anyhow::Error::msg),
            None => Ok(crate::guard::ToolPolicies::default()),
        }
    }

    /// The bounds on each guard caller.
    pub fn limits(&self) -> crate::web::GuardLimits {
        crate::web::GuardLimits {
            max_body_bytes: self.guard_max_body_bytes,
            concurrency: self.guard_concurrency_per_token,
            rate: self.guard_rate_per_token,
        }
    }

    pub fn settings(&self) -> crate::guard::GuardSettings {
        crate::guard::GuardSettings {
            lease_margin: self.lease_margin.0,
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct KeyArgs {
    #[arg(long, env = "IDEMWATCH_TENANT")]
    pub tenant: String,
    #[arg(long)]
    pub tool: String,
    #[arg(long)]
    pub workflow_id: String,
    #[arg(long)]
    pub step_id: String,
    #[arg(long)]
    pub intent_id: String,
    /// Also print the canonical JSON that was hashed.
    #[arg(long)]
    pub verbose: bool,
}

#[derive(Debug, Clone, Args)]
pub struct FingerprintArgs {
    /// The business arguments, a JSON object.
    #[arg(long)]
    pub args: String,
    /// A free-text field to leave out (repeat, or separate with commas).
    #[arg(long, value_delimiter = ',')]
    pub exclude: Vec<String>,
    /// Also print the canonical JSON that was hashed.
    #[arg(long)]
    pub verbose: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_in_the_database_url_is_never_printed() {
        assert_eq!(
            redact_url("postgres://app:s3cret@db:5432/idem"),
            "postgres://app:***@db:5432/idem"
        );
        assert_eq!(
            redact_url("sqlite://idemwatch.db?mode=rwc"),
            "sqlite://idemwatch.db?mode=rwc"
        );
        assert_eq!(redact_url("sqlite::memory:"), "sqlite::memory:");
        for (url, secret) in [
            ("postgres://app:p@ss@db:5432/idem", "ss"),
            ("postgres://app:s3cret@db/idem?sslmode=require", "s3cret"),
            ("postgres://db/idem?user=app&password=s3cret", "s3cret"),
            (
                "postgres://db/idem?PASSWORD=s3cret&sslmode=require",
                "s3cret",
            ),
            ("postgres://db/idem?sslpassword=s3cret", "s3cret"),
            ("postgres://app:s3cret@[::1/idem", "s3cret"),
        ] {
            let shown = redact_url(url);
            assert!(!shown.contains(secret), "{url} → {shown}");
            assert!(shown.contains("***"), "{url} → {shown}");
        }
        assert_eq!(
            redact_url("postgres://app:p@ss@db:5432/idem"),
            "postgres://app:***@db:5432/idem"
        );
        assert_eq!(
            redact_url("postgres://db/idem?user=app&password=s3cret&sslmode=require"),
            "postgres://db/idem?user=app&password=***&sslmode=require"
        );
        let args = DatabaseArgs {
            database_url: "postgres://app:s3cret@db/idem".into(),
            db_max_connections: 1,
            no_migrate: false,
        };
        assert!(!format!("{args:?}").contains("s3cret"));
    }
}
