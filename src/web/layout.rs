//! The frame of every HTML page (`templates/base.html`): title, navigation, assets,
//! who is signed in. Part of the web shell, so error and login pages use it without
//! reaching into the pages.

use super::assets;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use std::convert::Infallible;

tokio::task_local! {
    /// The reader of the request being handled, for the one page rendered without the
    /// request at hand: an error page, made by `Error::into_response`.
    pub(super) static CONTEXT: Viewer;
}

/// Who reads a page: who is signed in, and the CSRF token its forms (sign out,
/// resolve) carry. Handlers take it as an extractor (`viewer: Viewer`); the
/// authentication middleware (`web::auth`) makes it and puts it in the request. It lives
/// here, with the layout that shows it, so the error page (`web::error`) reads it
/// without reaching back into `web::auth`.
#[derive(Debug, Clone, Default)]
pub struct Viewer {
    pub user: Option<SignedIn>,
    pub csrf_token: String,
    /// What this request's CSRF tokens must be bound to (see the module comment).
    pub(super) csrf_binding: String,
}

#[derive(Debug, Clone)]
pub struct SignedIn {
    pub name: String,
    /// `resolver, viewer`.
    pub roles: String,
    pub can_resolve: bool,
    /// A login session, which the sign-out button ends.
    pub has_session: bool,
}

/// The reader of the request being handled (nobody outside a request), for an error
/// page: `IntoResponse` has no request to extract it from. Every other page takes its
/// [`Viewer`] as an extractor.
pub(crate) fn viewer_of_error_page() -> Viewer {
    CONTEXT.try_with(Clone::clone).unwrap_or_default()
}

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
