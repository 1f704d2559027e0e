//! Static files, embedded in the binary so `idemwatch serve` runs from any directory.
//! Pages link them as `/static/app.css?v=<hash of the content>`: a changed file gets a
//! new URL, so browsers may cache each URL for a year. Part of the web shell (the
//! layout links them); `web/static_files.rs` serves them.

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::LazyLock;

pub(super) struct Asset {
    pub name: &'static str,
    pub content_type: &'static str,
    pub body: &'static str,
}

pub(super) const ASSETS: &[Asset] = &[
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
pub(super) static VERSIONS: LazyLock<HashMap<&'static str, String>> = LazyLock::new(|| {
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
