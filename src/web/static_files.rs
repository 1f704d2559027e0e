//! `GET /static/{name}`: the embedded files of `web/assets.rs`, the current version's
//! URL cached for a year, any other revalidated.

use super::assets::{ASSETS, VERSIONS};
use super::{AppState, Error};
use axum::Router;
use axum::extract::{Path, Query};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::collections::HashMap;

pub fn router() -> Router<AppState> {
    Router::new().route("/static/{name}", get(serve))
}

async fn serve(
    Path(name): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, Error> {
    let asset = ASSETS
        .iter()
        .find(|a| a.name == name)
        .ok_or_else(|| Error::NotFound(format!("There is no static file {name:?}.")))?;
    let current = VERSIONS.get(asset.name);
    // Only the current version's URL is immutable; anything else revalidates.
    let cache = if query.get("v") == current {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    let mut response = asset.body.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if let Some(v) = current.and_then(|v| HeaderValue::from_str(&format!("\"{v}\"")).ok()) {
        headers.insert(header::ETAG, v);
    }
    Ok(response)
}
