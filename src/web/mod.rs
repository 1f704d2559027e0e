//! HTTP: one [`AppState`], one router per page family, one error type.

mod export;
mod health;
mod metrics;

use crate::metrics::Metrics;
use crate::store::Store;
use axum::Router;
use std::sync::Arc;

/// Everything a handler needs, shared through `State`.
#[derive(Debug, Clone)]
pub struct AppState {
    pub store: Store,
    /// What /metrics renders; the tailer and the backlog refresher update it.
    pub metrics: Arc<Metrics>,
}

impl AppState {
    /// State with metrics of its own (nothing updates them unless a tailer is given
    /// the same `Arc`: see [`AppState::with_metrics`]).
    pub fn new(store: Store) -> Self {
        Self::with_metrics(store, Arc::new(Metrics::default()))
    }

    pub fn with_metrics(store: Store, metrics: Arc<Metrics>) -> Self {
        Self { store, metrics }
    }
}

pub fn app(state: AppState) -> Router {
    Router::new()
        .merge(health::router())
        .merge(export::router())
        .merge(metrics::router())
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .with_state(state)
}
