//! An exported row as CSV fields and back, and what its columns mean to `verify`.
//! The row itself ([`ExportRow`]) and its column order ([`COLUMNS`], the CSV header
//! and the NDJSON member order) are the export port's, in which the store yields it;
//! NDJSON is its serde form.

use super::port::{COLUMNS, ExportRow, JsonText};
use crate::base::canonical::{canonical_json, write_canonical_text};
use crate::guard::binding::RecordState;
use crate::guard::{ChainFields, Detail, Intent, StoreError, rfc3339};
use chrono::DateTime;
use serde_json::Value;
use std::borrow::Cow;

/// Files of earlier versions end after `hash`.
pub(crate) const LEGACY_COLUMNS: usize = 18;

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
            text(&self.intent.tenant),
            text(&self.intent.tool),
            text(&self.intent.workflow_id),
            text(&self.intent.step_id),
            text(&self.intent.intent_id),
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
    pub(crate) fn from_csv_fields(fields: &csv::StringRecord) -> Result<ExportRow, String> {
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
            intent: Intent {
                tenant: text(4),
                tool: text(5),
                workflow_id: text(6),
                step_id: text(7),
                intent_id: text(8),
            },
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

/// Appends [`canonical_detail`]'s text of a JSON column to `out`, written from the
/// column's text (no map or `String` per member for a row's three JSON columns); a
/// column JCS refuses (edited into a huge integer) goes through its value.
pub(crate) fn write_canonical_cell(
    out: &mut String,
    json: &JsonText<'_>,
) -> Result<(), StoreError> {
    if write_canonical_text(out, json.text).is_none() {
        out.push_str(&canonical_detail(&json.value()?));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::guard::{AttemptKind, GENESIS_HASH, Status};
    use serde_json::json;

    pub fn sample() -> ExportRow {
        let mut row = ExportRow {
            attempt_id: 7,
            key: String::new(),
            seq: 1,
            occurred_at: DateTime::parse_from_rfc3339("2026-11-29T14:02:11.402Z")
                .unwrap()
                .to_utc(),
            intent: Intent {
                tenant: "acme, \"ltd\"".into(),
                tool: "issue_refund".into(),
                workflow_id: "run-7f3a".into(),
                step_id: "4".into(),
                intent_id: "refund:order-A-88214".into(),
            },
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
