//! `idemwatch serve` and `idemwatch migrate`.

use super::{DatabaseArgs, ServeArgs, redact_url};
use crate::store::{Store, StoreOptions};
use crate::web::{self, AppState};
use anyhow::Context;
use axum::Router;
use std::future::Future;
use std::net::SocketAddr;
use tokio::net::TcpListener;

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
    let store = open_store(&args.database).await?;
    let listener = bind(args.listen).await?;
    tracing::info!(listen = %listener.local_addr()?, database = %redact_url(&args.database.database_url), "idemwatch serving");
    run_server(store.clone(), listener, Router::new(), shutdown_signal()).await?;
    store.close().await;
    tracing::info!("stopped");
    Ok(())
}

pub async fn bind(listen: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))
}

/// The service itself: the app (plus `extra` routes) and every background task,
/// until `shutdown` resolves. `serve` and `demo` both run this, so a background
/// task started here (tailer, pruner) runs in the demo too. The caller owns the
/// store and closes it afterwards.
pub async fn run_server(
    store: Store,
    listener: TcpListener,
    extra: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let state = AppState::new(store);
    let app = web::app(state).merge(extra);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
        .context("server failed")
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
