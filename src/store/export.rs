//! The export query: attempts joined with their record, sorted by (key, seq), as a
//! row stream (`fetch`, never `fetch_all`): memory stays flat however many rows.
//!
//! One statement, so one snapshot on both backends: each row's record context and
//! chain head are consistent with the attempts beside it.

use super::{Store, StoreError, on_pool};
use crate::export::{ChainHead, ExportFilter, ExportRow};
use chrono::{DateTime, Utc};
use futures::stream::{BoxStream, StreamExt};
use serde_json::Value;
use sqlx::types::Json;

/// The columns both the export and the pruner's archive read.
macro_rules! export_select {
    () => {
        "SELECT a.id, a.key, a.seq, a.occurred_at, a.tenant, a.tool, r.workflow_id, r.step_id, \
         r.intent_id, r.business_ref, r.status, a.kind, a.actor, a.fencing_token, a.duration_ms, \
         a.detail, a.prev_hash, a.hash, r.fingerprint, r.business_args, r.result, r.error, \
         r.log_seq, r.log_hash \
         FROM idempotency_attempts a JOIN idempotency_records r ON r.key = a.key "
    };
}
pub(crate) use export_select;

/// Optional filters as `($n IS NULL OR …)`: PostgreSQL needs the parameter's type.
/// `since` inclusive, `until` exclusive. The (key, seq) unique index gives the order.
pub const EXPORT_POSTGRES: &str = concat!(
    export_select!(),
    "WHERE ($1::timestamptz IS NULL OR a.occurred_at >= $1) \
     AND ($2::timestamptz IS NULL OR a.occurred_at < $2) \
     AND ($3::text IS NULL OR a.tenant = $3) \
     AND ($4::text IS NULL OR a.tool = $4) \
     AND ($5::text IS NULL OR a.key = $5) \
     AND ($6::text IS NULL OR r.business_ref = $6) \
     ORDER BY a.key, a.seq"
);
/// SQLite compares the RFC 3339 text it stores; the bound times use the same form.
pub const EXPORT_SQLITE: &str = concat!(
    export_select!(),
    "WHERE ($1 IS NULL OR a.occurred_at >= $1) \
     AND ($2 IS NULL OR a.occurred_at < $2) \
     AND ($3 IS NULL OR a.tenant = $3) \
     AND ($4 IS NULL OR a.tool = $4) \
     AND ($5 IS NULL OR a.key = $5) \
     AND ($6 IS NULL OR r.business_ref = $6) \
     ORDER BY a.key, a.seq"
);

/// Records whose attempt rows are all gone (the verifier reports them).
pub const RECORDS_WITHOUT_ATTEMPTS: &str = "SELECT r.key FROM idempotency_records r \
    WHERE NOT EXISTS (SELECT 1 FROM idempotency_attempts a WHERE a.key = r.key) \
    ORDER BY r.key LIMIT 100";

/// One row of [`export_select!`], decoded by position (below).
#[derive(Debug)]
pub(crate) struct ExportRowDb {
    id: i64,
    key: String,
    seq: i64,
    occurred_at: DateTime<Utc>,
    tenant: String,
    tool: String,
    workflow_id: String,
    step_id: String,
    intent_id: String,
    business_ref: Option<String>,
    status: String,
    kind: String,
    actor: String,
    fencing_token: i64,
    duration_ms: Option<i64>,
    detail: Json<Value>,
    prev_hash: String,
    hash: String,
    fingerprint: String,
    business_args: Json<Value>,
    result: Option<Json<Value>>,
    error: Option<String>,
    log_seq: i64,
    log_hash: String,
}

