//! `/keys`: the keys matching the filters in the query string, newest activity first,
//! one keyset page at a time. A Grafana data link
//! `/keys?tool=issue_refund&from=…&to=…` opens exactly that list; with
//! `outcome=conflict` (or `attempt_kind=escalated`) only the keys where that happened
//! within the window; with `entered=UNKNOWN` the keys that entered the status within the
//! window, as `idempotency_transitions_total{status}` counts them, and with
//! `resolution=release` the keys resolved so ([`super::counted`]).

use super::counted::{attempts_entering, attempts_resolving};
use super::params::{
    self, Params, parse_attempt_kinds, parse_cursor, parse_entered, parse_key_prefix, parse_limit,
    parse_outcomes, parse_resolutions, parse_status,
};
use super::{KeyRow, Layout};
use crate::guard::{AttemptKind, Resolution, Status};
use crate::store::{Count, Cursor, KeyFilter, KeyPage as StoreKeyPage, ResolvedAs};
use crate::web::filters::{thousands_sep, utc};
use crate::web::links::link;
use crate::web::{AppState, Error, Viewer};
use askama::Template;
use axum::Router;
use axum::extract::{Query, State};
use axum::response::Html;
use axum::routing::get;
use chrono::{DateTime, Utc};

pub fn router() -> Router<AppState> {
    Router::new().route("/keys", get(keys))
}

/// The filter parameters, in the order the form shows them. Public contract.
pub const FILTERS: [(&str, &str); 14] = [
    ("q", "Order, ticket or provider id"),
    ("business_ref", "Business ref"),
    ("key", "Key or prefix"),
    ("tool", "Tool"),
    ("status", "Status"),
    ("tenant", "Tenant"),
    ("intent_id", "Intent id"),
    ("workflow_id", "Workflow id"),
    ("attempt_kind", "Attempt kind"),
    ("outcome", "Admission outcome"),
    ("entered", "Entered status"),
    ("resolution", "Resolution"),
    ("from", "Active from"),
    ("to", "Active before"),
];

/// Reads and checks every filter; the first bad one answers 400.
pub fn read_filter(p: &Params, now: DateTime<Utc>) -> Result<KeyFilter, Error> {
    let (attempt_kinds, resolved_as) = read_attempts(p)?;
    let filter = KeyFilter {
        search: p.text("q")?,
        key_prefix: p
            .get("key")
            .map(|v| parse_key_prefix("key", v))
            .transpose()?,
        business_ref: p.text("business_ref")?,
        workflow_id: p.text("workflow_id")?,
        intent_id: p.text("intent_id")?,
        tenant: p.text("tenant")?,
        tool: p.text("tool")?,
        status: p.get("status").map(parse_status).transpose()?,
        from: p.time("from", now)?,
        to: p.time("to", now)?,
        attempt_kinds,
        resolved_as,
    };
    if let (Some(from), Some(to)) = (filter.from, filter.to)
        && to <= from
    {
        return Err(Error::bad_request(
            "to",
            format!("must be later than from ({}); got {}", utc(from), utc(to)),
        ));
    }
    Ok(filter)
}

/// The statuses `entered` names; empty without it.
fn read_entered(p: &Params) -> Result<Vec<Status>, Error> {
    Ok(p.get("entered")
        .map(parse_entered)
        .transpose()?
        .unwrap_or_default())
}

/// The resolutions `resolution` names; empty without it.
fn read_resolutions(p: &Params) -> Result<Vec<Resolution>, Error> {
    Ok(p.get("resolution")
        .map(parse_resolutions)
        .transpose()?
        .unwrap_or_default())
}

/// The attempts asked for by `attempt_kind`, `outcome`, `entered` and `resolution`: the
/// attempts each selects, and those all of them select together. `entered` and
/// `resolution` also say which `resolved` attempts count (by what they decided).
/// Filters that cannot meet (`attempt_kind=escalated&outcome=replay`,
/// `outcome=replay&entered=DONE`, `entered=UNKNOWN&resolution=done`) are a 400 rather
/// than an empty list that looks like "nothing happened".
fn read_attempts(p: &Params) -> Result<(Vec<AttemptKind>, Option<Vec<ResolvedAs>>), Error> {
    let mut kinds = read_attempt_kinds(p)?;
    let mut resolved_as: Option<Vec<ResolvedAs>> = None;
    let entered = read_entered(p)?;
    let resolutions = read_resolutions(p)?;
    let series = [
        (
            "entered",
            (!entered.is_empty()).then(|| attempts_entering(&entered)),
            "no attempt kind given in attempt_kind or outcome enters these statuses; \
             give entered alone, or kinds that enter them",
        ),
        (
            "resolution",
            (!resolutions.is_empty()).then(|| attempts_resolving(&resolutions)),
            "no attempt that attempt_kind, outcome or entered selects records these \
             resolutions; give resolution alone, or filters that include them",
        ),
    ];
    for (name, counted, cannot_meet) in series {
        let Some((counted_kinds, counted_resolved)) = counted else {
            continue;
        };
        let resolved: Vec<ResolvedAs> = match resolved_as.take() {
            Some(before) => before
                .into_iter()
                .filter(|r| counted_resolved.contains(r))
                .collect(),
            None => counted_resolved,
        };
        let mut both: Vec<AttemptKind> = if kinds.is_empty() {
            counted_kinds
        } else {
            kinds
                .into_iter()
                .filter(|k| counted_kinds.contains(k))
                .collect()
        };
        if resolved.is_empty() {
            both.retain(|k| *k != AttemptKind::Resolved);
        }
        if both.is_empty() {
            return Err(Error::bad_request(name, cannot_meet));
        }
        kinds = both;
        resolved_as = Some(resolved);
    }
    Ok((kinds, resolved_as))
}

