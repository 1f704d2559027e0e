//! Row shapes as sqlx decodes them, and their conversion into domain values.

use super::StoreError;
use crate::guard::{Attempt, Record, Status};
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;

/// A stored status this version cannot read is a corrupt row, named by its key.
pub(crate) fn status_of(key: &str, text: &str) -> Result<Status, StoreError> {
    text.parse()
        .map_err(|e| StoreError::Corrupt(format!("record {key}: {e}")))
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct RecordRow {
    key: String,
    tenant: String,
    tool: String,
    workflow_id: String,
    step_id: String,
    intent_id: String,
    business_ref: Option<String>,
    fingerprint: String,
    business_args: Json<Value>,
    status: String,
    fencing_token: i64,
    lease_until: DateTime<Utc>,
    attempt_count: i64,
    result: Option<Json<Value>>,
    error: Option<String>,
    provider_retention_until: DateTime<Utc>,
    resend_safe_until: DateTime<Utc>,
    release_approved: bool,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    log_seq: i64,
    log_hash: String,
}

impl TryFrom<RecordRow> for Record {
    type Error = StoreError;
    fn try_from(r: RecordRow) -> Result<Record, StoreError> {
        Ok(Record {
            status: status_of(&r.key, &r.status)?,
            key: r.key,
            tenant: r.tenant,
            tool: r.tool,
            workflow_id: r.workflow_id,
            step_id: r.step_id,
            intent_id: r.intent_id,
            business_ref: r.business_ref,
            fingerprint: r.fingerprint,
            business_args: r.business_args.0,
            fencing_token: r.fencing_token,
            lease_until: r.lease_until,
            attempt_count: r.attempt_count,
            result: r.result.map(|j| j.0),
            error: r.error,
            provider_retention_until: r.provider_retention_until,
            resend_safe_until: r.resend_safe_until,
            release_approved: r.release_approved,
            created_at: r.created_at,
            updated_at: r.updated_at,
            log_seq: r.log_seq,
            log_hash: r.log_hash,
        })
    }
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct AttemptRow {
    id: i64,
    key: String,
    tenant: String,
    tool: String,
    seq: i64,
    kind: String,
    fencing_token: i64,
    actor: String,
    detail: Json<Value>,
    duration_ms: Option<i64>,
    occurred_at: DateTime<Utc>,
    prev_hash: String,
    hash: String,
}

impl TryFrom<AttemptRow> for Attempt {
    type Error = StoreError;
    fn try_from(r: AttemptRow) -> Result<Attempt, StoreError> {
        Ok(Attempt {
            kind: r
                .kind
                .parse()
                .map_err(|e| StoreError::Corrupt(format!("attempt {}: {e}", r.id)))?,
            id: r.id,
            key: r.key,
            tenant: r.tenant,
            tool: r.tool,
            seq: r.seq,
            fencing_token: r.fencing_token,
            actor: r.actor,
            detail: r.detail.0,
            duration_ms: r.duration_ms,
            occurred_at: r.occurred_at,
            prev_hash: r.prev_hash,
            hash: r.hash,
        })
    }
}
