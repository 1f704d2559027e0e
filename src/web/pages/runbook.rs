//! `GET /runbook`: docs/RUNBOOK.md as this binary was built with it, so the alerts'
//! `runbook_url` (`<idemwatch_url>/runbook#<alert name, lower case>`) always matches the
//! version that is running; and `GET /docs/<NAME>.md`, the other docs it links to
//! (OPERATIONS.md and what that links to), so no link in the runbook leads nowhere.
//!
//! The Markdown is rendered by pulldown-cmark (CommonMark and tables: links, nested
//! lists, emphasis) once per document, on first use. Three changes on the way:
//! - headings get GitHub's anchors as ids, so `#idempotencyreplayspike` and the docs'
//!   own `FILE.md#section` links land where they do on a code host;
//! - a link to another served doc points at its route here (`OPERATIONS.md#x` →
//!   `/docs/OPERATIONS.md#x`, `RUNBOOK.md#x` → `/runbook#x`); a relative link to a file
//!   not served (`../grafana/README.md`) keeps its text and loses the link;
//! - raw HTML in the Markdown is shown as text, never passed through.

use super::Layout;
use crate::web::{AppState, Error, Viewer};
use askama::Template;
use axum::Router;
use axum::extract::{Path, Query};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use pulldown_cmark::{CowStr, Event, Options, Parser, Tag, TagEnd};
use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

/// The runbook's route.
const RUNBOOK_PATH: &str = "/runbook";

/// Every doc served, by file name. RUNBOOK.md is served at [`RUNBOOK_PATH`].
const DOCS: &[(&str, &str)] = &[
    ("RUNBOOK.md", include_str!("../../../docs/RUNBOOK.md")),
    (
        "ARCHITECTURE.md",
        include_str!("../../../docs/ARCHITECTURE.md"),
    ),
    ("AUTH.md", include_str!("../../../docs/AUTH.md")),
    ("CLIENTS.md", include_str!("../../../docs/CLIENTS.md")),
    ("DEMO.md", include_str!("../../../docs/DEMO.md")),
    ("EXPORT.md", include_str!("../../../docs/EXPORT.md")),
    ("GUARD.md", include_str!("../../../docs/GUARD.md")),
    ("METRICS.md", include_str!("../../../docs/METRICS.md")),
    ("OPERATIONS.md", include_str!("../../../docs/OPERATIONS.md")),
    (
        "PERFORMANCE.md",
        include_str!("../../../docs/PERFORMANCE.md"),
    ),
    ("SCHEMA.md", include_str!("../../../docs/SCHEMA.md")),
    ("TESTING.md", include_str!("../../../docs/TESTING.md")),
    ("UI.md", include_str!("../../../docs/UI.md")),
];

pub fn router() -> Router<AppState> {
    Router::new()
        .route(RUNBOOK_PATH, get(runbook))
        .route("/docs/{name}", get(doc))
}

