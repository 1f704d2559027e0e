//! Auditor downloads, streamed from the database row stream into the response body
//! (`Body::from_stream`): memory stays flat whatever the size.
//!
//! - `GET /export/attempts.csv`: RFC 4180 CSV with a header row.
//! - `GET /export/attempts.ndjson`: NDJSON whose last line is the manifest.
//! - `GET /export/attempts.manifest?format=csv|ndjson&…`: the manifest of the same
//!   query, for CSV downloads (which cannot carry one); every CSV response links to it
//!   (`Link: <…>; rel="describedby"`) with the same filters and a pinned `until`.
//!
//! Query parameters: `since`, `until`, `tenant`, `tool`, `key`, `business_ref`, as for
//! `idemwatch export`; `checkpoint=true` takes a signed checkpoint first (a server
//! with `--signing-key`, which also signs every manifest). Without `until`, the
//! request time is used, so a later manifest request selects the same rows.

use super::AppState;
use super::links::encode;
use super::problem::Problem;
use crate::export::{self, ChunkSink, CsvCells, Discard, ExportFilter, FilterError, Format};
use crate::guard::{Clock, SystemClock, rfc3339};
use crate::store::{Store, StoreError};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{FromRequestParts, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use tokio::sync::{OwnedSemaphorePermit, mpsc};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/export/attempts.csv", get(csv))
        .route("/export/attempts.ndjson", get(ndjson))
        .route("/export/attempts.manifest", get(manifest))
        // `auditor` and `admin` only: others get 403 before any row is read.
        .route_layer(axum::middleware::from_fn(super::auth::require_export))
}

/// The query string; empty values mean "no filter".
#[derive(Debug, Default)]
pub(crate) struct ExportQuery {
    since: Option<String>,
    until: Option<String>,
    tenant: Option<String>,
    tool: Option<String>,
    key: Option<String>,
    business_ref: Option<String>,
    format: Option<String>,
    raw: Option<String>,
    checkpoint: Option<String>,
}

/// Read by hand rather than with `Query<ExportQuery>`, whose rejection (a parameter
/// given twice, say) is a plain-text 400 naming no field: here every refusal is the
/// export's JSON error with the parameter named. Unknown parameters are ignored.
impl<S: Send + Sync> FromRequestParts<S> for ExportQuery {
    type Rejection = DownloadError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Query(pairs) = Query::<Vec<(String, String)>>::from_request_parts(parts, state)
            .await
            .map_err(|e| FilterError {
                field: "query",
                message: e.body_text(),
            })?;
        let mut query = ExportQuery::default();
        for (name, value) in pairs {
            let (field, slot) = match name.as_str() {
                "since" => ("since", &mut query.since),
                "until" => ("until", &mut query.until),
                "tenant" => ("tenant", &mut query.tenant),
                "tool" => ("tool", &mut query.tool),
                "key" => ("key", &mut query.key),
                "business_ref" => ("business_ref", &mut query.business_ref),
                "format" => ("format", &mut query.format),
                "raw" => ("raw", &mut query.raw),
                "checkpoint" => ("checkpoint", &mut query.checkpoint),
                _ => continue,
            };
            if slot.replace(value).is_some() {
                return Err(FilterError {
                    field,
                    message: "given more than once".into(),
                }
                .into());
            }
        }
        Ok(query)
    }
}

impl ExportQuery {
    /// `raw=true`: CSV cells as stored, formula-like ones included (docs/EXPORT.md).
    fn csv_cells(&self) -> Result<CsvCells, DownloadError> {
        match self.raw.as_deref().map(str::trim) {
            None | Some("" | "false" | "0") => Ok(CsvCells::Neutralised),
            Some("true" | "1") => Ok(CsvCells::Raw),
            Some(_) => Err(FilterError {
                field: "raw",
                message: "expected true or false".into(),
            }
            .into()),
        }
    }