/// The attempt kinds asked for by `attempt_kind` and `outcome`: either alone, or the
/// kinds both name.
fn read_attempt_kinds(p: &Params) -> Result<Vec<AttemptKind>, Error> {
    let kinds = p.get("attempt_kind").map(parse_attempt_kinds).transpose()?;
    let of_outcomes = p.get("outcome").map(parse_outcomes).transpose()?;
    Ok(match (kinds, of_outcomes) {
        (Some(kinds), Some(of_outcomes)) => {
            let both: Vec<AttemptKind> = kinds
                .into_iter()
                .filter(|k| of_outcomes.contains(k))
                .collect();
            if both.is_empty() {
                return Err(Error::bad_request(
                    "outcome",
                    "no attempt kind given in attempt_kind records these outcomes; \
                     give one of the two filters, or kinds that record the outcomes",
                ));
            }
            both
        }
        (Some(kinds), None) => kinds,
        (None, Some(kinds)) => kinds,
        (None, None) => Vec::new(),
    })
}

/// One filter input as the form shows it.
struct Field {
    name: &'static str,
    label: &'static str,
    value: String,
    hint: &'static str,
}

/// An active filter, with the link that drops it.
struct Chip {
    label: &'static str,
    value: String,
    remove: String,
}

#[derive(Template)]
#[template(path = "keys.html")]
struct KeysPage {
    layout: Layout,
    /// The search box support staff use: first, open.
    search: Field,
    /// Every other filter, folded unless one is set.
    fields: Vec<Field>,
    advanced_open: bool,
    /// (value, selected)
    statuses: Vec<(&'static str, bool)>,
    chips: Vec<Chip>,
    range: Option<String>,
    count: Option<String>,
    rows: Vec<KeyRow>,
    next: Option<String>,
    first: Option<String>,
    /// When nothing matched: a link trying the value the other way round.
    other_way: Option<(String, String)>,
}

fn hint(name: &str) -> &'static str {
    match name {
        "q" => {
            "an order (A-28261 or just 28261), a ticket (ticket-1934), the provider's id (rf_002202)"
        }
        "business_ref" => "order:A-88214, or just A-88214",
        "key" => "at least 4 hex characters",
        "attempt_kind" => "payload_mismatch, escalated, taken_over… (comma-separated)",
        "outcome" => "new, replay, replay_failure, conflict, in_flight, takeover",
        "entered" => "DONE, FAILED, UNKNOWN (comma-separated)",
        "resolution" => "done, failed, release (comma-separated)",
        "from" | "to" => "RFC 3339, 2026-11-29, now-1h or epoch ms",
        _ => "",
    }
}

