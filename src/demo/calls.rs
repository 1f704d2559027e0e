//! The tool calls the simulated agents make, and the ways a retry can differ from
//! the original: another worker, a rephrasing model, a buggy client.

use super::TrafficContext;
use super::scenario::{REPEAT_ORDER, Scenario};
use crate::guard::{Intent, ToolCall};
use rand::RngExt;
use rand::seq::IndexedRandom;
use serde_json::json;

const REASONS: [&str; 6] = [
    "The parcel never arrived.",
    "Customer reports the item arrived damaged.",
    "Charged twice at checkout, refunding one charge.",
    "Delivery was four days late; goodwill refund.",
    "Wrong size sent, customer returned it.",
    "Subscription cancelled within the cooling-off period.",
];

const REPHRASED: [&str; 4] = [
    "As discussed, refunding the customer because their order did not arrive",
    "Issuing a refund: the customer says the order is missing",
    "Refund for the order (customer complaint, see ticket)",
    "The customer's parcel was lost in transit so we refund it",
];

/// One agent's recorded intent and the arguments it sends.
#[derive(Debug, Clone)]
pub(super) struct Plan {
    pub(super) tool: &'static str,
    pub(super) tenant: &'static str,
    pub(super) order: String,
    pub(super) ticket: u32,
    pub(super) amount_p: i64,
    pub(super) reason: &'static str,
    pub(super) workflow: u64,
    /// One of the opening's showcase intents (the deterministic path of its scenario).
    pub(super) showcase: bool,
}

impl TrafficContext {
    pub(super) fn plan(&self, n: u64, scenario: Scenario) -> Plan {
        let mut rng = rand::rng();
        let voucher = scenario == Scenario::Plain && rng.random_bool(0.2);
        // Email receipts, whose provider does not deduplicate by key (tools file:
        // `provider_dedupes = false`): never resent after an ambiguous outcome.
        let receipt = !voucher && scenario == Scenario::Plain && rng.random_bool(0.1);
        let showcase = super::scenario::showcase_index(n, &self.config).is_some();
        let order = if scenario == Scenario::RepeatRefund && showcase {
            REPEAT_ORDER.to_string()
        } else {
            format!("A-{:05}", rng.random_range(10_000..100_000))
        };
        Plan {
            tool: if voucher {
                "send_voucher"
            } else if receipt {
                super::provider::RECEIPTS
            } else {
                "issue_refund"
            },
            tenant: ["acme", "acme", "globex", "initech"]
                .choose(&mut rng)
                .copied()
                .unwrap_or("acme"),
            order,
            ticket: rng.random_range(1000..10_000),
            amount_p: if voucher {
                500
            } else {
                *[1299, 2500, 4500, 4500, 8999]
                    .choose(&mut rng)
                    .unwrap_or(&4500)
            },
            reason: REASONS.choose(&mut rng).copied().unwrap_or(REASONS[0]),
            workflow: n,
            showcase,
        }
    }

    pub(super) fn call(&self, plan: &Plan) -> ToolCall {
        let (verb, step) = match plan.tool {
            "send_voucher" => ("voucher", "5"),
            super::provider::RECEIPTS => ("receipt", "6"),
            _ => ("refund", "4"),
        };
        ToolCall {
            intent: Intent {
                tenant: plan.tenant.to_string(),
                tool: plan.tool.to_string(),
                workflow_id: format!("run-{}-{:06}", self.run_id, plan.workflow),
                step_id: step.to_string(),
                intent_id: format!("{verb}:order-{}:ticket-{}", plan.order, plan.ticket),
            },
            business_ref: Some(format!("order:{}", plan.order)),
            args: json!({
                "order": plan.order,
                "amount_p": plan.amount_p,
                "currency": "GBP",
                "reason": plan.reason,
            }),
            actor: worker(),
        }
    }
}

fn worker() -> String {
    format!("worker-{}", rand::rng().random_range(1..=8))
}

/// The same call from another worker (a redelivery lands anywhere).
pub(super) fn redelivered(call: &ToolCall) -> ToolCall {
    let mut c = call.clone();
    c.actor = worker();
    c
}

/// The model regenerates the call: same intent (the orchestrator recorded it), same
/// business arguments but written differently, and new free text.
pub(super) fn rephrased(call: &ToolCall) -> ToolCall {
    let mut c = redelivered(call);
    let amount = call.args["amount_p"].as_i64().unwrap_or(0) as f64;
    let reason = REPHRASED
        .choose(&mut rand::rng())
        .copied()
        .unwrap_or(REPHRASED[0]);
    c.args = json!({
        "reason": reason,
        "currency": call.args["currency"],
        "amount_p": amount,
        "order": call.args["order"],
    });
    c
}

/// The payload-mismatch bug: a retry that converts pence to pounds.
pub(super) fn buggy(call: &ToolCall) -> ToolCall {
    let mut c = redelivered(call);
    c.args["amount_p"] = json!(call.args["amount_p"].as_i64().unwrap_or(0) / 100);
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::BusinessArgs;

    fn call() -> ToolCall {
        ToolCall {
            intent: Intent {
                tenant: "acme".into(),
                tool: "issue_refund".into(),
                workflow_id: "run-x-000001".into(),
                step_id: "4".into(),
                intent_id: "refund:order-A-1:ticket-1".into(),
            },
            business_ref: Some("order:A-1".into()),
            args: json!({"order": "A-1", "amount_p": 4500, "currency": "GBP", "reason": "late"}),
            actor: "worker-1".into(),
        }
    }

    fn fingerprint(c: &ToolCall) -> String {
        BusinessArgs::new(&c.args, &["reason"])
            .unwrap()
            .fingerprint
            .0
    }

    #[test]
    fn a_rephrased_call_has_the_same_key_and_fingerprint() {
        let c = call();
        let r = rephrased(&c);
        assert_ne!(r.args["reason"], c.args["reason"]);
        assert_eq!(r.intent.key().unwrap(), c.intent.key().unwrap());
        assert_eq!(fingerprint(&r), fingerprint(&c));
    }

    #[test]
    fn the_buggy_retry_has_the_same_key_and_another_fingerprint() {
        let c = call();
        let b = buggy(&c);
        assert_eq!(b.args["amount_p"], 45);
        assert_eq!(b.intent.key().unwrap(), c.intent.key().unwrap());
        assert_ne!(fingerprint(&b), fingerprint(&c));
    }
}
