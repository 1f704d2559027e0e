//! Decoding [`VERIFY`](super::VERIFY)'s rows for `verify`: the record's context is
//! decoded from a key's first row only and carried to the key's other rows, and each
//! row is decoded into a row the verifier has already checked and handed back
//! (`VerifyRows::give_back`), so its strings are overwritten in place instead of allocated
//! anew. Per row that was about a dozen `String`s (perf: `malloc`/`free` ~22 % of the
//! verifier's samples, sqlx's `try_get` ~13 %).
//!
//! Carrying is exact: the statement joins every row of a key to the same record row
//! in one snapshot, so a key's rows carry the same context columns. The server still
//! sends them on every row: sending them once per key needs the statement to know a
//! key's first row (`lag` over its order, exact even when a key's first rows were
//! deleted), and that window cost the server more than the columns it saves
//! (docs/PERFORMANCE.md, "Making verify faster").
//!
//! A row's `detail` is kept as the JSON text the database sent ([`VerifyRow`]): the
//! hash covers its JCS form, which is written from the text, and only a key's head
//! row needs it as a value (its bound state), parsed then by the check.

use crate::export::port::{ExportRow, VerifyRow};
use crate::guard::{AttemptKind, Intent, Status, UnknownName};
use serde_json::Value;
use serde_json::value::RawValue;
use sqlx::types::Json;

/// The record's context of the key being read, as its first row gave it (`status`
/// is `None` before the first row).
#[derive(Default)]
pub(super) struct KeyContext {
    key: String,
    workflow_id: String,
    step_id: String,
    intent_id: String,
    business_ref: Option<String>,
    status: Option<Status>,
    log_seq: i64,
    log_hash: String,
}

/// A row to decode into when no checked one has come back yet; every field is
/// overwritten by [`DecodeInto::decode_into`].
pub(super) fn blank_row() -> VerifyRow {
    let row = ExportRow {
        attempt_id: 0,
        key: String::new(),
        seq: 0,
        occurred_at: chrono::DateTime::UNIX_EPOCH,
        intent: Intent {
            tenant: String::new(),
            tool: String::new(),
            workflow_id: String::new(),
            step_id: String::new(),
            intent_id: String::new(),
        },
        business_ref: None,
        current_status: Status::Done,
        kind: AttemptKind::Claimed,
        actor: String::new(),
        fencing_token: 0,
        duration_ms: None,
        detail: Value::Null,
        prev_hash: String::new(),
        hash: String::new(),
        fingerprint: String::new(),
        business_args: Value::Null,
        result: None,
        error: None,
        log_seq: 0,
        log_hash: String::new(),
    };
    VerifyRow {
        row,
        detail: String::new(),
    }
}

fn set(to: &mut String, from: &str) {
    to.clear();
    to.push_str(from);
}

fn set_opt(to: &mut Option<String>, from: Option<&str>) {
    match from {
        Some(from) => set(to.get_or_insert_with(String::new), from),
        None => *to = None,
    }
}

/// One [`VERIFY`](super::VERIFY) row decoded by column position into `out`.
pub(super) trait DecodeInto {
    fn decode_into(&self, ctx: &mut KeyContext, out: &mut VerifyRow) -> Result<(), sqlx::Error>;
}

macro_rules! decode_into {
    ($row:ty) => {
        impl DecodeInto for $row {
            fn decode_into(
                &self,
                ctx: &mut KeyContext,
                out: &mut VerifyRow,
            ) -> Result<(), sqlx::Error> {
                use sqlx::Row;
                let r = self;
                let attempt_id: i64 = r.try_get(0)?;
                let corrupt = |e: UnknownName| {
                    sqlx::Error::Decode(format!("attempt {attempt_id}: {e}").into())
                };
                let key: &str = r.try_get(1)?;
                if ctx.status.is_none() || ctx.key != key {
                    set(&mut ctx.key, key);
                    set(&mut ctx.workflow_id, r.try_get(6)?);
                    set(&mut ctx.step_id, r.try_get(7)?);
                    set(&mut ctx.intent_id, r.try_get(8)?);
                    set_opt(&mut ctx.business_ref, r.try_get(9)?);
                    ctx.status = Some(r.try_get::<&str, _>(10)?.parse().map_err(corrupt)?);
                    ctx.log_seq = r.try_get(22)?;
                    set(&mut ctx.log_hash, r.try_get(23)?);
                }
                // Every field is written: the row held another row before. Named
                // in full, so a field added to `ExportRow` is a compile error here,
                // not a value left over from an earlier row.
                let ExportRow {
                    attempt_id: out_id,
                    key: out_key,
                    seq,
                    occurred_at,
                    intent,
                    business_ref,
                    current_status,
                    kind,
                    actor,
                    fencing_token,
                    duration_ms,
                    detail,
                    prev_hash,
                    hash,
                    fingerprint,
                    business_args,
                    result,
                    error,
                    log_seq,
                    log_hash,
                } = &mut out.row;
                let Intent {
                    tenant,
                    tool,
                    workflow_id,
                    step_id,
                    intent_id,
                } = intent;
                *out_id = attempt_id;
                set(out_key, key);
                *seq = r.try_get(2)?;
                *occurred_at = r.try_get(3)?;
                set(tenant, r.try_get(4)?);
                set(tool, r.try_get(5)?);
                workflow_id.clone_from(&ctx.workflow_id);
                step_id.clone_from(&ctx.step_id);
                intent_id.clone_from(&ctx.intent_id);
                business_ref.clone_from(&ctx.business_ref);
                *current_status = ctx.status.expect("set with the key's context");
                *kind = r.try_get::<&str, _>(11)?.parse().map_err(corrupt)?;
                set(actor, r.try_get(12)?);
                *fencing_token = r.try_get(13)?;
                *duration_ms = r.try_get(14)?;
                *detail = Value::Null;
                // Checked to be JSON, as the value it replaces was.
                set(
                    &mut out.detail,
                    r.try_get::<Json<&RawValue>, _>(15)?.0.get(),
                );
                set(prev_hash, r.try_get(16)?);
                set(hash, r.try_get(17)?);
                set(fingerprint, r.try_get(18)?);
                *business_args = r.try_get::<Json<Value>, _>(19)?.0;
                *result = r.try_get::<Option<Json<Value>>, _>(20)?.map(|j| j.0);
                set_opt(error, r.try_get(21)?);
                *log_seq = ctx.log_seq;
                log_hash.clone_from(&ctx.log_hash);
                Ok(())
            }
        }
    };
}
decode_into!(sqlx::postgres::PgRow);
decode_into!(sqlx::sqlite::SqliteRow);
