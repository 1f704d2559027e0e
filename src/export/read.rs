//! Verifying export files: NDJSON (the manifest is its last line) and CSV (the
//! manifest is the `FILE.manifest.json` sidecar). Read once, line by line, in
//! constant memory.

use super::manifest::{CsvCells, Format, Manifest};
use super::port::{COLUMNS, ExportRow};
use super::row::LEGACY_COLUMNS;
use super::verify::{ChainCheck, Finding, Report};
use crate::evidence::{Anchor, Authenticity, TrustedKeys};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::{self, BufRead, Read};

/// One NDJSON line.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Line {
    Attempt(Box<ExportRow>),
    Manifest(Box<Manifest>),
}

/// What a file's manifest says about checkpoints, checked before its rows are read:
/// the anchors each key's chain must pass, what failed, and what a trusted key
/// established.
#[derive(Debug, Default, Clone)]
pub struct FileEvidence {
    pub anchors: HashMap<String, Anchor>,
    pub problems: Vec<String>,
    pub notes: Vec<String>,
    pub checkpoint_signature: Authenticity,
    pub manifest_signature: Authenticity,
}

impl FileEvidence {
    /// Checks `manifest`'s evidence: the checkpoint's signature with the trusted keys
    /// (reported as unchecked when none are given, never as verified) and every
    /// inclusion proof.
    pub fn of(manifest: Option<&Manifest>, trusted: &TrustedKeys) -> FileEvidence {
        let mut out = FileEvidence::default();
        match manifest.and_then(|m| m.evidence.as_ref()) {
            None => out.notes.push(
                "no signed checkpoint in this file: the hash chains are checked, not whether rows or keys were removed".into(),
            ),
            Some(e) => {
                let found = e.check(trusted);
                out.anchors = found.anchors;
                out.problems = found.problems;
                out.checkpoint_signature = found.signature;
                let c = &e.checkpoint.body;
                out.notes.push(format!(
                    "signed checkpoint {} ({}, key {}) covers {} of the file's keys; {}",
                    c.seq,
                    crate::base::time::rfc3339(c.created_at),
                    c.key_id,
                    e.proofs.len(),
                    said(found.signature, "its signature")
                ));
            }
        }
        match manifest.map(|m| (m, m.check_signature(trusted))) {
            None => {}
            Some((_, None)) => out.notes.push(
                "the manifest is not signed: nothing shows the file is complete (rows or whole keys removed with the manifest recomputed look intact)".into(),
            ),
            Some((m, Some(checked))) => {
                out.manifest_signature = Authenticity::of((!trusted.is_empty()).then_some(&checked));
                let key = m.signature.as_ref().map_or("", |s| s.key_id.as_str());
                match checked {
                    Err(why) if !trusted.is_empty() => out.problems.push(why),
                    _ => out.notes.push(format!(
                        "the manifest is signed by key {key}, covering its filters, counts and digest; {}",
                        said(out.manifest_signature, "its signature")
                    )),
                }
            }
        }
        out
    }

    fn apply_before(&mut self, check: &mut ChainCheck) {
        for p in self.problems.drain(..) {
            check.file_problem(None, Finding::Evidence(p));
        }
        for n in self.notes.drain(..) {
            check.note(n);
        }
        check.signatures(self.checkpoint_signature, self.manifest_signature);
    }
}

/// What a note says about a signature that is there.
fn said(found: Authenticity, what: &str) -> String {
    match found {
        Authenticity::Verified => format!("{what} verified with a trusted key"),
        Authenticity::Unchecked => format!(
            "{what} was not checked: no --public-key given, and anyone can sign with a key of their own"
        ),
        Authenticity::Failed => format!("{what} does not verify (see above)"),
        Authenticity::Unsigned => format!("{what} is missing"),
    }
}

/// The manifest on the last line of an NDJSON file, if there is one.
pub fn ndjson_manifest<R: BufRead>(reader: R) -> io::Result<Option<Manifest>> {
    let mut last = None;
    for line in reader.lines() {
        let line = line?;
        if !line.trim().is_empty() {
            last = Some(line);
        }
    }
    Ok(last.and_then(|l| match serde_json::from_str::<Line>(&l) {
        Ok(Line::Manifest(m)) => Some(*m),
        _ => None,
    }))
}

