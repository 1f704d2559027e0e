//! `idemwatch serve` and `idemwatch migrate`.

use super::{DatabaseArgs, ServeArgs, redact_url};
use crate::guard::SystemClock;
use crate::metrics::{Metrics, backlog};
use crate::retention::{PruneMetrics, Pruner, RetentionSettings};
use crate::store::{Store, StoreOptions};
use crate::tail::Tailer;
use crate::web::{self, AppState};
use anyhow::Context;
use futures::FutureExt;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinSet;

pub async fn open_store(args: &DatabaseArgs) -> anyhow::Result<Store> {
    let options = StoreOptions {
        max_connections: args.db_max_connections,
        ..StoreOptions::default()
    };
    let url = redact_url(&args.database_url);
    let store = Store::connect(&args.database_url, &options)
        .await
        .with_context(|| format!("cannot open database {url}"))?;
    store
        .migrate()
        .await
        .with_context(|| format!("cannot apply migrations to {url}"))?;
    Ok(store)
}

pub async fn migrate_command(args: DatabaseArgs) -> anyhow::Result<()> {
    let store = open_store(&args).await?;
    tracing::info!(database = %redact_url(&args.database_url), "migrations applied");
    store.close().await;
    Ok(())
}

pub async fn serve_command(args: ServeArgs) -> anyhow::Result<()> {
    // Refuse, before anything runs: a public address without authentication, and a
    // retention that could prune a key a retry may still reach.
    let retention = args.retention.checked().await?;
    let auth = args.auth.authenticator(args.listen)?;
    let store = open_store(&args.database).await?;
    let metrics =
        Arc::new(Metrics::new(args.metrics.metrics_options()).context("cannot register metrics")?);
    let state = AppState::with_metrics(store.clone(), metrics.clone())
        .with_auth(auth, args.auth.cookie_secure);
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
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    tracing::info!(listen = %listener.local_addr()?, database = %redact_url(&args.database.database_url), "idemwatch serving");

    let (stop, stopped) = watch::channel(false);
    let mut tasks: JoinSet<(&'static str, anyhow::Result<()>)> = JoinSet::new();
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
    let mut server_stopped = stopped.clone();
    tasks.spawn(async move {
        // The peer address: proxy headers are believed only from trusted proxies.
        let app = web::app(state).into_make_service_with_connect_info::<SocketAddr>();
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = server_stopped.wait_for(|stop| *stop).await;
            })
            .await
            .context("server failed");
        ("server", served)
    });

    // Runs until a signal, or until a task ends on its own (it should not: that is
    // reported, and the process exits non-zero so that its supervisor restarts it).
    let mut failure = None;
    tokio::select! {
        () = shutdown_signal() => {}
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
    tail_store.close().await;
    store.close().await;
    tracing::info!("stopped");
    failure.map_or(Ok(()), Err)
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
pub async fn shutdown_signal() {
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
