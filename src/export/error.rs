//! The export's one error type, below the pipeline and the evidence it reads.

use crate::guard::StoreError;
use std::io;

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The sink refused a chunk: a write failed, or an HTTP client went away.
    #[error("cannot write the export: {0}")]
    Io(#[from] io::Error),
}
