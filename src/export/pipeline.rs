//! The one way rows become a file: a row stream is encoded into chunks of about
//! [`CHUNK`] bytes, each handed to a [`ChunkSink`] (a file, stdout, an HTTP body, or
//! nowhere when only the manifest is wanted), and the manifest comes back at the end.
//! `idemwatch export`, the HTTP downloads, the manifest endpoint and the pruner's
//! archive all run [`encode`], so they cannot disagree on a byte or a hash.

use super::encode::{EncodeRow, Encoder, write_ndjson_manifest};
use super::error::ExportError;
use super::evidence::EvidenceSource;
use super::manifest::{CsvCells, Format, Manifest, Source};
use super::port::{ExportFilter, ExportStore};
use crate::evidence::port::EvidenceStore;
use crate::evidence::{Checkpointer, Proofs};
use crate::guard::StoreError;
use ed25519_dalek::SigningKey;
use futures::{Stream, StreamExt};
use std::future::Future;
use std::io;
use std::sync::Arc;
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// Bytes gathered before a write: large enough for few syscalls, small enough that
/// memory stays flat.
pub const CHUNK: usize = 64 * 1024;

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
/// the checkpoint evidence it carries (read from an `S`).
pub struct Job<S> {
    pub format: Format,
    pub source: Source,
    pub filter: ExportFilter,
    pub cells: CsvCells,
    pub evidence: Option<EvidenceSource<S>>,
    /// Signs the manifest (docs/EXPORT.md, "Signed manifests"); none: unsigned.
    pub signer: Option<Arc<SigningKey>>,
}

/// How an export is signed: its manifest with the checkpoint signing key, and, when
/// asked, after a checkpoint taken for it, so that no row in it is left unsigned.
#[derive(Clone)]
pub struct Signing<S> {
    /// The server's checkpointer, whose key signs; none: the export is unsigned.
    pub checkpointer: Option<Checkpointer<S>>,
    /// Take a checkpoint before the rows are read (`--checkpoint`, `?checkpoint=true`).
    pub checkpoint_now: bool,
}

/// Encodes `rows` into `sink` and returns the manifest (for NDJSON also written as
/// the file's last line). Stops at the first error of either side.
pub async fn encode<R, T, S, K>(job: Job<S>, rows: R, sink: &mut K) -> Result<Manifest, ExportError>
where
    R: Stream<Item = Result<T, StoreError>>,
    T: EncodeRow,
    S: EvidenceStore + Clone,
    K: ChunkSink,
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
        Some(source) => Some(source.evidence(encoder.exported()?).await?),
        None => None,
    };
    let mut manifest = encoder.manifest(evidence);
    if let Some(key) = &job.signer {
        manifest.sign(key);
    }
    let streamed = manifest
        .evidence
        .as_ref()
        .is_some_and(|e| matches!(e.proofs, Proofs::Streamed(_)));
    match manifest.format {
        // A whole export's manifest line holds a proof a key (~1.7 kB each): written
        // by a blocking thread in chunks as the proofs are read back from their files,
        // never whole in memory.
        Format::Ndjson if streamed => {
            sink.chunk(buf).await?;
            let (tx, mut rx) = tokio::sync::mpsc::channel(4);
            let line = manifest.clone();
            let writer = tokio::task::spawn_blocking(move || {
                let out = ChunkWriter::new(tx);
                out.write_all_of(|out| write_ndjson_manifest(&line, out));
            });
            while let Some(chunk) = rx.recv().await {
                sink.chunk(chunk?).await?; // on an error the writer stops at its next chunk
            }
            // The channel also closes if the writer panicked: never a short line taken
            // for a whole one.
            writer.await.map_err(io::Error::other)?;
        }
        Format::Ndjson => {
            write_ndjson_manifest(&manifest, &mut buf)?;
            sink.chunk(buf).await?;
        }
        Format::Csv => sink.chunk(buf).await?,
    }
    Ok(manifest)
}

/// A blocking writer that hands what is written to an async task in chunks of about
/// [`CHUNK`] bytes (a manifest serialised on a blocking thread, into a file's last
/// line or an HTTP body); a write fails once the receiver has gone.
pub struct ChunkWriter {
    tx: tokio::sync::mpsc::Sender<io::Result<Vec<u8>>>,
    buf: Vec<u8>,
}

impl ChunkWriter {
    pub fn new(tx: tokio::sync::mpsc::Sender<io::Result<Vec<u8>>>) -> Self {
        ChunkWriter {
            tx,
            buf: Vec::with_capacity(CHUNK),
        }
    }

    fn send(&mut self) -> io::Result<()> {
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK));
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| io::ErrorKind::BrokenPipe.into())
    }

    /// Runs `write` into this writer and sends what is left, or the error, so that the
    /// receiver never takes a cut-off text for a whole one.
    pub(crate) fn write_all_of(mut self, write: impl FnOnce(&mut Self) -> io::Result<()>) {
        let sent = write(&mut self).and_then(|()| match self.buf.is_empty() {
            true => Ok(()),
            false => self.send(),
        });
        if let Err(e) = sent
            && e.kind() != io::ErrorKind::BrokenPipe
        {
            let _ = self.tx.blocking_send(Err(e));
        }
    }
}

impl io::Write for ChunkWriter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(bytes.len())
    }

    /// Chunks go when full or at the end of [`ChunkWriter::write_all_of`]; flushing
    /// sends nothing.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The export `filter` selects, with the proofs of the newest checkpoint, signed as
/// `signing` says: with a checkpoint first when asked (a row committed between that
/// checkpoint and the read stays unsigned, and verify counts it), and the manifest
/// signed with the checkpoint key.
pub async fn export_signed<S: ExportStore, K: ChunkSink>(
    store: &S,
    filter: &ExportFilter,
    format: Format,
    cells: CsvCells,
    signing: &Signing<S>,
    sink: &mut K,
) -> Result<Manifest, ExportError> {
    if signing.checkpoint_now {
        let checkpointer = signing.checkpointer.as_ref().ok_or_else(|| {
            StoreError::Config("a checkpoint at export time needs a signing key".into())
        })?;
        checkpointer
            .checkpoint()
            .await
            .map_err(|e| match e.downcast::<StoreError>() {
                Ok(e) => e,
                Err(e) => StoreError::Other(format!("the export's checkpoint failed: {e:#}")),
            })?;
    }
    let job = Job {
        format,
        source: Source::Export,
        filter: filter.clone(),
        cells,
        evidence: EvidenceSource::newest(store).await?,
        signer: signing.checkpointer.as_ref().map(Checkpointer::key),
    };
    encode(job, store.export_rows(filter), sink).await
}
