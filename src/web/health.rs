//! `/healthz`: the process answers. `/readyz`: the database answers and the schema is
//! current; load balancers stop sending traffic when it fails.

use super::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
}

async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Value>) {
    match state.store.ready().await {
        Ok(()) => (StatusCode::OK, Json(json!({ "status": "ready" }))),
        Err(e) => {
            // The probe is public: the store's error text (host names, SQL states,
            // file paths) goes to the log only.
            tracing::warn!(error = %e, "not ready");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({
                    "status": "unavailable",
                    "reason": "the database cannot be used; the error is in the server's log",
                })),
            )
        }
    }
}
