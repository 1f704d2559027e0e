//! Turns a stream of rows into CSV or NDJSON bytes, one row at a time, while counting
//! and hashing what it wrote. The caller owns the output buffer and drains it to a
//! file, stdout or an HTTP body as it likes: nothing here holds more than one row.

use super::manifest::{CsvCells, Format, HASH_CHAIN, MANIFEST_VERSION, Manifest, ORDER, Source};
use super::port::{COLUMNS, ExportCells, ExportFilter, ExportRow, JsonText, RawRow};
use super::row::write_canonical_cell;
use super::spool::{Fields, Spool};
use crate::base::time::rfc3339;
use crate::evidence::ExportEvidence;
use crate::guard::StoreError;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::fmt::Write;

/// A row the encoder takes: an [`ExportRow`] (the pruner's archive, files read
/// back), or a row as the database sent it, whose CSV cells are written from its
/// text without an [`ExportRow`] in between.
pub trait EncodeRow {
    fn encode(&self, encoder: &mut Encoder, out: &mut Vec<u8>) -> Result<(), StoreError>;
}

impl EncodeRow for ExportRow {
    fn encode(&self, encoder: &mut Encoder, out: &mut Vec<u8>) -> Result<(), StoreError> {
        encoder.row(self, out);
        Ok(())
    }
}

impl<R: RawRow> EncodeRow for R {
    fn encode(&self, encoder: &mut Encoder, out: &mut Vec<u8>) -> Result<(), StoreError> {
        encoder.cells(&self.cells()?, out)
    }
}

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
    csv_cells: CsvCells,
    /// A number's or a JSON column's cell text, reused from row to row.
    scratch: String,
    digest: Sha256,
    rows: u64,
    keys: u64,
    last_key: Option<String>,
    first_at: Option<DateTime<Utc>>,
    last_at: Option<DateTime<Utc>>,
    /// Whether the manifest will carry evidence, so the exported keys are kept.
    proving: bool,
    /// The last seq of `last_key` written so far.
    last_seq: i64,
    /// Each exported key before `last_key` with its last exported seq (only when
    /// proving): a whole export's keys, so spooled rather than held.
    exported: Spool,
    /// The first failure to spool a key, reported by [`Encoder::exported`].
    spool_failed: Option<std::io::Error>,
}

impl Encoder {
    /// Keeps each exported key and its last seq, for the evidence the manifest will
    /// carry ([`Encoder::exported`], then [`Encoder::finish`]).
    pub(crate) fn proving(mut self, proving: bool) -> Self {
        self.proving = proving;
        self
    }

    /// Each exported key with its last exported seq, in key order, as
    /// [`exported_key`] records (empty unless [`Encoder::proving`]). Call it after the
    /// last row.
    pub fn exported(&mut self) -> std::io::Result<&Spool> {
        if self.proving
            && let Some(key) = self.last_key.take()
        {
            self.exported.push(&exported_key(&key, self.last_seq))?;
        }
        match self.spool_failed.take() {
            Some(e) => Err(e),
            None => Ok(&self.exported),
        }
    }

    /// Writes CSV cells as stored ([`CsvCells::Raw`]) or neutralised (the default).
    pub fn csv_cells(mut self, cells: CsvCells) -> Self {
        self.csv_cells = cells;
        self
    }

    /// Starts a file: for CSV the header row is appended to `out`.
    pub fn start(format: Format, source: Source, filter: ExportFilter, out: &mut Vec<u8>) -> Self {
        let mut encoder = Encoder {
            format,
            source,
            filter,
            csv_cells: CsvCells::Neutralised,
            scratch: String::new(),
            digest: Sha256::new(),
            rows: 0,
            keys: 0,
            last_key: None,
            first_at: None,
            last_at: None,
            proving: false,
            last_seq: 0,
            exported: Spool::new(),
            spool_failed: None,
        };
        if format == Format::Csv {
            let start = out.len();
            let mut header = CsvRecord::start(out, CsvCells::Raw);
            for name in COLUMNS {
                header.cell(name);
            }
            header.end();
            encoder.digest.update(&out[start..]);
        }
        encoder
    }

