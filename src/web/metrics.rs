//! `GET /metrics`: the Prometheus text format, rendered from memory. A scrape never
//! queries the database, so it answers during a database outage (with
//! `idemwatch_db_up 0`).

use super::AppState;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

pub fn router() -> Router<AppState> {
    Router::new().route("/metrics", get(metrics))
}

async fn metrics(State(state): State<AppState>) -> Response {
    exposition(state.metrics.render())
}

/// A rendered registry as the answer to a scrape (also `mcp-proxy --listen`'s).
pub fn exposition(rendered: Result<String, prometheus::Error>) -> Response {
    match rendered {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(e) => {
            tracing::error!(error = %e, "cannot encode metrics");
            (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics\n").into_response()
        }
    }
}
