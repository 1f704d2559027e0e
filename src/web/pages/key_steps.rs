//! How the key page shows one attempt of a timeline: a badge, plain words for support
//! staff and the engineer's terms one click away, what a retry changed field by field.

use super::diff::{JsonChange, diff};
use crate::guard::{Attempt, AttemptKind, MoneyField, Record};
use crate::web::filters::{When, duration_ms, money as money_text, pretty, when};
use chrono::{DateTime, Utc};
use serde_json::Value;

/// How the timeline shows one kind of attempt: a text badge, a style, what happened in
/// plain words (for support staff), and the same in the engineer's terms (leases,
/// fencing tokens, status codes), which the page folds one click away.
pub struct Presentation {
    pub label: &'static str,
    pub class: &'static str,
    pub plain: &'static str,
    pub engineering: &'static str,
}

pub fn presentation(kind: AttemptKind) -> Presentation {
    use AttemptKind::*;
    let (label, class, plain, engineering) = match kind {
        Claimed => (
            "Started",
            "neutral",
            "The agent asked for this; the call to the provider began.",
            "Claimed the key under a lease; the provider call starts.",
        ),
        Replayed => (
            "Retry answered",
            "replay",
            "The agent's retry was answered from the first call's result: nothing was sent twice.",
            "A retry got the stored result; the provider was not called again.",
        ),
        ReplayedFailure => (
            "Retry answered",
            "replay",
            "The agent's retry got the first call's refusal again: nothing was sent twice.",
            "A retry got the stored error; the provider was not called again.",
        ),
        InFlightRejected => (
            "Retry asked to wait",
            "neutral",
            "A retry came while the first call was still running; it was asked to try again shortly.",
            "A retry arrived while the call held its lease and was told to retry later (409).",
        ),
        PayloadMismatch => (
            "Changed retry refused",
            "mismatch",
            "A retry of the same request came with different details; it was refused and nothing was sent.",
            "Same key, different business arguments: refused (422), nothing was sent.",
        ),
        Completed => (
            "Done",
            "ok",
            "The provider confirmed it; retries get this answer.",
            "The provider answered; the result is stored.",
        ),
        Failed => (
            "Refused",
            "fail",
            "The provider refused it; retries get the same answer.",
            "The provider refused definitively; retries get this error.",
        ),
        MarkedUnknown => (
            "No clear answer",
            "unknown",
            "The provider did not answer clearly (it timed out or erred): it may or may not have happened.",
            "No clear answer (timeout, reset, 5xx): the effect may or may not have happened.",
        ),
        TakenOver => (
            "Checking the provider",
            "takeover",
            "A later try picked up the unfinished call to ask the provider what happened before doing anything.",
            "A retry took the undecided key over with a new fencing token, to check the provider.",
        ),
        ReconciledFound => (
            "Found at the provider",
            "ok",
            "The provider had done it: recorded as done, nothing sent again.",
            "The provider has the effect: stored as done without sending again.",
        ),
        Resent => (
            "Sent again safely",
            "takeover",
            "The provider had no trace of it and still recognises the request, so it was sent again; it cannot happen twice.",
            "Not found while the provider still remembers the key: sent again with the same key.",
        ),
        Escalated => (
            "Needs a person",
            "escalation",
            "The provider shows nothing but may have forgotten the request: sending again could do it twice, so a person checks.",
            "The provider shows no effect and a resend is no longer safe: it could pay twice.",
        ),
        Resolved => (
            "Decided by a person",
            "resolution",
            "A person recorded what happened.",
            "A person recorded what happened (resolve).",
        ),
        StaleWriteRejected => (
            "Late answer ignored",
            "fail",
            "A worker that had been replaced tried to record an answer; it was ignored and nothing changed.",
            "A worker holding an old fencing token tried to write; nothing changed.",
        ),
        DuplicateReviewed => (
            "Duplicate reviewed",
            "resolution",
            "A person reviewed this as a possible repeat of another request.",
            "A person reviewed this key as a suspected duplicate of another key.",
        ),
    };
    Presentation {
        label,
        class,
        plain,
        engineering,
    }
}

