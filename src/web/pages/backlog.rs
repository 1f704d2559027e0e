//! `/backlog`: the keys nobody has decided: UNKNOWN, and IN_PROGRESS with a lease that
//! ran out. Oldest first, with the time left in the provider's key retention; keys
//! past it are highlighted, because only a person can resolve them.

use super::params::{Params, format_cursor, parse_cursor, parse_limit};
use super::{KeyRow, Layout};
use crate::metrics::port::{BacklogGroup, BacklogSource};
use crate::store::Cursor;
use crate::web::filters::{self, When, when};
use crate::web::links::link;
use crate::web::{AppState, Error, Viewer};
use askama::Template;
use axum::Router;
use axum::extract::{Query, State};
use axum::response::Html;
use axum::routing::get;
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

pub fn router() -> Router<AppState> {
    Router::new().route("/backlog", get(backlog))
}

struct ToolLine {
    tool: String,
    unknown: i64,
    expired_leases: i64,
    past_retention: i64,
    oldest: Option<When>,
    link: String,
    current: bool,
}

#[derive(Template)]
#[template(path = "backlog.html")]
struct BacklogPageView {
    layout: Layout,
    tool: String,
    tools: Vec<ToolLine>,
    unknown: i64,
    expired_leases: i64,
    past_retention: i64,
    rows: Vec<KeyRow>,
    next: Option<String>,
    first: Option<String>,
    /// Show the bulk resolve form and a checkbox per row.
    can_resolve: bool,
    /// The status filter, or empty. With one, "all keys matching this filter" is not
    /// offered: bulk resolve selects by tool only.
    status: String,
    /// How many keys "all keys matching this filter" stands for now.
    in_scope: i64,
    max_batch: i64,
}

/// What `/backlog?…` asks for.
struct BacklogQuery {
    tool: Option<String>,
    /// `?status=IN_PROGRESS`: the expired leases only (the Grafana panel's link);
    /// `UNKNOWN`: the unknown keys only.
    status: Option<String>,
    after: Option<Cursor>,
    limit: u32,
    /// `limit` as given, for the links.
    limit_text: Option<String>,
}

impl BacklogQuery {
    fn parse(p: &Params) -> Result<Self, Error> {
        let tool = p.text("tool")?;
        let after = p
            .get("after")
            .map(|v| parse_cursor("after", v))
            .transpose()?;
        let limit = parse_limit(p.get("limit"))?;
        let status = p.text("status")?;
        if let Some(s) = status.as_deref()
            && !matches!(s, "UNKNOWN" | "IN_PROGRESS")
        {
            return Err(Error::bad_request(
                "status",
                "expected UNKNOWN or IN_PROGRESS (expired leases)",
            ));
        }
        Ok(Self {
            tool,
            status,
            after,
            limit,
            limit_text: p.get("limit").map(str::to_string),
        })
    }
}

async fn backlog(
    State(state): State<AppState>,
    viewer: Viewer,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Result<Html<String>, Error> {
    let q = BacklogQuery::parse(&Params(pairs))?;
    let now = state.clock.now();
    let summary = BacklogGroup::per_tool(&state.store.backlog_by_tool(now).await?);
    let (tool, status) = (q.tool.as_deref(), q.status.as_deref());
    let page = state
        .store
        .backlog(tool, status, q.after.as_ref(), q.limit, now)
        .await?;
    let view = BacklogPageView::new(q, &summary, &page, &viewer, now);
    Ok(Html(view.render()?))
}

impl BacklogPageView {
    fn new(
        q: BacklogQuery,
        summary: &BTreeMap<String, BacklogGroup>,
        page: &crate::store::BacklogPage,
        viewer: &Viewer,
        now: DateTime<Utc>,
    ) -> Self {
        let BacklogQuery {
            tool,
            status,
            after,
            limit_text,
            ..
        } = q;
        let in_scope = |t: &str| tool.as_deref().is_none_or(|want| want == t);
        let scoped = summary.values().filter(|s| in_scope(&s.tool));
        let (mut unknown, mut expired_leases, mut past_retention) = (0, 0, 0);
        for s in scoped {
            unknown += s.unknown;
            expired_leases += s.expired_leases;
            past_retention += s.past_retention;
        }
        let base = [
            ("tool", tool.as_deref()),
            ("status", status.as_deref()),
            ("limit", limit_text.as_deref()),
        ];
        let next = page.next.as_ref().map(|c| {
            let cursor = format_cursor(c);
            let mut pairs = base.to_vec();
            pairs.push(("after", Some(cursor.as_str())));
            link("/backlog", &pairs)
        });
        Self {
            layout: Layout::new("Backlog", "backlog", viewer),
            tools: summary
                .values()
                .map(|s| ToolLine {
                    link: link("/backlog", &[("tool", Some(&s.tool))]),
                    current: tool.as_deref() == Some(s.tool.as_str()),
                    tool: s.tool.clone(),
                    unknown: s.unknown,
                    expired_leases: s.expired_leases,
                    past_retention: s.past_retention,
                    oldest: s.oldest_created_at.map(|t| when(t, now)),
                })
                .collect(),
            tool: tool.clone().unwrap_or_default(),
            unknown,
            expired_leases,
            past_retention,
            rows: page.keys.iter().map(|k| KeyRow::new(k, now)).collect(),
            next,
            first: after.as_ref().map(|_| link("/backlog", &base)),
            can_resolve: viewer.user.as_ref().is_some_and(|u| u.can_resolve),
            in_scope: match status.as_deref() {
                Some("UNKNOWN") => unknown,
                Some(_) => expired_leases,
                None => unknown + expired_leases,
            },
            status: status.unwrap_or_default(),
            max_batch: super::resolve_bulk::MAX_BATCH as i64,
        }
    }
}
