//! `GET /api/v1/checkpoints/public-key`: the PEM that checks checkpoint signatures.
//!
//! Public by nature (an auditor fetches it to run `idemwatch verify --public-key`
//! offline), so it sits outside authentication. Served only when `serve` signs
//! checkpoints; without a signing key the route does not exist (404).

use crate::evidence::keys;
use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use ed25519_dalek::VerifyingKey;

pub fn router(key: &VerifyingKey) -> Router {
    let pem = keys::public_key_pem(key);
    Router::new().route(
        "/api/v1/checkpoints/public-key",
        get(move || async move {
            ([(header::CONTENT_TYPE, "application/x-pem-file")], pem).into_response()
        }),
    )
}
