//! `/`: per tool, the replay ratio, conflicts, the UNKNOWN backlog, the oldest UNKNOWN,
//! past-retention keys and expired leases, for the last hour and the last day, counted
//! from the database (it works without Prometheus). Each figure links to its keys.

use super::Layout;
use super::chart::{Chart, Point, replay_chart, replay_spike};
use crate::guard::AttemptKind;
use crate::metrics::port::{BacklogGroup, BacklogSource};
use crate::store::{AttemptBucket, BUCKET_SECONDS};
use crate::web::filters::{self, When, percent, when};
use crate::web::links::link;
use crate::web::{AppState, Error, Viewer};
use askama::Template;
use axum::Router;
use axum::extract::State;
use axum::response::Html;
use axum::routing::get;
use chrono::{DateTime, TimeDelta, Utc};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::Mutex;

pub fn router() -> Router<AppState> {
    Router::new().route("/", get(overview))
}

/// Admissions and what became of them in one window (what counts as what:
/// [`Point::add`]), and the takeovers and escalations among them.
#[derive(Debug, Clone, Default)]
struct WindowTraffic {
    requests: i64,
    replays: i64,
    conflicts: i64,
    takeovers: i64,
    escalations: i64,
}

impl WindowTraffic {
    fn add(&mut self, kind: AttemptKind, n: i64) {
        let mut counted = Point::default();
        counted.add(kind, n);
        self.requests += counted.requests;
        self.replays += counted.replays;
        self.conflicts += counted.conflicts;
        match kind {
            AttemptKind::TakenOver => self.takeovers += n,
            AttemptKind::Escalated => self.escalations += n,
            _ => {}
        }
    }

    fn merge(&mut self, o: &WindowTraffic) {
        self.requests += o.requests;
        self.replays += o.replays;
        self.conflicts += o.conflicts;
        self.takeovers += o.takeovers;
        self.escalations += o.escalations;
    }

    fn ratio(&self) -> String {
        percent(self.replays, self.requests)
    }

    /// Replays at the share and count the replay alert pages on.
    fn spiking(&self) -> bool {
        replay_spike(self.replays, self.requests)
    }
}

struct ToolCard {
    tool: String,
    /// For element ids.
    n: usize,
    hour: WindowTraffic,
    day: WindowTraffic,
    unknown: i64,
    expired_leases: i64,
    past_retention: i64,
    oldest_unknown: Option<When>,
    /// The last hour at the same 5-minute resolution, wide enough that minutes of
    /// incident are not a hairline (issue 50); then the whole day.
    hour_chart: Chart,
    chart: Chart,
    keys_hour: String,
    keys_day: String,
    /// The keys behind each count, as `/keys?tool=…&outcome=…&from=…` lists them.
    replay_keys: Drill,
    conflict_keys: Drill,
    takeover_keys: Drill,
    escalation_keys: Drill,
    backlog: String,
    expired: String,
}

/// A tool whose replays spike now, as the page's first line says it.
struct Spiking {
    tool: String,
    ratio: String,
    replays: i64,
    requests: i64,
    keys: String,
}

/// The keys where something happened to a tool in the last hour and the last day.
struct Drill {
    hour: String,
    day: String,
}

impl Drill {
    /// `filter` is `outcome` or `attempt_kind`, `value` what it selects.
    fn new(tool: &str, filter: &str, value: &str) -> Drill {
        let within = |from| {
            link(
                "/keys",
                &[
                    ("tool", Some(tool)),
                    (filter, Some(value)),
                    ("from", Some(from)),
                ],
            )
        };
        Drill {
            hour: within("now-1h"),
            day: within("now-1d"),
        }
    }
}

#[derive(Template)]
#[template(path = "overview.html")]
struct OverviewPage {
    layout: Layout,
    cards: Vec<ToolCard>,
    hour: WindowTraffic,
    day: WindowTraffic,
    unknown: i64,
    expired_leases: i64,
    past_retention: i64,
    chart_start: When,
    hour_start: When,
    /// The tools whose replays spike in the last hour: what the page leads with.
    spiking: Vec<Spiking>,
    /// When the figures were counted.
    counted: When,
}

/// How long one computation of the overview is reused.
pub const OVERVIEW_TTL: TimeDelta = TimeDelta::seconds(30);

/// The overview's counts, reused for [`OVERVIEW_TTL`]. After a busy day they take a scan
/// of about a million index entries (0.4 s at 900,000 attempts on PostgreSQL), and
/// dashboards refresh while several people look: one computation serves them all, and
/// concurrent requests wait for it instead of each starting their own.
#[derive(Debug, Clone, Default)]
pub struct OverviewCache(Arc<Mutex<Option<OverviewCounts>>>);

#[derive(Debug, Clone)]
pub struct OverviewCounts {
    at: DateTime<Utc>,
    rows: Vec<AttemptBucket>,
    backlog: Vec<BacklogGroup>,
}

impl OverviewCache {
    async fn get(&self, state: &AppState) -> Result<OverviewCounts, Error> {
        let mut slot = self.0.lock().await;
        let now = state.clock.now();
        if let Some(s) = slot
            .as_ref()
            .filter(|s| s.at <= now && now - s.at < OVERVIEW_TTL)
        {
            return Ok(s.clone());
        }
        let rows = state
            .store
            .attempt_buckets(now - TimeDelta::days(1), now - TimeDelta::hours(1))
            .await?;
        let backlog = state.store.backlog_by_tool(now).await?;
        let fresh = OverviewCounts {
            at: now,
            rows,
            backlog,
        };
        *slot = Some(fresh.clone());
        Ok(fresh)
    }
}

