//! `idemwatch serve` and `idemwatch migrate`.

use super::{DatabaseArgs, ServeArgs, redact_url};
use crate::auth::Authenticator;
use crate::guard::{SystemClock, ToolPolicies};
use crate::metrics::{Metrics, backlog};
use crate::retention::{PruneMetrics, Pruner, RetentionSettings};
use crate::store::{Store, StoreOptions};
use crate::tail::Tailer;
use crate::web::{self, AppState};
use anyhow::Context;
use axum::Router;
use futures::FutureExt;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// Opens the database and brings its schema up to date (or, with `--no-migrate`,
/// checks that it is).
pub(crate) async fn open_store(args: &DatabaseArgs) -> anyhow::Result<Store> {
    let (store, url) = connect(args).await?;
    if args.no_migrate {
        store
            .ready()
            .await
            .with_context(|| format!("database {url} is not ready (--no-migrate)"))?;
    } else {
        store
            .migrate()
            .await
            .with_context(|| format!("cannot apply migrations to {url}"))?;
    }
    Ok(store)
}

async fn connect(args: &DatabaseArgs) -> anyhow::Result<(Store, String)> {
    let options = StoreOptions {
        max_connections: args.db_max_connections,
        ..StoreOptions::default()
    };
    let url = redact_url(&args.database_url);
    let store = Store::connect(&with_create_mode(&args.database_url), &options)
        .await
        .with_context(|| format!("cannot open database {url}"))?;
    Ok((store, url))
}

/// `sqlite://FILE` opens read-write but does not create FILE; the commands that
/// migrate create it, as the default URL's `?mode=rwc` does.
fn with_create_mode(url: &str) -> String {
    let sqlite = url.starts_with("sqlite:");
    if !sqlite || url.contains("mode=") || url.contains(":memory:") {
        return url.to_string();
    }
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}mode=rwc")
}

pub async fn migrate_command(args: DatabaseArgs) -> anyhow::Result<()> {
    let (store, url) = connect(&args).await?;
    store
        .migrate()
        .await
        .with_context(|| format!("cannot apply migrations to {url}"))?;
    tracing::info!(database = %url, "migrations applied");
    store.close().await;
    Ok(())
}

pub async fn serve_command(args: ServeArgs) -> anyhow::Result<()> {
    // Refuse, before anything runs: a public address without authentication, and a
    // retention that could prune a key a retry may still reach.
    let retention = args.retention.checked().await?;
    let auth = args.auth.authenticator(args.listen)?;
    args.auth.session_settings()?;
    let tools = args.guard.tools()?;
    let store = open_store(&args.database).await?;
    let listener = bind(args.listen).await?;
    tracing::info!(listen = %listener.local_addr()?, database = %redact_url(&args.database.database_url), "idemwatch serving");
    let served = run_server(
        &args,
        retention,
        auth,
        tools,
        store.clone(),
        listener,
        Router::new(),
        shutdown_signal(),
    )
    .await;
    store.close().await;
    tracing::info!("stopped");
    served
}

pub async fn bind(listen: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))
}

/// Routes beyond the service's own (the demo's), and where the key page sends a person
/// to look a key up at its provider when those routes include such a lookup.
pub struct Extra {
    pub routes: Router,
    /// A path the key is appended to (`/demo/provider/`).
    pub provider_lookup: Option<&'static str>,
}

impl From<Router> for Extra {
    fn from(routes: Router) -> Self {
        Self {
            routes,
            provider_lookup: None,
        }
    }
}

