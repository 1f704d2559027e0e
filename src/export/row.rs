//! One exported row: an attempt with its record's context, in the shape both formats
//! share. The column order here is the public contract of the CSV header and of the
//! NDJSON member order (docs/EXPORT.md).

use crate::guard::binding::RecordState;
use crate::guard::canonical::canonical_json;
use crate::guard::{AttemptKind, ChainFields, Intent, Status, chain_hash, rfc3339};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::borrow::Cow;

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

/// Files of earlier versions end after `hash`.
pub const LEGACY_COLUMNS: usize = 18;

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
    pub tenant: String,
    pub tool: String,
    pub workflow_id: String,
    pub step_id: String,
    pub intent_id: String,
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

/// Where a key's chain ends according to its record (`log_seq`, `log_hash`): the
/// anchor that makes a deleted or appended last row visible in the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainHead {
    pub seq: i64,
    pub hash: String,
}

impl ExportRow {
    pub fn chain_fields(&self) -> ChainFields<'_> {
        ChainFields {
            key: &self.key,
            tenant: &self.tenant,
            tool: &self.tool,
            seq: self.seq,
            kind: self.kind.as_str(),
            fencing_token: self.fencing_token,
            actor: &self.actor,
            detail: &self.detail,
            duration_ms: self.duration_ms,
            occurred_at: self.occurred_at,
        }
    }

    /// The key the guard derives from this row's intent; an empty or over-long field
    /// derives nothing (and so never matches).
    pub fn derived_key(&self) -> String {
        let intent = Intent {
            tenant: self.tenant.clone(),
            tool: self.tool.clone(),
            workflow_id: self.workflow_id.clone(),
            step_id: self.step_id.clone(),
            intent_id: self.intent_id.clone(),
        };
        intent.key().map(|k| k.to_string()).unwrap_or_default()
    }

    /// The record's state as exported beside this row.
    pub fn record_state(&self) -> RecordState<'_> {
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
    pub fn is_head(&self) -> bool {
        self.seq == self.log_seq && self.hash == self.log_hash
    }

    /// The hash this row's content and `prev_hash` must have.
    pub fn computed_hash(&self) -> String {
        chain_hash(&self.prev_hash, self.chain_fields())
    }

    /// The row as CSV fields, in [`COLUMNS`] order. `None` becomes an empty field;
    /// `detail` is its canonical (JCS) JSON text, the form the hash covers.
    pub fn csv_fields(&self) -> [Cow<'_, str>; 24] {
        fn text(s: &str) -> Cow<'_, str> {
            Cow::Borrowed(s)
        }
        fn opt(s: &Option<String>) -> Cow<'_, str> {
            Cow::Borrowed(s.as_deref().unwrap_or_default())
        }
        [
            self.attempt_id.to_string().into(),
            text(&self.key),
            self.seq.to_string().into(),
            rfc3339(self.occurred_at).into(),
            text(&self.tenant),
            text(&self.tool),
            text(&self.workflow_id),
            text(&self.step_id),
            text(&self.intent_id),
            opt(&self.business_ref),
            text(self.current_status.as_str()),
            text(self.kind.as_str()),
            text(&self.actor),
            self.fencing_token.to_string().into(),
            self.duration_ms
                .map(|d| d.to_string())
                .unwrap_or_default()
                .into(),
            canonical_detail(&self.detail).into(),
            text(&self.prev_hash),
            text(&self.hash),
            text(&self.fingerprint),
            canonical_detail(&self.business_args).into(),
            self.result
                .as_ref()
                .map(canonical_detail)
                .unwrap_or_default()
                .into(),
            opt(&self.error),
            self.log_seq.to_string().into(),
            text(&self.log_hash),
        ]
    }

    /// Reads a CSV record written by [`ExportRow::csv_fields`].
    pub fn from_csv_fields(fields: &csv::StringRecord) -> Result<ExportRow, String> {
        if fields.len() == LEGACY_COLUMNS {
            let mut padded = fields.clone();
            for value in ["", "null", "", "", "0", ""] {
                padded.push_field(value);
            }
            return Self::from_csv_fields(&padded);
        }
        if fields.len() != COLUMNS.len() {
            return Err(format!(
                "{} fields, expected {}",
                fields.len(),
                COLUMNS.len()
            ));
        }
        let text = |i: usize| fields[i].to_string();
        let optional = |i: usize| Some(text(i)).filter(|s| !s.is_empty());
        let int = |i: usize| -> Result<i64, String> {
            fields[i]
                .parse()
                .map_err(|_| format!("{} is not an integer: {:?}", COLUMNS[i], &fields[i]))
        };
        Ok(ExportRow {
            attempt_id: int(0)?,
            key: text(1),
            seq: int(2)?,
            occurred_at: DateTime::parse_from_rfc3339(&fields[3])
                .map_err(|e| format!("occurred_at: {e}"))?
                .to_utc(),
            tenant: text(4),
            tool: text(5),
            workflow_id: text(6),
            step_id: text(7),
            intent_id: text(8),
            business_ref: optional(9),
            current_status: fields[10].parse().map_err(|e| format!("{e}"))?,
            kind: fields[11].parse().map_err(|e| format!("{e}"))?,
            actor: text(12),
            fencing_token: int(13)?,
            duration_ms: if fields[14].is_empty() {
                None
            } else {
                Some(int(14)?)
            },
            detail: serde_json::from_str(&fields[15]).map_err(|e| format!("detail: {e}"))?,
            prev_hash: text(16),
            hash: text(17),
            fingerprint: text(18),
            business_args: serde_json::from_str(&fields[19])
                .map_err(|e| format!("business_args: {e}"))?,
            result: optional(20)
                .map(|t| serde_json::from_str(&t))
                .transpose()
                .map_err(|e| format!("result: {e}"))?,
            error: optional(21),
            log_seq: int(22)?,
            log_hash: text(23),
        })
    }
}

