//! HTTP: one [`AppState`], one router per page family, one error type.

mod assets;
mod error;
mod export;
pub mod filters;
mod health;
mod metrics;
mod pages;

pub use error::Error;

use crate::guard::{Clock, SystemClock};
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
    /// What pages call "now" (relative times, leases, retention, the overview's windows).
    pub clock: Arc<dyn Clock>,
    /// The overview's counts, reused for half a minute.
    pub(crate) overview: pages::OverviewCache,
}

impl AppState {
    /// State with metrics of its own (nothing updates them unless a tailer is given
    /// the same `Arc`: see [`AppState::with_metrics`]).
    pub fn new(store: Store) -> Self {
        Self::with_metrics(store, Arc::new(Metrics::default()))
    }

    pub fn with_metrics(store: Store, metrics: Arc<Metrics>) -> Self {
        Self {
            store,
            metrics,
            clock: Arc::new(SystemClock),
            overview: pages::OverviewCache::default(),
        }
    }

    /// The same state on another clock (tests move it past leases and retention).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }
}

pub fn app(state: AppState) -> Router {
    Router::new()
        .merge(health::router())
        .merge(pages::router())
        .merge(export::router())
        .merge(metrics::router())
        .merge(assets::router())
        .fallback(error::no_such_page)
        // Inner to outer: a panic becomes a 500 page, which under /api/ becomes JSON.
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            error::panicked,
        ))
        .layer(axum::middleware::from_fn(error::json_under_api))
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .with_state(state)
}
