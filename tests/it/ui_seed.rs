//! A known set of keys for the UI tests, written through the real guard against the
//! fake provider: every status, a replay, a payload mismatch, an escalation past the
//! provider's retention, an expired lease, and two refunds on one order.

use crate::support::fixture::DEADLINE;
use crate::support::provider::{Client, Fault, Ledger};
use chrono::{DateTime, TimeDelta, Utc};
use idemwatch::guard::{Guard, GuardSettings, Intent, ManualClock, ToolCall, ToolPolicy};
use idemwatch::store::Store;
use serde_json::{Value, json};
use std::sync::Arc;

pub struct Seeded {
    /// The clock the guard wrote with; it ends at `end`, which the pages take as now.
    pub clock: ManualClock,
    #[allow(dead_code, reason = "read by the browser test")]
    pub end: DateTime<Utc>,
    /// DONE at end−170 min, replayed a minute later. order:A-88214.
    pub replayed: String,
    /// DONE, the second refund on order:A-88214 (another intent).
    pub second_refund: String,
    /// DONE; a retry then sent amount_p 4000 instead of 4500.
    pub mismatch: String,
    /// FAILED: the provider declined.
    pub failed: String,
    /// send_message (tenant globex): UNKNOWN, escalated after the provider forgot it.
    pub escalated: String,
    /// send_message (tenant globex): DONE.
    pub message: String,
    /// UNKNOWN at end−40 min, inside the provider's retention.
    pub unknown: String,
    /// IN_PROGRESS since end−10 min; its lease ran out.
    pub expired: String,
    /// Between the refunds (before) and the rest (after).
    pub mid: DateTime<Utc>,
}

impl Seeded {
    /// Every key, newest activity first.
    pub fn newest_first(&self) -> Vec<String> {
        [
            &self.expired,
            &self.unknown,
            &self.message,
            &self.escalated,
            &self.failed,
            &self.mismatch,
            &self.second_refund,
            &self.replayed,
        ]
        .into_iter()
        .cloned()
        .collect()
    }
}

pub fn call(
    tenant: &str,
    tool: &str,
    workflow: &str,
    step: &str,
    intent: &str,
    business_ref: &str,
    args: Value,
) -> ToolCall {
    ToolCall {
        intent: Intent {
            tenant: tenant.into(),
            tool: tool.into(),
            workflow_id: workflow.into(),
            step_id: step.into(),
            intent_id: intent.into(),
        },
        business_ref: Some(business_ref.into()),
        args,
        actor: "worker-1".into(),
    }
}

fn refund(workflow: &str, step: &str, intent: &str, order: &str, amount_p: i64) -> ToolCall {
    call(
        "acme",
        "issue_refund",
        workflow,
        step,
        intent,
        &format!("order:{order}"),
        json!({ "order": order, "amount_p": amount_p, "reason": "parcel never came" }),
    )
}

fn key(call: &ToolCall) -> String {
    call.intent.key().unwrap().to_string()
}

/// Seeds the keys above, ending at `end`, plus `background` refunds spread over the
/// day before (with a replay spike 8 to 9 hours before `end`) for the overview chart.
pub async fn seed(store: &Store, end: DateTime<Utc>, background: usize) -> Seeded {
    let at = |minutes_before: i64| end - TimeDelta::minutes(minutes_before);
    let clock = ManualClock::new(at(180));
    let settings = GuardSettings {
        lease_margin: TimeDelta::seconds(30),
    };
    let guard = Guard::new(store.clone(), Arc::new(clock.clone()), settings);
    let payments = Ledger::new(clock.clone(), TimeDelta::hours(24));
    let messages = Ledger::new(clock.clone(), TimeDelta::minutes(30));
    let ok = || Client::new(&payments, DEADLINE, []);

    for i in 0..background {
        // Spread from 23 h to 3.5 h before the end.
        let span = TimeDelta::minutes(23 * 60 - 210).num_seconds();
        let offset = span * i as i64 / background.max(1) as i64;
        let t = end - TimeDelta::hours(23) + TimeDelta::seconds(offset);
        clock.set(t);
        let order = format!("B-{i}");
        let c = refund(
            &format!("run-bg-{i}"),
            "1",
            &format!("refund:order-{order}"),
            &order,
            1000 + i as i64,
        );
        guard.run(&c, &ok()).await.unwrap();
        let hours_before = (end - t).num_hours();
        let replay = if hours_before == 8 {
            i % 3 == 0
        } else {
            i % 25 == 0
        };
        if replay {
            clock.set(t + TimeDelta::seconds(20));
            assert!(guard.run(&c, &ok()).await.unwrap().replayed);
        }
    }

    clock.set(at(170));
    let c = refund("run-7f3a", "4", "refund:order-A-88214", "A-88214", 4500);
    guard.run(&c, &ok()).await.unwrap();
    clock.set(at(169));
    assert!(guard.run(&c, &ok()).await.unwrap().replayed);
    let replayed = key(&c);

    clock.set(at(160));
    let c = refund(
        "run-9c1d",
        "2",
        "refund:order-A-88214:ticket-5521",
        "A-88214",
        1200,
    );
    guard.run(&c, &ok()).await.unwrap();
    let second_refund = key(&c);

    clock.set(at(150));
    let c = refund("run-2b7e", "3", "refund:order-A-1001", "A-1001", 4500);
    guard.run(&c, &ok()).await.unwrap();
    clock.set(at(148));
    let changed = refund("run-2b7e", "3", "refund:order-A-1001", "A-1001", 4000);
    assert!(guard.run(&changed, &ok()).await.is_err());
    let mismatch = key(&c);

    clock.set(at(140));
    let c = refund("run-4d4d", "1", "refund:order-A-4004", "A-4004", 900);
    let declined = Client::new(&payments, DEADLINE, [Fault::Decline]);
    assert!(guard.run(&c, &declined).await.is_err());
    let failed = key(&c);

    let message = |n: &str| {
        call(
            "globex",
            "send_message",
            "run-msg",
            n,
            &format!("notify:refund-{n}"),
            &format!("ticket:T-{n}"),
            json!({ "to": "+44 7700 900123", "template": "refund_sent" }),
        )
    };
    clock.set(at(120));
    let c = message("3003");
    let down = Client::new(&messages, DEADLINE, [Fault::Unavailable]);
    assert!(guard.run(&c, &down).await.is_err());
    clock.set(at(80));
    // The provider forgot the key 30 minutes after the first send: escalated.
    assert!(
        guard
            .run(&c, &Client::new(&messages, DEADLINE, []))
            .await
            .is_err()
    );
    let escalated = key(&c);

    clock.set(at(70));
    let c = message("2");
    guard
        .run(&c, &Client::new(&messages, DEADLINE, []))
        .await
        .unwrap();
    let message = key(&c);

    clock.set(at(40));
    let c = refund("run-5e5e", "1", "refund:order-A-2002", "A-2002", 2500);
    let down = Client::new(&payments, DEADLINE, [Fault::Unavailable]);
    assert!(guard.run(&c, &down).await.is_err());
    let unknown = key(&c);

    clock.set(at(10));
    // A worker claims the key and dies before it calls the provider.
    let c = refund("run-6f6f", "1", "refund:order-A-5005", "A-5005", 700);
    guard.admit_call(&c, &ToolPolicy::of(&ok())).await.unwrap();
    let expired = key(&c);

    clock.set(end);
    Seeded {
        clock,
        end,
        replayed,
        second_refund,
        mismatch,
        failed,
        escalated,
        message,
        unknown,
        expired,
        mid: at(130),
    }
}
