//! The one error type of the web layer. Each variant says which status it answers
//! with; `IntoResponse` renders `templates/error.html`, and [`json_under_api`] turns
//! the same error into JSON for paths under `/api/`. Internal errors are logged once,
//! here, and shown as a generic message: no database text or trace reaches a page.

use super::pages::Layout;
use crate::guard::GuardError;
use crate::store::StoreError;
use askama::Template;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};
use serde_json::json;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// 400: a query parameter or path segment cannot be read. `message` names the form
    /// expected ("expected RFC 3339 … or now-1h").
    #[error("{field}: {message}")]
    BadRequest {
        field: &'static str,
        message: String,
    },
    /// 401: nobody has signed in (no session, no valid token, no trusted proxy
    /// header). The text says how to sign in.
    #[error("{0}")]
    Unauthorized(String),
    /// 403: signed in, but without the role this needs (the text names it), or a
    /// form without a valid CSRF token. Nothing was changed.
    #[error("{0}")]
    Forbidden(String),
    /// 421: without an auth file, a request addressed to a host name that is neither
    /// loopback nor `--allowed-host` (DNS rebinding). The text names the flag.
    #[error("{0}")]
    MisdirectedHost(String),
    /// 404: no such key, page or file. The text says what was looked for.
    #[error("{0}")]
    NotFound(String),
    /// 409: the key changed since the person looked at it, or a worker holds it now.
    /// Nothing was overwritten.
    #[error("{0}")]
    Conflict(String),
    /// 422: the request is well formed but the key is not in a state it applies to
    /// (already decided; release after the provider forgot the key).
    #[error("{0}")]
    Unprocessable(String),
    /// 503: the database cannot be reached now; the page says to retry.
    #[error("the database is unavailable")]
    Unavailable(#[source] StoreError),
    /// 503 without `Retry-After`: this instance reads from a read-only standby, so a
    /// write (resolving a key) can never succeed here; the page says to use the
    /// instance connected to the primary.
    #[error("this instance reads from a read-only standby")]
    ReadOnly(#[source] StoreError),
    /// 500: anything else. The cause is logged, never shown.
    #[error("internal error")]
    Internal(String),
}

impl Error {
    pub fn bad_request(field: &'static str, message: impl Into<String>) -> Self {
        Error::BadRequest {
            field,
            message: message.into(),
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Error::BadRequest { .. } => StatusCode::BAD_REQUEST,
            Error::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Error::Forbidden(_) => StatusCode::FORBIDDEN,
            Error::MisdirectedHost(_) => StatusCode::MISDIRECTED_REQUEST,
            Error::NotFound(_) => StatusCode::NOT_FOUND,
            Error::Conflict(_) => StatusCode::CONFLICT,
            Error::Unprocessable(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Error::Unavailable(_) | Error::ReadOnly(_) => StatusCode::SERVICE_UNAVAILABLE,
            Error::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// What a person reads: a heading and one sentence they can act on.
    fn public(&self) -> (&'static str, String) {
        match self {
            Error::BadRequest { .. } => ("That input cannot be read", self.to_string()),
            Error::Unauthorized(how) => ("Sign in first", how.clone()),
            Error::Forbidden(why) => ("Not allowed", why.clone()),
            Error::MisdirectedHost(why) => ("Not served under this name", why.clone()),
            Error::NotFound(what) => ("Not found", what.clone()),
            Error::Conflict(what) => ("Someone else acted first", what.clone()),
            Error::Unprocessable(why) => ("Not possible for this key", why.clone()),
            Error::Unavailable(_) => (
                "Database unavailable",
                "The database cannot be reached right now. Nothing was changed; try again in a moment."
                    .to_string(),
            ),
            Error::ReadOnly(_) => (
                "Read-only replica",
                "This idemwatch reads from a read-only standby database, which cannot record changes. \
                 Nothing was changed: resolve keys on the idemwatch connected to the primary database."
                    .to_string(),
            ),
            Error::Internal(_) => (
                "Something went wrong",
                "The page could not be shown. The error has been logged.".to_string(),
            ),
        }
    }
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound => Error::NotFound("Nothing is recorded under that name.".into()),
            e @ StoreError::Unavailable(_) => Error::Unavailable(e),
            e @ StoreError::ReadOnly(_) => Error::ReadOnly(e),
            other => Error::Internal(other.to_string()),
        }
    }
}

/// The one place a guard answer becomes an HTTP status.
impl From<GuardError> for Error {
    fn from(e: GuardError) -> Self {
        match e {
            GuardError::Invalid { field, message } => Error::BadRequest { field, message },
            GuardError::InvalidCall(k) => Error::bad_request("key", k.to_string()),
            GuardError::NotFound(key) => Error::NotFound(format!("No key {key} is recorded.")),
            e @ (GuardError::Conflict { .. } | GuardError::InFlight { .. }) => {
                Error::Conflict(e.to_string())
            }
            e @ (GuardError::NotResolvable { .. } | GuardError::PayloadMismatch { .. }) => {
                Error::Unprocessable(e.to_string())
            }
            GuardError::Store(e) => Error::from(e),
            other => Error::Internal(other.to_string()),
        }
    }
}

impl From<askama::Error> for Error {
    fn from(e: askama::Error) -> Self {
        Error::Internal(format!("template: {e}"))
    }
}

/// What the JSON conversion needs, carried from the HTML response to the middleware.
#[derive(Debug, Clone)]
struct Report {
    status: StatusCode,
    title: &'static str,
    message: String,
    field: Option<&'static str>,
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage<'a> {
    layout: Layout,
    status: u16,
    title: &'a str,
    message: &'a str,
    field: Option<&'static str>,
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let status = self.status();
        match &self {
            Error::Internal(cause) => tracing::error!(%cause, "request failed"),
            Error::Unavailable(cause) => tracing::warn!(%cause, "database unavailable"),
            _ => {}
        }
        let (title, message) = self.public();
        let field = match &self {
            Error::BadRequest { field, .. } => Some(*field),
            _ => None,
        };
        let page = ErrorPage {
            layout: Layout::new(title, ""),
            status: status.as_u16(),
            title,
            message: &message,
            field,
        };
        let body = page.render().unwrap_or_else(|e| {
            tracing::error!(error = %e, "error page failed to render");
            format!("{} {title}", status.as_u16())
        });
        let mut response = (status, Html(body)).into_response();
        if matches!(self, Error::Unavailable(_)) {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        }
        if status == StatusCode::UNAUTHORIZED {
            // Scripts authenticate with `Authorization: Bearer <token>`.
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"idemwatch\""),
            );
        }
        response.extensions_mut().insert(Report {
            status,
            title,
            message,
            field,
        });
        response
    }
}

