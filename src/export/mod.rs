//! Auditor exports of the attempt log and tamper evidence.
//!
//! An export is the attempt rows a filter selects, each with its key's context, in
//! (key, seq) order, as RFC 4180 CSV or NDJSON, with a manifest (row count, time
//! range, filters, SHA-256 of the content). Every row carries `prev_hash` and `hash`,
//! so a file verifies on its own ([`verify_ndjson`], [`verify_csv`]) and the database
//! verifies in place ([`verify_database`]), with the same checks ([`ChainCheck`]).
//! docs/EXPORT.md is the reader's guide.

mod database;
mod encode;
mod error;
mod evidence;
mod manifest;
mod pipeline;
pub mod port;
mod problem;
mod ranges;
mod read;
mod row;
mod spool;
mod verify;

pub use crate::evidence::{Authenticity, TrustedKeys};
pub use database::{Outside, verify_database, verify_database_split, verify_database_with};
pub use encode::{EncodeRow, Encoder, spool_exported};
pub use error::ExportError;
pub use evidence::{EvidenceSource, LISTED_UP_TO};
pub use manifest::{CsvCells, Format, Manifest, ManifestSignature, Source};
pub use pipeline::{
    CHUNK, ChunkSink, ChunkWriter, Discard, Job, Signing, Writer, encode, export_signed,
};
pub use port::{COLUMNS, ExportFilter, ExportRow, ExportStore, FilterError};
pub use ranges::Split;
pub use read::{
    FileEvidence, ndjson_manifest, sha256_of, verify_csv, verify_csv_with, verify_ndjson,
    verify_ndjson_with,
};
pub use row::canonical_detail;
pub use spool::Spool;
pub use verify::{Break, ChainCheck, Finding, Report};

use tokio::io::{AsyncWrite, AsyncWriteExt};

#[cfg(test)]
pub(crate) use row::tests;

/// Streams the export selected by `filter` into `out` and returns its manifest (for
/// NDJSON also written as the last line).
pub async fn export_to<W: AsyncWrite + Unpin + Send>(
    store: &impl ExportStore,
    filter: &ExportFilter,
    format: Format,
    cells: CsvCells,
    out: &mut W,
) -> Result<Manifest, ExportError> {
    let unsigned = Signing {
        checkpointer: None,
        checkpoint_now: false,
    };
    export_signed_to(store, filter, format, cells, &unsigned, out).await
}

/// [`export_to`], signed as `signing` says ([`export_signed`]).
pub async fn export_signed_to<S: ExportStore, W: AsyncWrite + Unpin + Send>(
    store: &S,
    filter: &ExportFilter,
    format: Format,
    cells: CsvCells,
    signing: &Signing<S>,
    out: &mut W,
) -> Result<Manifest, ExportError> {
    let manifest = export_signed(
        store,
        filter,
        format,
        cells,
        signing,
        &mut Writer(&mut *out),
    )
    .await?;
    out.flush().await?;
    Ok(manifest)
}
