//! One exported row: an attempt with its record's context, as the store yields it and
//! both export formats write it. The column order here is the public contract of the
//! CSV header and of the NDJSON member order (docs/EXPORT.md); the export query
//! selects the columns in this order and is decoded by position.

use crate::guard::binding::RecordState;
use crate::guard::{AttemptKind, ChainFields, Detail, Intent, Status, chain_hash};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

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
    pub fn derived_key(&self) -> String {
        self.intent.key().map(|k| k.to_string()).unwrap_or_default()
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
}

/// Times in exports, manifests and checkpoints: RFC 3339 UTC with microseconds, the
/// form the hash covers.
pub mod micros {
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