async fn keys(
    State(state): State<AppState>,
    viewer: Viewer,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Result<Html<String>, Error> {
    let p = Params(pairs);
    let now = state.clock.now();
    let filter = read_filter(&p, now)?;
    let after = p
        .get("after")
        .map(|v| parse_cursor("after", v))
        .transpose()?;
    let limit = parse_limit(p.get("limit"))?;
    let page = state
        .store
        .list_keys(&filter, after.as_ref(), limit)
        .await?;
    let view = KeysPage::new(&p, &filter, after.as_ref(), &page, &viewer, now)?;
    Ok(Html(view.render()?))
}

impl KeysPage {
    /// The list `page` read for `filter` (from `p`, the query as given), after `after`.
    fn new(
        p: &Params,
        filter: &KeyFilter,
        after: Option<&Cursor>,
        page: &StoreKeyPage,
        viewer: &Viewer,
        now: DateTime<Utc>,
    ) -> Result<Self, Error> {
        // The filters as typed (`now-1h` stays relative in links), plus a non-default limit.
        let raw: Vec<(&str, Option<&str>)> = FILTERS
            .iter()
            .map(|(name, _)| (*name, p.get(name)))
            .chain([("limit", p.get("limit"))])
            .collect();
        let chips = FILTERS
            .iter()
            .filter_map(|(name, label)| {
                let value = p.get(name)?;
                let rest: Vec<_> = raw.iter().copied().filter(|(n, _)| n != name).collect();
                Some(Chip {
                    label,
                    value: value.to_string(),
                    remove: link("/keys", &rest),
                })
            })
            .collect();
        let next = page.next.as_ref().map(|c| {
            let cursor = params::format_cursor(c);
            let mut pairs = raw.clone();
            pairs.push(("after", Some(cursor.as_str())));
            link("/keys", &pairs)
        });
        let first = after.map(|_| link("/keys", &raw));
        let range = describe_range(filter, &read_entered(p)?, &read_resolutions(p)?);
        let count = page.count.map(|c| match c {
            Count::Exact(1) => "1 key".to_string(),
            Count::Exact(n) => format!("{} keys", thousands_sep(n)),
            Count::AtLeast(n) => format!("More than {} keys", thousands_sep(n)),
        });
        let other_way = if page.keys.is_empty() && after.is_none() {
            other_way(filter)
        } else {
            None
        };
        let field = |(name, label): &(&'static str, &'static str)| Field {
            name,
            label,
            value: p.get(name).unwrap_or_default().to_string(),
            hint: hint(name),
        };
        // The common search first; the engineer's filters (Grafana links fill them) folded.
        let fields: Vec<Field> = FILTERS
            .iter()
            .filter(|(name, _)| !matches!(*name, "status" | "q"))
            .map(field)
            .collect();
        let advanced_open = fields.iter().any(|f| !f.value.is_empty());
        let search = filter
            .search
            .clone()
            .or_else(|| filter.business_ref.clone())
            .or_else(|| filter.key_prefix.clone())
            .unwrap_or_default();
        Ok(KeysPage {
            layout: Layout::new("Keys", "keys", viewer).with_query(search),
            search: field(&FILTERS[0]),
            fields,
            advanced_open,
            statuses: Status::ALL
                .iter()
                .map(|s| (s.as_str(), filter.status == Some(*s)))
                .collect(),
            chips,
            range,
            count,
            rows: page.keys.iter().map(|k| KeyRow::new(k, now)).collect(),
            next,
            first,
            other_way,
        })
    }
}

/// What the list selects on: last activity, an attempt of some kinds, a transition into
/// one of `entered` or a resolution of `resolutions`, in a window.
fn describe_range(
    filter: &KeyFilter,
    entered: &[Status],
    resolutions: &[Resolution],
) -> Option<String> {
    let window = match (filter.from, filter.to) {
        (None, None) => None,
        (Some(f), None) => Some(format!("at or after {}", utc(f))),
        (None, Some(t)) => Some(format!("before {}", utc(t))),
        (Some(f), Some(t)) => Some(format!("from {} to before {}", utc(f), utc(t))),
    };
    if filter.attempt_kinds.is_empty() {
        return window.map(|w| format!("last activity {w}"));
    }
    let or = |names: Vec<&str>| names.join(" or ");
    let kinds = or(filter.attempt_kinds.iter().map(|k| k.as_str()).collect());
    let entered = or(entered.iter().map(|s| s.as_str()).collect());
    let resolutions = or(resolutions.iter().map(|r| r.as_str()).collect());
    let what = match (entered.is_empty(), resolutions.is_empty()) {
        (true, true) => format!("an attempt of kind {kinds}"),
        (false, true) => format!("a transition into {entered}"),
        (true, false) => format!("a resolution {resolutions}"),
        (false, false) => format!("a transition into {entered} by a resolution {resolutions}"),
    };
    Some(match window {
        Some(w) => format!("{what} {w}"),
        None => what,
    })
}

/// A search for `88214` may have meant a key prefix or an order id: offer the other.
fn other_way(filter: &KeyFilter) -> Option<(String, String)> {
    let hexish = |v: &str| (4..=64).contains(&v.len()) && v.bytes().all(|b| b.is_ascii_hexdigit());
    if let Some(r) = filter.search.as_ref().or(filter.business_ref.as_ref())
        && hexish(r)
    {
        let lower = r.to_ascii_lowercase();
        return Some((
            format!("keys starting with {lower}"),
            link("/keys", &[("key", Some(&lower))]),
        ));
    }
    if let Some(k) = &filter.key_prefix {
        return Some((
            format!("an order or another id {k}"),
            link("/keys", &[("q", Some(k))]),
        ));
    }
    None
}
