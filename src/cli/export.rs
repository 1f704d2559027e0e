//! `idemwatch export` and `idemwatch verify`: straight against the database, read-only
//! (neither applies migrations).

use super::{DatabaseArgs, redact_url};
use crate::evidence::{Authenticity, Checkpointer, TrustedKeys};
use crate::export::Signing;
use crate::export::{
    self, CsvCells, ExportFilter, FileEvidence, FilterError, Format, Manifest, Report,
    ndjson_manifest, sha256_of, verify_csv_with, verify_ndjson_with,
};
use crate::guard::SystemClock;
use crate::store::{Store, StoreOptions};
use anyhow::{Context, bail};
use clap::Args;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use tokio::io::BufWriter;

#[derive(Debug, Clone, Args)]
pub struct ExportArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// `csv` (RFC 4180, header row) or `ndjson` (one JSON object a line, manifest last).
    #[arg(long)]
    pub format: Format,
    /// Attempts that occurred at or after this time (RFC 3339, or a date = midnight UTC).
    #[arg(long)]
    pub since: Option<String>,
    /// Attempts that occurred before this time (exclusive).
    #[arg(long)]
    pub until: Option<String>,
    #[arg(long)]
    pub tenant: Option<String>,
    #[arg(long)]
    pub tool: Option<String>,
    /// One idempotency key (64 hex characters).
    #[arg(long)]
    pub key: Option<String>,
    /// E.g. `order:A-88214`.
    #[arg(long)]
    pub business_ref: Option<String>,
    /// CSV cells as stored. By default a cell starting with `=`, `+`, `-`, `@`, tab,
    /// CR or `'` gets a leading `'` so a spreadsheet shows it as text instead of running
    /// it as a formula; `verify` takes it off again (docs/EXPORT.md).
    #[arg(long, env = "IDEMWATCH_CSV_RAW")]
    pub csv_raw: bool,
    /// Write here (plus FILE.sha256, and FILE.manifest.json for CSV) instead of stdout.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Sign the manifest with this checkpoint signing key (PKCS#8 PEM, mode 0600), so
    /// that `verify --require-signed` can show the file is complete (docs/EXPORT.md).
    #[arg(long, env = "IDEMWATCH_SIGNING_KEY")]
    pub signing_key: Option<PathBuf>,
    /// Take a signed checkpoint before reading the rows, so that no row in the export
    /// is unsigned. Needs --signing-key; it is this command's one write to the database.
    #[arg(long, env = "IDEMWATCH_EXPORT_CHECKPOINT", requires = "signing_key")]
    pub checkpoint: bool,
    /// With --checkpoint: also write that checkpoint here, as serve's --checkpoint-dir.
    #[arg(long, env = "IDEMWATCH_CHECKPOINT_DIR")]
    pub checkpoint_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// Verify an export file (NDJSON, or CSV with its FILE.manifest.json) instead of the database.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// The manifest of a CSV file, if not FILE.manifest.json.
    #[arg(long, requires = "file")]
    pub manifest: Option<PathBuf>,
    /// A trusted public key (PEM) that checks checkpoint and manifest signatures.
    /// Repeat the flag (commas in IDEMWATCH_PUBLIC_KEY) to trust every key of a
    /// rotation: each checkpoint names the key that signed it. Without one,
    /// signatures are reported as not checked, never as verified.
    #[arg(long, env = "IDEMWATCH_PUBLIC_KEY", value_delimiter = ',')]
    pub public_key: Vec<PathBuf>,
    /// What an auditor runs: also fail (exit 1) unless a trusted key verified the
    /// signatures, every row is covered by a signed checkpoint, and a file's manifest
    /// is signed (so the file is shown complete). Needs --public-key.
    #[arg(long, env = "IDEMWATCH_REQUIRE_SIGNED", requires = "public_key")]
    pub require_signed: bool,
    /// Checkpoints kept outside the database (serve's --checkpoint-dir): each must be
    /// in the database unchanged.
    #[arg(long, env = "IDEMWATCH_CHECKPOINT_DIR", conflicts_with = "file")]
    pub checkpoint_dir: Option<PathBuf>,
}

