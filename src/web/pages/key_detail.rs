//! `/keys/{key}`: one key's record, its attempt timeline, and the other keys with the
//! same business ref. Answers "what happened to order A-88214?".

use super::diff::{Change, diff};
use super::params::parse_key_prefix;
use super::{Badge, KeyRow, Layout, Retention, lease_note, status_badge};
use crate::guard::MoneyField;
use crate::guard::{Attempt, AttemptKind, IdempotencyKey, Record, Status};
use crate::web::filters::{
    When, duration, duration_ms, money as money_text, pretty, short_key, when,
};
use crate::web::links::link;
use crate::web::{AppState, Error};
use askama::Template;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::collections::BTreeMap;

pub fn router() -> Router<AppState> {
    Router::new().route("/keys/{key}", get(key_page))
}

/// How many other keys with the same business ref the page lists.
const SIBLINGS: u32 = 20;

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
struct Step {
    seq: i64,
    at: When,
    kind: &'static str,
    label: &'static str,
    class: &'static str,
    blurb: &'static str,
    engineering: &'static str,
    /// A person's words (a resolution, a review): shown open, not folded.
    by_person: bool,
    actor: String,
    token: i64,
    /// `1 → 2` on a takeover.
    token_change: Option<String>,
    duration: Option<String>,
    /// `reason`, `error`, `resolution`… lifted out of the detail, in field order.
    notes: Vec<(String, String)>,
    detail: Option<String>,
    /// Field by field, for a payload mismatch.
    changes: Vec<Change>,
}

