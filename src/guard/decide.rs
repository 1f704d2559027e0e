//! The guard's decisions as pure functions of the locked record. Each returns the
//! attempt rows that describe what it did; the store writes the record change and the
//! rows in one transaction.

use super::deadline::LeaseState;
use super::key::{BusinessArgs, FencingToken};
use super::record::{AttemptDraft, Record};
use super::status::{AttemptKind, Resolution, Status};
use crate::base::canonical::canonical_json;
use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{Value, json};

/// What an admission to the guard found.
#[derive(Debug, Clone, PartialEq)]
pub enum Admission {
    /// This caller claimed the key and must execute under `token` before `lease_until`.
    New {
        token: FencingToken,
        lease_until: DateTime<Utc>,
    },
    /// DONE: the stored result, marked as a replay.
    Replay { result: Value },
    /// FAILED: the stored definitive error.
    ReplayFailure { error: String },
    /// IN_PROGRESS under a live lease: answer 409, never wait.
    InFlight { lease_until: DateTime<Utc> },
    /// Same key, other business arguments. `differing_fields`: the top-level argument
    /// names whose values differ (sorted); `stored_status`: the key's status as the
    /// caller leaves it. On a key whose outcome is unknown (UNKNOWN, or a lease that
    /// ran out) the key is escalated to a person, and `lookup_token` lets this caller
    /// report a lookup by key under it (never a resend): found settles the key DONE.
    Mismatch {
        stored_fingerprint: String,
        differing_fields: Vec<String>,
        stored_status: Status,
        lookup_token: Option<FencingToken>,
    },
    /// UNKNOWN, or a lease that expired: this caller won the compare-and-swap and must
    /// reconcile under `token` before `lease_until`. `before` is the record as it was found.
    TakeOver {
        token: FencingToken,
        lease_until: DateTime<Utc>,
        before: Box<Record>,
    },
}

/// Why a key whose outcome is unknown is escalated when a retry brings other values.
pub(crate) const MISMATCH_ON_UNKNOWN: &str = "a retry arrived with other business arguments while the \
    outcome of the stored ones is unknown: an earlier attempt with other values may or may not \
    have happened, and neither version may be sent under this key without checking: a lookup by \
    key that finds the effect settles it, otherwise a person decides";

/// Decides what a caller arriving at an existing key gets.
pub(crate) fn admit_existing(
    rec: &mut Record,
    args: &BusinessArgs,
    actor: &str,
    now: DateTime<Utc>,
    lease: TimeDelta,
) -> (Vec<AttemptDraft>, Admission) {
    rec.attempt_count += 1;
    rec.updated_at = now;
    let token = rec.fencing_token;
    let draft = |kind| AttemptDraft::new(kind, token, actor, now);

    if rec.fingerprint != args.fingerprint.0 {
        // The record's business fields stay as they are; the attempt keeps what the
        // retry sent, so a person can see what changed.
        let attempt = draft(AttemptKind::PayloadMismatch).detail(json!({
            "stored_fingerprint": rec.fingerprint,
            "fingerprint": args.fingerprint.0,
            "business_args": args.value,
        }));
        let differing = differing_fields(&rec.business_args, &args.value);
        let undecided = rec.status == Status::Unknown
            || (rec.status == Status::InProgress && rec.lease_state(now) != LeaseState::Held);
        if !undecided {
            let mismatch = Admission::Mismatch {
                stored_fingerprint: rec.fingerprint.clone(),
                differing_fields: differing,
                stored_status: rec.status,
                lookup_token: None,
            };
            return (vec![attempt], mismatch);
        }
        // Nobody knows whether the first call (with the stored arguments) happened, and
        // this caller's arguments must not be sent under its key: no takeover, no
        // resend. A person is asked; this caller may look the effect up by key.
        rec.status = Status::Unknown;
        rec.lease_until = rec.lease_until.min(now);
        let escalated = draft(AttemptKind::Escalated).detail(json!({
            "reason": MISMATCH_ON_UNKNOWN,
            "fingerprint": args.fingerprint.0,
            "differing_fields": differing,
            "provider_retention_until": rec.provider_retention_until,
            "resend_safe_until": rec.resend_safe_until,
        }));
        let mismatch = Admission::Mismatch {
            stored_fingerprint: rec.fingerprint.clone(),
            differing_fields: differing,
            stored_status: Status::Unknown,
            lookup_token: Some(token),
        };
        return (vec![attempt, escalated], mismatch);
    }
    match rec.status {
        Status::Done => {
            let result = rec.result.clone().unwrap_or(Value::Null);
            (
                vec![draft(AttemptKind::Replayed)],
                Admission::Replay { result },
            )
        }
        Status::Failed => {
            let error = rec.error.clone().unwrap_or_default();
            (
                vec![draft(AttemptKind::ReplayedFailure)],
                Admission::ReplayFailure { error },
            )
        }
        Status::InProgress if rec.lease_state(now) == LeaseState::Held => {
            let attempt = draft(AttemptKind::InFlightRejected)
                .detail(json!({ "lease_until": rec.lease_until }));
            (
                vec![attempt],
                Admission::InFlight {
                    lease_until: rec.lease_until,
                },
            )
        }
        Status::InProgress | Status::Unknown => {
            let before = Box::new(rec.clone());
            let lease_expired = rec.status == Status::InProgress;
            rec.fencing_token = rec.fencing_token.next();
            rec.status = Status::InProgress;
            rec.lease_until = now + lease;
            let attempt = AttemptDraft::new(AttemptKind::TakenOver, rec.fencing_token, actor, now)
                .detail(json!({
                    "from_status": before.status,
                    "previous_token": before.fencing_token,
                    "lease_expired": lease_expired,
                }));
            let admission = Admission::TakeOver {
                token: rec.fencing_token,
                lease_until: rec.lease_until,
                before,
            };
            (vec![attempt], admission)
        }
    }
}

