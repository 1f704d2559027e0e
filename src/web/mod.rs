//! HTTP: one [`AppState`], one router per page family, one error type.

mod export;
mod health;

use crate::store::Store;
use axum::Router;

/// Everything a handler needs, shared through `State`.
#[derive(Debug, Clone)]
pub struct AppState {
    pub store: Store,
}

impl AppState {
    pub fn new(store: Store) -> Self {
        Self { store }
    }
}

pub fn app(state: AppState) -> Router {
    Router::new()
        .merge(health::router())
        .merge(export::router())
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .with_state(state)
}