/// GitHub's heading anchor: lower case, spaces as `-`, other punctuation dropped
/// (`## IdempotencyReplaySpike` → `idempotencyreplayspike`).
pub fn anchor(text: &str) -> String {
    text.chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

/// Where a link in a served doc goes: `None` drops the link (a relative path to a
/// file not served here); anything absolute or in-page is kept.
fn link_target(dest: &str) -> Option<String> {
    if dest.starts_with('#') || dest.contains("://") || dest.starts_with("mailto:") {
        return Some(dest.to_string());
    }
    let (file, fragment) = match dest.split_once('#') {
        Some((file, fragment)) => (file, format!("#{fragment}")),
        None => (dest, String::new()),
    };
    let name = file.strip_prefix("./").unwrap_or(file);
    match name {
        "RUNBOOK.md" => Some(format!("{RUNBOOK_PATH}{fragment}")),
        _ if DOCS.iter().any(|(n, _)| *n == name) => Some(format!("/docs/{name}{fragment}")),
        _ => None,
    }
}

/// A doc's Markdown as HTML (see the module comment for what changes on the way).
pub fn render(markdown: &str) -> String {
    let events: Vec<Event> = Parser::new_ext(markdown, Options::ENABLE_TABLES).collect();
    let mut out = Vec::with_capacity(events.len());
    let mut ids: HashSet<String> = HashSet::new();
    let mut dropped_links = 0usize;
    for (i, event) in events.iter().enumerate() {
        let event = match event {
            Event::Start(Tag::Heading {
                level,
                classes,
                attrs,
                ..
            }) => {
                let text: String = events[i + 1..]
                    .iter()
                    .take_while(|e| !matches!(e, Event::End(TagEnd::Heading(_))))
                    .filter_map(|e| match e {
                        Event::Text(t) | Event::Code(t) => Some(t.as_ref()),
                        _ => None,
                    })
                    .collect();
                // GitHub numbers repeated headings: `x`, `x-1`, `x-2`.
                let base = anchor(&text);
                let mut id = base.clone();
                let mut n = 0;
                while !ids.insert(id.clone()) {
                    n += 1;
                    id = format!("{base}-{n}");
                }
                Event::Start(Tag::Heading {
                    level: *level,
                    id: Some(CowStr::from(id)),
                    classes: classes.clone(),
                    attrs: attrs.clone(),
                })
            }
            Event::Start(Tag::Link {
                link_type,
                dest_url,
                title,
                id,
            }) => match link_target(dest_url) {
                Some(target) => Event::Start(Tag::Link {
                    link_type: *link_type,
                    dest_url: CowStr::from(target),
                    title: title.clone(),
                    id: id.clone(),
                }),
                None => {
                    dropped_links += 1;
                    continue;
                }
            },
            // Links do not nest: the next end of a link closes the one dropped.
            Event::End(TagEnd::Link) if dropped_links > 0 => {
                dropped_links -= 1;
                continue;
            }
            Event::Html(html) | Event::InlineHtml(html) => Event::Text(html.clone()),
            other => other.clone(),
        };
        out.push(event);
    }
    let mut html = String::with_capacity(markdown.len() * 3 / 2);
    pulldown_cmark::html::push_html(&mut html, out.into_iter());
    html
}

/// Every doc rendered, on first use.
static RENDERED: LazyLock<HashMap<&'static str, String>> =
    LazyLock::new(|| DOCS.iter().map(|(name, md)| (*name, render(md))).collect());

#[derive(Template)]
#[template(path = "runbook.html")]
struct DocPage {
    layout: Layout,
    /// Rendered from a doc built into the binary (see [`render`]), never from input.
    html: &'static str,
}

fn page(title: &str, name: &str, viewer: &Viewer) -> Result<Response, Error> {
    let html = RENDERED
        .get(name)
        .ok_or_else(|| Error::NotFound(format!("no document {name}")))?;
    let page = DocPage {
        layout: Layout::new(title, "runbook", viewer),
        html,
    };
    Ok(Html(page.render()?).into_response())
}

/// `?alert=<AlertName>`: the alert's section (`/runbook#<anchor>`), for links that know
/// an alert's name but cannot lower-case it (the dashboard's alert table).
#[derive(Debug, serde::Deserialize)]
struct RunbookQuery {
    alert: Option<String>,
}

async fn runbook(viewer: Viewer, Query(q): Query<RunbookQuery>) -> Result<Response, Error> {
    if let Some(alert) = q.alert {
        let id = anchor(&alert);
        let known = RENDERED["RUNBOOK.md"].contains(&format!(" id=\"{id}\""));
        let to = if known && !id.is_empty() {
            format!("{RUNBOOK_PATH}#{id}")
        } else {
            RUNBOOK_PATH.to_string()
        };
        return Ok(Redirect::to(&to).into_response());
    }
    page("Runbook", "RUNBOOK.md", &viewer)
}

async fn doc(viewer: Viewer, Path(name): Path<String>) -> Result<Response, Error> {
    if name == "RUNBOOK.md" {
        return Ok(Redirect::permanent(RUNBOOK_PATH).into_response());
    }
    page(name.trim_end_matches(".md"), &name, &viewer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_alert_section_has_the_anchor_its_runbook_url_names() {
        let html = render(DOCS[0].1);
        for alert in [
            "IdempotencyReplaySpike",
            "IdempotencySuspectedDuplicates",
            "IdemwatchDown",
        ] {
            let id = format!("<h2 id=\"{}\">", alert.to_lowercase());
            assert!(html.contains(&id), "{id}");
        }
    }

    #[test]
    fn headings_get_githubs_anchors() {
        let cases = [
            ("IdempotencyReplaySpike", "idempotencyreplayspike"),
            ("Resolving an UNKNOWN key", "resolving-an-unknown-key"),
            (
                "The database failed or failed over",
                "the-database-failed-or-failed-over",
            ),
        ];
        for (text, id) in cases {
            assert_eq!(anchor(text), id);
        }
        assert_eq!(
            render("## A `b`\n\n## A b\n"),
            "<h2 id=\"a-b\">A <code>b</code></h2>\n<h2 id=\"a-b-1\">A b</h2>\n"
        );
    }

    #[test]
    fn links_render_and_point_at_the_docs_served_here() {
        let html = render(
            "See [the key](#resolving-an-unknown-key), [ops](OPERATIONS.md#when-the-database-fails), \
             [back](RUNBOOK.md#idemwatchdown), [grafana](../grafana/README.md) and [site](https://example.com/x).",
        );
        assert!(
            html.contains(r##"<a href="#resolving-an-unknown-key">the key</a>"##),
            "{html}"
        );
        assert!(
            html.contains(r#"<a href="/docs/OPERATIONS.md#when-the-database-fails">ops</a>"#),
            "{html}"
        );
        assert!(
            html.contains(r#"<a href="/runbook#idemwatchdown">back</a>"#),
            "{html}"
        );
        assert!(
            html.contains(" grafana and "),
            "not served: text only: {html}"
        );
        assert!(
            html.contains(r#"<a href="https://example.com/x">site</a>"#),
            "{html}"
        );
    }

    #[test]
    fn a_nested_list_stays_a_list_and_raw_html_is_text() {
        let html =
            render("- **Failures**: one\n  - nested `x`\n- two\n\n<script>alert(1)</script>\n");
        assert!(
            html.contains(
                "<ul>\n<li><strong>Failures</strong>: one\n<ul>\n<li>nested <code>x</code></li>"
            ),
            "{html}"
        );
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("&lt;script&gt;"), "{html}");
    }

    #[test]
    fn every_relative_link_in_the_runbook_resolves_to_a_served_doc_or_an_anchor() {
        for (name, md) in DOCS {
            let html = &RENDERED[name];
            for href in html
                .split("href=\"")
                .skip(1)
                .filter_map(|h| h.split('"').next())
            {
                if href.starts_with("http") || href.starts_with("mailto:") {
                    continue;
                }
                let (path, fragment) = href.split_once('#').unwrap_or((href, ""));
                let target = match path {
                    "" => name,
                    RUNBOOK_PATH => "RUNBOOK.md",
                    p => p
                        .strip_prefix("/docs/")
                        .unwrap_or_else(|| panic!("{name}: {href}")),
                };
                let target_html = RENDERED
                    .get(target)
                    .unwrap_or_else(|| panic!("{name}: {href} not served"));
                if !fragment.is_empty() {
                    assert!(
                        target_html.contains(&format!(" id=\"{fragment}\"")),
                        "{name}: {href}: no such section in {target}"
                    );
                }
            }
            assert!(!md.is_empty());
        }
    }
}
