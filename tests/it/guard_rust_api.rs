//! The Rust API as docs/GUARD.md shows it ("The Rust API"): both examples stand here
//! line for line (a test checks that every line of the two blocks is in this file),
//! so they compile, and they run against a real store.

use crate::both_backends;
use chrono::TimeDelta;
use idemwatch::guard::{GuardError, IdempotencyKey, Intent, Operation, Status};
use idemwatch::store::Store;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// A provider that always performs the refund.
struct Refunds;

impl Operation for Refunds {
    type Error = String;
    fn free_text_fields(&self) -> &[&str] {
        &["reason"]
    }
    fn key_retention(&self) -> TimeDelta {
        TimeDelta::hours(24)
    }
    fn call_timeout(&self) -> Duration {
        Duration::from_secs(5)
    }
    async fn execute(&self, key: &IdempotencyKey, _: &Value) -> Result<Value, String> {
        Ok(json!({ "refund_id": format!("rf_{}", &key.as_str()[..8]) }))
    }
    async fn find_by_key(&self, _: &IdempotencyKey) -> Result<Option<Value>, String> {
        Ok(None)
    }
}

fn intent(intent_id: &str) -> Intent {
    Intent {
        tenant: "acme".into(),
        tool: "issue_refund".into(),
        workflow_id: "run-7f3a".into(),
        step_id: "4".into(),
        intent_id: intent_id.into(),
    }
}

fn args() -> Value {
    json!({ "order": "A-88214", "amount_p": 4500, "reason": "arrived late" })
}

/// The first example, `Guard::run` in the same process; the intent's key.
#[rustfmt::skip]
async fn run_in_process(store: Store, refunds: Refunds, intent: Intent, args: Value) -> anyhow::Result<IdempotencyKey> {
    let Intent { tenant, tool, workflow_id, step_id, intent_id } = intent;
use idemwatch::guard::{Guard, GuardSettings, Intent, SystemClock, ToolCall};

let guard = Guard::new(store, Arc::new(SystemClock), GuardSettings::default());
let call = ToolCall {
    intent: Intent { tenant, tool, workflow_id, step_id, intent_id },   // persisted with the run
    business_ref: Some("order:A-88214".into()),
    args,                                                               // free text included; the guard strips it
    actor: "worker-3".into(),
};
match guard.run(&call, &refunds).await {
    Ok(outcome) if outcome.replayed => { /* the effect happened on an earlier attempt */ }
    Ok(_outcome) => { /* the effect happened now */ }
    Err(GuardError::InFlight { .. }) => { /* 409: retry later with the same intent */ }
    Err(GuardError::OutcomeUnknown { .. }) => { /* retry with the same intent: it reconciles first */ }
    Err(GuardError::NeedsHumanReview { .. }) => { /* stop; a person resolves it in the UI */ }
    Err(e) => return Err(e.into()),
}
    Ok(call.intent.key()?)
}

/// The second example, the engine's steps with the policy as a value.
#[rustfmt::skip]
async fn run_as_steps(guard: &idemwatch::guard::Guard<Store>, call: idemwatch::guard::ToolCall, result: Value) -> anyhow::Result<()> {
    let (key_retention, call_timeout, ms) = (TimeDelta::hours(24), Duration::from_secs(5), 12);
use idemwatch::guard::{Admission, CallOutcome, DEFAULT_DUPLICATE_WINDOW, Lookup, ToolPolicy};

let policy = ToolPolicy {
    key_retention,
    call_timeout,
    free_text_fields: vec!["reason".into()],
    natural_key: vec![],                                            // or the fields naming the action
    duplicate_window: DEFAULT_DUPLICATE_WINDOW,
};
let admitted = guard.admit_call(&call, &policy).await?.refuse()?;   // 409 / 422 as errors
match admitted.admission {
    Admission::New { token, .. } => { /* call the provider, then: */
        guard.settle_call(&admitted.key, token, CallOutcome::Done { result }, Some(ms), "worker-3").await?;
    }
    Admission::TakeOver { token, .. } => { /* look the effect up, then: */
        guard.report_lookup(&admitted.key, token, Lookup::NotFound, Some(ms), "worker-3").await?;
    }
    _ => { /* replay or stored failure */ }
}
    Ok(())
}

#[test]
fn every_line_of_the_rust_api_examples_in_guard_md_is_in_this_file() {
    let doc = include_str!("../../docs/GUARD.md");
    let section = doc
        .split("## The Rust API")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("docs/GUARD.md has a section \"The Rust API\"");
    let blocks: Vec<&str> = section
        .split("```rust\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .collect();
    assert_eq!(blocks.len(), 2, "two Rust examples");
    let squeeze = |line: &str| line.split_whitespace().collect::<Vec<_>>().join(" ");
    let here: Vec<String> = include_str!("guard_rust_api.rs")
        .lines()
        .map(squeeze)
        .collect();
    for line in blocks.iter().flat_map(|b| b.lines()).map(squeeze) {
        assert!(
            line.is_empty() || here.contains(&line),
            "docs/GUARD.md shows a line this test does not compile: {line}"
        );
    }
}

both_backends!(
    async fn the_documented_examples_run_and_record_done(db: TestDb) {
        let key = run_in_process(db.store.clone(), Refunds, intent("refund:1"), args())
            .await
            .unwrap();
        let record = db.store.record(&key).await.unwrap().unwrap();
        assert_eq!(record.status, Status::Done);
        // The same intent again is a replay: still one effect.
        let again = run_in_process(db.store.clone(), Refunds, intent("refund:1"), args())
            .await
            .unwrap();
        assert_eq!(again, key);
        assert_eq!(db.store.attempts(&key).await.unwrap().len(), 3);

        let guard = idemwatch::guard::Guard::new(
            db.store.clone(),
            Arc::new(idemwatch::guard::SystemClock),
            idemwatch::guard::GuardSettings::default(),
        );
        let call = idemwatch::guard::ToolCall {
            intent: intent("refund:2"),
            business_ref: Some("order:A-88215".into()),
            args: args(),
            actor: "worker-3".into(),
        };
        let result = json!({ "refund_id": "rf_8XM1" });
        run_as_steps(&guard, call.clone(), result.clone())
            .await
            .unwrap();
        let key = call.intent.key().unwrap();
        let record = db.store.record(&key).await.unwrap().unwrap();
        assert_eq!(
            (record.status, record.result),
            (Status::Done, Some(result.clone()))
        );
        run_as_steps(&guard, call.clone(), result).await.unwrap();
        assert_eq!(db.store.attempts(&key).await.unwrap().len(), 3);
    }
);