/// JCS text of a detail value. Every value the guard wrote is canonicalisable; one
/// that was edited into something that is not still prints (and then fails verify).
pub fn canonical_detail(detail: &Value) -> String {
    canonical_json(detail).unwrap_or_else(|_| detail.to_string())
}

/// Times in exports: RFC 3339 UTC with microseconds, the form the hash covers.
pub(crate) mod micros {
    use crate::guard::rfc3339;
    use chrono::{DateTime, Utc};
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&rfc3339(*t))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
        let text = String::deserialize(d)?;
        DateTime::parse_from_rfc3339(&text)
            .map(|t| t.to_utc())
            .map_err(serde::de::Error::custom)
    }

    pub mod option {
        use super::*;

        pub fn serialize<S: Serializer>(
            t: &Option<DateTime<Utc>>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match t {
                Some(t) => s.serialize_str(&rfc3339(*t)),
                None => s.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<DateTime<Utc>>, D::Error> {
            Option::<String>::deserialize(d)?
                .map(|text| {
                    DateTime::parse_from_rfc3339(&text)
                        .map(|t| t.to_utc())
                        .map_err(serde::de::Error::custom)
                })
                .transpose()
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::guard::GENESIS_HASH;
    use serde_json::json;

    pub fn sample() -> ExportRow {
        let mut row = ExportRow {
            attempt_id: 7,
            key: String::new(),
            seq: 1,
            occurred_at: DateTime::parse_from_rfc3339("2026-11-29T14:02:11.402Z")
                .unwrap()
                .to_utc(),
            tenant: "acme, \"ltd\"".into(),
            tool: "issue_refund".into(),
            workflow_id: "run-7f3a".into(),
            step_id: "4".into(),
            intent_id: "refund:order-A-88214".into(),
            business_ref: Some("order:A-88214".into()),
            current_status: Status::Done,
            kind: AttemptKind::Resolved,
            actor: "søren@support".into(),
            fencing_token: 2,
            duration_ms: None,
            detail: json!({"reason": "line one,\r\nline \"two\" — €", "n": 4500}),
            prev_hash: GENESIS_HASH.into(),
            hash: String::new(),
            fingerprint: String::new(),
            business_args: json!({"amount_p": 4500}),
            result: Some(json!({"refund_id": "rf_1"})),
            error: None,
            log_seq: 0,
            log_hash: String::new(),
        };
        row.fingerprint = crate::guard::binding::value_sha256(&row.business_args);
        row.key = row.derived_key();
        row.hash = row.computed_hash();
        row
    }

    #[test]
    fn a_row_survives_its_csv_fields() {
        let row = sample();
        let record = csv::StringRecord::from(row.csv_fields().to_vec());
        assert_eq!(ExportRow::from_csv_fields(&record).unwrap(), row);
    }

    #[test]
    fn a_row_survives_json() {
        let row = sample();
        let text = serde_json::to_string(&row).unwrap();
        assert!(text.contains("\"occurred_at\":\"2026-11-29T14:02:11.402000Z\""));
        assert_eq!(serde_json::from_str::<ExportRow>(&text).unwrap(), row);
    }

    #[test]
    fn the_columns_and_the_json_members_agree() {
        let value = serde_json::to_value(sample()).unwrap();
        let names: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut columns = COLUMNS.to_vec();
        columns.sort_unstable();
        assert_eq!(names, columns);
    }
}
