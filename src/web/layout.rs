//! The frame of every HTML page (`templates/base.html`): title, navigation, assets,
//! who is signed in. Part of the web shell, so error and login pages use it without
//! reaching into the pages.

use super::assets;

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
    pub ctx: super::auth::PageContext,
}

impl Layout {
    pub fn new(title: impl Into<String>, nav: &'static str) -> Self {
        Self {
            title: title.into(),
            nav,
            q: String::new(),
            css: assets::url("app.css"),
            js: assets::url("app.js"),
            icon: assets::url("favicon.svg"),
            version: env!("CARGO_PKG_VERSION"),
            ctx: super::auth::page_context(),
        }
    }

    pub(crate) fn with_query(mut self, q: impl Into<String>) -> Self {
        self.q = q.into();
        self
    }
}