    /// `checkpoint=true`: a checkpoint before the rows are read, so none is unsigned;
    /// a server without a signing key refuses it rather than export unsigned rows.
    fn signing(&self, state: &AppState) -> Result<export::Signing<Store>, DownloadError> {
        let bad = |message: &str| {
            DownloadError::from(FilterError {
                field: "checkpoint",
                message: message.into(),
            })
        };
        let checkpoint_now = match self.checkpoint.as_deref().map(str::trim) {
            None | Some("" | "false" | "0") => false,
            Some("true" | "1") => true,
            Some(_) => return Err(bad("expected true or false")),
        };
        if checkpoint_now && state.checkpointer.is_none() {
            return Err(bad(
                "this server signs no checkpoints: start `idemwatch serve` with --signing-key",
            ));
        }
        Ok(export::Signing {
            checkpointer: state.checkpointer.clone(),
            checkpoint_now,
        })
    }

    /// The filter, with `until` pinned to `now` when not given.
    fn filter(&self, now: DateTime<Utc>) -> Result<ExportFilter, DownloadError> {
        let mut filter = ExportFilter::parse(
            now,
            self.since.as_deref(),
            self.until.as_deref(),
            self.tenant.as_deref(),
            self.tool.as_deref(),
            self.key.as_deref(),
            self.business_ref.as_deref(),
        )?;
        if filter.until.is_none() {
            filter.until = Some(now);
            filter.validate()?;
        }
        Ok(filter)
    }
}

/// What an export request can answer besides the file.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DownloadError {
    /// A filter that cannot be used. 400, naming the parameter.
    #[error(transparent)]
    BadRequest(#[from] FilterError),
    /// 400.
    #[error("invalid format: {0}")]
    BadFormat(String),
    /// As many downloads as allowed are running. 429 with `Retry-After`.
    #[error("too many exports are running; try again in a minute")]
    Busy,
    /// The database cannot be read now. 503; the detail is logged, not shown.
    #[error("the database is unavailable; try again later")]
    Unavailable,
    /// 500; the detail is logged, not shown.
    #[error("the export failed; the error has been logged")]
    Internal,
}

impl From<StoreError> for DownloadError {
    fn from(e: StoreError) -> Self {
        tracing::error!(error = %e, "export failed");
        if e.is_unavailable() {
            DownloadError::Unavailable
        } else {
            DownloadError::Internal
        }
    }
}

impl IntoResponse for DownloadError {
    fn into_response(self) -> Response {
        let (status, code, title) = match &self {
            DownloadError::BadRequest(_) | DownloadError::BadFormat(_) => (
                StatusCode::BAD_REQUEST,
                "invalid",
                "That input cannot be read",
            ),
            DownloadError::Busy => (
                StatusCode::TOO_MANY_REQUESTS,
                "busy",
                "Too many downloads at once",
            ),
            DownloadError::Unavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "Database unavailable",
            ),
            DownloadError::Internal => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "Something went wrong",
            ),
        };
        let mut problem = Problem::new(status, code, title, self.to_string());
        match &self {
            DownloadError::BadRequest(e) => problem = problem.field(e.field),
            DownloadError::BadFormat(_) => problem = problem.field("format"),
            DownloadError::Unavailable => problem = problem.member("retry_after", 5),
            // Downloads take minutes: a minute before the next try.
            DownloadError::Busy => problem = problem.member("retry_after", 60),
            DownloadError::Internal => {}
        }
        problem.response()
    }
}

async fn csv(state: State<AppState>, query: ExportQuery) -> Result<Response, DownloadError> {
    download(state, query, Format::Csv).await
}

async fn ndjson(state: State<AppState>, query: ExportQuery) -> Result<Response, DownloadError> {
    download(state, query, Format::Ndjson).await
}

async fn download(
    State(state): State<AppState>,
    query: ExportQuery,
    format: Format,
) -> Result<Response, DownloadError> {
    let now = SystemClock.now();
    let filter = query.filter(now)?;
    let cells = query.csv_cells()?;
    let signing = query.signing(&state)?;
    // Held by the body until the download ends or the client goes away.
    let permit = slot(&state)?;
    let (tx, rx) = mpsc::channel::<Result<Bytes, StoreError>>(4);
    let store = state.store.clone();
    tokio::spawn(produce(store, filter.clone(), format, cells, signing, tx));
    let mut response = Response::new(body(rx, permit).await?);
    let raw = cells == CsvCells::Raw;
    set_headers(response.headers_mut(), &filter, format, raw, now);
    Ok(response)
}

