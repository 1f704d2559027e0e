//! One exported row: an attempt with its record's context, as the store yields it and
//! both export formats write it. The column order here is the public contract of the
//! CSV header and of the NDJSON member order (docs/EXPORT.md); the export query
//! selects the columns in this order and is decoded by position ([`ExportCells`]).

use crate::base::time::micros;
use crate::guard::binding::RecordState;
use crate::guard::{AttemptKind, ChainFields, Detail, Intent, Status};
use crate::store::StoreError;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgRow, PgTypeInfo, PgValueFormat, PgValueRef, Postgres};
use sqlx::sqlite::{Sqlite, SqliteRow, SqliteTypeInfo, SqliteValueRef};
use sqlx::types::Json;
use sqlx::{Decode, Type, ValueRef};

/// The CSV header, in order. NDJSON objects carry the same members in the same
/// order, after `"type": "attempt"`.
pub const COLUMNS: [&str; 24] = [
    "attempt_id",
    "key",
    "seq",
    "occurred_at",
    "tenant",
    "tool",
    "workflow_id",
    "step_id",
    "intent_id",
    "business_ref",
    "current_status",
    "kind",
    "actor",
    "fencing_token",
    "duration_ms",
    "detail",
    "prev_hash",
    "hash",
    "fingerprint",
    "business_args",
    "result",
    "error",
    "log_seq",
    "log_hash",
];

/// An attempt row and the context of its key. `tenant` and `tool` are the attempt's
/// own (hash-covered) columns; `workflow_id` … `current_status` come from the record,
/// and `current_status` is the key's status at export time, not at `occurred_at`.
/// So do the last six (`fingerprint` … `log_hash`): the record's state and chain head
/// at export time, which the head row's `detail.state` binds (docs/EXPORT.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportRow {
    pub attempt_id: i64,
    pub key: String,
    pub seq: i64,
    #[serde(with = "micros")]
    pub occurred_at: DateTime<Utc>,
    /// The attempt's `tenant` and `tool` and the record's other three intent fields;
    /// flattened, so the members stay in [`COLUMNS`] order at the top level.
    #[serde(flatten)]
    pub intent: Intent,
    pub business_ref: Option<String>,
    pub current_status: Status,
    pub kind: AttemptKind,
    pub actor: String,
    pub fencing_token: i64,
    pub duration_ms: Option<i64>,
    pub detail: Value,
    pub prev_hash: String,
    pub hash: String,
    // The record's state and head: absent from files of earlier versions, which
    // then read as "not the head" (nothing to compare the state with).
    #[serde(default)]
    pub fingerprint: String,
    #[serde(default)]
    pub business_args: Value,
    #[serde(default)]
    pub result: Option<Value>,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub log_seq: i64,
    #[serde(default)]
    pub log_hash: String,
}

impl ExportRow {
    pub fn chain_fields(&self) -> ChainFields<'_> {
        ChainFields {
            key: &self.key,
            tenant: &self.intent.tenant,
            tool: &self.intent.tool,
            seq: self.seq,
            kind: self.kind.as_str(),
            fencing_token: self.fencing_token,
            actor: &self.actor,
            detail: Detail::Value(&self.detail),
            duration_ms: self.duration_ms,
            occurred_at: self.occurred_at,
        }
    }

    /// The key the guard derives from this row's intent; an empty or over-long field
    /// derives nothing (and so never matches).
    pub(crate) fn derived_key(&self) -> String {
        self.intent.key().map(|k| k.to_string()).unwrap_or_default()
    }

    /// The record's state as exported beside this row.
    pub(crate) fn record_state(&self) -> RecordState<'_> {
        RecordState {
            status: self.current_status,
            fingerprint: &self.fingerprint,
            business_args: &self.business_args,
            business_ref: self.business_ref.as_deref(),
            result: self.result.as_ref(),
            error: self.error.as_deref(),
        }
    }

    /// Whether this row is its record's head (the newest row when exported).
    pub(crate) fn is_head(&self) -> bool {
        self.seq == self.log_seq && self.hash == self.log_hash
    }

    /// The hash this row's content and `prev_hash` must have (tests' fixtures seal
    /// edited rows with it).
    #[cfg(test)]
    pub(crate) fn computed_hash(&self) -> String {
        crate::guard::chain_hash(&self.prev_hash, self.chain_fields())
    }
}

/// An export row as the database sent it, not yet decoded. The CSV export reads
/// its cells in place ([`RawExportRow::cells`]): a row's text is borrowed, not
/// copied into the `String`s and JSON trees of an [`ExportRow`], which were most of
/// the exporter's allocations (docs/PERFORMANCE.md, "Export").
pub struct RawExportRow(Raw);

enum Raw {
    /// A PostgreSQL row, and whether its columns' types are still to be checked.
    Postgres(PgRow, Checked),
    Sqlite(SqliteRow),
}