/// How a worker's call ended, to be written under its fencing token.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Settlement {
    Completed {
        result: Value,
        duration_ms: Option<i64>,
    },
    Failed {
        error: String,
        duration_ms: Option<i64>,
    },
    Unknown {
        reason: String,
        duration_ms: Option<i64>,
    },
    ReconciledFound {
        result: Value,
        duration_ms: Option<i64>,
    },
    /// About to resend with the same key: the row is written before the call.
    Resent {
        reason: &'static str,
    },
    Escalated {
        reason: String,
    },
}

/// The fenced write refused: the record has moved on to `current`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stale {
    pub current: FencingToken,
}

/// [`settle`] for a lookup's outcome: also on a key that is UNKNOWN under `token`
/// (the lookup offered to a retry with other arguments), where [`after_lookup`] never
/// chooses a resend.
pub(crate) fn settle_lookup(
    rec: &mut Record,
    token: FencingToken,
    settlement: Settlement,
    actor: &str,
    now: DateTime<Utc>,
) -> (Vec<AttemptDraft>, Result<(), Stale>) {
    let lookup_only = rec.status == Status::Unknown
        && rec.fencing_token == token
        && !matches!(settlement, Settlement::Resent { .. });
    if lookup_only {
        rec.status = Status::InProgress;
    }
    settle(rec, token, settlement, actor, now)
}

/// Applies `settlement` if `token` is still the record's token; otherwise records a
/// `stale_write_rejected` attempt and changes nothing else.
pub fn settle(
    rec: &mut Record,
    token: FencingToken,
    settlement: Settlement,
    actor: &str,
    now: DateTime<Utc>,
) -> (Vec<AttemptDraft>, Result<(), Stale>) {
    if rec.fencing_token != token || rec.status != Status::InProgress {
        let attempt =
            AttemptDraft::new(AttemptKind::StaleWriteRejected, token, actor, now).detail(json!({
                "attempted": settlement_kind(&settlement).as_str(),
                "current_token": rec.fencing_token,
                "current_status": rec.status,
            }));
        return (
            vec![attempt],
            Err(Stale {
                current: rec.fencing_token,
            }),
        );
    }
    rec.updated_at = now;
    let draft = |kind| AttemptDraft::new(kind, token, actor, now);
    let attempt = match settlement {
        Settlement::Completed {
            result,
            duration_ms,
        } => {
            rec.status = Status::Done;
            rec.result = Some(result);
            draft(AttemptKind::Completed).duration_ms(duration_ms)
        }
        Settlement::ReconciledFound {
            result,
            duration_ms,
        } => {
            rec.status = Status::Done;
            let attempt = draft(AttemptKind::ReconciledFound)
                .duration_ms(duration_ms)
                .detail(json!({ "evidence": result }));
            rec.result = Some(result);
            attempt
        }
        Settlement::Failed { error, duration_ms } => {
            rec.status = Status::Failed;
            let attempt = draft(AttemptKind::Failed)
                .duration_ms(duration_ms)
                .detail(json!({ "error": error }));
            rec.error = Some(error);
            attempt
        }
        Settlement::Unknown {
            reason,
            duration_ms,
        } => {
            rec.status = Status::Unknown;
            rec.lease_until = now;
            draft(AttemptKind::MarkedUnknown)
                .detail(json!({ "reason": reason }))
                .duration_ms(duration_ms)
        }
        Settlement::Resent { reason } => {
            rec.release_approved = false;
            draft(AttemptKind::Resent).detail(json!({ "reason": reason }))
        }
        Settlement::Escalated { reason } => {
            rec.status = Status::Unknown;
            rec.lease_until = now;
            draft(AttemptKind::Escalated).detail(json!({
                "reason": reason,
                "provider_retention_until": rec.provider_retention_until,
                "resend_safe_until": rec.resend_safe_until,
            }))
        }
    };
    (vec![attempt], Ok(()))
}

