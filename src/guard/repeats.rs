//! A run of identical refusals on one key is recorded once (docs/GUARD.md, "What the
//! attempt log records"). A worker stuck in a loop — settling with a stale token,
//! admitting other arguments, retrying a key in flight — would otherwise append one
//! row per request without end: 55,547 rows to one key in 20 s in a review. The
//! first refusal of a run is recorded as ever; a refusal identical to the key's newest
//! row (same kind, token, actor and detail but the caller's `context`, nothing written
//! since) is answered the same way but not appended. An admission in such a run still counts in the record's
//! `attempt_count`; a stale write in it leaves the key untouched but for its count of
//! refusals not logged (`refusals_not_logged`), and a [`RefusalsNotLogged`] hears of
//! each one (the process's metrics).

use super::context::CONTEXT_MEMBER;
use super::record::{Attempt, AttemptDraft, Record};
use super::status::AttemptKind;

/// The refusals a run of which is recorded once, and the escalation a retry with other
/// arguments makes of a key whose outcome is unknown (decide.rs): repeated by the same
/// caller, it says nothing new.
const REFUSALS: [AttemptKind; 4] = [
    AttemptKind::StaleWriteRejected,
    AttemptKind::PayloadMismatch,
    AttemptKind::InFlightRejected,
    AttemptKind::Escalated,
];

/// The refusals answered without a row, by the kind of the refusal answered (an
/// escalation is never the first of its decision's rows).
pub const NOT_LOGGED: [AttemptKind; 3] = [
    AttemptKind::StaleWriteRejected,
    AttemptKind::PayloadMismatch,
    AttemptKind::InFlightRejected,
];

/// Who hears of each refusal answered without a row, once the transaction that
/// counted it on the record has committed: the process's metrics (`crate::metrics`),
/// which the guard does not name.
pub trait RefusalsNotLogged: Send + Sync + std::fmt::Debug {
    /// One refusal of `kind` (one of [`NOT_LOGGED`]) on a key of `tool` and `tenant`.
    fn refusal_not_logged(&self, tool: &str, tenant: &str, kind: AttemptKind);
}

/// What the guard knows of a decision's rows against the key's newest attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Repeat {
    /// Not refusals only, or unlike the newest row: write them.
    New,
    /// Refusals whose last is the same as the newest row: write no row.
    Same,
    /// Refusals, and the newest row is not known (or the key moved since it was read):
    /// read it, then decide again.
    Unread,
}

/// Whether `drafts`, decided on `before` (the record as locked), repeat `newest`: all
/// refusals, the last of them equal to the newest row (kind, token, actor and detail;
/// the earlier ones were written with it, decided on the same record).
pub fn repeat(drafts: &[AttemptDraft], before: &Record, newest: Option<&Attempt>) -> Repeat {
    let Some(draft) = drafts.last() else {
        return Repeat::New;
    };
    if !drafts.iter().all(|d| REFUSALS.contains(&d.kind)) {
        return Repeat::New;
    }
    // A lone escalation is the end of a reconciliation, never a repeat.
    if drafts.len() == 1 && draft.kind == AttemptKind::Escalated {
        return Repeat::New;
    }
    match newest {
        Some(last) if last.seq == before.log_seq => {
            let same = last.kind == draft.kind
                && last.fencing_token == draft.fencing_token
                && last.actor == draft.actor
                && without(&last.detail, &["state", CONTEXT_MEMBER])
                    == without(&draft.detail, &[CONTEXT_MEMBER]);
            if same { Repeat::Same } else { Repeat::New }
        }
        _ => Repeat::Unread,
    }
}

/// A detail without `members`: the record's `state`, which sealing adds to every
/// stored row (record.rs; a draft has none yet), and the caller's `context`
/// (context.rs), which names the request and so differs on every retry of a loop: it
/// says which call it was, never whether the refusal is new.
fn without(detail: &serde_json::Value, members: &[&str]) -> serde_json::Value {
    let mut d = detail.clone();
    if let Some(o) = d.as_object_mut() {
        for m in members {
            o.remove(*m);
        }
    }
    d
}