/// Whether decoding checks each column's type against the Rust type it becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checked {
    /// Each value against its Rust type, as sqlx does; on PostgreSQL also each
    /// column's declared type (a NULL value has none to check).
    Yes,
    /// An earlier row of the same statement was checked. PostgreSQL describes a
    /// statement's columns once (one RowDescription, shared by every row, `PgRow`'s
    /// metadata), so the types checked on its first row hold for the rest. sqlx's
    /// check on every column of every row was ~10 % of an export's CPU
    /// (docs/PERFORMANCE.md, "Cells checked once a statement").
    AsTheFirstRow,
}

impl RawExportRow {
    /// A PostgreSQL row; `checked`: see [`Checked`].
    pub(super) fn postgres(row: PgRow, checked: Checked) -> Self {
        RawExportRow(Raw::Postgres(row, checked))
    }

    /// A SQLite row: its types are checked on every row (a SQLite column's values
    /// may each have their own type).
    pub(super) fn sqlite(row: SqliteRow) -> Self {
        RawExportRow(Raw::Sqlite(row))
    }

    /// The row's cells, borrowed from it. A name that is no status or kind is
    /// corrupt data, as is a JSON column that is not JSON.
    pub fn cells(&self) -> Result<ExportCells<'_>, StoreError> {
        Ok(match &self.0 {
            Raw::Postgres(r, checked) => r.decode_cells(*checked)?,
            Raw::Sqlite(r) => r.decode_cells(Checked::Yes)?,
        })
    }
}

/// A JSON column's text, as the database sent it: a `jsonb`'s text form on
/// PostgreSQL, the stored text on SQLite. Not parsed yet: its reader (the
/// canonicaliser, or [`JsonText::value`]) finds text that is not JSON.
#[derive(Debug, Clone, Copy)]
pub struct JsonText<'r> {
    /// The column's position, for the error of [`JsonText::value`].
    pub column: usize,
    pub text: &'r str,
}

impl JsonText<'_> {
    /// The text as a value, failing as decoding the column as `Json<Value>` would.
    pub fn value(&self) -> Result<Value, StoreError> {
        Ok(self.decode()?)
    }

    fn decode(&self) -> Result<Value, sqlx::Error> {
        serde_json::from_str(self.text).map_err(|e| sqlx::Error::ColumnDecode {
            index: format!("{:?}", self.column),
            source: e.into(),
        })
    }
}

/// One export row borrowed from the database's row, in [`COLUMNS`] order: numbers,
/// times and names decoded, text and JSON as sent.
#[derive(Debug, Clone, Copy)]
pub struct ExportCells<'r> {
    pub attempt_id: i64,
    pub key: &'r str,
    pub seq: i64,
    pub occurred_at: DateTime<Utc>,
    pub tenant: &'r str,
    pub tool: &'r str,
    pub workflow_id: &'r str,
    pub step_id: &'r str,
    pub intent_id: &'r str,
    pub business_ref: Option<&'r str>,
    pub current_status: Status,
    pub kind: AttemptKind,
    pub actor: &'r str,
    pub fencing_token: i64,
    pub duration_ms: Option<i64>,
    pub detail: JsonText<'r>,
    pub prev_hash: &'r str,
    pub hash: &'r str,
    pub fingerprint: &'r str,
    pub business_args: JsonText<'r>,
    pub result: Option<JsonText<'r>>,
    pub error: Option<&'r str>,
    pub log_seq: i64,
    pub log_hash: &'r str,
}

impl ExportCells<'_> {
    /// The row with its own strings and JSON values (NDJSON, the archive).
    pub fn to_row(&self) -> Result<ExportRow, StoreError> {
        Ok(self.decode_row()?)
    }

    fn decode_row(&self) -> Result<ExportRow, sqlx::Error> {
        Ok(ExportRow {
            attempt_id: self.attempt_id,
            key: self.key.into(),
            seq: self.seq,
            occurred_at: self.occurred_at,
            intent: Intent {
                tenant: self.tenant.into(),
                tool: self.tool.into(),
                workflow_id: self.workflow_id.into(),
                step_id: self.step_id.into(),
                intent_id: self.intent_id.into(),
            },
            business_ref: self.business_ref.map(String::from),
            current_status: self.current_status,
            kind: self.kind,
            actor: self.actor.into(),
            fencing_token: self.fencing_token,
            duration_ms: self.duration_ms,
            detail: self.detail.decode()?,
            prev_hash: self.prev_hash.into(),
            hash: self.hash.into(),
            fingerprint: self.fingerprint.into(),
            business_args: self.business_args.decode()?,
            result: self.result.map(|j| j.decode()).transpose()?,
            error: self.error.map(String::from),
            log_seq: self.log_seq,
            log_hash: self.log_hash.into(),
        })
    }
}

/// A JSON column's text, borrowed and not parsed: whoever reads it parses it (the
/// canonicaliser, or serde_json into a value), so checking it here as
/// `Json<&RawValue>` does was a second parse of every JSON byte (6 % of the CSV
/// export's CPU, docs/PERFORMANCE.md). Text that is not JSON fails there, as
/// [`JsonText::value`]'s column error.
struct Unparsed<'r>(&'r str);

/// A `json` or `jsonb` column, as for `Json<T>`.
impl Type<Postgres> for Unparsed<'_> {
    fn type_info() -> PgTypeInfo {
        <Json<()> as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <Json<()> as Type<Postgres>>::compatible(ty)
    }
}

