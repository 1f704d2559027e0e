//! Static files, embedded in the binary so `idemwatch serve` runs from any directory.
//! Pages link them as `/static/app.css?v=<hash of the content>`: a changed file gets a
//! new URL, so browsers may cache each URL for a year.

use super::{AppState, Error};
use axum::Router;
use axum::extract::{Path, Query};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::LazyLock;

struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
}

const ASSETS: &[Asset] = &[
    Asset {
        name: "app.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("../../static/app.css"),
    },
    Asset {
        name: "app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../../static/app.js"),
    },
    Asset {
        name: "favicon.svg",
        content_type: "image/svg+xml",
        body: include_str!("../../static/favicon.svg"),
    },
];

/// name → first 12 hex digits of the SHA-256 of the content.
static VERSIONS: LazyLock<HashMap<&'static str, String>> = LazyLock::new(|| {
    ASSETS
        .iter()
        .map(|a| {
            let digest = Sha256::digest(a.body.as_bytes());
            (a.name, hex::encode(&digest[..6]))
        })
        .collect()
});

/// The versioned URL of an embedded file, e.g. `/static/app.css?v=3f2a9c01d4e7`.
pub fn url(name: &str) -> String {
    match VERSIONS.get(name) {
        Some(v) => format!("/static/{name}?v={v}"),
        None => format!("/static/{name}"),
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_has_a_versioned_url() {
        for a in ASSETS {
            let u = url(a.name);
            assert!(u.starts_with(&format!("/static/{}?v=", a.name)), "{u}");
            assert_eq!(u.len(), format!("/static/{}?v=", a.name).len() + 12);
            assert!(!a.body.is_empty());
        }
    }
}