fn step(a: &Attempt, record: &Record, money: Option<&MoneyField>, now: DateTime<Utc>) -> Step {
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
    Step {
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

/// Attempts shown on one page of a key's timeline (and in one `GET /api/v1/keys/{key}`):
/// a key retried 60,000 times made a 122 MB page when all were shown.
pub const TIMELINE_PAGE: u32 = 500;

/// The middle of a long timeline, not shown: attempts `from` to `to`, which `link`
/// pages through. It sits before the step at index `at`.
#[derive(Debug, Clone)]
pub struct Gap {
    pub at: usize,
    pub from: i64,
    pub to: i64,
    pub link: String,
}

/// `?after=SEQ`: the timeline from the attempt after `SEQ` (default: from the first).
pub fn parse_after(pairs: &[(String, String)]) -> Result<i64, Error> {
    match pairs.iter().rev().find(|(k, _)| k == "after") {
        None => Ok(0),
        Some((_, v)) if v.is_empty() => Ok(0),
        Some((_, v)) => v
            .trim()
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .ok_or_else(|| {
                Error::bad_request(
                    "after",
                    format!(
                        "after must be an attempt number (0 or more), not {:?}",
                        v.chars().take(40).collect::<String>()
                    ),
                )
            }),
    }
}

/// The other keys with this business ref, and a sentence about them.
struct Siblings {
    business_ref: String,
    summary: String,
    rows: Vec<KeyRow>,
    more: Option<String>,
}

/// Counts of the timeline's notable kinds, for the summary sentence.
#[derive(Default)]
struct Tally {
    replays: usize,
    mismatches: usize,
    takeovers: usize,
    escalations: usize,
    resolutions: usize,
}

/// Filtered lists one click away from the record.
struct KeyLinks {
    tool: String,
    workflow: String,
    intent: String,
    business_ref: String,
}

#[derive(Template)]
#[template(path = "key.html")]
struct KeyPage {
    layout: Layout,
    r: Record,
    links: KeyLinks,
    short: String,
    badge: Badge,
    verdict: String,
    undecided: bool,
    past_retention: bool,
    lease: When,
    lease_note: &'static str,
    retention: When,
    retention_note: String,
    /// The amount of the tools file's money field (`£45.00`), when it names one.
    amount: Option<String>,
    created: When,
    updated: When,
    args: String,
    result: Option<String>,
    steps: Vec<Step>,
    tally: Tally,
    /// Attempt rows of the whole timeline; `steps` is one page of them.
    total: i64,
    /// The attempt number this page starts after (0: the first page).
    after: i64,
    /// The next page of the timeline, when there is one.
    next: Option<String>,
    /// On a long timeline's first view: the attempts left out between its two ends.
    gap: Option<Gap>,
    page_size: u32,
    siblings: Option<Siblings>,
    api: String,
    /// The resolve form, for callers who may resolve an undecided key.
    resolve: Option<super::resolve::FormView>,
    /// Suspected duplicate pairs this key is in (either side).
    pairs: Vec<super::pairs::PairView>,
    /// May the caller review an open pair (and the CSRF token of its form)?
    may_review: bool,
    csrf_token: String,
}

/// The attempt that decided a DONE or FAILED key, newest first among `attempts`: a
/// person's resolution to that status, or the provider's answer.
fn decision(attempts: &[Attempt], status: Status) -> Option<&Attempt> {
    let by_person = match status {
        Status::Done => "done",
        Status::Failed => "failed",
        _ => return None,
    };
    attempts.iter().rev().find(|a| match a.kind {
        AttemptKind::Resolved => {
            a.detail.get("resolution").and_then(Value::as_str) == Some(by_person)
        }
        AttemptKind::Completed | AttemptKind::ReconciledFound => status == Status::Done,
        AttemptKind::Failed => status == Status::Failed,
        _ => false,
    })
}

/// "Marked failed by ana (2 h ago): “reason”. Evidence: …" for a person's decision.
fn resolved_by(a: &Attempt, status: &str, now: DateTime<Utc>) -> Option<String> {
    if a.kind != AttemptKind::Resolved {
        return None;
    }
    let text = |f: &str| {
        a.detail
            .get(f)
            .and_then(Value::as_str)
            .filter(|t| !t.trim().is_empty())
    };
    let reason = text("reason").map_or(String::new(), |r| format!(": \u{201c}{r}\u{201d}"));
    let evidence = match text("evidence") {
        Some(e) => format!(" Evidence: {e}."),
        None => " No evidence was recorded.".to_string(),
    };
    Some(format!(
        "{status}: marked {} by {} ({}){reason}.{evidence}",
        status.to_lowercase(),
        a.actor,
        when(a.occurred_at, now).rel
    ))
}

fn verdict(
    r: &Record,
    retention: &Retention,
    tally: &Tally,
    decided: Option<&Attempt>,
    now: DateTime<Utc>,
) -> String {
    let retries = match tally.replays {
        0 => String::new(),
        1 => " One retry was answered from the stored result; nothing was sent twice.".into(),
        n => format!(" {n} retries were answered from the stored result; nothing was sent twice."),
    };
    let person = |status| decided.and_then(|a| resolved_by(a, status, now));
    match r.status {
        Status::Done => match person("Done") {
            Some(by) => format!("{by}{retries}"),
            None => format!("Done: the effect happened once.{retries}"),
        },
        Status::Failed => match person("Failed") {
            Some(by) => format!("{by} Retries get the same error.{retries}"),
            None => format!(
                "Failed: the provider refused definitively; retries get the same error.{retries}"
            ),
        },
        Status::Unknown if retention.past => format!(
            "Unknown, and {}: only a person can tell whether the effect happened. Check the provider for an effect tagged with this key.",
            retention.long
        ),
        Status::Unknown => format!(
            "Unknown: nobody knows yet whether the effect happened. The next retry with this key checks the provider first; {}.",
            retention.long
        ),
        Status::InProgress if r.lease_expired(now) => format!(
            "The worker's lease ran out {} ago: it died or hung mid-call. The next retry takes the key over and checks the provider before anything is resent.",
            duration(now - r.lease_until)
        ),
        Status::InProgress => format!(
            "In progress: a worker holds the lease for {} more; retries are told to wait.",
            duration(r.lease_until - now)
        ),
    }
}

fn siblings(
    business_ref: &str,
    this: &IdempotencyKey,
    keys: &[crate::store::KeySummary],
    now: DateTime<Utc>,
) -> Siblings {
    let shown: Vec<_> = keys.iter().take(SIBLINGS as usize).collect();
    let mut per_tool: BTreeMap<&str, usize> = BTreeMap::new();
    for k in &shown {
        *per_tool.entry(k.intent.tool.as_str()).or_default() += 1;
    }
    let more = keys.len() > SIBLINGS as usize;
    let n = shown.len();
    let others = n.saturating_sub(1);
    let plus = if more { "+" } else { "" };
    let summary = match per_tool.len() {
        1 => {
            let tool = per_tool.keys().next().copied().unwrap_or_default();
            let which = match (others, more) {
                (0, false) => "this key only".to_string(),
                (1, false) => "this key and 1 other".to_string(),
                _ => format!("this key and {others}{plus} others"),
            };
            format!(
                "{n}{plus} {tool} {} on {business_ref}: {which}.",
                if n == 1 { "call" } else { "calls" },
            )
        }
        _ => {
            let parts: Vec<String> = per_tool.iter().map(|(t, c)| format!("{t} ×{c}")).collect();
            format!("{n}{plus} keys on {business_ref} ({}).", parts.join(", "))
        }
    };
    Siblings {
        business_ref: business_ref.to_string(),
        summary,
        rows: shown
            .iter()
            .filter(|k| &k.key != this)
            .map(|k| KeyRow::new(k, now))
            .collect(),
        more: more.then(|| link("/keys", &[("business_ref", Some(business_ref))])),
    }
}

async fn key_page(
    State(state): State<AppState>,
    Path(key): Path<String>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Result<Response, Error> {
    let after = parse_after(&pairs)?;
    let Ok(key) = IdempotencyKey::parse(&key) else {
        // A prefix or an upper-case key: show the keys it stands for.
        let prefix = parse_key_prefix("key", &key)?;
        let to = if prefix.len() == 64 {
            format!("/keys/{prefix}")
        } else {
            link("/keys", &[("key", Some(&prefix))])
        };
        return Ok(Redirect::to(&to).into_response());
    };
    let now = state.clock.now();
    let record = state.store.record(&key).await?.ok_or_else(|| {
        Error::NotFound(format!(
            "No key {key} is recorded. It may never have been claimed, or retention has removed it."
        ))
    })?;
    let kinds = state.store.attempt_kinds(&key).await?;
    let total_rows: i64 = kinds.values().sum();
    // A long timeline opens on its two ends: how it started and where it stands now,
    // with the middle a page at a time on demand (`?after=`).
    let ends = after == 0 && total_rows > i64::from(TIMELINE_PAGE);
    let (attempts, next, gap) = if ends {
        let half = TIMELINE_PAGE / 2;
        let mut attempts = state.store.attempts_page(&key, 0, half).await?.attempts;
        let newest = state.store.attempts_newest(&key, half).await?;
        let first_hidden = attempts.last().map_or(0, |a| a.seq) + 1;
        let last_hidden = newest.first().map_or(first_hidden, |a| a.seq) - 1;
        let gap = (last_hidden >= first_hidden).then(|| Gap {
            at: attempts.len(),
            from: first_hidden,
            to: last_hidden,
            link: link(
                &format!("/keys/{key}"),
                &[("after", Some(&(first_hidden - 1).to_string()))],
            ),
        });
        attempts.extend(newest);
        (attempts, None, gap)
    } else {
        let page = state
            .store
            .attempts_page(&key, after, TIMELINE_PAGE)
            .await?;
        let next = match page.attempts.last() {
            Some(last) if page.more => Some(link(
                &format!("/keys/{key}"),
                &[("after", Some(&last.seq.to_string()))],
            )),
            _ => None,
        };
        (page.attempts, next, None)
    };
    let siblings = match &record.business_ref {
        Some(b) => {
            let keys = state.store.keys_with_business_ref(b, SIBLINGS + 1).await?;
            Some(siblings(b, &key, &keys, now))
        }
        None => None,
    };
    // Counted over the whole timeline, not the page shown.
    let mut tally = Tally::default();
    let mut total = 0;
    for (kind, n) in kinds {
        total += n;
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        match kind {
            AttemptKind::Replayed | AttemptKind::ReplayedFailure => tally.replays += n,
            AttemptKind::PayloadMismatch => tally.mismatches += n,
            AttemptKind::TakenOver => tally.takeovers += n,
            AttemptKind::Escalated => tally.escalations += n,
            AttemptKind::Resolved => tally.resolutions += n,
            _ => {}
        }
    }
    let lease_expired = record.lease_expired(now);
    let ctx = crate::web::auth::page_context();
    let may_resolve = ctx.user.as_ref().is_some_and(|u| u.can_resolve);
    let resolve = (may_resolve && record.is_undecided(now))
        .then(|| super::resolve::FormView::new(&record, now, ctx.csrf_token.clone()));
    let pairs = state
        .store
        .suspected_pairs_of(&key)
        .await?
        .iter()
        .map(|p| super::pairs::PairView::new(p, Some(key.as_str()), now))
        .collect();
    let money = state.tools.amount(&record.intent.tool);
    let retention = Retention::new(
        record.resend_safe_until,
        record.provider_retention_until,
        now,
    );
    // What decided the key, for the verdict: usually on the page shown; else among the
    // newest attempts (a page of replays may follow it).
    let newest;
    let mut decided = decision(&attempts, record.status);
    if decided.is_none() && matches!(record.status, Status::Done | Status::Failed) {
        newest = state.store.attempts_newest(&key, TIMELINE_PAGE).await?;
        decided = decision(&newest, record.status);
    }
    let view = KeyPage {
        layout: Layout::new(format!("Key {}", short_key(record.key.as_str())), "keys")
            .with_query(record.business_ref.clone().unwrap_or_default()),
        short: short_key(record.key.as_str()),
        badge: status_badge(record.status, lease_expired),
        verdict: verdict(&record, &retention, &tally, decided, now),
        undecided: record.is_undecided(now),
        past_retention: retention.past,
        lease: when(record.lease_until, now),
        lease_note: lease_note(record.lease_state(now)),
        retention: when(record.provider_retention_until, now),
        // Once the outcome is recorded, the provider forgetting the key is no news.
        retention_note: if record.is_undecided(now) {
            retention.long
        } else {
            "no longer matters: the outcome is recorded".to_string()
        },
        amount: money.and_then(|m| {
            m.minor_units(&record.business_args)
                .map(|n| money_text(m, n))
        }),
        created: when(record.created_at, now),
        updated: when(record.updated_at, now),
        args: pretty(&record.business_args),
        result: record.result.as_ref().map(pretty),
        steps: attempts
            .iter()
            .map(|a| step(a, &record, money, now))
            .collect(),
        tally,
        total,
        after,
        next,
        gap,
        page_size: TIMELINE_PAGE,
        siblings,
        api: format!("/api/v1/keys/{key}"),
        resolve,
        pairs,
        may_review: may_resolve,
        csrf_token: ctx.csrf_token.clone(),
        links: KeyLinks {
            tool: link("/keys", &[("tool", Some(&record.intent.tool))]),
            workflow: link(
                "/keys",
                &[("workflow_id", Some(&record.intent.workflow_id))],
            ),
            intent: link("/keys", &[("intent_id", Some(&record.intent.intent_id))]),
            business_ref: link("/keys", &[("business_ref", record.business_ref.as_deref())]),
        },
        r: record,
    };
    Ok(Html(view.render()?).into_response())
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
