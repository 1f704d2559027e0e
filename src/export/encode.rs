//! Turns a stream of rows into CSV or NDJSON bytes, one row at a time, while counting
//! and hashing what it wrote. The caller owns the output buffer and drains it to a
//! file, stdout or an HTTP body as it likes: nothing here holds more than one row.

use super::manifest::{CsvCells, Format, HASH_CHAIN, MANIFEST_VERSION, Manifest, ORDER, Source};
use super::row::{COLUMNS, ExportRow};
use crate::evidence::EvidenceSource;
use crate::store::ExportFilter;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::io;
use std::sync::{Arc, Mutex};

/// The NDJSON line of one row: `{"type":"attempt", …the row's members…}`.
#[derive(Serialize)]
struct Tagged<'a, T> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(flatten)]
    inner: &'a T,
}

pub struct Encoder {
    format: Format,
    source: Source,
    filter: ExportFilter,
    csv: Option<(csv::Writer<Shared>, Shared)>,
    csv_cells: CsvCells,
    digest: Sha256,
    rows: u64,
    keys: u64,
    last_key: Option<String>,
    first_at: Option<DateTime<Utc>>,
    last_at: Option<DateTime<Utc>>,
    evidence: Option<Arc<EvidenceSource>>,
    /// Each exported key with its last exported seq (only with evidence).
    exported: Vec<(String, i64)>,
}

impl Encoder {
    /// Puts the newest checkpoint and the inclusion proofs of the exported keys into
    /// the manifest.
    pub fn with_evidence(mut self, evidence: Option<Arc<EvidenceSource>>) -> Self {
        self.evidence = evidence;
        self
    }

    /// Writes CSV cells as stored ([`CsvCells::Raw`]) or neutralised (the default).
    pub fn csv_cells(mut self, cells: CsvCells) -> Self {
        self.csv_cells = cells;
        self
    }

    /// Starts a file: for CSV the header row is appended to `out`.
    pub fn start(format: Format, source: Source, filter: ExportFilter, out: &mut Vec<u8>) -> Self {
        let csv = (format == Format::Csv).then(|| {
            let shared = Shared::default();
            let writer = csv::WriterBuilder::new()
                // RFC 4180: CRLF after every record; quotes only where needed (a
                // comma, a quote, CR or LF), quotes doubled inside.
                .terminator(csv::Terminator::CRLF)
                .quote_style(csv::QuoteStyle::Necessary)
                .from_writer(shared.clone());
            (writer, shared)
        });
        let mut encoder = Encoder {
            format,
            source,
            filter,
            csv,
            csv_cells: CsvCells::Neutralised,
            digest: Sha256::new(),
            rows: 0,
            keys: 0,
            last_key: None,
            first_at: None,
            last_at: None,
            evidence: None,
            exported: Vec::new(),
        };
        if let Some((w, shared)) = encoder.csv.as_mut() {
            let start = out.len();
            write_csv(w, shared, COLUMNS, out);
            encoder.digest.update(&out[start..]);
        }
        encoder
    }

    /// Appends one row to `out`.
    pub fn row(&mut self, row: &ExportRow, out: &mut Vec<u8>) {
        let start = out.len();
        match self.csv.as_mut() {
            Some((w, shared)) => {
                let cells = self.csv_cells;
                let fields = row.csv_fields();
                // Borrowed cells stay borrowed: no copy of a row's text per cell.
                let cells = fields.iter().map(|f| match cells.write(f) {
                    Cow::Borrowed(s) => Cow::Borrowed(s.as_bytes()),
                    Cow::Owned(s) => Cow::Owned(s.into_bytes()),
                });
                write_csv(w, shared, cells, out)
            }
            None => {
                let line = Tagged {
                    kind: "attempt",
                    inner: row,
                };
                serde_json::to_writer(&mut *out, &line).expect("a row always serialises");
                out.push(b'\n');
            }
        }
        self.digest.update(&out[start..]);
        self.rows += 1;
        if self.last_key.as_deref() != Some(row.key.as_str()) {
            self.keys += 1;
            self.last_key = Some(row.key.clone());
            if self.evidence.is_some() {
                self.exported.push((row.key.clone(), row.seq));
            }
        }
        if let Some(last) = self.exported.last_mut() {
            last.1 = row.seq;
        }
        self.first_at = Some(
            self.first_at
                .map_or(row.occurred_at, |t| t.min(row.occurred_at)),
        );
        self.last_at = Some(
            self.last_at
                .map_or(row.occurred_at, |t| t.max(row.occurred_at)),
        );
    }

