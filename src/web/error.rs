//! The one error type of the web layer. Each variant says which status it answers
//! with; `IntoResponse` renders `templates/error.html`, and [`json_under_api`] turns
//! the same error into JSON for paths under `/api/`. Internal errors are logged once,
//! here, and shown as a generic message: no database text or trace reaches a page.

use super::pages::Layout;
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
    /// 404: no such key, page or file. The text says what was looked for.
    #[error("{0}")]
    NotFound(String),
    /// 503: the database cannot be reached now; the page says to retry.
    #[error("the database is unavailable")]
    Unavailable(#[source] StoreError),
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
            Error::NotFound(_) => StatusCode::NOT_FOUND,
            Error::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Error::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// What a person reads: a heading and one sentence they can act on.
    fn public(&self) -> (&'static str, String) {
        match self {
            Error::BadRequest { .. } => ("That filter cannot be read", self.to_string()),
            Error::NotFound(what) => ("Not found", what.clone()),
            Error::Unavailable(_) => (
                "Database unavailable",
                "The database cannot be reached right now. Nothing was changed; try again in a moment."
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
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
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

/// Middleware: an error answered under `/api/` becomes
/// `{"error": {"status": 404, "title": "…", "message": "…", "field": null}}`.
pub async fn json_under_api(request: Request, next: Next) -> Response {
    let api = request.uri().path().starts_with("/api/");
    let response = next.run(request).await;
    if !api {
        return response;
    }
    let Some(report) = response.extensions().get::<Report>().cloned() else {
        return response;
    };
    let retry_after = response.headers().get(header::RETRY_AFTER).cloned();
    let body = json!({ "error": {
        "status": report.status.as_u16(),
        "title": report.title,
        "message": report.message,
        "field": report.field,
    }});
    let mut json = (report.status, axum::Json(body)).into_response();
    if let Some(v) = retry_after {
        json.headers_mut().insert(header::RETRY_AFTER, v);
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
                Error::from(StoreError::Other("syntax error at or near".into())),
                500,
            ),
            (Error::from(StoreError::NotFound), 404),
        ];
        for (e, want) in cases {
            assert_eq!(e.status().as_u16(), want, "{e:?}");
        }
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