    /// Appends one row to `out`.
    pub fn row(&mut self, row: &ExportRow, out: &mut Vec<u8>) {
        let start = out.len();
        match self.format {
            Format::Csv => {
                let mut record = CsvRecord::start(out, self.csv_cells);
                for field in row.csv_fields() {
                    record.cell(&field);
                }
                record.end();
            }
            Format::Ndjson => {
                let line = Tagged {
                    kind: "attempt",
                    inner: row,
                };
                serde_json::to_writer(&mut *out, &line).expect("a row always serialises");
                out.push(b'\n');
            }
        }
        self.digest.update(&out[start..]);
        self.count(&row.key, row.seq, row.occurred_at);
    }

    /// Appends one row borrowed from the database's row to `out`: for CSV its cells
    /// are written from the row's text, the JSON columns canonicalised from theirs
    /// (the same bytes as [`Encoder::row`]); NDJSON serialises the [`ExportRow`].
    pub fn cells(&mut self, row: &ExportCells<'_>, out: &mut Vec<u8>) -> Result<(), StoreError> {
        if self.format == Format::Ndjson {
            self.row(&row.to_row()?, out);
            return Ok(());
        }
        let start = out.len();
        let s = &mut self.scratch;
        let mut r = CsvRecord::start(out, self.csv_cells);
        number(&mut r, s, Some(row.attempt_id));
        r.cell(row.key);
        number(&mut r, s, Some(row.seq));
        r.cell(&rfc3339(row.occurred_at));
        for text in [
            row.tenant,
            row.tool,
            row.workflow_id,
            row.step_id,
            row.intent_id,
            row.business_ref.unwrap_or_default(),
            row.current_status.as_str(),
            row.kind.as_str(),
            row.actor,
        ] {
            r.cell(text);
        }
        number(&mut r, s, Some(row.fencing_token));
        number(&mut r, s, row.duration_ms);
        json(&mut r, s, Some(&row.detail))?;
        r.cell(row.prev_hash);
        r.cell(row.hash);
        r.cell(row.fingerprint);
        json(&mut r, s, Some(&row.business_args))?;
        json(&mut r, s, row.result.as_ref())?;
        r.cell(row.error.unwrap_or_default());
        number(&mut r, s, Some(row.log_seq));
        r.cell(row.log_hash);
        r.end();
        self.digest.update(&out[start..]);
        self.count(row.key, row.seq, row.occurred_at);
        Ok(())
    }

    /// Counts a row written for the manifest.
    fn count(&mut self, key: &str, seq: i64, occurred_at: DateTime<Utc>) {
        self.rows += 1;
        if self.last_key.as_deref() != Some(key) {
            self.keys += 1;
            if self.proving
                && let Some(done) = &self.last_key
                && let Err(e) = self.exported.push(&exported_key(done, self.last_seq))
            {
                self.spool_failed.get_or_insert(e);
            }
            let last = self.last_key.get_or_insert_with(String::new);
            last.clear();
            last.push_str(key);
        }
        self.last_seq = seq;
        self.first_at = Some(self.first_at.map_or(occurred_at, |t| t.min(occurred_at)));
        self.last_at = Some(self.last_at.map_or(occurred_at, |t| t.max(occurred_at)));
    }

    /// Ends the file with `evidence` in its manifest. For NDJSON the manifest line is
    /// appended to `out` (and is not covered by its own `sha256`); for CSV the manifest
    /// goes beside the file. A whole export's manifest can be larger than memory
    /// should hold: [`encode`](super::pipeline::encode) takes [`Encoder::manifest`] and
    /// streams the line with [`write_ndjson_manifest`] instead.
    pub fn finish(self, out: &mut Vec<u8>, evidence: Option<ExportEvidence>) -> Manifest {
        let manifest = self.manifest(evidence);
        if manifest.format == Format::Ndjson {
            write_ndjson_manifest(&manifest, &mut *out).expect("a manifest always serialises");
        }
        manifest
    }

    /// Ends the file with `evidence` in its manifest, writing nothing.
    pub fn manifest(self, evidence: Option<ExportEvidence>) -> Manifest {
        Manifest {
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
            evidence,
            csv_cells: (self.format == Format::Csv).then_some(self.csv_cells),
            signature: None,
        }
    }
}

