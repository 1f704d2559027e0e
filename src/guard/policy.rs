//! A tool's rules, as a value the engine's steps take: how long the provider remembers
//! a key, how long one call may take (the lease is this plus a margin), which
//! arguments are free text, which name the business action (the natural key), and
//! how far back a claim looks for a suspected duplicate. The Rust guard takes them from its [`Operation`]; the HTTP
//! routes take them from the server's tools file, so a client cannot loosen them.

use super::operation::Operation;
use chrono::TimeDelta;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolPolicy {
    /// How long the provider remembers an idempotency key: zero for a provider that
    /// does not deduplicate (`provider_dedupes = false`), so a resend is never safe.
    pub key_retention: TimeDelta,
    /// The client deadline for one provider call.
    pub call_timeout: Duration,
    /// Top-level argument fields left out of the fingerprint and never sent.
    pub free_text_fields: Vec<String>,
    /// Top-level argument fields that identify the business action (`invoice_id`):
    /// a second intent with the same values replays the first or is refused. Empty:
    /// no natural key.
    pub natural_key: Vec<String>,
    /// How far back a claim looks for another key with the same tenant, tool,
    /// business ref and fingerprint (a suspected duplicate).
    pub duplicate_window: TimeDelta,
}

impl ToolPolicy {
    /// The rules an [`Operation`] declares.
    pub fn of<O: Operation>(op: &O) -> Self {
        Self {
            key_retention: if op.provider_dedupes() {
                op.key_retention()
            } else {
                TimeDelta::zero()
            },
            call_timeout: op.call_timeout(),
            free_text_fields: op
                .free_text_fields()
                .iter()
                .map(|f| f.to_string())
                .collect(),
            natural_key: op
                .natural_key_fields()
                .iter()
                .map(|f| f.to_string())
                .collect(),
            duplicate_window: op.duplicate_window(),
        }
    }

    /// The lease of a call under this policy: the call timeout plus `margin`, so a slow
    /// success never looks like a dead worker.
    pub fn lease(&self, margin: TimeDelta) -> TimeDelta {
        TimeDelta::from_std(self.call_timeout)
            .unwrap_or(TimeDelta::MAX)
            .checked_add(&margin)
            .unwrap_or(TimeDelta::MAX)
    }

    /// Whether the provider deduplicates by key: a zero retention says it does not
    /// (one definition: every "resend is safe" decision reads the retention).
    pub fn provider_dedupes(&self) -> bool {
        self.key_retention > TimeDelta::zero()
    }

    /// The policy as recorded on a claim and answered over HTTP. Seconds are whole
    /// numbers when they are whole (`10`), fractions otherwise (`0.25`); a provider
    /// that does not deduplicate adds `"provider_dedupes": false`.
    pub(crate) fn to_json(&self, tool: &str) -> Value {
        let mut v = self.to_json_common(tool);
        if !self.provider_dedupes() {
            v["provider_dedupes"] = json!(false);
        }
        v
    }

    fn to_json_common(&self, tool: &str) -> Value {
        json!({
            "tool": tool,
            "key_retention_seconds": seconds(self.key_retention.num_milliseconds()),
            "call_timeout_seconds": seconds(i64::try_from(self.call_timeout.as_millis()).unwrap_or(i64::MAX)),
            "free_text_fields": self.free_text_fields,
            "natural_key": self.natural_key,
            "duplicate_window_seconds": seconds(self.duplicate_window.num_milliseconds()),
        })
    }
}

fn seconds(ms: i64) -> Value {
    if ms % 1000 == 0 {
        json!(ms / 1000)
    } else {
        json!(ms as f64 / 1000.0)
    }
}

/// The policies of a server's tools file: one per tool, and an optional default for
/// tools the file does not name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolPolicies {
    pub tools: BTreeMap<String, ToolPolicy>,
    pub default: Option<ToolPolicy>,
    /// The money field of each tool that names one (`amount = {…}`), for the pages;
    /// under `None`, the `[default]` table's.
    pub amounts: BTreeMap<Option<String>, super::MoneyField>,
}

impl ToolPolicies {
    /// The policy in force for `tool`, or `None`: the tool is unknown and there is no
    /// default, so the call is refused.
    pub fn get(&self, tool: &str) -> Option<&ToolPolicy> {
        self.tools.get(tool).or(self.default.as_ref())
    }

    /// The money field of `tool`'s arguments, when the tools file names one.
    pub fn amount(&self, tool: &str) -> Option<&super::MoneyField> {
        if self.tools.contains_key(tool) {
            self.amounts.get(&Some(tool.to_string()))
        } else {
            self.amounts.get(&None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::DEFAULT_DUPLICATE_WINDOW;

    fn policy(ms: u64) -> ToolPolicy {
        ToolPolicy {
            key_retention: TimeDelta::hours(24),
            call_timeout: Duration::from_millis(ms),
            free_text_fields: vec!["reason".into()],
            natural_key: vec![],
            duplicate_window: DEFAULT_DUPLICATE_WINDOW,
        }
    }

    #[test]
    fn the_lease_is_the_call_timeout_plus_the_margin() {
        assert_eq!(
            policy(10_000).lease(TimeDelta::seconds(30)),
            TimeDelta::seconds(40)
        );
    }

    #[test]
    fn seconds_are_whole_when_they_are_whole() {
        let v = policy(10_000).to_json("issue_refund");
        assert_eq!(v["call_timeout_seconds"], json!(10));
        assert_eq!(v["key_retention_seconds"], json!(86_400));
        assert_eq!(
            policy(250).to_json("t")["call_timeout_seconds"],
            json!(0.25)
        );
    }

    #[test]
    fn an_unknown_tool_gets_the_default_or_nothing() {
        let mut p = ToolPolicies::default();
        p.tools.insert("a".into(), policy(1000));
        assert!(p.get("b").is_none());
        p.default = Some(policy(2000));
        assert_eq!(
            p.get("b").unwrap().call_timeout,
            Duration::from_millis(2000)
        );
        assert_eq!(
            p.get("a").unwrap().call_timeout,
            Duration::from_millis(1000)
        );
    }
}
