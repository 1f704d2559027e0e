//! One exported row: an attempt with its record's context, as the store yields it and
//! both export formats write it. The column order here is the public contract of the
//! CSV header and of the NDJSON member order (docs/EXPORT.md); the store's export
//! query selects the columns in this order and decodes them by position into
//! [`ExportCells`]. How a row becomes CSV fields and what it means to `verify` are
//! the export's (`export/row.rs`).

use crate::base::time::micros;
use crate::guard::{AttemptKind, Intent, Status, StoreError};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

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

/// A JSON column's text, as the database sent it: a `jsonb`'s text form on
/// PostgreSQL, the stored text on SQLite. Not parsed yet: its reader (the
/// canonicaliser, or [`JsonText::value`]) finds text that is not JSON.
#[derive(Debug, Clone, Copy)]
pub struct JsonText<'r> {
    /// The column's position, for the error of [`JsonText::value`].
    pub column: usize,
    pub text: &'r str,
}

impl<'r> JsonText<'r> {
    /// The text as a value.
    pub fn value(&self) -> Result<Value, StoreError> {
        self.parse()
    }

    /// The text, checked to be JSON without building a value.
    pub fn checked(&self) -> Result<&'r str, StoreError> {
        self.parse().map(RawValue::get)
    }

    /// Text that is not JSON fails as decoding the column as `Json<T>` would (in
    /// sqlx's words for a column it cannot decode).
    fn parse<T: Deserialize<'r>>(&self) -> Result<T, StoreError> {
        serde_json::from_str(self.text).map_err(|e| {
            let column = self.column;
            StoreError::Corrupt(format!(
                "error occurred while decoding column {column}: {e}"
            ))
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
    pub(crate) fn to_row(self) -> Result<ExportRow, StoreError> {
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
            detail: self.detail.value()?,
            prev_hash: self.prev_hash.into(),
            hash: self.hash.into(),
            fingerprint: self.fingerprint.into(),
            business_args: self.business_args.value()?,
            result: self.result.map(|j| j.value()).transpose()?,
            error: self.error.map(String::from),
            log_seq: self.log_seq,
            log_hash: self.log_hash.into(),
        })
    }
}