/// A download's headers: its type, never cached or sniffed, its file name, and the
/// link to its manifest (`raw`: the CSV's raw cells).
fn set_headers(
    headers: &mut HeaderMap,
    filter: &ExportFilter,
    format: Format,
    raw: bool,
    now: DateTime<Utc>,
) {
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(format.content_type()),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    let name = file_name(filter, format, now);
    let manifest = manifest_url(filter, format) + if raw { "&raw=true" } else { "" };
    let named = [
        (
            header::CONTENT_DISPOSITION,
            format!("attachment; filename=\"{name}\""),
        ),
        (
            header::LINK,
            format!("<{manifest}>; rel=\"describedby\"; type=\"application/json\""),
        ),
    ];
    for (name, value) in named {
        if let Ok(v) = HeaderValue::from_str(&value) {
            headers.insert(name, v);
        }
    }
}

/// The download's body: the chunks `produce` sends, holding `permit` until the last.
/// It waits for the first chunk (or error) before answering, so a database that
/// cannot be read gets a proper 503 rather than a 200 with a broken body.
async fn body(
    mut rx: mpsc::Receiver<Result<Bytes, StoreError>>,
    permit: OwnedSemaphorePermit,
) -> Result<Body, DownloadError> {
    let first = rx.recv().await.ok_or(DownloadError::Internal)??;
    let rest = futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).map(move |chunk| {
        let _held = &permit;
        // A failure mid-stream can only abort the body: the client sees an incomplete
        // transfer, and an NDJSON file then lacks its manifest, which verify reports.
        chunk.map_err(|e| std::io::Error::other(e.to_string()))
    });
    Ok(Body::from_stream(
        futures::stream::once(async { Ok(first) }).chain(rest),
    ))
}

/// Encodes the rows into the body's channel (the export pipeline, chunks of about
/// [`export::CHUNK`] bytes); stops when the client goes.
async fn produce(
    store: Store,
    filter: ExportFilter,
    format: Format,
    cells: CsvCells,
    signing: export::Signing<Store>,
    tx: mpsc::Sender<Result<Bytes, StoreError>>,
) {
    let mut sink = BodySender(tx);
    match export::export_signed(&store, &filter, format, cells, &signing, &mut sink).await {
        Ok(_) | Err(export::ExportError::Io(_)) => {} // done, or the client went away
        Err(export::ExportError::Store(e)) => {
            tracing::error!(error = %e, "export stream failed");
            let _ = sink.0.send(Err(e)).await;
        }
    }
}

/// The response body's side of the channel: a chunk it cannot take means the
/// client went away.
struct BodySender(mpsc::Sender<Result<Bytes, StoreError>>);

impl ChunkSink for BodySender {
    async fn chunk(&mut self, bytes: Vec<u8>) -> std::io::Result<()> {
        self.0
            .send(Ok(Bytes::from(bytes)))
            .await
            .map_err(|_| std::io::ErrorKind::BrokenPipe.into())
    }
}

/// The manifest of a query: the same rows encoded the same way, hashed, discarded.
async fn manifest(
    State(state): State<AppState>,
    query: ExportQuery,
) -> Result<Response, DownloadError> {
    let format: Format = query
        .format
        .as_deref()
        .unwrap_or("csv")
        .parse()
        .map_err(DownloadError::BadFormat)?;
    let filter = query.filter(SystemClock.now())?;
    let cells = query.csv_cells()?;
    let signing = query.signing(&state)?;
    // A manifest is a whole export's work (every selected row read and hashed, a proof
    // per key gathered) without the file: it takes a slot like a download.
    let permit = slot(&state)?;
    let manifest =
        export::export_signed(&state.store, &filter, format, cells, &signing, &mut Discard)
            .await
            .map_err(|e| match e {
                export::ExportError::Store(e) => DownloadError::from(e),
                // Discarding never fails.
                export::ExportError::Io(_) => DownloadError::Internal,
            })?;
    let headers = [
        (header::CONTENT_TYPE, "application/json"),
        (header::CACHE_CONTROL, "no-store"),
    ];
    Ok((headers, manifest_body(manifest, permit)).into_response())
}

/// One of the [`MAX_EXPORTS`](super::MAX_EXPORTS) slots downloads and manifests share,
/// or 503 busy.
fn slot(state: &AppState) -> Result<OwnedSemaphorePermit, DownloadError> {
    state
        .exports
        .clone()
        .try_acquire_owned()
        .map_err(|_| DownloadError::Busy)
}

