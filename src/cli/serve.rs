//! `idemwatch serve` and `idemwatch migrate`.

use super::{DatabaseArgs, ServeArgs, redact_url};
use crate::guard::SystemClock;
use crate::retention::{Pruner, RetentionSettings};
use crate::store::{Store, StoreOptions};
use crate::web::{self, AppState};
use anyhow::Context;
use std::sync::Arc;
use tokio::sync::watch;

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
    // Refuse a retention that could prune a key a retry may still reach, before anything runs.
    let retention = args.retention.checked().await?;
    let store = open_store(&args.database).await?;
    let state = AppState::new(store.clone());
    let (stop_pruner, pruner) = start_pruner(&store, retention);
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    tracing::info!(listen = %listener.local_addr()?, database = %redact_url(&args.database.database_url), "idemwatch serving");
    axum::serve(listener, web::app(state))
        .with_graceful_shutdown(shutdown_signal())
        .await
        .context("server failed")?;
    stop_pruner.send_replace(true);
    if let Some(task) = pruner {
        // A batch in flight finishes or rolls back; never wait long.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(10), task).await;
    }
    store.close().await;
    tracing::info!("stopped");
    Ok(())
}

/// Starts the background pruner unless its interval is 0.
fn start_pruner(
    store: &Store,
    settings: RetentionSettings,
) -> (watch::Sender<bool>, Option<tokio::task::JoinHandle<()>>) {
    let (stop, stopped) = watch::channel(false);
    if settings.interval.is_zero() {
        tracing::info!("pruner off (--prune-interval 0)");
        return (stop, None);
    }
    // Wiring for `idemwatch_pruned_total`: once the metrics registry exists, attach
    // `.with_metrics(PruneMetrics::register(&registry)?)` here.
    let pruner = Pruner::new(store.clone(), settings, Arc::new(SystemClock));
    (stop, Some(tokio::spawn(pruner.run(stopped))))
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