/// What the reconciliation lookup at the provider found.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
    /// The provider's record of the effect.
    Found(Value),
    /// No effect tagged with the key.
    NotFound,
    /// The lookup itself failed or timed out: why.
    Failed(String),
}

/// What a takeover does after its lookup, decided on the locked record (its token,
/// deadlines and release are those of the takeover): record the effect found; resend
/// while that is safe (not found, or a failed lookup on a key a person released);
/// otherwise stay UNKNOWN (a failed lookup) or ask a person (not found, and a resend
/// is no longer safe).
///
/// A lookup reported on a key that is UNKNOWN under the reporter's token (the lookup a
/// retry with other arguments is offered, see [`Admission::Mismatch`]) never resends:
/// found settles the key, anything else leaves it with a person. Nor does one whose
/// provider does not deduplicate by key: its retention is zero, so a resend is never
/// safe.
pub(crate) fn after_lookup(
    rec: &Record,
    lookup: Lookup,
    duration_ms: Option<i64>,
    now: DateTime<Utc>,
) -> Settlement {
    let lookup_only = rec.status == Status::Unknown;
    let remembers = rec.resend_safe(now) && !lookup_only;
    if lookup_only && lookup == Lookup::NotFound {
        return Settlement::Escalated {
            reason: "not found at the provider by key, looked up for a retry with other \
                     arguments: nothing is resent; a person decides"
                .to_string(),
        };
    }
    let forgotten = if rec.provider_retention_until <= rec.created_at {
        "not found at the provider, which does not deduplicate by key (provider_dedupes = \
         false): a resend could perform the effect twice"
    } else {
        "not found at the provider, and a resend is no longer safe (the provider forgets the key \
         within the safety margin, or already has): a resend could pay twice"
    };
    match lookup {
        Lookup::Found(result) => Settlement::ReconciledFound {
            result,
            duration_ms,
        },
        Lookup::NotFound if remembers => Settlement::Resent {
            reason: "not found at the provider, which still remembers the key",
        },
        Lookup::Failed(_) if remembers && rec.release_approved => Settlement::Resent {
            reason: "provider lookup failed; a person released the key for resend",
        },
        Lookup::Failed(reason) => Settlement::Unknown {
            reason,
            duration_ms,
        },
        Lookup::NotFound => Settlement::Escalated {
            reason: forgotten.to_string(),
        },
    }
}

/// The top-level argument names whose values differ between the stored business
/// arguments and a retry's, sorted; values are compared in their canonical form, as
/// the fingerprint compares them.
pub fn differing_fields(stored: &Value, sent: &Value) -> Vec<String> {
    let empty = serde_json::Map::new();
    let stored = stored.as_object().unwrap_or(&empty);
    let sent = sent.as_object().unwrap_or(&empty);
    let canonical =
        |v: Option<&Value>| v.map(|v| canonical_json(v).unwrap_or_else(|_| v.to_string()));
    let names: std::collections::BTreeSet<&String> = stored.keys().chain(sent.keys()).collect();
    names
        .into_iter()
        .filter(|name| canonical(stored.get(*name)) != canonical(sent.get(*name)))
        .cloned()
        .collect()
}

