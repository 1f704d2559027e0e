//! `GET /api/v1/checkpoints/public-key`: the PEM that checks checkpoint signatures.
//!
//! Public by nature (an auditor fetches it to run `idemwatch verify --public-key`
//! offline), so it sits outside authentication. A server that signs no checkpoints
//! (no `--signing-key`) answers 404 saying so, rather than a generic "no such page".

use crate::evidence::keys;
use crate::web::Error;
use axum::Router;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use ed25519_dalek::VerifyingKey;

pub fn router(key: Option<&VerifyingKey>) -> Router {
    let pem = key.map(keys::public_key_pem);
    Router::new().route(
        "/api/v1/checkpoints/public-key",
        get(move || async move { public_key(pem.as_deref()) }),
    )
}

fn public_key(pem: Option<&str>) -> Response {
    match pem {
        Some(pem) => {
            ([(header::CONTENT_TYPE, "application/x-pem-file")], pem.to_string()).into_response()
        }
        None => Error::NotFound(
            "This server signs no checkpoints, so it has no public key: start `idemwatch serve` with --signing-key (docs/EXPORT.md)."
                .into(),
        )
        .into_response(),
    }
}
