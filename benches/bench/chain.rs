//! `chain`: the attempt log's hash as `verify` computes it for every row
//! (`guard::chain_hash`, the JCS text written member by member), with the detail as a
//! value (as `seal` has it) and as the JSON text the store read (as `verify` has it),
//! against the definition computed the plain way in the same run (docs/GUARD.md: a
//! `json!` object of the row's content, `canonical_json`, then SHA-256 over
//! `prev \n text`). Rows are shaped like the guard's: a `completed` row's detail with
//! its state digests.

use super::report::Figure;
use chrono::{DateTime, Utc};
use idemwatch::base::canonical::canonical_json;
use idemwatch::guard::{ChainFields, Detail, chain_hash, rfc3339};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::time::Instant;

fn plain(prev: &str, f: ChainFields<'_>) -> String {
    let parsed: Value;
    let detail = match f.detail {
        Detail::Value(value) => value,
        Detail::Json(text) => {
            parsed = serde_json::from_str(text).unwrap();
            &parsed
        }
    };
    let content = json!({
        "key": f.key, "tenant": f.tenant, "tool": f.tool, "seq": f.seq, "kind": f.kind,
        "fencing_token": f.fencing_token, "actor": f.actor, "detail": detail,
        "duration_ms": f.duration_ms, "occurred_at": rfc3339(f.occurred_at),
    });
    let text = canonical_json(&content).unwrap();
    hex::encode(Sha256::digest(format!("{prev}\n{text}").as_bytes()))
}

pub fn run(rows: usize, figures: &mut Vec<Figure>) {
    for as_text in [false, true] {
        run_one(rows, as_text, figures);
    }
}

fn run_one(rows: usize, as_text: bool, figures: &mut Vec<Figure>) {
    let at: DateTime<Utc> = "2026-11-29T14:02:11.402113Z".parse().unwrap();
    let details: Vec<Value> = (0..rows)
        .map(|i| {
            json!({
                "lease_until": "2026-11-29T14:02:21.402113Z",
                "state": {
                    "status": "DONE",
                    "result_sha256": format!("{:064x}", i),
                    "args_sha256": format!("{:064x}", i + 1),
                },
            })
        })
        .collect();
    let texts: Vec<String> = details.iter().map(|d| d.to_string()).collect();
    let keys: Vec<String> = (0..rows).map(|i| format!("{:064x}", i * 7)).collect();
    let fields = |i: usize| ChainFields {
        key: &keys[i],
        tenant: "acme",
        tool: "issue_refund",
        seq: 3,
        kind: "completed",
        fencing_token: 1,
        actor: "token:payments/worker-3",
        detail: if as_text {
            Detail::Json(&texts[i])
        } else {
            Detail::Value(&details[i])
        },
        duration_ms: Some(812),
        occurred_at: at,
    };
    // Equal results first: the comparison is only fair if both compute the same hash.
    for i in 0..rows.min(1000) {
        assert_eq!(chain_hash("p", fields(i)), plain("p", fields(i)));
    }
    let (mut direct, mut general) = (Vec::new(), Vec::new());
    for round in 0..6 {
        for which in [round % 2, 1 - round % 2] {
            let t = Instant::now();
            let mut prev = String::from("0");
            for i in 0..rows {
                prev = if which == 0 {
                    chain_hash(&prev, fields(i))
                } else {
                    plain(&prev, fields(i))
                };
            }
            std::hint::black_box(&prev);
            let rate = rows as f64 / t.elapsed().as_secs_f64();
            if which == 0 {
                direct.push(rate)
            } else {
                general.push(rate)
            }
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    figures.push(Figure::ratio(
        format!(
            "chain hash, {rows} rows, detail as {} (one core)",
            if as_text { "text" } else { "value" }
        ),
        "rows/s",
        median(&mut direct),
        median(&mut general),
        None,
    ));
}
