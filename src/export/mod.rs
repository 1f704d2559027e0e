//! Auditor exports of the attempt log and tamper evidence.
//!
//! An export is the attempt rows a filter selects, each with its key's context, in
//! (key, seq) order, as RFC 4180 CSV or NDJSON, with a manifest (row count, time
//! range, filters, SHA-256 of the content). Every row carries `prev_hash` and `hash`,
//! so a file verifies on its own ([`verify_ndjson`], [`verify_csv`]) and the database
//! verifies in place ([`verify_database`]), with the same checks ([`ChainCheck`]).
//! docs/EXPORT.md is the reader's guide.

mod encode;
mod filter;
mod manifest;
mod problem;
mod read;
mod row;
mod verify;

pub use encode::Encoder;
pub use filter::{ExportFilter, FilterError, parse_time};
pub use manifest::{Format, Manifest, Source};
pub use read::{sha256_of, verify_csv, verify_ndjson};
pub use row::{COLUMNS, ChainHead, ExportRow, canonical_detail};
pub use verify::{Break, ChainCheck, Problem, Report};

use crate::store::{Store, StoreError};
use futures::StreamExt;
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// Bytes gathered before a write: large enough for few syscalls, small enough that
/// memory stays flat.
pub const CHUNK: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot write the export: {0}")]
    Io(#[from] std::io::Error),
}

/// Streams the export selected by `filter` into `out` and returns its manifest (for
/// NDJSON also written as the last line).
pub async fn export_to<W: AsyncWrite + Unpin>(
    store: &Store,
    filter: &ExportFilter,
    format: Format,
    out: &mut W,
) -> Result<Manifest, ExportError> {
    let mut buf = Vec::with_capacity(CHUNK * 2);
    let mut encoder = Encoder::start(format, Source::Export, filter.clone(), &mut buf);
    let mut rows = store.export_rows(filter);
    while let Some(item) = rows.next().await {
        let (row, _head) = item?;
        encoder.row(&row, &mut buf);
        if buf.len() >= CHUNK {
            out.write_all(&buf).await?;
            buf.clear();
        }
    }
    let manifest = encoder.finish(&mut buf);
    out.write_all(&buf).await?;
    out.flush().await?;
    Ok(manifest)
}

/// Checks every key's chain in the database against its record's head, streaming.
pub async fn verify_database(store: &Store) -> Result<Report, StoreError> {
    let mut check = ChainCheck::new();
    let mut rows = store.export_rows(&ExportFilter::default());
    while let Some(item) = rows.next().await {
        let (row, head) = item?;
        check.push(&row, Some(&head), None);
    }
    drop(rows);
    for key in store.records_without_attempts().await? {
        check.record_without_attempts(&key);
    }
    Ok(check.finish(false))
}
