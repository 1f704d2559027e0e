//! The archive: each pruned batch becomes one NDJSON file in the export format, with
//! its manifest line, written and fsynced before the rows are deleted. A file is
//! written as `.NAME.partial` and renamed when complete, so a visible archive file
//! is always whole; `idemwatch verify --file` checks it like any export.

use crate::export::{Encoder, ExportFilter, ExportRow, Format, Manifest, Source};
use chrono::Utc;
use std::io;
use std::path::{Path, PathBuf};
use tokio::io::{AsyncWriteExt, BufWriter};

pub struct ArchiveFile {
    partial: PathBuf,
    path: PathBuf,
    file: BufWriter<tokio::fs::File>,
    encoder: Encoder,
    buf: Vec<u8>,
}

impl ArchiveFile {
    /// A new file in `dir`, named by time and a random suffix so that replicas
    /// sharing the directory never collide.
    pub async fn create(dir: &Path) -> io::Result<ArchiveFile> {
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
        let mut buf = Vec::new();
        let encoder = Encoder::start(
            Format::Ndjson,
            Source::Archive,
            ExportFilter::default(),
            &mut buf,
        );
        Ok(ArchiveFile {
            partial,
            path,
            file: BufWriter::new(file),
            encoder,
            buf,
        })
    }

    pub async fn write(&mut self, row: &ExportRow) -> io::Result<()> {
        self.encoder.row(row, &mut self.buf);
        if self.buf.len() >= crate::export::CHUNK {
            self.file.write_all(&self.buf).await?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Writes the manifest, makes the file durable and gives it its final name.
    pub async fn finish(mut self) -> io::Result<(PathBuf, Manifest)> {
        let manifest = self.encoder.finish(&mut self.buf);
        self.file.write_all(&self.buf).await?;
        self.file.flush().await?;
        self.file.get_ref().sync_all().await?;
        tokio::fs::rename(&self.partial, &self.path).await?;
        if let Some(dir) = self.path.parent() {
            sync_dir(dir).await?;
        }
        Ok((self.path, manifest))
    }

    /// Removes the partial file of a batch that did not complete.
    pub async fn abandon(self) {
        drop(self.file);
        let _ = tokio::fs::remove_file(&self.partial).await;
    }
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
