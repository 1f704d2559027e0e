//! The archive: each pruned batch becomes one NDJSON file in the export format, with
//! its manifest line, written and fsynced before the rows are deleted. A file is
//! written as `.NAME.partial` and renamed when complete, so a visible archive file
//! is always whole; `idemwatch verify --file` checks it like any export.

use crate::export::{
    self, CsvCells, ExportError, ExportFilter, ExportRow, Format, Job, Manifest, Source, Writer,
};
use crate::store::{Store, StoreError};
use chrono::Utc;
use futures::Stream;
use std::io;
use std::path::{Path, PathBuf};
use tokio::io::{AsyncWriteExt, BufWriter};

/// Writes `rows` through the export pipeline into a new file in `dir`, named by time
/// and a random suffix so that replicas sharing the directory never collide, and
/// makes it durable. On any failure the partial file is removed.
pub async fn write<R>(dir: &Path, rows: R) -> Result<(PathBuf, Manifest), ExportError>
where
    R: Stream<Item = Result<ExportRow, StoreError>>,
{
    let name = format!(
        "pruned-{}-{:016x}.ndjson",
        Utc::now().format("%Y%m%dT%H%M%S%.6fZ"),
        rand::random::<u64>()
    );
    let path = dir.join(&name);
    let partial = dir.join(format!(".{name}.partial"));
    let file = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&partial)
        .await?;
    let mut file = BufWriter::new(file);
    let job: Job<Store> = Job {
        format: Format::Ndjson,
        source: Source::Archive,
        filter: ExportFilter::default(),
        cells: CsvCells::Raw,
        evidence: None,
        signer: None,
    };
    let written = match export::encode(job, rows, &mut Writer(&mut file)).await {
        Ok(manifest) => finish(file, &partial, &path).await.map(|()| manifest),
        Err(e) => Err(e),
    };
    if written.is_err() {
        let _ = tokio::fs::remove_file(&partial).await;
    }
    Ok((path, written?))
}

/// Makes the file durable and gives it its final name.
async fn finish(
    mut file: BufWriter<tokio::fs::File>,
    partial: &Path,
    path: &Path,
) -> Result<(), ExportError> {
    file.flush().await?;
    file.get_ref().sync_all().await?;
    drop(file);
    tokio::fs::rename(partial, path).await?;
    if let Some(dir) = path.parent() {
        sync_dir(dir).await?;
    }
    Ok(())
}

/// Makes a rename durable (Unix: fsync of the directory).
async fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        tokio::fs::File::open(dir).await?.sync_all().await?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// Creates `dir` if needed and proves it is writable, at start-up rather than at the
/// first batch.
pub async fn prepare_dir(dir: &Path) -> io::Result<()> {
    tokio::fs::create_dir_all(dir).await?;
    let probe = dir.join(format!(".idemwatch-probe-{:016x}", rand::random::<u64>()));
    tokio::fs::write(&probe, b"").await?;
    tokio::fs::remove_file(&probe).await
}