    /// Ends the file. For NDJSON the manifest line is appended to `out` (and is not
    /// covered by its own `sha256`); for CSV the manifest goes beside the file.
    pub fn finish(self, out: &mut Vec<u8>) -> Manifest {
        let manifest = Manifest {
            manifest_version: MANIFEST_VERSION,
            source: self.source,
            format: self.format,
            generator: format!("idemwatch {}", env!("CARGO_PKG_VERSION")),
            generated_at: Utc::now(),
            filters: self.filter,
            order: ORDER.into(),
            row_count: self.rows,
            key_count: self.keys,
            first_occurred_at: self.first_at,
            last_occurred_at: self.last_at,
            sha256: hex::encode(self.digest.finalize()),
            sha256_covers: self.format.sha256_covers().into(),
            hash_chain: HASH_CHAIN.into(),
            evidence: self.evidence.as_ref().map(|e| e.evidence(&self.exported)),
            csv_cells: (self.format == Format::Csv).then_some(self.csv_cells),
        };
        if self.format == Format::Ndjson {
            let line = Tagged {
                kind: "manifest",
                inner: &manifest,
            };
            serde_json::to_writer(&mut *out, &line).expect("a manifest always serialises");
            out.push(b'\n');
        }
        manifest
    }
}

/// Where the csv writer puts its bytes until they are moved to the caller's buffer
/// (`csv::Writer` does not lend its inner writer out mutably).
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl io::Write for Shared {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        lock(&self.0).extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn lock(m: &Mutex<Vec<u8>>) -> std::sync::MutexGuard<'_, Vec<u8>> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write_csv<I, T>(w: &mut csv::Writer<Shared>, shared: &Shared, fields: I, out: &mut Vec<u8>)
where
    I: IntoIterator<Item = T>,
    T: AsRef<[u8]>,
{
    // Writing into memory cannot fail; flush moves csv's buffer into `shared`.
    w.write_record(fields).expect("writing CSV into memory");
    w.flush().expect("writing CSV into memory");
    let mut bytes = lock(&shared.0);
    out.extend_from_slice(&bytes);
    bytes.clear();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::tests::sample;

    fn start(format: Format, out: &mut Vec<u8>) -> Encoder {
        Encoder::start(format, Source::Export, ExportFilter::default(), out)
    }

    #[test]
    fn csv_is_rfc4180_with_a_header_and_crlf() {
        let mut out = Vec::new();
        let mut e = start(Format::Csv, &mut out);
        e.row(&sample(), &mut out);
        let manifest = e.finish(&mut out);
        let text = String::from_utf8(out.clone()).unwrap();
        assert!(
            text.starts_with("attempt_id,key,seq,occurred_at,tenant,"),
            "{text}"
        );
        assert!(text.ends_with("\r\n"));
        // A comma and quotes: quoted, quotes doubled; CRLF inside a field is kept.
        assert!(text.contains(",\"acme, \"\"ltd\"\"\","), "{text}");
        assert!(
            text.contains("line one,\\r\\nline \\\"\"two\\\"\" — €"),
            "{text}"
        );
        assert_eq!(manifest.row_count, 1);
        assert_eq!(manifest.sha256, hex::encode(Sha256::digest(&out)));
    }

    #[test]
    fn ndjson_ends_with_a_manifest_that_hashes_the_lines_before_it() {
        let mut out = Vec::new();
        let mut e = start(Format::Ndjson, &mut out);
        let mut row = sample();
        e.row(&row, &mut out);
        row.seq = 2;
        e.row(&row, &mut out);
        let rows_end = out.len();
        let manifest = e.finish(&mut out);
        let text = String::from_utf8(out.clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("{\"type\":\"attempt\",\"attempt_id\":7,"));
        assert!(lines[2].starts_with("{\"type\":\"manifest\","));
        assert_eq!(
            manifest.sha256,
            hex::encode(Sha256::digest(&out[..rows_end]))
        );
        assert_eq!((manifest.row_count, manifest.key_count), (2, 1));
    }

    #[test]
    fn an_empty_export_is_a_header_or_a_lone_manifest() {
        let mut out = Vec::new();
        let e = start(Format::Csv, &mut out);
        let m = e.finish(&mut out);
        assert_eq!(
            out,
            COLUMNS
                .join(",")
                .into_bytes()
                .into_iter()
                .chain(*b"\r\n")
                .collect::<Vec<_>>()
        );
        assert_eq!((m.row_count, m.first_occurred_at), (0, None));

        let mut out = Vec::new();
        let e = start(Format::Ndjson, &mut out);
        let m = e.finish(&mut out);
        assert_eq!(String::from_utf8(out).unwrap().lines().count(), 1);
        assert_eq!(m.sha256, hex::encode(Sha256::digest(b"")));
    }
}
