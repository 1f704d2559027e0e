//! A suspected duplicate pair as pages show it: on both keys' pages and on
//! `/duplicates` (templates/duplicates_macros.html).

use crate::store::SuspectedPair;
use crate::web::filters::{When, short_key, when};
use chrono::{DateTime, Utc};

/// What to do at the provider once a pair is confirmed: the one place this advice is
/// written.
pub const CONFIRMED_ADVICE: &str = "The provider performed this action twice. Undo the later \
    effect at the provider: find it by the later key (its Idempotency-Key) and refund, void or \
    cancel it there, then tell the customer if they saw both. Nothing in idemwatch undoes it.";

#[derive(Debug, Clone)]
pub struct PairView {
    /// The later key (the suspected one) and the earlier key it matched.
    pub key: String,
    pub short: String,
    pub other_key: String,
    pub other_short: String,
    pub tool: String,
    pub tenant: String,
    pub business_ref: String,
    pub detected: When,
    /// `open`, `intended`, `confirmed`.
    pub state: String,
    /// One sentence on what the state means and what to do.
    pub meaning: String,
    pub reviewed_by: String,
    pub reason: String,
    /// On a key's page: `later` when that key is `key`, `earlier` when it is `other_key`.
    pub role: &'static str,
}

impl PairView {
    pub fn new(p: &SuspectedPair, this: Option<&str>, now: DateTime<Utc>) -> Self {
        let meaning = match p.state.as_str() {
            // Shown after the state's name (`open: …`): the words do not repeat it.
            "intended" => "reviewed: a genuine repeat, both effects wanted.".to_string(),
            "confirmed" => format!("a real duplicate. {CONFIRMED_ADVICE}"),
            _ => "same tenant, tool, business ref and arguments as an earlier key within \
                  the tool's duplicate window. A second intent may have done the same action \
                  twice; a resolver decides on /duplicates."
                .to_string(),
        };
        Self {
            key: p.key.clone(),
            short: short_key(&p.key),
            other_key: p.other_key.clone(),
            other_short: short_key(&p.other_key),
            tool: p.tool.clone(),
            tenant: p.tenant.clone(),
            business_ref: p.business_ref.clone().unwrap_or_default(),
            detected: when(p.detected_at, now),
            state: p.state.clone(),
            meaning,
            reviewed_by: p.reviewed_by.clone().unwrap_or_default(),
            reason: p.reason.clone().unwrap_or_default(),
            role: if this == Some(p.key.as_str()) {
                "later"
            } else {
                "earlier"
            },
        }
    }

    pub fn is_open(&self) -> bool {
        self.state == "open"
    }
}