async fn overview(State(state): State<AppState>, viewer: Viewer) -> Result<Html<String>, Error> {
    let snapshot = state.overview.get(&state).await?;
    let page = OverviewPage::new(snapshot, &viewer, state.clock.now());
    Ok(Html(page.render()?))
}

impl OverviewPage {
    /// The page of `snapshot`'s counts (taken at its own time), shown at `shown_at`.
    fn new(snapshot: OverviewCounts, viewer: &Viewer, shown_at: DateTime<Utc>) -> Self {
        let OverviewCounts {
            at: now,
            rows,
            backlog,
        } = snapshot;
        let day_ago = now - TimeDelta::days(1);

        let first = day_ago.timestamp().div_euclid(BUCKET_SECONDS);
        let buckets = (now.timestamp().div_euclid(BUCKET_SECONDS) - first + 1) as usize;
        let chart_start = DateTime::from_timestamp(first * BUCKET_SECONDS, 0).unwrap_or(day_ago);
        // The last hour's buckets: the current one and the 11 before it.
        let hour_buckets = (3600 / BUCKET_SECONDS) as usize;
        let hour_first = buckets.saturating_sub(hour_buckets);
        let hour_start = chart_start + TimeDelta::seconds(hour_first as i64 * BUCKET_SECONDS);

        let mut traffic: BTreeMap<String, (WindowTraffic, WindowTraffic, Vec<Point>)> =
            BTreeMap::new();
        for r in &rows {
            // A kind this version does not know (a newer writer) is left out, not fatal.
            let Ok(kind) = r.kind.parse::<AttemptKind>() else {
                continue;
            };
            let (hour, day, series) = traffic.entry(r.tool.clone()).or_insert_with(|| {
                (
                    WindowTraffic::default(),
                    WindowTraffic::default(),
                    vec![Point::default(); buckets],
                )
            });
            hour.add(kind, r.n_recent);
            day.add(kind, r.n);
            let Some(point) = usize::try_from(r.bucket - first)
                .ok()
                .and_then(|i| series.get_mut(i))
            else {
                continue;
            };
            point.add(kind, r.n);
        }
        let mut backlog = BacklogGroup::per_tool(&backlog);
        let mut tools: Vec<String> = traffic.keys().chain(backlog.keys()).cloned().collect();
        tools.sort();
        tools.dedup();

        let mut page = OverviewPage {
            layout: Layout::new("Overview", "overview", viewer),
            cards: Vec::new(),
            hour: WindowTraffic::default(),
            day: WindowTraffic::default(),
            unknown: 0,
            expired_leases: 0,
            past_retention: 0,
            chart_start: when(chart_start, now),
            hour_start: when(hour_start, now),
            spiking: Vec::new(),
            counted: when(now, shown_at),
        };
        for (n, tool) in tools.into_iter().enumerate() {
            let (hour, day, series) = traffic.get(&tool).cloned().unwrap_or_else(|| {
                (
                    WindowTraffic::default(),
                    WindowTraffic::default(),
                    vec![Point::default(); buckets],
                )
            });
            let b = backlog.remove(&tool).unwrap_or_default();
            page.hour.merge(&hour);
            page.day.merge(&day);
            page.unknown += b.unknown;
            page.expired_leases += b.expired_leases;
            page.past_retention += b.past_retention;
            let replay_keys = Drill::new(&tool, "outcome", "replay,replay_failure");
            if hour.spiking() {
                page.spiking.push(Spiking {
                    tool: tool.clone(),
                    ratio: hour.ratio(),
                    replays: hour.replays,
                    requests: hour.requests,
                    keys: replay_keys.hour.clone(),
                });
            }
            page.cards.push(ToolCard {
                n,
                hour_chart: replay_chart(&series[hour_first..], hour_start, BUCKET_SECONDS),
                chart: replay_chart(&series, chart_start, BUCKET_SECONDS),
                hour,
                day,
                unknown: b.unknown,
                expired_leases: b.expired_leases,
                past_retention: b.past_retention,
                oldest_unknown: b.oldest_unknown_created_at.map(|t| when(t, now)),
                keys_hour: link("/keys", &[("tool", Some(&tool)), ("from", Some("now-1h"))]),
                keys_day: link("/keys", &[("tool", Some(&tool)), ("from", Some("now-1d"))]),
                replay_keys,
                conflict_keys: Drill::new(&tool, "outcome", "conflict"),
                takeover_keys: Drill::new(&tool, "outcome", "takeover"),
                escalation_keys: Drill::new(&tool, "attempt_kind", "escalated"),
                backlog: link("/backlog", &[("tool", Some(&tool))]),
                expired: link(
                    "/keys",
                    &[("tool", Some(&tool)), ("status", Some("IN_PROGRESS"))],
                ),
                tool,
            });
        }
        // What is wrong now first: tools whose replays spike, then those with keys past
        // retention, then the rest, each group by name.
        page.cards
            .sort_by_key(|c| (!c.hour.spiking(), c.past_retention == 0));
        page
    }
}