/// Opens the database for reading: the schema must already be current.
async fn open_read_only(args: &DatabaseArgs) -> anyhow::Result<Store> {
    let options = StoreOptions {
        max_connections: args.db_max_connections.min(2),
        ..StoreOptions::default()
    };
    let url = redact_url(&args.database_url);
    let store = Store::connect(&args.database_url, &options)
        .await
        .with_context(|| format!("cannot open database {url}"))?;
    store
        .ready()
        .await
        .with_context(|| format!("database {url} is not ready"))?;
    Ok(store)
}

fn flag_error(e: FilterError) -> anyhow::Error {
    anyhow::anyhow!("invalid --{}: {}", e.field.replace('_', "-"), e.message)
}

pub async fn export_command(args: ExportArgs) -> anyhow::Result<()> {
    let filter = ExportFilter::parse(
        chrono::Utc::now(),
        args.since.as_deref(),
        args.until.as_deref(),
        args.tenant.as_deref(),
        args.tool.as_deref(),
        args.key.as_deref(),
        args.business_ref.as_deref(),
    )
    .map_err(flag_error)?;
    let cells = if args.csv_raw {
        CsvCells::Raw
    } else {
        CsvCells::Neutralised
    };
    let key = args
        .signing_key
        .as_deref()
        .map(super::checkpoint::read_signing_key)
        .transpose()?;
    let store = open_read_only(&args.database).await?;
    let signing = Signing {
        checkpointer: key.map(|key| {
            Checkpointer::new(store.clone(), key, Arc::new(SystemClock))
                .with_dir(args.checkpoint_dir.clone())
        }),
        checkpoint_now: args.checkpoint,
    };
    let result = match &args.output {
        Some(path) => export_file(&store, &filter, args.format, cells, &signing, path).await,
        None => {
            let mut out = BufWriter::new(tokio::io::stdout());
            let manifest =
                export::export_signed_to(&store, &filter, args.format, cells, &signing, &mut out)
                    .await?;
            if args.format == Format::Csv {
                manifest
                    .write_pretty(std::io::stderr().lock())
                    .context("cannot write the manifest to stderr")?;
            }
            Ok(())
        }
    };
    store.close().await;
    result
}

/// Writes `path` (complete or not at all: a `.partial` file is renamed at the end),
/// `path.sha256`, and for CSV `path.manifest.json`.
async fn export_file(
    store: &Store,
    filter: &ExportFilter,
    format: Format,
    cells: CsvCells,
    signing: &Signing<Store>,
    path: &Path,
) -> anyhow::Result<()> {
    let partial = sidecar(path, "partial");
    let file = tokio::fs::File::create(&partial)
        .await
        .with_context(|| format!("cannot create {}", partial.display()))?;
    let mut out = BufWriter::new(file);
    let exported = export::export_signed_to(store, filter, format, cells, signing, &mut out);
    let manifest = match exported.await {
        Ok(m) => m,
        Err(e) => {
            let _ = tokio::fs::remove_file(&partial).await;
            return Err(e.into());
        }
    };
    out.into_inner().sync_all().await?;
    tokio::fs::rename(&partial, path)
        .await
        .with_context(|| format!("cannot write {}", path.display()))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let whole = file_sha256(path).await?;
    tokio::fs::write(sidecar(path, "sha256"), format!("{whole}  {name}\n")).await?;
    if format == Format::Csv {
        let sidecar = sidecar(path, "manifest.json");
        std::fs::File::create(&sidecar)
            .and_then(|file| manifest.write_pretty(file))
            .with_context(|| format!("cannot write {}", sidecar.display()))?;
    }
    eprintln!(
        "wrote {} rows ({} keys) to {}; sha256 {whole}",
        manifest.row_count,
        manifest.key_count,
        path.display()
    );
    Ok(())
}

