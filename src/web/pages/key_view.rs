//! The key page as a pure view of one [`KeyHistory`]: built without a database, so
//! what the page says about a key is unit-tested from the history alone.

use super::key_steps::{Gap, TimelineRow, step};
use super::{Badge, KeyRow, Layout, Retention, lease_note, status_badge};
use crate::guard::{Attempt, AttemptKind, IdempotencyKey, MoneyField, Record, Status};
use crate::store::{KeyHistory, Shown};
use crate::web::Viewer;
use crate::web::filters::{When, duration, money as money_text, pretty, short_key, when};
use crate::web::links::link;
use askama::Template;
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::collections::BTreeMap;

/// How many other keys with the same business ref the page lists.
pub const SIBLINGS: u32 = 20;

/// The other keys with this business ref, and a sentence about them.
struct Siblings {
    business_ref: String,
    summary: String,
    rows: Vec<KeyRow>,
    more: Option<String>,
}

/// Counts of the timeline's notable kinds, for the summary sentence.
#[derive(Default)]
struct TimelineTally {
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
pub struct KeyPageView {
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
    steps: Vec<TimelineRow>,
    tally: TimelineTally,
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
    /// The demo provider's lookup of this key, when the demo provider runs.
    provider_lookup: Option<String>,
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
    tally: &TimelineTally,
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

/// What the view needs beside the history: who reads it, the page asked for, the
/// money field of the key's tool, and the time the page calls "now".
pub struct Context<'a> {
    pub viewer: &'a Viewer,
    /// The attempt number the timeline starts after (`?after=`).
    pub after: i64,
    pub page_size: u32,
    pub money: Option<&'a MoneyField>,
    /// Where the demo provider looks this key up (`/demo/provider/{key}`), when it runs.
    pub provider_lookup: Option<String>,
    pub now: DateTime<Utc>,
}

impl KeyPageView {
    pub fn new(h: KeyHistory, cx: Context<'_>) -> Self {
        let Context {
            viewer,
            after,
            page_size,
            money,
            provider_lookup,
            now,
        } = cx;
        let KeyHistory {
            record,
            kinds,
            shown,
            newest,
            siblings: same_ref,
            pairs,
        } = h;
        let key = &record.key;
        let (attempts, next, gap) = match shown {
            Shown::Ends { mut first, newest } => {
                let first_hidden = first.last().map_or(0, |a| a.seq) + 1;
                let last_hidden = newest.first().map_or(first_hidden, |a| a.seq) - 1;
                let gap = (last_hidden >= first_hidden).then(|| Gap {
                    at: first.len(),
                    from: first_hidden,
                    to: last_hidden,
                    link: link(
                        &format!("/keys/{key}"),
                        &[("after", Some(&(first_hidden - 1).to_string()))],
                    ),
                });
                first.extend(newest);
                (first, None, gap)
            }
            Shown::Page(page) => {
                let next = match page.attempts.last() {
                    Some(last) if page.more => Some(link(
                        &format!("/keys/{key}"),
                        &[("after", Some(&last.seq.to_string()))],
                    )),
                    _ => None,
                };
                (page.attempts, next, None)
            }
        };
        let (tally, total) = TimelineTally::of(&kinds);
        let may_resolve = viewer.user.as_ref().is_some_and(|u| u.can_resolve);
        let undecided = record.is_undecided(now);
        let retention = Retention::new(
            record.resend_safe_until,
            record.provider_retention_until,
            now,
        );
        // What decided the key, for the verdict: usually on the page shown; else among
        // the newest attempts (a page of replays may follow it).
        let decided =
            decision(&attempts, record.status).or_else(|| decision(&newest, record.status));
        Self {
            layout: Layout::new(format!("Key {}", short_key(key.as_str())), "keys", viewer)
                .with_query(record.business_ref.clone().unwrap_or_default()),
            short: short_key(key.as_str()),
            badge: status_badge(record.status, record.lease_expired(now)),
            verdict: verdict(&record, &retention, &tally, decided, now),
            undecided,
            past_retention: retention.past,
            lease: when(record.lease_until, now),
            lease_note: lease_note(record.lease_state(now)),
            retention: when(record.provider_retention_until, now),
            // Once the outcome is recorded, the provider forgetting the key is no news.
            retention_note: if undecided {
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
            page_size,
            siblings: record
                .business_ref
                .as_deref()
                .map(|b| siblings(b, key, &same_ref, now)),
            api: format!("/api/v1/keys/{key}"),
            resolve: (may_resolve && undecided)
                .then(|| super::resolve::FormView::new(&record, now, viewer.csrf_token.clone())),
            pairs: pairs
                .iter()
                .map(|p| super::pairs::PairView::new(p, Some(key.as_str()), now))
                .collect(),
            may_review: may_resolve,
            csrf_token: viewer.csrf_token.clone(),
            provider_lookup,
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
        }
    }
}

impl TimelineTally {
    /// The notable kinds, counted over the whole timeline (not the page shown), and
    /// the number of attempts.
    fn of(kinds: &BTreeMap<AttemptKind, i64>) -> (Self, i64) {
        let mut tally = TimelineTally::default();
        let mut total = 0;
        for (kind, n) in kinds {
            total += n;
            let n = usize::try_from(*n).unwrap_or(usize::MAX);
            match kind {
                AttemptKind::Replayed | AttemptKind::ReplayedFailure => tally.replays += n,
                AttemptKind::PayloadMismatch => tally.mismatches += n,
                AttemptKind::TakenOver => tally.takeovers += n,
                AttemptKind::Escalated => tally.escalations += n,
                AttemptKind::Resolved => tally.resolutions += n,
                _ => {}
            }
        }
        (tally, total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::{AttemptDraft, FencingToken, seal};
    use crate::store::AttemptPage;
    use serde_json::json;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    fn record(status: Status) -> Record {
        let t = at("2026-11-29T14:00:00Z");
        Record {
            status,
            lease_until: t,
            provider_retention_until: t + chrono::TimeDelta::days(1),
            resend_safe_until: t + chrono::TimeDelta::hours(23),
            created_at: t,
            updated_at: t,
            ..crate::guard::sample_record()
        }
    }

    /// A history of `record` with `drafts` sealed onto it, every attempt shown.
    fn history(mut record: Record, drafts: Vec<AttemptDraft>) -> KeyHistory {
        let attempts: Vec<Attempt> = drafts.into_iter().map(|d| seal(&mut record, d)).collect();
        let mut kinds = BTreeMap::new();
        for a in &attempts {
            *kinds.entry(a.kind).or_insert(0) += 1;
        }
        KeyHistory {
            record,
            kinds,
            shown: Shown::Page(AttemptPage {
                attempts,
                more: false,
            }),
            newest: Vec::new(),
            siblings: Vec::new(),
            pairs: Vec::new(),
        }
    }

    fn draft(kind: AttemptKind, minute: u32) -> AttemptDraft {
        let t = at("2026-11-29T14:00:00Z") + chrono::TimeDelta::minutes(minute.into());
        AttemptDraft::new(kind, FencingToken::FIRST, "ana", t)
    }

    fn view(h: KeyHistory, viewer: &Viewer, lookup: Option<&str>) -> KeyPageView {
        KeyPageView::new(
            h,
            Context {
                viewer,
                after: 0,
                page_size: 500,
                money: None,
                provider_lookup: lookup.map(str::to_string),
                now: at("2026-11-29T15:00:00Z"),
            },
        )
    }

    #[test]
    fn a_key_a_person_marked_done_says_who_decided_why_and_on_what_evidence() {
        let resolved = draft(AttemptKind::Resolved, 30).detail(json!({
            "resolution": "done", "reason": "found it", "evidence": "rf_002202"
        }));
        let h = history(
            record(Status::Done),
            vec![
                draft(AttemptKind::Claimed, 0),
                draft(AttemptKind::MarkedUnknown, 1),
                draft(AttemptKind::Replayed, 2),
                resolved,
            ],
        );
        let page = view(h, &Viewer::default(), None);
        assert_eq!(
            page.verdict,
            "Done: marked done by ana (30 min ago): \u{201c}found it\u{201d}. Evidence: \
             rf_002202. One retry was answered from the stored result; nothing was sent twice."
        );
        assert_eq!(
            (page.total, page.tally.replays, page.tally.resolutions),
            (4, 1, 1)
        );
        assert_eq!(page.steps.len(), 4);
        assert!(page.next.is_none() && page.gap.is_none());
        assert!(page.resolve.is_none(), "a decided key has no resolve form");
    }

    #[test]
    fn a_long_timeline_shows_its_two_ends_and_links_the_middle() {
        let mut h = history(
            record(Status::Unknown),
            (0..10).map(|i| draft(AttemptKind::Replayed, i)).collect(),
        );
        let Shown::Page(page) = h.shown else {
            unreachable!()
        };
        let mut all = page.attempts;
        let newest = all.split_off(7);
        all.truncate(2);
        h.shown = Shown::Ends { first: all, newest };
        let page = view(h, &Viewer::default(), None);
        let gap = page.gap.as_ref().expect("a gap");
        assert_eq!((gap.at, gap.from, gap.to), (2, 3, 7));
        assert_eq!(gap.link, format!("/keys/{}?after=2", "a".repeat(64)));
        assert_eq!(page.steps.len(), 5);
        assert_eq!(page.total, 10, "counted over the whole timeline");
    }

    #[test]
    fn the_provider_lookup_is_linked_only_where_a_provider_lookup_exists() {
        let undecided = || {
            history(
                record(Status::Unknown),
                vec![draft(AttemptKind::Claimed, 0)],
            )
        };
        let lookup = format!("/demo/provider/{}", "a".repeat(64));
        let with = view(undecided(), &Viewer::default(), Some(&lookup))
            .render()
            .unwrap();
        assert!(
            with.contains(&format!(
                "<a href=\"{lookup}\">Look this key up at the (demo) provider</a>"
            )),
            "{with}"
        );
        let without = view(undecided(), &Viewer::default(), None)
            .render()
            .unwrap();
        assert!(!without.contains("Look this key up"));
    }
}