/// An NDJSON file's last line: `{"type":"manifest", …the manifest…}` and a newline.
pub(crate) fn write_ndjson_manifest(
    manifest: &Manifest,
    mut out: impl std::io::Write,
) -> std::io::Result<()> {
    let line = Tagged {
        kind: "manifest",
        inner: manifest,
    };
    serde_json::to_writer(&mut out, &line)?;
    out.write_all(b"\n")
}

/// An exported key and its last seq as a [`Spool`] record.
pub(crate) fn exported_key(key: &str, last_seq: i64) -> Vec<u8> {
    let mut record = Vec::with_capacity(8 + key.len());
    record.extend_from_slice(&last_seq.to_le_bytes());
    record.extend_from_slice(key.as_bytes());
    record
}

/// Keys and last seqs as an [`Encoder::exported`] spool (tests give
/// [`EvidenceSource::evidence_by`](super::EvidenceSource::evidence_by) their own).
#[doc(hidden)]
pub fn spool_exported(keys: &[(String, i64)]) -> std::io::Result<Spool> {
    let mut spool = Spool::new();
    for (key, last_seq) in keys {
        spool.push(&exported_key(key, *last_seq))?;
    }
    Ok(spool)
}

/// Reads an [`exported_key`] record back.
pub(crate) fn read_exported_key(record: &[u8]) -> std::io::Result<(String, i64)> {
    let mut fields = Fields(record);
    let seq = fields.i64()?;
    Ok((fields.text(None)?.to_owned(), seq))
}

/// One CSV record appended to a buffer through the `csv` crate: RFC 4180, a cell
/// quoted only when it holds a comma, a quote, CR or LF, quotes doubled inside, CRLF
/// at the end. Each cell is marked as the export's [`CsvCells`] says.
struct CsvRecord<'a> {
    writer: csv::Writer<&'a mut Vec<u8>>,
    cells: CsvCells,
}

impl<'a> CsvRecord<'a> {
    /// Starts a record at the end of `out`, its cells written as `cells` says.
    fn start(out: &'a mut Vec<u8>, cells: CsvCells) -> Self {
        let writer = csv::WriterBuilder::new()
            .terminator(csv::Terminator::CRLF)
            .quote_style(csv::QuoteStyle::Necessary)
            // A record's bytes go to `out` at its end; the JSON cells are most of them.
            .buffer_capacity(4 << 10)
            .from_writer(out);
        CsvRecord { writer, cells }
    }

    /// Appends the next cell.
    fn cell(&mut self, cell: &str) {
        let written = match self.cells.mark(cell) {
            "" => self.writer.write_field(cell),
            mark => self.writer.write_field(format!("{mark}{cell}")),
        };
        written.expect("writing to memory cannot fail");
    }

    /// Ends the record.
    fn end(mut self) {
        self.writer
            .write_record(None::<&[u8]>)
            .expect("writing to memory cannot fail");
        self.writer.flush().expect("writing to memory cannot fail");
    }
}

/// A number's cell; `None` is an empty cell.
fn number(record: &mut CsvRecord<'_>, scratch: &mut String, n: Option<i64>) {
    scratch.clear();
    if let Some(n) = n {
        // Writing to a String cannot fail.
        let _ = write!(scratch, "{n}");
    }
    record.cell(scratch);
}

