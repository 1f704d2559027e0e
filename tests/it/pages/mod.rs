//! The HTML pages and the JSON view, driven through `web::app(state)` with `oneshot`
//! on both backends: each page, each filter, each error case.

mod errors;
mod key_list;
mod key_moment;
mod key_page;
mod overview;
mod search;
mod static_files;

use crate::support::app::Page;

pub(super) fn card<'a>(body: &'a str, tool: &str) -> &'a str {
    body.split("<section class=\"card\"")
        .find(|c| c.contains(&format!(">{tool}</h2>")))
        .unwrap_or_else(|| panic!("no card for {tool}"))
}

pub(super) fn assert_no_internals(p: &Page) {
    for leak in [
        "panicked",
        "backtrace",
        "sqlx",
        "relation ",
        "syntax error",
        "PoolClosed",
        "src/",
    ] {
        assert!(!p.body.contains(leak), "page shows {leak:?}: {}", p.body);
    }
}