/// One row of the timeline.
pub struct TimelineRow {
    pub seq: i64,
    pub at: When,
    pub kind: &'static str,
    pub label: &'static str,
    pub class: &'static str,
    pub blurb: &'static str,
    pub engineering: &'static str,
    /// A person's words (a resolution, a review): shown open, not folded.
    pub by_person: bool,
    pub actor: String,
    pub token: i64,
    /// `1 → 2` on a takeover.
    pub token_change: Option<String>,
    pub duration: Option<String>,
    /// `reason`, `error`, `resolution`… lifted out of the detail, in field order.
    pub notes: Vec<(String, String)>,
    pub detail: Option<String>,
    /// Field by field, for a payload mismatch.
    pub changes: Vec<JsonChange>,
}

pub fn step(
    a: &Attempt,
    record: &Record,
    money: Option<&MoneyField>,
    now: DateTime<Utc>,
) -> TimelineRow {
    let Presentation {
        label,
        class,
        plain,
        engineering,
    } = presentation(a.kind);
    let object = a.detail.as_object();
    let notes = [
        "reason",
        "error",
        "resolution",
        "evidence",
        "verdict",
        "suspected_duplicate_of",
        "intent_key",
    ]
    .iter()
    .filter_map(|f| {
        let text = match object?.get(*f)? {
            // A field given as nothing is not shown as the word `null`.
            Value::Null => return None,
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        Some((f.replace('_', " "), text))
    })
    .collect();
    let token_change = object
        .and_then(|o| o.get("previous_token"))
        .and_then(Value::as_i64)
        .map(|prev| format!("{prev} → {}", a.fencing_token));
    let mut changes = match (a.kind, object.and_then(|o| o.get("business_args"))) {
        (AttemptKind::PayloadMismatch, Some(retry)) => diff(&record.business_args, retry),
        _ => Vec::new(),
    };
    if let Some(m) = money {
        for c in changes.iter_mut().filter(|c| c.field == m.field) {
            for side in [&mut c.stored, &mut c.retry] {
                if let Ok(minor) = side.parse::<i64>() {
                    *side = money_text(m, minor);
                }
            }
        }
    }
    let empty = object.is_some_and(|o| o.is_empty()) || a.detail.is_null();
    TimelineRow {
        seq: a.seq,
        at: when(a.occurred_at, now),
        kind: a.kind.as_str(),
        label,
        class,
        blurb: plain,
        engineering,
        by_person: matches!(
            a.kind,
            AttemptKind::Resolved | AttemptKind::DuplicateReviewed
        ),
        actor: a.actor.clone(),
        token: a.fencing_token.0,
        token_change,
        duration: a.duration_ms.map(duration_ms),
        notes,
        detail: (!empty).then(|| pretty(&a.detail)),
        changes,
    }
}

/// The middle of a long timeline, not shown: attempts `from` to `to`, which `link`
/// pages through. It sits before the step at index `at`.
#[derive(Debug, Clone)]
pub struct Gap {
    pub at: usize,
    pub from: i64,
    pub to: i64,
    pub link: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_notable_kind_has_its_own_marker() {
        use AttemptKind::*;
        let notable = [
            (Replayed, "replay"),
            (PayloadMismatch, "mismatch"),
            (TakenOver, "takeover"),
            (Escalated, "escalation"),
            (Resolved, "resolution"),
        ];
        for (kind, class) in notable {
            assert_eq!(presentation(kind).class, class, "{kind}");
        }
        for kind in AttemptKind::ALL {
            let p = presentation(*kind);
            assert!(!p.label.is_empty() && p.plain.ends_with('.'), "{kind}");
            assert!(p.engineering.ends_with('.'), "{kind}");
            // Support staff's words: the engineering terms stay in the folded detail.
            for jargon in ["lease", "fencing", "token", "409", "422", "takeover", "key"] {
                assert!(
                    !p.plain.contains(jargon),
                    "{kind}: {jargon} in {:?}",
                    p.plain
                );
            }
        }
    }
}