/// Decodes by column position, in [`export_select!`]'s order: `FromRow`'s derive
/// looks every column up by name, 24 hash lookups a row, a measurable share of an
/// export's CPU (docs/PERFORMANCE.md, export). A test checks the order against the
/// names.
macro_rules! export_row_by_index {
    ($row:ty) => {
        impl<'r> sqlx::FromRow<'r, $row> for ExportRowDb {
            fn from_row(r: &'r $row) -> Result<Self, sqlx::Error> {
                use sqlx::Row;
                Ok(ExportRowDb {
                    id: r.try_get(0)?,
                    key: r.try_get(1)?,
                    seq: r.try_get(2)?,
                    occurred_at: r.try_get(3)?,
                    tenant: r.try_get(4)?,
                    tool: r.try_get(5)?,
                    workflow_id: r.try_get(6)?,
                    step_id: r.try_get(7)?,
                    intent_id: r.try_get(8)?,
                    business_ref: r.try_get(9)?,
                    status: r.try_get(10)?,
                    kind: r.try_get(11)?,
                    actor: r.try_get(12)?,
                    fencing_token: r.try_get(13)?,
                    duration_ms: r.try_get(14)?,
                    detail: r.try_get(15)?,
                    prev_hash: r.try_get(16)?,
                    hash: r.try_get(17)?,
                    fingerprint: r.try_get(18)?,
                    business_args: r.try_get(19)?,
                    result: r.try_get(20)?,
                    error: r.try_get(21)?,
                    log_seq: r.try_get(22)?,
                    log_hash: r.try_get(23)?,
                })
            }
        }
    };
}
export_row_by_index!(sqlx::postgres::PgRow);
export_row_by_index!(sqlx::sqlite::SqliteRow);

/// The column names of [`export_select!`] in the order [`ExportRowDb`] reads them.
#[cfg(test)]
const EXPORT_ROW_ORDER: [&str; 24] = [
    "id",
    "key",
    "seq",
    "occurred_at",
    "tenant",
    "tool",
    "workflow_id",
    "step_id",
    "intent_id",
    "business_ref",
    "status",
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

impl TryFrom<ExportRowDb> for (ExportRow, ChainHead) {
    type Error = StoreError;
    fn try_from(r: ExportRowDb) -> Result<Self, StoreError> {
        let corrupt =
            |e: crate::guard::UnknownName| StoreError::Corrupt(format!("attempt {}: {e}", r.id));
        let row = ExportRow {
            current_status: r.status.parse().map_err(corrupt)?,
            kind: r.kind.parse().map_err(corrupt)?,
            attempt_id: r.id,
            key: r.key,
            seq: r.seq,
            occurred_at: r.occurred_at,
            tenant: r.tenant,
            tool: r.tool,
            workflow_id: r.workflow_id,
            step_id: r.step_id,
            intent_id: r.intent_id,
            business_ref: r.business_ref,
            actor: r.actor,
            fencing_token: r.fencing_token,
            duration_ms: r.duration_ms,
            detail: r.detail.0,
            prev_hash: r.prev_hash,
            hash: r.hash,
            fingerprint: r.fingerprint,
            business_args: r.business_args.0,
            result: r.result.map(|j| j.0),
            error: r.error,
            log_seq: r.log_seq,
            log_hash: r.log_hash.clone(),
        };
        let head = ChainHead {
            seq: r.log_seq,
            hash: r.log_hash,
        };
        Ok((row, head))
    }
}

pub(crate) fn convert(
    row: Result<ExportRowDb, sqlx::Error>,
) -> Result<(ExportRow, ChainHead), StoreError> {
    row.map_err(StoreError::from).and_then(TryInto::try_into)
}

impl Store {
    /// Every attempt `filter` selects, with its record's context and chain head, in
    /// (key, seq) order, streamed from the database.
    pub fn export_rows(
        &self,
        filter: &ExportFilter,
    ) -> BoxStream<'_, Result<(ExportRow, ChainHead), StoreError>> {
        let sql = match self {
            Store::Postgres(_) => EXPORT_POSTGRES,
            Store::Sqlite(_) => EXPORT_SQLITE,
        };
        let f = filter.clone();
        on_pool!(self, pool => sqlx::query_as::<_, ExportRowDb>(sql)
            .bind(f.since)
            .bind(f.until)
            .bind(f.tenant)
            .bind(f.tool)
            .bind(f.key)
            .bind(f.business_ref)
            .fetch(pool)
            .map(convert)
            .boxed())
    }

    /// Up to 100 keys whose record has no attempt rows left.
    pub async fn records_without_attempts(&self) -> Result<Vec<String>, StoreError> {
        Ok(
            on_pool!(self, pool => sqlx::query_scalar(RECORDS_WITHOUT_ATTEMPTS).fetch_all(pool).await)?,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_export_row_is_decoded_in_the_order_the_select_names_its_columns() {
        let select = export_select!();
        let list = select
            .strip_prefix("SELECT ")
            .and_then(|s| s.split(" FROM ").next())
            .unwrap();
        let names: Vec<&str> = list
            .split(',')
            .map(|c| c.trim().rsplit('.').next().unwrap())
            .collect();
        assert_eq!(names, EXPORT_ROW_ORDER);
    }
}
