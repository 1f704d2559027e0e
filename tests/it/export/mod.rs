//! Exports, tamper evidence and retention, on both backends. Data is made through the
//! guard (the fake provider of `support::provider`), never inserted by hand, except
//! where a test plays a DBA tampering with the log.

mod cli;
mod evidence;
mod files;
mod formulas;
mod http;
mod plan;
mod prune;
mod public_key;
mod ranges;
mod signed;
mod signed_http;
mod tamper;
mod verdict;

use crate::support::as_key;
use crate::support::fixture::{Fixture, refund};
use crate::support::provider::Fault;
use chrono::{DateTime, TimeDelta, Utc};
use idemwatch::base::canonical::canonical_json;
use idemwatch::export::{CsvCells, ExportFilter, Format, Manifest, export_to};
use idemwatch::guard::{Clock, Resolution, ResolveRequest, ToolCall, rfc3339};
use idemwatch::store::Store;
use serde_json::{Value, json};

/// Free text with everything a CSV or JSON writer can get wrong.
pub const NASTY: &str = "Kunde sagt: \"Paket nie angekommen\", bitte prüfen;\r\nzweite Zeile\nthird, line — €42 😀 =SUM(A1)\t'tab'";
pub const NASTY_REF: &str = "order:A-4,\"x\"\nß";
pub const NASTY_TENANT: &str = "acme, \"eu\"\nß";
pub const NASTY_ACTOR: &str = "søren\r\n@support";

/// What [`seed`] made; times are the guard clock's when each key was created.
pub struct Seeded {
    pub done: String,
    pub failed: String,
    pub unknown: String,
    pub nasty: String,
    pub other: String,
    pub in_progress: String,
    pub created: Vec<(String, DateTime<Utc>)>,
}

impl Seeded {
    pub fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.created.iter().map(|(k, _)| k.clone()).collect();
        keys.sort();
        keys
    }
}

pub fn other_call() -> ToolCall {
    let mut call = refund("G-1", 100, "1");
    call.intent.tenant = "globex".into();
    call.intent.tool = "send_message".into();
    call.intent.intent_id = "message:welcome".into();
    call.business_ref = None;
    call
}

/// Six keys, an hour apart, starting `start`: DONE (replayed again at the end),
/// FAILED, UNKNOWN, resolved by a person with nasty free text, DONE for another tenant
/// and tool, and IN_PROGRESS (the worker died). The clock ends at `start` + 6 h.
pub async fn seed(f: &Fixture, start: DateTime<Utc>) -> Seeded {
    f.clock.set(start);
    let mut created = Vec::new();
    // Each key's rows are written at the time noted for it; the clock then moves on.
    let mut next = |key: &str, f: &Fixture| {
        if !created.is_empty() {
            f.clock.advance(TimeDelta::hours(1));
        }
        created.push((key.to_string(), f.clock.now()));
    };

    let call = refund("A-1", 4500, "1");
    let done = call.intent.key().unwrap().to_string();
    next(&done, f);
    f.guard.run(&call, &f.client([])).await.unwrap();
    let done_call = call;

    let call = refund("A-2", 999, "2");
    let failed = call.intent.key().unwrap().to_string();
    next(&failed, f);
    f.guard
        .run(&call, &f.client([Fault::Decline]))
        .await
        .unwrap_err();

    let call = refund("A-3", 300, "3");
    let unknown = call.intent.key().unwrap().to_string();
    next(&unknown, f);
    f.guard
        .run(&call, &f.client([Fault::Unavailable]))
        .await
        .unwrap_err();

    let mut call = refund("A-4", 4200, "4");
    call.intent.tenant = NASTY_TENANT.into();
    call.business_ref = Some(NASTY_REF.into());
    call.actor = NASTY_ACTOR.into();
    let key = call.intent.key().unwrap();
    let nasty = key.to_string();
    next(&nasty, f);
    f.guard
        .run(&call, &f.client([Fault::Unavailable]))
        .await
        .unwrap_err();
    let request = ResolveRequest {
        resolution: Resolution::Done,
        reason: NASTY.into(),
        evidence: Some("rf_1, \"seen\" in the dashboard".into()),
        result: Some(json!({"refund_id": "rf_1", "note": NASTY, "amount_p": 4200, "ratio": 0.25})),
        actor: NASTY_ACTOR.into(),
        expected_token: None,
    };
    f.guard.resolve(&key, &request).await.unwrap();

    let call = other_call();
    let other = call.intent.key().unwrap().to_string();
    next(&other, f);
    f.guard.run(&call, &f.client([])).await.unwrap();

    let call = refund("A-6", 600, "6");
    let in_progress = call.intent.key().unwrap().to_string();
    next(&in_progress, f);
    f.crash_after_effect(&call).await;

    // A replay of the first key, an hour later: its chain spans six hours.
    f.clock.advance(TimeDelta::hours(1));
    f.guard.run(&done_call, &f.client([])).await.unwrap();

    Seeded {
        done,
        failed,
        unknown,
        nasty,
        other,
        in_progress,
        created,
    }
}