/// `FILE` + `.ext`, e.g. `attempts.csv.sha256`.
fn sidecar(path: &Path, ext: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".");
    s.push(ext);
    PathBuf::from(s)
}

async fn file_sha256(path: &Path) -> anyhow::Result<String> {
    let owned = path.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let file = std::fs::File::open(&owned)?;
        sha256_of(BufReader::new(file))
    })
    .await?
    .with_context(|| format!("cannot read {}", path.display()))
}

/// Exit statuses, like `cmp`: 0 every chain is intact, 1 something is broken (the
/// first break is printed) or, with `--require-signed`, not shown to be signed, 2
/// verification could not run.
pub async fn verify_command(args: VerifyArgs) -> ExitCode {
    match verify(&args).await {
        Ok(findings) if findings.is_empty() => ExitCode::SUCCESS,
        Ok(findings) => {
            for line in findings {
                println!("{line}");
            }
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Verifies and prints the summary; returns the lines describing breaks (empty: intact).
async fn verify(args: &VerifyArgs) -> anyhow::Result<Vec<String>> {
    let trusted = TrustedKeys::new(
        args.public_key
            .iter()
            .map(|p| super::checkpoint::read_public_key(p))
            .collect::<anyhow::Result<Vec<_>>>()?,
    );
    let (what, report, mut extra) = match &args.file {
        Some(path) => {
            let (report, extra) =
                verify_file(path, args.manifest.as_deref(), trusted.clone()).await?;
            (path.display().to_string(), report, extra)
        }
        None => {
            let outside = export::Outside {
                trusted: trusted.clone(),
                checkpoints: args
                    .checkpoint_dir
                    .as_deref()
                    .map(crate::evidence::read_dir)
                    .transpose()?,
            };
            let store = open_read_only(&args.database).await?;
            let report = export::verify_database_with(&store, &outside).await;
            store.close().await;
            (
                format!("database {}", redact_url(&args.database.database_url)),
                report.context("cannot read the attempt log")?,
                Vec::new(),
            )
        }
    };
    // The verdict comes first (scripts read the first line); notes follow it.
    let mut notes: Vec<String> = report.notes.iter().map(|n| format!("note: {n}")).collect();
    if report.unbound_keys > 0 {
        notes.push(format!(
            "note: {} keys were last written before state binding: their record's status, result and arguments are not covered by the chain",
            report.unbound_keys
        ));
    }
    let mut lines = Vec::new();
    if let Some(first) = report.first_break() {
        lines.push(format!("BROKEN: {what}: first break at {first}"));
        lines.push(format!(
            "{} of {} keys broken ({} rows read)",
            report.broken_keys, report.keys, report.rows
        ));
        for b in report.breaks.iter().skip(1) {
            lines.push(format!("also: {b}"));
        }
    }
    if !extra.is_empty() && lines.is_empty() {
        lines.push(format!("BROKEN: {what}: {}", extra.remove(0)));
    }
    lines.extend(extra.into_iter().map(|e| format!("also: {e}")));
    if args.require_signed && lines.is_empty() {
        let mut missing = unsigned(&report, args.file.is_some()).into_iter();
        if let Some(first) = missing.next() {
            lines.push(format!("NOT SIGNED: {what}: {first}"));
            lines.extend(missing.map(|m| format!("also: {m}")));
        }
    }
    if lines.is_empty() {
        println!("{}", intact_line(&what, &report));
        for note in notes {
            println!("{note}");
        }
    } else {
        lines.extend(notes);
    }
    Ok(lines)
}

fn intact_line(what: &str, report: &Report) -> String {
    let mut line = format!(
        "OK: {what}: {} rows in {} keys, every chain intact",
        report.rows, report.keys
    );
    if report.partial_keys > 0 {
        line.push_str(&format!(
            " ({} keys start after seq 1 because the export was filtered with since; checked from their first row)",
            report.partial_keys
        ));
    }
    // What the signatures established, on the line scripts read: never "verified"
    // without a trusted key.
    line.push_str(match report.checkpoint_signature {
        Authenticity::Verified => "; checkpoint signatures verified with a trusted key",
        Authenticity::Unchecked => {
            "; signatures NOT checked (no --public-key): consistent, but not shown to be idemwatch's"
        }
        Authenticity::Unsigned | Authenticity::Failed => {
            return line + "; no signed checkpoint, so no row is signed";
        }
    });
    line.push_str(&match report.unsigned_rows {
        0 => "; every row covered by a checkpoint".to_string(),
        n => format!(
            "; {n} rows in {} keys covered by no signed checkpoint",
            report.unsigned_keys
        ),
    });
    line
}

/// What `--require-signed` finds missing in an intact report: why the rows are not
/// shown to be idemwatch's, complete and unaltered since they were signed.
fn unsigned(report: &Report, file: bool) -> Vec<String> {
    let mut missing = Vec::new();
    if report.checkpoint_signature != Authenticity::Verified {
        missing.push(
            "no checkpoint signature was verified with a trusted key (there is none: take one with `idemwatch checkpoint`, or export with --checkpoint)"
                .to_string(),
        );
    }
    if file && report.manifest_signature != Authenticity::Verified {
        missing.push(
            "the manifest is not signed, so nothing shows the file is complete: rows or whole keys can be removed and the manifest recomputed (export with --signing-key, or over HTTP from a server with one)"
                .to_string(),
        );
    }
    if report.unsigned_rows > 0 {
        missing.push(format!(
            "{} rows in {} keys are covered by no signed checkpoint (written or rewritten after the newest one): export with --checkpoint, or run `idemwatch checkpoint` before verifying",
            report.unsigned_rows, report.unsigned_keys
        ));
    }
    missing
}

/// A file: NDJSON carries its manifest; CSV needs the sidecar. A `FILE.sha256`
/// sidecar, when present, must match the whole file.
async fn verify_file(
    path: &Path,
    manifest_path: Option<&Path>,
    trusted: TrustedKeys,
) -> anyhow::Result<(Report, Vec<String>)> {
    let owned = path.to_path_buf();
    let manifest_path = manifest_path
        .map(Path::to_path_buf)
        .unwrap_or_else(|| sidecar(path, "manifest.json"));
    let report = tokio::task::spawn_blocking(move || -> anyhow::Result<Report> {
        let open = || {
            std::fs::File::open(&owned).with_context(|| format!("cannot open {}", owned.display()))
        };
        let mut first = [0u8; 1];
        let n = open()?.read(&mut first)?;
        if n == 1 && first[0] == b'{' {
            let manifest = ndjson_manifest(BufReader::new(open()?))?;
            let evidence = FileEvidence::of(manifest.as_ref(), &trusted);
            return Ok(verify_ndjson_with(BufReader::new(open()?), evidence)?);
        }
        if n == 0 {
            bail!("{} is empty: not an idemwatch export", owned.display());
        }
        let text = std::fs::read_to_string(&manifest_path).with_context(|| {
            format!(
                "a CSV export is checked against its manifest; cannot read {}",
                manifest_path.display()
            )
        })?;
        let manifest: Manifest = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a manifest", manifest_path.display()))?;
        let evidence = FileEvidence::of(Some(&manifest), &trusted);
        Ok(verify_csv_with(
            BufReader::new(open()?),
            &manifest,
            evidence,
        )?)
    })
    .await??;
    let mut extra = Vec::new();
    let sums = sidecar(path, "sha256");
    if let Ok(text) = tokio::fs::read_to_string(&sums).await {
        let expected = text
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string();
        let actual = file_sha256(path).await?;
        if expected != actual {
            extra.push(format!(
                "{} says sha256 {expected}, the file hashes to {actual}",
                sums.display()
            ));
        }
    }
    Ok((report, extra))
}
