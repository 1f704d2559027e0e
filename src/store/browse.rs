//! What the UI reads: key listings, the backlog, the overview's counts. Read-only.
//!
//! One module per page family: [`keys`] (the `/keys` listing, its filter in
//! [`key_filter`] and its statements in [`keys_sql`]), [`backlog`] (`/backlog` and
//! the per-tool summary the overview shares), [`overview`] (attempt buckets) and
//! [`key_detail`] (the other keys of one business ref). Every listing row is a
//! [`KeySummary`], whose columns are written once ([`summary`]).
//!
//! Every statement here is served by an index (the test `every_page_query_uses_an_index`
//! checks the plans on both backends; [`explain`]). Listings page with a keyset, never
//! OFFSET. Where the backends must spell a statement differently, its text is chosen
//! per backend ([`Sql::on`]) and then run once, through [`on_pool!`](super::on_pool).

mod backlog;
mod explain;
mod key_detail;
mod key_filter;
mod keys;
mod keys_sql;
mod overview;
mod summary;

pub use backlog::BacklogPage;
pub(super) use key_detail::SAME_BUSINESS_REF;
pub use key_filter::{KeyFilter, ResolvedAs};
pub use keys::{Count, KeyPage};
pub use overview::{AttemptBucket, BUCKET_SECONDS};
pub use summary::KeySummary;

use super::{Backend, Store};
use chrono::{DateTime, Utc};

/// Where the next page of a listing starts: after this row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub at: DateTime<Utc>,
    pub key: String,
}

/// One statement's text on each backend, where the two must be spelled differently
/// (statements that are one text for both are plain `&'static str`).
#[derive(Debug, Clone, Copy)]
struct Sql {
    postgres: &'static str,
    sqlite: &'static str,
}

impl Sql {
    /// The text for the backend `store` runs on.
    fn on(&self, store: &Store) -> &'static str {
        match store.backend() {
            Backend::Postgres => self.postgres,
            Backend::Sqlite => self.sqlite,
        }
    }
}

/// A listing fetched one row beyond `limit`: the rows to show, and where the next page
/// starts if that extra row came (after the last row shown, at its `at` time).
fn page_of(
    mut keys: Vec<KeySummary>,
    limit: u32,
    at: fn(&KeySummary) -> DateTime<Utc>,
) -> (Vec<KeySummary>, Option<Cursor>) {
    if keys.len() <= limit as usize {
        return (keys, None);
    }
    keys.truncate(limit as usize);
    let next = keys.last().map(|k| Cursor {
        at: at(k),
        key: k.key.to_string(),
    });
    (keys, next)
}

/// Below every stored time / above every stored time: the bounds of an absent range.
/// Both backends store and compare these (SQLite as RFC 3339 text, which sorts).
fn far_past() -> DateTime<Utc> {
    DateTime::from_timestamp(-62_135_596_800, 0).unwrap_or(DateTime::<Utc>::MIN_UTC)
}
fn far_future() -> DateTime<Utc> {
    DateTime::from_timestamp(253_402_300_799, 0).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sentinels_sort_outside_every_stored_time() {
        assert_eq!(
            crate::base::time::rfc3339(far_past()),
            "0001-01-01T00:00:00.000000Z"
        );
        assert_eq!(
            crate::base::time::rfc3339(far_future()),
            "9999-12-31T23:59:59.000000Z"
        );
    }
}