impl<'r> Decode<'r, Postgres> for Unparsed<'r> {
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        let binary_jsonb = value.format() == PgValueFormat::Binary
            && *value.type_info() == <Json<()> as Type<Postgres>>::type_info();
        let mut bytes = value.as_bytes()?;
        if binary_jsonb {
            // A binary jsonb is a version byte (1, the only one) and the text.
            match bytes.split_first() {
                Some((1, text)) => bytes = text,
                _ => return Err("unsupported JSONB format version (expected 1)".into()),
            }
        }
        Ok(Unparsed(std::str::from_utf8(bytes)?))
    }
}

/// SQLite stores JSON as text.
impl Type<Sqlite> for Unparsed<'_> {
    fn type_info() -> SqliteTypeInfo {
        <&str as Type<Sqlite>>::type_info()
    }

    fn compatible(ty: &SqliteTypeInfo) -> bool {
        <&str as Type<Sqlite>>::compatible(ty)
    }
}

impl<'r> Decode<'r, Sqlite> for Unparsed<'r> {
    fn decode(value: SqliteValueRef<'r>) -> Result<Self, BoxDynError> {
        <&str as Decode<Sqlite>>::decode(value).map(Unparsed)
    }
}

/// Decoding by column position, in the export statement's order: `FromRow`'s derive
/// looks every column up by name, 24 hash lookups a row, a measurable share of an
/// export's CPU (docs/PERFORMANCE.md, export).
trait DecodeCells<'r> {
    fn decode_cells(&'r self, checked: Checked) -> Result<ExportCells<'r>, sqlx::Error>;
}

/// Column `i` decoded as `T`, checked: on PostgreSQL (`declared`) the statement's
/// type for the column, NULL or not, then (as sqlx's `try_get`) the value's.
fn get_checked<'r, R, T>(r: &'r R, i: usize, declared: bool) -> Result<T, sqlx::Error>
where
    R: sqlx::Row,
    T: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    usize: sqlx::ColumnIndex<R>,
{
    use sqlx::{Column, TypeInfo};
    if declared {
        let ty = r.column(i).type_info();
        if !T::compatible(ty) {
            return Err(sqlx::Error::ColumnDecode {
                index: i.to_string(),
                source: format!(
                    "the export reads it as {}, but the statement's column is {}",
                    std::any::type_name::<T>(),
                    ty.name()
                )
                .into(),
            });
        }
    }
    r.try_get(i)
}

macro_rules! decode_cells {
    ($row:ty, declared: $declared:expr) => {
        impl<'r> DecodeCells<'r> for $row {
            fn decode_cells(&'r self, checked: Checked) -> Result<ExportCells<'r>, sqlx::Error> {
                use sqlx::Row;
                let r = self;
                // Decoding still fails on a value of the wrong size or form; only the
                // comparison of type names is skipped.
                macro_rules! get {
                    ($column:expr) => {
                        match checked {
                            Checked::Yes => get_checked(r, $column, $declared)?,
                            Checked::AsTheFirstRow => r.try_get_unchecked($column)?,
                        }
                    };
                }
                let attempt_id: i64 = get!(0);
                let corrupt = |e: crate::guard::UnknownName| {
                    sqlx::Error::Decode(format!("attempt {attempt_id}: {e}").into())
                };
                let json = |column: usize| -> Result<JsonText<'r>, sqlx::Error> {
                    let text: Unparsed<'r> = get!(column);
                    Ok(JsonText {
                        column,
                        text: text.0,
                    })
                };
                let status: &str = get!(10);
                let kind: &str = get!(11);
                let result: Option<Unparsed<'r>> = get!(20);
                Ok(ExportCells {
                    attempt_id,
                    key: get!(1),
                    seq: get!(2),
                    occurred_at: get!(3),
                    tenant: get!(4),
                    tool: get!(5),
                    workflow_id: get!(6),
                    step_id: get!(7),
                    intent_id: get!(8),
                    business_ref: get!(9),
                    current_status: status.parse().map_err(corrupt)?,
                    kind: kind.parse().map_err(corrupt)?,
                    actor: get!(12),
                    fencing_token: get!(13),
                    duration_ms: get!(14),
                    detail: json(15)?,
                    prev_hash: get!(16),
                    hash: get!(17),
                    fingerprint: get!(18),
                    business_args: json(19)?,
                    result: result.map(|j| JsonText {
                        column: 20,
                        text: j.0,
                    }),
                    error: get!(21),
                    log_seq: get!(22),
                    log_hash: get!(23),
                })
            }
        }

        /// The pruner's archive reads whole rows; decoded as the export's cells.
        impl<'r> sqlx::FromRow<'r, $row> for ExportRow {
            fn from_row(r: &'r $row) -> Result<Self, sqlx::Error> {
                r.decode_cells(Checked::Yes)?.decode_row()
            }
        }
    };
}
decode_cells!(PgRow, declared: true);
// SQLite's declared types are the tables' affinities (none for an expression);
// each value carries its own type, which `try_get` checks.
decode_cells!(SqliteRow, declared: false);
