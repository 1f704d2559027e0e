//! The export's port: what `export` and `verify` read from the attempt log, owned
//! here so the export never names the store, and the rows it speaks in (the export's
//! contract: [`COLUMNS`], [`ExportRow`], [`ExportCells`]). `crate::store::Store`
//! implements it (`store/export.rs`, where the statements, their plans and the
//! decoding by position live).

mod filter;
mod range;
mod row;

pub use filter::{ExportFilter, FilterError};
pub use range::KeyRange;
pub use row::{COLUMNS, ExportCells, ExportRow, JsonText};

use crate::evidence::port::EvidenceStore;
use crate::guard::StoreError;
use futures::stream::BoxStream;
use std::future::Future;
use tokio::sync::mpsc;

/// A row as the database sent it, not yet decoded: its cells are borrowed from it
/// ([`RawRow::cells`]), not copied into the `String`s and JSON trees of an
/// [`ExportRow`], which were most of the exporter's allocations (docs/PERFORMANCE.md,
/// "Export").
pub trait RawRow: Send {
    /// The row's cells. A name that is no status or kind is corrupt data, as is a
    /// JSON column that is not JSON (found when its text is read).
    fn cells(&self) -> Result<ExportCells<'_>, StoreError>;
}

/// A row as `verify` reads it: `row.detail` is not decoded (it stays `null`), `detail`
/// holds the column's JSON text instead: the hash covers its JCS form, which is
/// written from the text.
pub struct VerifyRow {
    pub row: ExportRow,
    pub detail: String,
}

/// The batches of one key range, and the way back for batches checked, which the
/// reader decodes the next rows into (their strings overwritten, not allocated anew).
pub struct VerifyRows {
    pub(crate) batches: mpsc::Receiver<Result<Vec<VerifyRow>, StoreError>>,
    pub(crate) spent: mpsc::UnboundedSender<Vec<VerifyRow>>,
}

impl VerifyRows {
    /// The next batch, waiting for it; for a blocking thread, not the runtime's.
    pub fn next_blocking(&mut self) -> Option<Result<Vec<VerifyRow>, StoreError>> {
        self.batches.blocking_recv()
    }

    /// Hands a checked batch back to the reader.
    pub fn give_back(&self, batch: Vec<VerifyRow>) {
        // The reader may have finished: then the batch is simply dropped.
        let _ = self.spent.send(batch);
    }
}

/// The attempt log as the export and `verify` read it, beside the evidence tables
/// (the export's proofs, verify's checkpoints).
pub trait ExportStore: EvidenceStore + Clone {
    type Row: RawRow;

    /// Every attempt `filter` selects, with its record's context and chain head, in
    /// (key, seq) order, streamed (memory stays flat however many rows); dropping the
    /// stream stops it. One statement, so one snapshot: each row's record context and
    /// chain head are consistent with the attempts beside it.
    fn export_rows(&self, filter: &ExportFilter) -> BoxStream<'_, Result<Self::Row, StoreError>>;

    /// The attempts of the keys in `range` with their records, as an unfiltered
    /// [`ExportStore::export_rows`], but with the record's state only on the row at
    /// its `log_seq` (the one row `verify` compares it with), in batches read ahead
    /// while the caller checks the one before. Dropping the batches stops the reader.
    fn verify_rows(&self, range: KeyRange) -> VerifyRows;

    /// How many [`ExportStore::verify_rows`] can read at once (each holds a
    /// connection until its range is read).
    fn read_connections(&self) -> usize;

    /// Up to 100 keys whose record has no attempt rows left (verify reports them).
    fn records_without_attempts(
        &self,
    ) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;
}
