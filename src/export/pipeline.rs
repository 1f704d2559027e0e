//! The one way rows become a file: a row stream is encoded into chunks of about
//! [`CHUNK`] bytes, each handed to a [`ChunkSink`] (a file, stdout, an HTTP body, or
//! nowhere when only the manifest is wanted), and the manifest comes back at the end.
//! `idemwatch export`, the HTTP downloads, the manifest endpoint and the pruner's
//! archive all run [`encode`], so they cannot disagree on a byte or a hash.

use super::encode::{EncodeRow, Encoder};
use super::evidence::EvidenceSource;
use super::manifest::{CsvCells, Format, Manifest, Source};
use crate::store::{ExportFilter, Store, StoreError};
use futures::{Stream, StreamExt};
use std::future::Future;
use std::io;
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// Bytes gathered before a write: large enough for few syscalls, small enough that
/// memory stays flat.
pub const CHUNK: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The sink refused a chunk: a write failed, or an HTTP client went away.
    #[error("cannot write the export: {0}")]
    Io(#[from] io::Error),
}

/// Where encoded chunks go.
pub trait ChunkSink {
    /// Takes the next chunk (the last one may be short, or empty).
    fn chunk(&mut self, bytes: Vec<u8>) -> impl Future<Output = io::Result<()>> + Send;
}

/// Chunks written to a file or stdout; the caller flushes (and syncs) at the end.
pub struct Writer<'a, W>(pub &'a mut W);

impl<W: AsyncWrite + Unpin + Send> ChunkSink for Writer<'_, W> {
    async fn chunk(&mut self, bytes: Vec<u8>) -> io::Result<()> {
        self.0.write_all(&bytes).await
    }
}

/// Chunks dropped: the manifest of a query without its file.
pub struct Discard;

impl ChunkSink for Discard {
    async fn chunk(&mut self, _bytes: Vec<u8>) -> io::Result<()> {
        Ok(())
    }
}

/// What one file is: its format, why it exists, the filter its manifest names, and
/// the checkpoint evidence it carries.
pub struct Job {
    pub format: Format,
    pub source: Source,
    pub filter: ExportFilter,
    pub cells: CsvCells,
    pub evidence: Option<EvidenceSource>,
}

/// Encodes `rows` into `sink` and returns the manifest (for NDJSON also written as
/// the file's last line). Stops at the first error of either side.
pub async fn encode<R, T, S>(job: Job, rows: R, sink: &mut S) -> Result<Manifest, ExportError>
where
    R: Stream<Item = Result<T, StoreError>>,
    T: EncodeRow,
    S: ChunkSink,
{
    let mut rows = std::pin::pin!(rows);
    let mut buf = Vec::with_capacity(CHUNK * 2);
    let mut encoder = Encoder::start(job.format, job.source, job.filter, &mut buf)
        .proving(job.evidence.is_some())
        .csv_cells(job.cells);
    while let Some(row) = rows.next().await {
        row?.encode(&mut encoder, &mut buf)?;
        if buf.len() >= CHUNK {
            let full = std::mem::replace(&mut buf, Vec::with_capacity(CHUNK * 2));
            sink.chunk(full).await?;
        }
    }
    let evidence = match &job.evidence {
        Some(source) => Some(source.evidence(encoder.exported()).await?),
        None => None,
    };
    let manifest = encoder.finish(&mut buf, evidence);
    sink.chunk(buf).await?;
    Ok(manifest)
}

/// The export `filter` selects, with the proofs of the newest checkpoint.
pub async fn export_into<S: ChunkSink>(
    store: &Store,
    filter: &ExportFilter,
    format: Format,
    cells: CsvCells,
    sink: &mut S,
) -> Result<Manifest, ExportError> {
    let job = Job {
        format,
        source: Source::Export,
        filter: filter.clone(),
        cells,
        evidence: EvidenceSource::newest(store).await?,
    };
    encode(job, store.export_rows(filter), sink).await
}
