use clap::Parser;
use idemwatch::cli::{self, Cli, Command};
use std::process::ExitCode;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(&cli.log_format);
    let outcome = match cli.command {
        Command::Serve(args) => cli::serve_command(args).await,
        Command::Migrate(args) => cli::migrate_command(args).await,
        Command::Key(args) => cli::key_command(args).map(|out| println!("{out}")),
        Command::Fingerprint(args) => cli::fingerprint_command(args).map(|out| println!("{out}")),
        Command::Demo(args) => cli::demo_command(args).await,
        Command::Export(args) => cli::export_command(args).await,
        // verify has its own exit statuses: 0 intact, 1 broken, 2 could not verify.
        Command::Verify(args) => return cli::verify_command(args).await,
        Command::Prune(args) => cli::prune_command(args).await,
        Command::Checkpoint(args) => cli::checkpoint_command(args).await,
        Command::NewSigningKey(args) => cli::new_signing_key_command(args),
        Command::PublicKey(args) => cli::public_key_command(args),
        Command::HashPassword => {
            cli::hash_password_command(std::io::stdin().lock()).map(|out| println!("{out}"))
        }
        Command::NewToken(args) => cli::new_token_command(args).map(|out| println!("{out}")),
        Command::Tokens(args) => cli::tokens_command(args).map(|out| println!("{out}")),
        Command::EndSessions(args) => cli::end_sessions_command(args)
            .await
            .map(|out| println!("{out}")),
        Command::McpProxy(args) => cli::mcp_proxy_command(args).await,
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line a person can act on, with its causes; never a backtrace.
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_tracing(format: &str) {
    let filter =
        EnvFilter::try_from_env("IDEMWATCH_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    // sqlx logs an unknown URL parameter with its value (a secret, for `sslpassword`);
    // the store logs the key alone instead (store::url_params).
    let quiet = format!("{}=error", idemwatch::store::url_params::DRIVER_LOG_TARGET);
    let filter = match quiet.parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    };
    // rmcp (mcp-proxy) logs every session's start and end at info, with the peer's
    // whole capability struct: noise beside the proxy's own lines, unless asked for.
    let filter = match std::env::var("IDEMWATCH_LOG") {
        Err(_) => filter.add_directive("rmcp=warn".parse().expect("a valid directive")),
        Ok(_) => filter,
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}
