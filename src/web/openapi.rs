//! `GET /api/v1/openapi.json`: the OpenAPI 3.1 description of everything under
//! `/api/v1`, committed at docs/openapi.json and built into the binary. A test keeps
//! the document, this route and the router in agreement (tests/it/openapi.rs).

use super::AppState;
use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::IntoResponse;
use axum::routing::get;

/// The committed document, byte for byte.
pub(crate) const DOCUMENT: &str = include_str!("../../docs/openapi.json");

pub fn router() -> Router<AppState> {
    Router::new().route("/api/v1/openapi.json", get(document))
}

async fn document() -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        DOCUMENT,
    )
}