/// The rows the export must contain for `keys`, built from the guard's own reads
/// (`Store::attempts`, `Store::record`), not from the export query: one JSON object
/// per row, as the NDJSON format specifies.
pub async fn expected(store: &Store, keys: &[String]) -> Vec<Value> {
    let mut keys = keys.to_vec();
    keys.sort();
    let mut rows = Vec::new();
    for key in keys {
        let record = store.record(&as_key(&key)).await.unwrap().unwrap();
        for a in store.attempts(&as_key(&key)).await.unwrap() {
            rows.push(json!({
                "type": "attempt",
                "attempt_id": a.id,
                "key": a.key,
                "seq": a.seq,
                "occurred_at": rfc3339(a.occurred_at),
                "tenant": a.tenant,
                "tool": a.tool,
                "workflow_id": record.intent.workflow_id,
                "step_id": record.intent.step_id,
                "intent_id": record.intent.intent_id,
                "business_ref": record.business_ref,
                "current_status": record.status.as_str(),
                "kind": a.kind.as_str(),
                "actor": a.actor,
                "fencing_token": a.fencing_token,
                "duration_ms": a.duration_ms,
                "detail": a.detail,
                "prev_hash": a.prev_hash,
                "hash": a.hash,
                "fingerprint": record.fingerprint,
                "business_args": record.business_args,
                "result": record.result,
                "error": record.error,
                "log_seq": record.log_seq,
                "log_hash": record.log_hash,
            }));
        }
    }
    rows
}

/// One expected row as the CSV fields it must have.
pub fn csv_fields(row: &Value) -> Vec<String> {
    let text = |name: &str| match &row[name] {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let names = [
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
    ];
    let mut fields: Vec<String> = names.iter().map(|n| text(n)).collect();
    fields.push(canonical_json(&row["detail"]).unwrap());
    fields.push(text("prev_hash"));
    fields.push(text("hash"));
    fields.push(text("fingerprint"));
    fields.push(canonical_json(&row["business_args"]).unwrap());
    fields.push(match &row["result"] {
        Value::Null => String::new(),
        v => canonical_json(v).unwrap(),
    });
    fields.push(text("error"));
    fields.push(text("log_seq"));
    fields.push(text("log_hash"));
    fields
}

pub async fn export(store: &Store, filter: &ExportFilter, format: Format) -> (Vec<u8>, Manifest) {
    let mut out = Vec::new();
    let manifest = export_to(store, filter, format, CsvCells::Neutralised, &mut out)
        .await
        .unwrap();
    (out, manifest)
}

/// The attempt lines of an NDJSON export as JSON, and its manifest line.
pub fn ndjson_lines(bytes: &[u8]) -> (Vec<Value>, Value) {
    let text = std::str::from_utf8(bytes).unwrap();
    let mut values: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let manifest = values.pop().unwrap();
    assert_eq!(manifest["type"], "manifest");
    (values, manifest)
}

/// Records of a CSV export read with the csv crate's reader: header, then rows.
pub fn csv_records(bytes: &[u8]) -> Vec<Vec<String>> {
    csv::ReaderBuilder::new()
        .has_headers(false)
        .from_reader(bytes)
        .records()
        .map(|r| r.unwrap().iter().map(String::from).collect())
        .collect()
}

/// Runs raw SQL as a DBA would.
pub async fn dba(store: &Store, sql: &str) {
    let sql = sqlx::AssertSqlSafe(sql.to_string());
    match store {
        Store::Postgres(p) => {
            sqlx::raw_sql(sql).execute(p).await.unwrap();
        }
        Store::Sqlite(p) => {
            sqlx::raw_sql(sql).execute(p).await.unwrap();
        }
    }
}

/// The append-only trigger stops UPDATEs; a DBA can drop it, and so do these tests.
pub async fn drop_append_only_trigger(store: &Store) {
    match store {
        Store::Postgres(_) => {
            dba(
                store,
                "DROP TRIGGER idempotency_attempts_no_update ON idempotency_attempts",
            )
            .await
        }
        Store::Sqlite(_) => dba(store, "DROP TRIGGER idempotency_attempts_no_update").await,
    }
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    idemwatch::base::hash::sha256_hex(bytes)
}

/// Lines of an NDJSON export, the manifest last.
pub fn lines(bytes: &[u8]) -> Vec<String> {
    String::from_utf8(bytes.to_vec())
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

pub fn join(lines: &[String]) -> Vec<u8> {
    lines
        .iter()
        .flat_map(|l| format!("{l}\n").into_bytes())
        .collect()
}
