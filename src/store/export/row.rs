//! The export's raw row ([`RawExportRow`]) and how its cells are decoded from a
//! PostgreSQL or SQLite row, by position, in the order of the port's
//! [`COLUMNS`](crate::export::port::COLUMNS) (the export's contract, `export/port/row.rs`).

use crate::export::port::{ExportCells, JsonText, RawRow};
use crate::guard::StoreError;
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgRow, PgTypeInfo, PgValueFormat, PgValueRef, Postgres};
use sqlx::sqlite::{Sqlite, SqliteRow, SqliteTypeInfo, SqliteValueRef};
use sqlx::types::Json;
use sqlx::{Decode, Type, ValueRef};

/// An export row as the database sent it, not yet decoded ([`RawRow`]).
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
    pub(crate) fn postgres(row: PgRow, checked: Checked) -> Self {
        RawExportRow(Raw::Postgres(row, checked))
    }
}

/// A PostgreSQL row, its types checked.
impl From<PgRow> for RawExportRow {
    fn from(row: PgRow) -> Self {
        RawExportRow::postgres(row, Checked::Yes)
    }
}

/// A SQLite row: its types are checked on every row (a SQLite column's values may
/// each have their own type).
impl From<SqliteRow> for RawExportRow {
    fn from(row: SqliteRow) -> Self {
        RawExportRow(Raw::Sqlite(row))
    }
}

impl RawRow for RawExportRow {
    fn cells(&self) -> Result<ExportCells<'_>, StoreError> {
        Ok(match &self.0 {
            Raw::Postgres(r, checked) => r.decode_cells(*checked)?,
            Raw::Sqlite(r) => r.decode_cells(Checked::Yes)?,
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
    };
}
decode_cells!(PgRow, declared: true);
// SQLite's declared types are the tables' affinities (none for an expression);
// each value carries its own type, which `try_get` checks.
decode_cells!(SqliteRow, declared: false);
