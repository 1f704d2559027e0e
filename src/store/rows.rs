//! Rows into domain values: [`Record`] and [`Attempt`] decode straight from a row of
//! either backend, so their columns are declared once (the domain struct) and listed
//! once (`store/sql.rs`), with no row struct repeating them in between.

use super::StoreError;
use crate::guard::{Attempt, Record, Status};
use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;
use sqlx::types::Json;
use sqlx::{FromRow, Row};
use std::str::FromStr;

/// A stored status this version cannot read is a corrupt row, named by its key.
pub(crate) fn status_of(key: &str, text: &str) -> Result<Status, StoreError> {
    text.parse()
        .map_err(|e| StoreError::Corrupt(format!("record {key}: {e}")))
}

/// Parses the text column `column` of the row named `what`; a value this version
/// does not know is a decode error (the store reports it as a corrupt row).
fn parsed<T>(text: String, column: &str, what: &str) -> Result<T, sqlx::Error>
where
    T: FromStr,
    T::Err: std::error::Error + Send + Sync + 'static,
{
    text.parse().map_err(|e| sqlx::Error::ColumnDecode {
        index: format!("{column} of {what}"),
        source: Box::new(e),
    })
}

/// `FromRow` for one backend's row type, by column name.
macro_rules! decode_by_name {
    ($row:ty) => {
        impl<'r> FromRow<'r, $row> for Record {
            fn from_row(r: &'r $row) -> Result<Self, sqlx::Error> {
                let key: String = r.try_get("key")?;
                let status = parsed(r.try_get("status")?, "status", &format!("record {key}"))?;
                Ok(Record {
                    status,
                    tenant: r.try_get("tenant")?,
                    tool: r.try_get("tool")?,
                    workflow_id: r.try_get("workflow_id")?,
                    step_id: r.try_get("step_id")?,
                    intent_id: r.try_get("intent_id")?,
                    business_ref: r.try_get("business_ref")?,
                    fingerprint: r.try_get("fingerprint")?,
                    business_args: r.try_get::<Json<_>, _>("business_args")?.0,
                    fencing_token: r.try_get("fencing_token")?,
                    lease_until: r.try_get("lease_until")?,
                    attempt_count: r.try_get("attempt_count")?,
                    result: r.try_get::<Option<Json<_>>, _>("result")?.map(|j| j.0),
                    error: r.try_get("error")?,
                    provider_retention_until: r.try_get("provider_retention_until")?,
                    resend_safe_until: r.try_get("resend_safe_until")?,
                    release_approved: r.try_get("release_approved")?,
                    created_at: r.try_get("created_at")?,
                    updated_at: r.try_get("updated_at")?,
                    log_seq: r.try_get("log_seq")?,
                    log_hash: r.try_get("log_hash")?,
                    key,
                })
            }
        }

        impl<'r> FromRow<'r, $row> for Attempt {
            fn from_row(r: &'r $row) -> Result<Self, sqlx::Error> {
                let id: i64 = r.try_get("id")?;
                let kind = parsed(r.try_get("kind")?, "kind", &format!("attempt {id}"))?;
                Ok(Attempt {
                    id,
                    kind,
                    key: r.try_get("key")?,
                    tenant: r.try_get("tenant")?,
                    tool: r.try_get("tool")?,
                    seq: r.try_get("seq")?,
                    fencing_token: r.try_get("fencing_token")?,
                    actor: r.try_get("actor")?,
                    detail: r.try_get::<Json<_>, _>("detail")?.0,
                    duration_ms: r.try_get("duration_ms")?,
                    occurred_at: r.try_get("occurred_at")?,
                    prev_hash: r.try_get("prev_hash")?,
                    hash: r.try_get("hash")?,
                })
            }
        }
    };
}

decode_by_name!(PgRow);
decode_by_name!(SqliteRow);