/// Middleware: an error answered under `/api/` or `/export/` (script paths) becomes
/// `{"error": {"status": 404, "title": "…", "message": "…", "field": null}}`.
pub async fn json_under_api(request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let api = path.starts_with("/api/") || path.starts_with("/export/");
    let response = next.run(request).await;
    if !api {
        return response;
    }
    let Some(report) = response.extensions().get::<Report>().cloned() else {
        return response;
    };
    let retry_after = response.headers().get(header::RETRY_AFTER).cloned();
    let challenge = response.headers().get(header::WWW_AUTHENTICATE).cloned();
    let cookies: Vec<_> = response
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .cloned()
        .collect();
    let body = json!({ "error": {
        "status": report.status.as_u16(),
        "title": report.title,
        "message": report.message,
        "field": report.field,
    }});
    let mut json = (report.status, axum::Json(body)).into_response();
    let headers = json.headers_mut();
    if let Some(v) = retry_after {
        headers.insert(header::RETRY_AFTER, v);
    }
    if let Some(v) = challenge {
        headers.insert(header::WWW_AUTHENTICATE, v);
    }
    for c in cookies {
        headers.append(header::SET_COOKIE, c);
    }
    json
}

/// Any path no router claims.
pub async fn no_such_page() -> Error {
    Error::NotFound("There is no page at this address.".into())
}

/// A handler that panicked: a plain 500 page, logged once; the server keeps serving.
pub fn panicked(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    Error::Internal("a handler panicked".into()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_variant_answers_with_its_status() {
        let cases = [
            (Error::bad_request("from", "x"), 400),
            (Error::NotFound("k".into()), 404),
            (Error::from(StoreError::Unavailable("down".into())), 503),
            (
                Error::from(StoreError::ReadOnly(
                    "cannot execute UPDATE in a read-only transaction".into(),
                )),
                503,
            ),
            (
                Error::from(StoreError::Other("syntax error at or near".into())),
                500,
            ),
            (Error::from(StoreError::NotFound), 404),
            (Error::Unauthorized("sign in".into()), 401),
            (Error::Forbidden("needs resolver".into()), 403),
        ];
        for (e, want) in cases {
            assert_eq!(e.status().as_u16(), want, "{e:?}");
        }
    }

    #[test]
    fn each_guard_refusal_maps_to_the_status_it_means() {
        use crate::guard::Status;
        let now = chrono::Utc::now();
        let cases = [
            (
                GuardError::Invalid {
                    field: "evidence",
                    message: "x".into(),
                },
                400,
            ),
            (GuardError::NotFound("k".into()), 404),
            (
                GuardError::Conflict {
                    key: "k".into(),
                    status: Status::Done,
                    token: 3,
                },
                409,
            ),
            (
                GuardError::InFlight {
                    key: "k".into(),
                    lease_until: now,
                },
                409,
            ),
            (
                GuardError::NotResolvable {
                    key: "k".into(),
                    status: Status::Unknown,
                    why: "forgot".into(),
                },
                422,
            ),
            (GuardError::Store(StoreError::Unavailable("x".into())), 503),
        ];
        for (e, want) in cases {
            let label = format!("{e:?}");
            assert_eq!(Error::from(e).status().as_u16(), want, "{label}");
        }
        let e = Error::from(GuardError::Invalid {
            field: "evidence",
            message: "x".into(),
        });
        assert!(matches!(
            e,
            Error::BadRequest {
                field: "evidence",
                ..
            }
        ));
    }

    #[test]
    fn a_write_refused_by_a_standby_points_at_the_primary_without_retry_after() {
        let e = Error::from(GuardError::Store(StoreError::ReadOnly(
            "cannot execute UPDATE in a read-only transaction".into(),
        )));
        assert_eq!(e.status().as_u16(), 503);
        assert!(e.public().1.contains("primary"), "{:?}", e.public());
        let response = e.into_response();
        assert!(response.headers().get(header::RETRY_AFTER).is_none());
    }

    #[test]
    fn internal_causes_never_reach_the_reader() {
        let e = Error::from(StoreError::Other("relation \"x\" does not exist".into()));
        let (_, message) = e.public();
        assert!(!message.contains("relation"), "{message}");
        let e = Error::from(StoreError::Unavailable(
            "connection refused 10.0.0.5".into(),
        ));
        assert!(!e.public().1.contains("10.0.0.5"));
    }
}
