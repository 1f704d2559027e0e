//! `GET /runbook`: docs/RUNBOOK.md as this binary was built with it, so the alerts'
//! `runbook_url` (`<idemwatch_url>/runbook#<alert name, lower case>`) always matches the
//! version that is running. The runbook's Markdown is a small subset (headings,
//! paragraphs, lists, tables, fenced code, `code` and **bold**); it is parsed once into
//! blocks that `templates/runbook.html` renders, so every piece of text is escaped.

use super::Layout;
use crate::web::{AppState, Error};
use askama::Template;
use axum::Router;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use std::sync::LazyLock;

const RUNBOOK: &str = include_str!("../../../docs/RUNBOOK.md");

pub fn router() -> Router<AppState> {
    Router::new().route("/runbook", get(page))
}

/// A run of inline text.
#[derive(Debug, Clone, PartialEq)]
pub enum Inline {
    Text(String),
    Code(String),
    Strong(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    /// `level` 1–3; `id` is GitHub's anchor: lower case, spaces as `-`, other
    /// punctuation dropped (`## IdempotencyReplaySpike` → `idempotencyreplayspike`).
    Heading {
        level: u8,
        id: String,
        text: String,
    },
    Paragraph(Vec<Inline>),
    List {
        ordered: bool,
        items: Vec<Vec<Inline>>,
    },
    Table {
        head: Vec<Vec<Inline>>,
        rows: Vec<Vec<Vec<Inline>>>,
    },
    Code(String),
}

/// GitHub's heading anchor.
pub fn anchor(text: &str) -> String {
    text.chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

/// `code` and **bold** spans; everything else is text.
pub fn inline(text: &str) -> Vec<Inline> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let code = rest.find('`');
        let strong = rest.find("**");
        let (at, marker) = match (code, strong) {
            (Some(c), Some(s)) if s < c => (s, "**"),
            (Some(c), _) => (c, "`"),
            (None, Some(s)) => (s, "**"),
            (None, None) => break,
        };
        let after = &rest[at + marker.len()..];
        let Some(end) = after.find(marker) else { break };
        if at > 0 {
            out.push(Inline::Text(rest[..at].to_string()));
        }
        let inner = after[..end].to_string();
        out.push(if marker == "`" {
            Inline::Code(inner)
        } else {
            Inline::Strong(inner)
        });
        rest = &after[end + marker.len()..];
    }
    if !rest.is_empty() {
        out.push(Inline::Text(rest.to_string()));
    }
    out
}

fn list_item(line: &str) -> Option<(bool, &str)> {
    if let Some(rest) = line.strip_prefix("- ") {
        return Some((false, rest));
    }
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    (digits > 0)
        .then(|| line[digits..].strip_prefix(". "))
        .flatten()
        .map(|rest| (true, rest))
}

fn cells(line: &str) -> Vec<Vec<Inline>> {
    line.trim()
        .trim_matches('|')
        .split('|')
        .map(|c| inline(c.trim()))
        .collect()
}

/// The runbook's Markdown as blocks.
pub fn parse(markdown: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut lines = markdown.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim().is_empty() {
            continue;
        }
        if line.starts_with("```") {
            let mut code = Vec::new();
            for l in lines.by_ref() {
                if l.starts_with("```") {
                    break;
                }
                code.push(l);
            }
            blocks.push(Block::Code(code.join("\n")));
        } else if let Some(level) = (1..=3u8).find(|n| {
            line.strip_prefix(&"#".repeat(*n as usize))
                .is_some_and(|r| r.starts_with(' '))
        }) {
            let text = line[level as usize + 1..].trim().to_string();
            blocks.push(Block::Heading {
                level,
                id: anchor(&text),
                text,
            });
        } else if line.starts_with('|') {
            let head = cells(line);
            let mut rows = Vec::new();
            while let Some(l) = lines.next_if(|l| l.starts_with('|')) {
                if !l.contains("---") {
                    rows.push(cells(l));
                }
            }
            blocks.push(Block::Table { head, rows });
        } else if let Some((ordered, first)) = list_item(line) {
            let mut items = vec![first.to_string()];
            while let Some(l) = lines.next_if(|l| !l.trim().is_empty() && !l.starts_with("```")) {
                match list_item(l) {
                    Some((_, item)) => items.push(item.to_string()),
                    None => {
                        let last = items.last_mut().expect("a list has an item");
                        last.push(' ');
                        last.push_str(l.trim());
                    }
                }
            }
            let items = items.iter().map(|i| inline(i)).collect();
            blocks.push(Block::List { ordered, items });
        } else {
            let mut text = line.trim().to_string();
            while let Some(l) = lines.next_if(|l| {
                !l.trim().is_empty()
                    && !l.starts_with('#')
                    && !l.starts_with("```")
                    && !l.starts_with('|')
                    && list_item(l).is_none()
            }) {
                text.push(' ');
                text.push_str(l.trim());
            }
            blocks.push(Block::Paragraph(inline(&text)));
        }
    }
    blocks
}

static BLOCKS: LazyLock<Vec<Block>> = LazyLock::new(|| parse(RUNBOOK));

#[derive(Template)]
#[template(path = "runbook.html")]
struct RunbookPage {
    layout: Layout,
    blocks: &'static [Block],
}

async fn page() -> Result<Response, Error> {
    let page = RunbookPage {
        layout: Layout::new("Runbook", "runbook"),
        blocks: &BLOCKS,
    };
    Ok(Html(page.render()?).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_alert_section_has_the_anchor_its_runbook_url_names() {
        let ids: Vec<String> = parse(RUNBOOK)
            .into_iter()
            .filter_map(|b| match b {
                Block::Heading { level: 2, id, .. } => Some(id),
                _ => None,
            })
            .collect();
        for alert in [
            "IdempotencyReplaySpike",
            "IdempotencySuspectedDuplicates",
            "IdemwatchDown",
        ] {
            assert!(ids.contains(&alert.to_lowercase()), "{alert}: {ids:?}");
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
    }

    #[test]
    fn inline_code_and_bold_are_spans_and_the_rest_is_text() {
        assert_eq!(
            inline("a `b` **c** d"),
            [
                Inline::Text("a ".into()),
                Inline::Code("b".into()),
                Inline::Text(" ".into()),
                Inline::Strong("c".into()),
                Inline::Text(" d".into()),
            ]
        );
        assert_eq!(inline("a `b"), [Inline::Text("a `b".into())]);
    }

    #[test]
    fn blocks_of_each_kind_are_recognised() {
        let blocks = parse(
            "# T\n\npara\nmore\n\n- one\n  cont\n- two\n\n1. a\n2. b\n\n| h | i |\n|---|---|\n| x | y |\n\n```sql\nSELECT 1\n```\n",
        );
        assert_eq!(blocks.len(), 6, "{blocks:#?}");
        assert_eq!(
            blocks[1],
            Block::Paragraph(vec![Inline::Text("para more".into())])
        );
        assert!(matches!(&blocks[2], Block::List { ordered: false, items } if items.len() == 2));
        assert!(matches!(&blocks[3], Block::List { ordered: true, .. }));
        assert!(matches!(&blocks[4], Block::Table { rows, .. } if rows.len() == 1));
        assert_eq!(blocks[5], Block::Code("SELECT 1".into()));
    }
}