/// The keys the evidence proves must be in the file.
fn unseen_anchors(check: &mut ChainCheck) {
    for (key, anchor) in check.take_unseen_anchors() {
        check.key_problem(
            &key,
            Some(anchor.seq),
            Finding::Evidence(format!(
                "the manifest proves the key at seq {} but the file has no rows of it: they were removed",
                anchor.seq
            )),
        );
    }
}

/// Checks every chain in an NDJSON export and the manifest at its end.
pub fn verify_ndjson<R: BufRead>(reader: R) -> io::Result<Report> {
    verify_ndjson_with(reader, FileEvidence::default())
}

/// [`verify_ndjson`] with the checkpoint evidence of its manifest, read beforehand.
pub fn verify_ndjson_with<R: BufRead>(
    mut reader: R,
    mut evidence: FileEvidence,
) -> io::Result<Report> {
    let mut check = ChainCheck::with_anchors(std::mem::take(&mut evidence.anchors));
    evidence.apply_before(&mut check);
    let mut digest = Sha256::new();
    let mut manifest: Option<(Manifest, u64)> = None;
    let mut rows = 0u64;
    let mut keys = KeyCounter::default();
    let mut line_no = 0u64;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        if reader.read_until(b'\n', &mut buf)? == 0 {
            break;
        }
        line_no += 1;
        if manifest.is_some() {
            check.file_problem(Some(line_no), Finding::AfterManifest);
            break;
        }
        match serde_json::from_slice::<Line>(&buf) {
            Ok(Line::Attempt(row)) => {
                digest.update(&buf);
                rows += 1;
                keys.see(&row.key);
                check.push(&row, Some(line_no));
            }
            Ok(Line::Manifest(m)) => manifest = Some((*m, line_no)),
            Err(e) => {
                digest.update(&buf);
                check.file_problem(Some(line_no), Finding::Unreadable(e.to_string()));
            }
        }
    }
    let since = manifest
        .as_ref()
        .is_some_and(|(m, _)| m.time_filtered_start());
    match &manifest {
        None => check.file_problem(None, Finding::ManifestMissing),
        Some((m, line)) => compare(
            &mut check,
            m,
            Some(*line),
            Format::Ndjson,
            rows,
            keys.count,
            &hex::encode(digest.finalize()),
        ),
    }
    unseen_anchors(&mut check);
    Ok(check.finish(since))
}

/// Checks every chain in a CSV export against its manifest (the sidecar).
pub fn verify_csv<R: Read>(reader: R, manifest: &Manifest) -> io::Result<Report> {
    verify_csv_with(reader, manifest, FileEvidence::default())
}

/// [`verify_csv`] with the checkpoint evidence of its manifest.
pub fn verify_csv_with<R: Read>(
    reader: R,
    manifest: &Manifest,
    mut evidence: FileEvidence,
) -> io::Result<Report> {
    let mut hashing = HashingReader {
        inner: reader,
        digest: Sha256::new(),
    };
    let mut check = ChainCheck::with_anchors(std::mem::take(&mut evidence.anchors));
    evidence.apply_before(&mut check);
    let mut rows = 0u64;
    let mut keys = KeyCounter::default();
    let cells = manifest.csv_cells.unwrap_or(CsvCells::Raw);
    {
        let mut csv = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .from_reader(&mut hashing);
        let mut record = csv::StringRecord::new();
        let mut line = 0u64;
        loop {
            match csv.read_record(&mut record) {
                Ok(false) => break,
                Ok(true) => {}
                Err(e) if e.is_io_error() => {
                    return Err(match e.into_kind() {
                        csv::ErrorKind::Io(io) => io,
                        other => io::Error::other(format!("{other:?}")),
                    });
                }
                Err(e) => {
                    check.file_problem(Some(line + 1), Finding::Unreadable(e.to_string()));
                    break;
                }
            }
            line += 1;
            if line == 1 {
                let legacy = &COLUMNS[..LEGACY_COLUMNS];
                if record.iter().ne(COLUMNS) && record.iter().ne(legacy.iter().copied()) {
                    check.file_problem(
                        Some(1),
                        Finding::Unreadable("the header row is not idemwatch's".into()),
                    );
                }
                continue;
            }
            if cells == CsvCells::Neutralised {
                record = record.iter().map(|f| cells.read(f)).collect();
            }
            match ExportRow::from_csv_fields(&record) {
                Ok(row) => {
                    rows += 1;
                    keys.see(&row.key);
                    check.push(&row, Some(line));
                }
                Err(why) => check.file_problem(Some(line), Finding::Unreadable(why)),
            }
        }
    }
    // Read what the CSV reader left (nothing, normally) so the digest covers the file.
    io::copy(&mut hashing, &mut io::sink())?;
    let digest = hex::encode(hashing.digest.finalize());
    compare(
        &mut check,
        manifest,
        None,
        Format::Csv,
        rows,
        keys.count,
        &digest,
    );
    unseen_anchors(&mut check);
    Ok(check.finish(manifest.time_filtered_start()))
}

