//! Decoding [`VERIFY`](super::VERIFY)'s rows for `verify`: each row's cells (decoded
//! by position as the export's, [`RawRow::cells`](crate::export::port::RawRow::cells))
//! are written into a row the verifier has already checked and handed back, so its
//! strings are overwritten in place instead of allocated anew. Per row that was about
//! a dozen `String`s (perf: `malloc`/`free` ~22 % of the verifier's samples).
//!
//! A row's `detail` is kept as the JSON text the database sent ([`VerifyRow`]): the
//! hash covers its JCS form, which is written from the text, and only a key's head
//! row needs it as a value (its bound state), parsed then by the check.

use crate::export::port::{ExportCells, ExportRow, VerifyRow};
use crate::guard::{Intent, StoreError};
use serde_json::Value;

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

/// One [`VERIFY`](super::VERIFY) row's cells written into `out`.
pub(super) fn decode_into(c: &ExportCells<'_>, out: &mut VerifyRow) -> Result<(), StoreError> {
    // Every field is written: the row held another row before. Named in full, so a
    // field added to `ExportRow` is a compile error here, not a value left over from
    // an earlier row.
    let ExportRow {
        attempt_id,
        key,
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
    *attempt_id = c.attempt_id;
    set(key, c.key);
    *seq = c.seq;
    *occurred_at = c.occurred_at;
    set(tenant, c.tenant);
    set(tool, c.tool);
    set(workflow_id, c.workflow_id);
    set(step_id, c.step_id);
    set(intent_id, c.intent_id);
    set_opt(business_ref, c.business_ref);
    *current_status = c.current_status;
    *kind = c.kind;
    set(actor, c.actor);
    *fencing_token = c.fencing_token;
    *duration_ms = c.duration_ms;
    *detail = Value::Null;
    // Checked to be JSON, as the value it replaces was.
    set(&mut out.detail, c.detail.checked()?);
    set(prev_hash, c.prev_hash);
    set(hash, c.hash);
    set(fingerprint, c.fingerprint);
    *business_args = c.business_args.value()?;
    *result = c.result.map(|j| j.value()).transpose()?;
    set_opt(error, c.error);
    *log_seq = c.log_seq;
    set(log_hash, c.log_hash);
    Ok(())
}