/// A JSON column's cell, its canonical (JCS) text; `None` (SQL NULL) is an empty cell.
fn json(
    record: &mut CsvRecord<'_>,
    scratch: &mut String,
    json: Option<&JsonText<'_>>,
) -> Result<(), StoreError> {
    scratch.clear();
    if let Some(json) = json {
        write_canonical_cell(scratch, json)?;
    }
    record.cell(scratch);
    Ok(())
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
        let manifest = e.finish(&mut out, None);
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
        let manifest = e.finish(&mut out, None);
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

    /// `row` as the database's cells, its JSON columns given as `json` texts.
    fn cells<'a>(row: &'a ExportRow, json: [&'a str; 3]) -> ExportCells<'a> {
        let text = |column, text| JsonText { column, text };
        ExportCells {
            attempt_id: row.attempt_id,
            key: &row.key,
            seq: row.seq,
            occurred_at: row.occurred_at,
            tenant: &row.intent.tenant,
            tool: &row.intent.tool,
            workflow_id: &row.intent.workflow_id,
            step_id: &row.intent.step_id,
            intent_id: &row.intent.intent_id,
            business_ref: row.business_ref.as_deref(),
            current_status: row.current_status,
            kind: row.kind,
            actor: &row.actor,
            fencing_token: row.fencing_token,
            duration_ms: row.duration_ms,
            detail: text(15, json[0]),
            prev_hash: &row.prev_hash,
            hash: &row.hash,
            fingerprint: &row.fingerprint,
            business_args: text(19, json[1]),
            result: row.result.as_ref().map(|_| text(20, json[2])),
            error: row.error.as_deref(),
            log_seq: row.log_seq,
            log_hash: &row.log_hash,
        }
    }

    #[test]
    fn cells_from_the_database_text_are_written_as_the_row_is() {
        let mut rows = [sample(), sample()];
        // Formula-like, quoted and empty cells; a number and JSON the text way
        // leaves to a value (a fraction, an exponent).
        rows[1].actor = "=cmd|' /C calc'!A0".into();
        rows[1].intent.step_id = "-1".into();
        rows[1].business_ref = None;
        rows[1].fencing_token = -3;
        rows[1].duration_ms = Some(12);
        rows[1].error = Some("@err, \"x\"\r\n".into());
        rows[1].result = None;
        // As PostgreSQL prints jsonb: spaces, its own member order.
        let texts = [
            [
                r#"{"n": 4500, "reason": "line one,\r\nline \"two\" \u2014 €"}"#,
                r#"{"amount_p": 4500}"#,
                r#"{"refund_id": "rf_1"}"#,
            ],
            [
                r#"{"reason": "line one,\r\nline \"two\" — €", "n": 4500}"#,
                r#"{"big": 1e30, "amount": 45.50}"#,
                "",
            ],
        ];
        // The rows hold what the database's text parses to, as when decoded whole.
        for (row, json) in rows.iter_mut().zip(texts) {
            row.detail = serde_json::from_str(json[0]).unwrap();
            row.business_args = serde_json::from_str(json[1]).unwrap();
            if row.result.is_some() {
                row.result = Some(serde_json::from_str(json[2]).unwrap());
            }
        }
        for format in [Format::Csv, Format::Ndjson] {
            for csv_cells in [CsvCells::Neutralised, CsvCells::Raw] {
                let (mut want, mut got) = (Vec::new(), Vec::new());
                let mut a = start(format, &mut want).csv_cells(csv_cells);
                let mut b = start(format, &mut got).csv_cells(csv_cells);
                for (row, json) in rows.iter().zip(texts) {
                    a.row(row, &mut want);
                    b.cells(&cells(row, json), &mut got).unwrap();
                }
                // Before the manifests, whose `generated_at` differ.
                assert_eq!(
                    String::from_utf8(got.clone()).unwrap(),
                    String::from_utf8(want.clone()).unwrap(),
                    "{format} {csv_cells:?}"
                );
                let (a, b) = (a.finish(&mut want, None), b.finish(&mut got, None));
                assert_eq!(
                    (a.sha256, a.row_count, a.key_count),
                    (b.sha256, b.row_count, b.key_count)
                );
            }
        }
    }

    #[test]
    fn a_json_cell_that_is_not_json_is_corrupt_data() {
        let row = sample();
        let mut out = Vec::new();
        let mut e = start(Format::Csv, &mut out);
        let err = e
            .cells(&cells(&row, ["{\"a\": ", "{}", "null"]), &mut out)
            .unwrap_err();
        assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
    }

    #[test]
    fn an_empty_export_is_a_header_or_a_lone_manifest() {
        let mut out = Vec::new();
        let e = start(Format::Csv, &mut out);
        let m = e.finish(&mut out, None);
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
        let m = e.finish(&mut out, None);
        assert_eq!(String::from_utf8(out).unwrap().lines().count(), 1);
        assert_eq!(m.sha256, hex::encode(Sha256::digest(b"")));
    }
}