fn compare(
    check: &mut ChainCheck,
    m: &Manifest,
    line: Option<u64>,
    format: Format,
    rows: u64,
    keys: u64,
    digest: &str,
) {
    let mismatches = [
        (m.format != format).then(|| format!("format {} but the file is {format}", m.format)),
        (m.row_count != rows)
            .then(|| format!("row_count {} but the file has {rows} rows", m.row_count)),
        (m.key_count != keys)
            .then(|| format!("key_count {} but the file has {keys} keys", m.key_count)),
        (m.sha256 != digest)
            .then(|| format!("sha256 {} but the content hashes to {digest}", m.sha256)),
    ];
    for why in mismatches.into_iter().flatten() {
        check.file_problem(line, Finding::ManifestMismatch(why));
    }
}

/// Counts keys in a stream sorted by key.
#[derive(Default)]
struct KeyCounter {
    last: Option<String>,
    count: u64,
}

impl KeyCounter {
    fn see(&mut self, key: &str) {
        if self.last.as_deref() != Some(key) {
            self.count += 1;
            self.last = Some(key.to_string());
        }
    }
}

struct HashingReader<R> {
    inner: R,
    digest: Sha256,
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.digest.update(&buf[..n]);
        Ok(n)
    }
}

/// The SHA-256 of a whole file, for the `.sha256` sidecar (`sha256sum -c` format).
pub fn sha256_of<R: Read>(mut reader: R) -> io::Result<String> {
    let mut digest = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            return Ok(hex::encode(digest.finalize()));
        }
        digest.update(&buf[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::encode::Encoder;
    use crate::export::manifest::Source;
    use crate::export::port::ExportFilter;
    use crate::export::tests::sample;

    fn file(format: Format) -> (Vec<u8>, Manifest) {
        let mut out = Vec::new();
        let mut e = Encoder::start(format, Source::Export, ExportFilter::default(), &mut out);
        let mut row = sample();
        e.row(&row, &mut out);
        row.attempt_id += 1;
        row.seq = 2;
        row.prev_hash = row.hash.clone();
        row.hash = row.computed_hash();
        e.row(&row, &mut out);
        let m = e.finish(&mut out, None);
        (out, m)
    }

    #[test]
    fn an_untouched_ndjson_file_verifies() {
        let (bytes, _) = file(Format::Ndjson);
        let report = verify_ndjson(&bytes[..]).unwrap();
        assert!(report.is_intact(), "{:?}", report.breaks);
        assert_eq!(report.rows, 2);
    }

    #[test]
    fn a_truncated_ndjson_file_has_no_manifest() {
        let (bytes, _) = file(Format::Ndjson);
        let text = String::from_utf8(bytes).unwrap();
        let cut: String = text.lines().take(2).map(|l| format!("{l}\n")).collect();
        let report = verify_ndjson(cut.as_bytes()).unwrap();
        assert_eq!(report.breaks[0].problem, Finding::ManifestMissing);
    }

    #[test]
    fn an_untouched_csv_file_verifies_against_its_manifest() {
        let (bytes, manifest) = file(Format::Csv);
        let report = verify_csv(&bytes[..], &manifest).unwrap();
        assert!(report.is_intact(), "{:?}", report.breaks);
        assert_eq!(report.rows, 2);
        let mut other = manifest.clone();
        other.row_count = 3;
        let report = verify_csv(&bytes[..], &other).unwrap();
        assert!(matches!(
            report.breaks[0].problem,
            Finding::ManifestMismatch(_)
        ));
    }
}