/// The service: the app (with `extra` routes merged in) and every background task,
/// until `shutdown` resolves or a task ends on its own. `serve` and `demo` both run
/// this, so a task started here runs in the demo too. The caller owns `store` (opened
/// and migrated) and closes it afterwards.
#[expect(
    clippy::too_many_arguments,
    reason = "each argument is checked by the caller before anything starts"
)]
pub async fn run_server(
    args: &ServeArgs,
    retention: RetentionSettings,
    auth: Authenticator,
    tools: ToolPolicies,
    store: Store,
    listener: TcpListener,
    extra: impl Into<Extra>,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let metrics =
        Arc::new(Metrics::new(args.metrics.metrics_options()).context("cannot register metrics")?);
    metrics.configure_tools(tools.tools.keys());
    let state = AppState::with_metrics(store.clone(), metrics.clone())
        .with_auth(auth, args.auth.cookie_secure)
        .with_session_settings(args.auth.session_settings()?)
        .with_hsts(args.auth.hsts)
        .with_guard(tools, args.guard.settings())
        .with_guard_limits(args.guard.limits());
    let checkpointer = args.checkpoints.checkpointer(&store, &metrics)?;
    let mut state = state.with_checkpointer(checkpointer.clone());
    let extra = extra.into();
    if let Some(prefix) = extra.provider_lookup {
        state = state.with_provider_lookup(prefix);
    }
    // The tailer and the backlog refresher get a small pool of their own: a guard or
    // UI burst cannot starve them of connections, nor they the guard.
    let tail_options = StoreOptions {
        max_connections: 2,
        ..StoreOptions::default()
    };
    let tail_store = Store::connect(&args.database.database_url, &tail_options)
        .await
        .with_context(|| {
            format!(
                "cannot open database {} for the tailer",
                redact_url(&args.database.database_url)
            )
        })?;

    let (stop, stopped) = watch::channel(false);
    let mut tasks = Tasks::new();
    let tailer = Tailer::new(metrics.clone(), args.metrics.tail_settings());
    tasks.spawn(
        tailer
            .run(tail_store.clone(), stopped.clone())
            .map(|()| ("tailer", Ok(()))),
    );
    tasks.spawn(
        backlog::run(
            tail_store.clone(),
            metrics.clone(),
            args.metrics.backlog_refresh_interval,
            stopped.clone(),
        )
        .map(|()| ("backlog refresher", Ok(()))),
    );
    if let Some(pruner) = pruner(&store, retention, &metrics)? {
        tasks.spawn(pruner.run(stopped.clone()).map(|()| ("pruner", Ok(()))));
    }
    if let Some(checkpointer) = checkpointer {
        let interval = args.checkpoints.checkpoint_interval.to_std();
        tasks.spawn(
            checkpointer
                .run(interval, stopped.clone())
                .map(|()| ("checkpointer", Ok(()))),
        );
    }
    let mut server_stopped = stopped.clone();
    let timeouts = args.timeouts.timeouts();
    // Inside the app's layers: the key is public (no sign-in), but it gets the Host
    // check, the security headers and a problem document for its 404 like every route.
    let app = web::app_with(state, extra.routes.merge(args.checkpoints.router()?));
    tasks.spawn(async move {
        // The peer address: proxy headers are believed only from trusted proxies.
        let shutdown = async move {
            let _ = server_stopped.wait_for(|stop| *stop).await;
        };
        let served = web::server::serve(listener, app, timeouts, shutdown)
            .await
            .context("server failed");
        ("server", served)
    });

    let failure = supervise(tasks, stop, shutdown).await;
    tail_store.close().await;
    failure.map_or(Ok(()), Err)
}

/// The service's tasks, each answering its name and how it ended.
type Tasks = JoinSet<(&'static str, anyhow::Result<()>)>;

/// Runs until `shutdown`, or until a task ends on its own (it should not: that is
/// reported, and the process exits non-zero so that its supervisor restarts it); then
/// tells every task to stop and waits for them. The error of the task that ended, if any.
async fn supervise(
    mut tasks: Tasks,
    stop: watch::Sender<bool>,
    shutdown: impl Future<Output = ()>,
) -> Option<anyhow::Error> {
    let mut failure = None;
    tokio::select! {
        () = shutdown => {}
        Some(ended) = tasks.join_next() => {
            let (name, result) = ended.unwrap_or_else(|e| ("a task", Err(anyhow::anyhow!("panicked: {e}"))));
            let error = result.err().unwrap_or_else(|| anyhow::anyhow!("ended unexpectedly"));
            tracing::error!(task = name, error = %format!("{error:#}"), "stopping");
            failure = Some(error.context(format!("{name} stopped")));
        }
    }
    let _ = stop.send(true);
    while let Some(ended) = tasks.join_next().await {
        match ended {
            Ok((_, Ok(()))) => {}
            Ok((name, Err(e))) => {
                tracing::error!(task = name, error = %format!("{e:#}"), "failed while stopping")
            }
            Err(e) => tracing::error!(error = %e, "a task panicked while stopping"),
        }
    }
    failure
}

/// The background pruner, unless its interval is 0.
fn pruner(
    store: &Store,
    settings: RetentionSettings,
    metrics: &Metrics,
) -> anyhow::Result<Option<Pruner>> {
    if settings.interval.is_zero() {
        tracing::info!("pruner off (--prune-interval 0)");
        return Ok(None);
    }
    let counters =
        PruneMetrics::register(metrics.registry()).context("cannot register pruner metrics")?;
    Ok(Some(
        Pruner::new(store.clone(), settings, Arc::new(SystemClock)).with_metrics(counters),
    ))
}

/// Resolves on Ctrl-C or SIGTERM, so in-flight requests finish before exit.
pub(crate) async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutdown signal received");
}

#[cfg(test)]
mod tests {
    use super::with_create_mode;

    #[test]
    fn a_plain_sqlite_file_url_is_created_when_missing() {
        assert_eq!(with_create_mode("sqlite://x.db"), "sqlite://x.db?mode=rwc");
        assert_eq!(
            with_create_mode("sqlite://x.db?cache=shared"),
            "sqlite://x.db?cache=shared&mode=rwc"
        );
        assert_eq!(
            with_create_mode("sqlite://x.db?mode=ro"),
            "sqlite://x.db?mode=ro"
        );
        assert_eq!(with_create_mode("postgres://h/db"), "postgres://h/db");
    }
}