fn settlement_kind(s: &Settlement) -> AttemptKind {
    match s {
        Settlement::Completed { .. } => AttemptKind::Completed,
        Settlement::Failed { .. } => AttemptKind::Failed,
        Settlement::Unknown { .. } => AttemptKind::MarkedUnknown,
        Settlement::ReconciledFound { .. } => AttemptKind::ReconciledFound,
        Settlement::Resent { .. } => AttemptKind::Resent,
        Settlement::Escalated { .. } => AttemptKind::Escalated,
    }
}

/// A person's decision about an undecided key.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolveRequest {
    pub resolution: Resolution,
    pub reason: String,
    /// The provider's resource id or other proof (required for `done`).
    pub evidence: Option<String>,
    /// The result to store for `done`; replays return it.
    pub result: Option<Value>,
    pub actor: String,
    /// The fencing token the person saw when deciding; a mismatch means someone else
    /// acted since, and the resolution is refused.
    pub expected_token: Option<FencingToken>,
}

/// Why a resolution was refused.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Refusal {
    /// Someone else acted since the person looked.
    Moved,
    /// IN_PROGRESS under a live lease: it belongs to its worker.
    InFlight {
        lease_until: DateTime<Utc>,
    },
    NotResolvable {
        why: String,
    },
}

/// Takes the key over for a person (the same compare-and-swap as a worker's
/// takeover) and writes the decision under the new token, or records the refusal.
pub fn resolve(
    rec: &mut Record,
    req: &ResolveRequest,
    now: DateTime<Utc>,
) -> (Vec<AttemptDraft>, Result<(), Refusal>) {
    let refusal = if req.expected_token.is_some_and(|t| t != rec.fencing_token) {
        Some(Refusal::Moved)
    } else if rec.status.is_terminal() {
        Some(Refusal::NotResolvable {
            why: format!(
                "it is already {}; a decided key cannot be resolved again",
                rec.status
            ),
        })
    } else if rec.lease_state(now) == LeaseState::Held {
        Some(Refusal::InFlight {
            lease_until: rec.lease_until,
        })
    } else if req.resolution == Resolution::Release && !rec.resend_safe(now) {
        Some(Refusal::NotResolvable {
            why: format!(
                "a resend is no longer safe since {} (the provider forgets this key at {}), so \
                 it could perform the effect twice; check the provider and mark the key done or \
                 failed instead",
                rec.resend_safe_until.format("%Y-%m-%d %H:%M:%S UTC"),
                rec.provider_retention_until.format("%Y-%m-%d %H:%M:%S UTC")
            ),
        })
    } else {
        None
    };
    if let Some(refusal) = refusal {
        let attempt = AttemptDraft::new(
            AttemptKind::StaleWriteRejected,
            req.expected_token.unwrap_or(rec.fencing_token),
            &req.actor,
            now,
        )
        .detail(json!({
            "attempted": "resolved",
            "resolution": req.resolution,
            "reason": req.reason,
            "current_token": rec.fencing_token,
            "current_status": rec.status,
        }));
        return (vec![attempt], Err(refusal));
    }

    let previous = (rec.status, rec.fencing_token);
    rec.fencing_token = rec.fencing_token.next();
    rec.updated_at = now;
    rec.lease_until = now;
    match req.resolution {
        Resolution::Done => {
            rec.status = Status::Done;
            rec.result =
                Some(req.result.clone().unwrap_or_else(
                    || json!({ "resolved_manually": true, "evidence": req.evidence }),
                ));
        }
        Resolution::Failed => {
            rec.status = Status::Failed;
            rec.error = Some(format!(
                "resolved as failed by {}: {}",
                req.actor, req.reason
            ));
        }
        Resolution::Release => {
            rec.status = Status::Unknown;
            rec.release_approved = true;
        }
    }
    let attempt = AttemptDraft::new(AttemptKind::Resolved, rec.fencing_token, &req.actor, now)
        .detail(json!({
            "resolution": req.resolution,
            "reason": req.reason,
            "evidence": req.evidence,
            "result": req.result,
            "previous_status": previous.0,
            "previous_token": previous.1,
        }));
    (vec![attempt], Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differing_fields_name_the_top_level_arguments_that_changed() {
        let stored = json!({"order": "A-1", "amount_p": 4500, "currency": "GBP"});
        let sent = json!({"order": "A-1", "amount_p": 45, "note": "x", "currency": "GBP"});
        assert_eq!(differing_fields(&stored, &sent), ["amount_p", "note"]);
        let same_number = json!({"order": "A-1", "amount_p": 4500.0, "currency": "GBP"});
        assert!(differing_fields(&stored, &same_number).is_empty());
    }
}
