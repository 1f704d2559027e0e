//! Rows into domain values: [`Record`] and [`Attempt`] (and the tailer's and the
//! backlog's rows) decode straight from a row of either backend, so their columns are
//! declared once (the domain struct) and listed once (`store/sql.rs`), with no row
//! struct repeating them in between.

use crate::guard::{Attempt, FencingToken, Intent, Record};
use crate::metrics::port::BacklogGroup;
use crate::tail::port::TailEvent;
use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;
use sqlx::types::Json;
use sqlx::{FromRow, Row};
use std::str::FromStr;

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

/// `Type { field: row.try_get("field")?, …, rest }`: each listed field decoded from
/// the column of its name; `rest` are the fields that need more than that.
macro_rules! by_name {
    ($r:ident => $ty:ident { $($field:ident),* $(,)? } { $($rest:tt)* }) => {
        $ty { $($field: $r.try_get(stringify!($field))?,)* $($rest)* }
    };
}

/// `FromRow` for one backend's row type.
macro_rules! decode_by_name {
    ($row:ty) => {
        /// The five intent columns of a record or a listing row (whose derive
        /// flattens it in).
        impl<'r> FromRow<'r, $row> for Intent {
            fn from_row(r: &'r $row) -> Result<Self, sqlx::Error> {
                Ok(by_name!(r => Intent { tenant, tool, workflow_id, step_id, intent_id } {}))
            }
        }

        impl<'r> FromRow<'r, $row> for Record {
            fn from_row(r: &'r $row) -> Result<Self, sqlx::Error> {
                let key: String = r.try_get("key")?;
                let status = parsed(r.try_get("status")?, "status", &format!("record {key}"))?;
                let key = parsed(key, "key", "a record")?;
                let fencing_token = FencingToken(r.try_get("fencing_token")?);
                let business_args = r.try_get::<Json<_>, _>("business_args")?.0;
                let result = r.try_get::<Option<Json<_>>, _>("result")?.map(|j| j.0);
                let intent = Intent::from_row(r)?;
                Ok(by_name!(r => Record {
                    business_ref, fingerprint,
                    lease_until, attempt_count, error, provider_retention_until,
                    resend_safe_until, release_approved, created_at, updated_at, log_seq, log_hash,
                    refusals_not_logged,
                } { key, intent, status, fencing_token, business_args, result }))
            }
        }

        impl<'r> FromRow<'r, $row> for Attempt {
            fn from_row(r: &'r $row) -> Result<Self, sqlx::Error> {
                let id: i64 = r.try_get("id")?;
                let kind = parsed(r.try_get("kind")?, "kind", &format!("attempt {id}"))?;
                let detail = r.try_get::<Json<_>, _>("detail")?.0;
                let what = format!("attempt {id}");
                let key = parsed(r.try_get("key")?, "key", &what)?;
                let fencing_token = FencingToken(r.try_get("fencing_token")?);
                Ok(by_name!(r => Attempt {
                    tenant, tool, seq, actor, duration_ms, occurred_at,
                    prev_hash, hash,
                } { id, key, kind, fencing_token, detail }))
            }
        }

        impl<'r> FromRow<'r, $row> for TailEvent {
            fn from_row(r: &'r $row) -> Result<Self, sqlx::Error> {
                Ok(by_name!(r => TailEvent {
                    id, txid, tool, tenant, kind, resolution, previous_status,
                    suspected_duplicate_of, duration_ms, occurred_at,
                } {}))
            }
        }

        impl<'r> FromRow<'r, $row> for BacklogGroup {
            fn from_row(r: &'r $row) -> Result<Self, sqlx::Error> {
                Ok(by_name!(r => BacklogGroup {
                    tool, tenant, unknown, expired_leases, oldest_created_at, oldest_unknown_created_at,
                    earliest_retention_deadline, past_retention,
                } {}))
            }
        }
    };
}

decode_by_name!(PgRow);
decode_by_name!(SqliteRow);
