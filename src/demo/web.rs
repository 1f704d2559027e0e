//! `GET /demo/stats`, served only by `idemwatch demo`: the provider's own count of
//! effects next to what the guard recorded.

use super::Demo;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

/// The demo's routes, with their state applied: merge into `web::app`.
pub fn router(demo: Demo) -> Router {
    Router::new()
        .route("/demo/stats", get(stats))
        .with_state(demo)
}

async fn stats(State(demo): State<Demo>) -> Response {
    match demo.snapshot().await {
        Ok(snapshot) => Json(snapshot).into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "demo: stats unavailable");
            let body = json!({ "error": "the database is unavailable; try again" });
            (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
        }
    }
}
