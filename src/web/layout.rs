//! The frame of every HTML page (`templates/base.html`): title, navigation, assets,
//! who is signed in. Part of the web shell, so error and login pages use it without
//! reaching into the pages.

use super::assets;
use super::auth::Viewer;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use std::convert::Infallible;

/// What `templates/base.html` needs on every page.
#[derive(Debug, Clone)]
pub struct Layout {
    pub title: String,
    /// Which main navigation entry is the current page: `overview`, `keys`, `backlog`.
    pub nav: &'static str,
    /// The search box's value.
    pub q: String,
    pub css: String,
    pub js: String,
    pub icon: String,
    pub version: &'static str,
    /// Who is signed in, and the CSRF token of the page's forms.
    pub ctx: Viewer,
}

impl Layout {
    pub fn new(title: impl Into<String>, nav: &'static str, viewer: &Viewer) -> Self {
        Self {
            title: title.into(),
            nav,
            q: String::new(),
            css: assets::url("app.css"),
            js: assets::url("app.js"),
            icon: assets::url("favicon.svg"),
            version: env!("CARGO_PKG_VERSION"),
            ctx: viewer.clone(),
        }
    }

    pub(crate) fn with_query(mut self, q: impl Into<String>) -> Self {
        self.q = q.into();
        self
    }
}

/// `viewer: Viewer` in a handler: the reader the authentication middleware found
/// (nobody, on a route it does not cover).
impl<S: Send + Sync> FromRequestParts<S> for Viewer {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Infallible> {
        Ok(parts
            .extensions
            .get::<Viewer>()
            .cloned()
            .unwrap_or_default())
    }
}