/// Written into the body as it is serialised, not first into one string: with
/// checkpoints a whole export's manifest is ~1.7 kB of proof a key (170 MB at 100 k
/// keys). The slot is held until the last byte is taken or the client goes. A chunk
/// that is an error (its proofs could not be read back) cuts the response off without
/// its last chunk, so the client sees a failed transfer, not a short manifest.
fn manifest_body(manifest: export::Manifest, permit: OwnedSemaphorePermit) -> Body {
    let (tx, mut rx) = mpsc::channel(4);
    tokio::task::spawn_blocking(move || {
        let _held = permit;
        export::ChunkWriter::new(tx).write_all_of(|body| manifest.write_pretty(body));
    });
    let chunks = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
    Body::from_stream(chunks.map(|c| c.map(Bytes::from)))
}

/// `idemwatch-attempts_tenant-acme_from-20261101T000000Z_to-20261201T000000Z.csv`:
/// the filters in the name, so a folder of downloads explains itself.
pub fn file_name(filter: &ExportFilter, format: Format, now: DateTime<Utc>) -> String {
    let stamp = |t: DateTime<Utc>| t.format("%Y%m%dT%H%M%SZ").to_string();
    let mut parts = vec!["idemwatch-attempts".to_string()];
    let mut add = |label: &str, value: &str| {
        let clean: String = value
            .chars()
            .take(40)
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        parts.push(format!("{label}-{clean}"));
    };
    if let Some(v) = &filter.tenant {
        add("tenant", v);
    }
    if let Some(v) = &filter.tool {
        add("tool", v);
    }
    if let Some(v) = &filter.business_ref {
        add("ref", v);
    }
    if let Some(v) = &filter.key {
        add("key", &v.as_str()[..12]);
    }
    if let Some(t) = filter.since {
        add("from", &stamp(t));
    }
    add("to", &stamp(filter.until.unwrap_or(now)));
    format!("{}.{}", parts.join("_"), format.as_str())
}

/// The manifest URL of a download, with its filters (and the pinned `until`).
pub(crate) fn manifest_url(filter: &ExportFilter, format: Format) -> String {
    let mut url = format!("/export/attempts.manifest?format={}", format.as_str());
    let times = [("since", filter.since), ("until", filter.until)];
    for (name, t) in times {
        if let Some(t) = t {
            url.push_str(&format!("&{name}={}", encode(&rfc3339(t))));
        }
    }
    let texts = [
        ("tenant", filter.tenant.as_deref()),
        ("tool", filter.tool.as_deref()),
        ("key", filter.key.as_ref().map(|k| k.as_str())),
        ("business_ref", filter.business_ref.as_deref()),
    ];
    for (name, v) in texts {
        if let Some(v) = v {
            url.push_str(&format!("&{name}={}", encode(v)));
        }
    }
    url
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_carry_the_filters_and_only_safe_characters() {
        let now = DateTime::parse_from_rfc3339("2026-12-01T09:30:00Z")
            .unwrap()
            .to_utc();
        let filter = ExportFilter {
            tenant: Some("acme \"ltd\"/eu".into()),
            since: Some(
                DateTime::parse_from_rfc3339("2026-11-01T00:00:00Z")
                    .unwrap()
                    .to_utc(),
            ),
            ..ExportFilter::default()
        };
        assert_eq!(
            file_name(&filter, Format::Csv, now),
            "idemwatch-attempts_tenant-acme__ltd__eu_from-20261101T000000Z_to-20261201T093000Z.csv"
        );
    }

    #[test]
    fn the_manifest_url_repeats_every_filter_encoded() {
        let filter = ExportFilter {
            business_ref: Some("order:A-1 & co".into()),
            until: Some(
                DateTime::parse_from_rfc3339("2026-12-01T09:30:00Z")
                    .unwrap()
                    .to_utc(),
            ),
            ..ExportFilter::default()
        };
        assert_eq!(
            manifest_url(&filter, Format::Csv),
            "/export/attempts.manifest?format=csv&until=2026-12-01T09%3A30%3A00.000000Z&business_ref=order%3AA-1%20%26%20co"
        );
    }
}
