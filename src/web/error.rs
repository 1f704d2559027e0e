//! The one error type of the web layer. Each variant says which status it answers
//! with; `IntoResponse` renders `templates/error.html`, and [`json_under_api`] turns
//! the same error into an RFC 9457 problem document (`super::problem`) for paths under
//! `/api/` and `/export/`, as it does axum's own rejections. Internal errors are logged
//! once, here, and shown as a generic message: no database text or trace reaches a page.

use super::layout::Layout;
use super::problem::{self, Problem};
use crate::store::StoreError;
use askama::Template;
use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};

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
    /// A refusal with its own code and members: the guard's answers (409 `in_flight`
    /// with `Retry-After`, 422 `payload_mismatch` with `differing_fields`…), built by
    /// [`Error::guard`]. Its status is the problem's.
    #[error("{}", .0.detail)]
    Refused(Box<Problem>),
}

impl Error {
    pub(crate) fn bad_request(field: &'static str, message: impl Into<String>) -> Self {
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
            Error::Unavailable(_) | Error::ReadOnly(_) => StatusCode::SERVICE_UNAVAILABLE,
            Error::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Error::Refused(p) => p.status,
        }
    }

    /// A refusal with a code of its own (see [`Error::Refused`]).
    pub fn refused(problem: Problem) -> Self {
        Error::Refused(Box::new(problem))
    }

    /// The error as a problem document: code, title, detail, field and members.
    pub fn problem(&self) -> Problem {
        if let Error::Refused(p) = self {
            return (**p).clone();
        }
        let (title, detail) = self.public();
        let code = match self {
            Error::BadRequest { .. } => "invalid",
            Error::Unauthorized(_) => "unauthorized",
            Error::Forbidden(_) => "forbidden",
            Error::NotFound(_) => "not_found",
            Error::Unavailable(_) => "unavailable",
            Error::ReadOnly(_) => "read_only",
            Error::MisdirectedHost(_) => "misdirected_host",
            Error::Internal(_) | Error::Refused(_) => "internal",
        };
        let mut p = Problem::new(self.status(), code, title, detail);
        match self {
            Error::BadRequest { field, .. } => p = p.field(*field),
            Error::Unavailable(_) => p = p.member("retry_after", 5),
            _ => {}
        }
        p
    }

    /// What a person reads: a heading and one sentence they can act on.
    fn public(&self) -> (&'static str, String) {
        match self {
            Error::BadRequest { .. } => ("That input cannot be read", self.to_string()),
            Error::Unauthorized(how) => ("Sign in first", how.clone()),
            Error::Forbidden(why) => ("Not allowed", why.clone()),
            Error::MisdirectedHost(why) => ("Not served under this name", why.clone()),
            Error::NotFound(what) => ("Not found", what.clone()),
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
            Error::Refused(p) => (p.title, p.detail.clone()),
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

impl From<askama::Error> for Error {
    fn from(e: askama::Error) -> Self {
        Error::Internal(format!("template: {e}"))
    }
}

tokio::task_local! {
    /// Set by [`json_under_api`] while it handles a script path: errors are rendered
    /// as problem documents directly, without an HTML page first.
    static WANTS_PROBLEM: bool;
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage<'a> {
    layout: Layout,
    status: u16,
    title: &'a str,
    message: &'a str,
    field: Option<&'a str>,
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let status = self.status();
        match &self {
            Error::Internal(cause) => tracing::error!(%cause, "request failed"),
            Error::Unavailable(cause) => tracing::warn!(%cause, "database unavailable"),
            _ => {}
        }
        let problem = self.problem();
        let mut response = if WANTS_PROBLEM.try_with(|w| *w).unwrap_or(false) {
            problem.response()
        } else {
            let page = ErrorPage {
                layout: Layout::new(problem.title, "", &super::layout::viewer_of_error_page()),
                status: status.as_u16(),
                title: problem.title,
                message: &problem.detail,
                field: problem.field.as_deref(),
            };
            let body = page.render().unwrap_or_else(|e| {
                tracing::error!(error = %e, "error page failed to render");
                format!("{} {}", status.as_u16(), problem.title)
            });
            let mut r = (status, Html(body)).into_response();
            problem.add_headers(&mut r);
            r
        };
        if status == StatusCode::UNAUTHORIZED {
            // Scripts authenticate with `Authorization: Bearer <token>`.
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"idemwatch\""),
            );
        }
        response
    }
}

/// Whether errors on `path` are answered as problem documents (script paths).
pub(crate) fn is_script_path(path: &str) -> bool {
    path.starts_with("/api/") || path.starts_with("/export/")
}

/// On `/api/` and `/export/` (`script_path`) every error is an RFC 9457 problem
/// document: ours are rendered so directly, and an error response from anywhere else
/// (axum's extractor rejections: a body that is not JSON, a wrong content type or
/// method, a body too large) is rewritten into one, its text as the detail. `handled`
/// is the rest of the request's handling (`super::every_request`).
pub(crate) async fn json_under_api(
    script_path: bool,
    handled: impl Future<Output = Response>,
) -> Response {
    if !script_path {
        return handled.await;
    }
    let response = WANTS_PROBLEM.scope(true, handled).await;
    let status = response.status();
    let done = response.extensions().get::<problem::Rendered>().is_some();
    if done || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 16 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    // A rejection of the body (415 without a JSON content type, 422 for JSON of the
    // wrong shape) is a malformed request: 400, as every other malformed field.
    let status = match status {
        StatusCode::UNSUPPORTED_MEDIA_TYPE | StatusCode::UNPROCESSABLE_ENTITY => {
            StatusCode::BAD_REQUEST
        }
        s => s,
    };
    let (code, title) = problem::for_status(status);
    let detail = if text.is_empty() || status.is_server_error() {
        title.to_string()
    } else {
        text
    };
    let mut p = Problem::new(status, code, title, detail);
    if status == StatusCode::BAD_REQUEST {
        p = p.field("body");
    }
    parts.status = status;
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(problem::CONTENT_TYPE),
    );
    Response::from_parts(parts, Body::from(p.to_json().to_string()))
}

/// Any path no router claims.
pub(crate) async fn no_such_page() -> Error {
    Error::NotFound("There is no page at this address.".into())
}

/// A handler that panicked: a plain 500 page, logged once; the server keeps serving.
pub fn panicked(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    Error::Internal("a handler panicked".into()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::GuardError;

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
                    token: crate::guard::FencingToken(3),
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
