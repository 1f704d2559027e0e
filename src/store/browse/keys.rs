//! The `/keys` listing: one keyset page of the keys a [`KeyFilter`] selects, newest
//! activity first (`(updated_at DESC, key DESC)`), and a capped count when it is cheap.

use super::{Cursor, KeyFilter, KeySummary, far_future, page_of};
use crate::guard::Status;
use crate::store::{Store, StoreError, on_pool};

/// How many rows match, counted up to [`COUNT_CAP`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    Exact(i64),
    AtLeast(i64),
}

pub const COUNT_CAP: i64 = 1000;

#[derive(Debug, Clone, PartialEq)]
pub struct KeyPage {
    pub keys: Vec<KeySummary>,
    /// Present when there are older rows.
    pub next: Option<Cursor>,
    /// Present when counting was cheap (see [`KeyFilter::index`]).
    pub count: Option<Count>,
}

/// Sorts after every key (keys are lowercase hex) and before none.
pub(super) const KEY_AFTER_ALL: &str = "g";

/// Binds a listing's eighteen parameters in the order of `key_filters!`
/// ([`super::keys_sql`]). A macro, not a function: the query's type is the backend's.
macro_rules! bind_listing {
    ($q:expr, $f:expr, $range:expr, $cursor:expr, $limit:expr) => {{
        let activity = $f.activity_range();
        let window = $f.attempt_range();
        $q.bind(&$range.0)
            .bind(&$range.1)
            .bind(&$f.business_ref)
            .bind(&$f.workflow_id)
            .bind(&$f.intent_id)
            .bind(&$f.tenant)
            .bind(&$f.tool)
            .bind($f.status.map(Status::as_str))
            .bind(activity.0)
            .bind(activity.1)
            .bind($cursor.0)
            .bind($cursor.1.clone())
            .bind($limit)
            .bind(window.0)
            .bind(window.1)
            .bind($f.attempt_kinds_list())
            .bind($f.resolved_as_list())
            .bind(&$f.search)
    }};
}
pub(super) use bind_listing;

/// The keyset position of a first page: above every row.
pub(super) fn first_page() -> (chrono::DateTime<chrono::Utc>, String) {
    (far_future(), KEY_AFTER_ALL.to_string())
}

impl Store {
    /// One page of keys matching `filter`, newest activity first, after `after`.
    #[tracing::instrument(skip_all, fields(index = ?filter.index()))]
    pub async fn list_keys(
        &self,
        filter: &KeyFilter,
        after: Option<&Cursor>,
        limit: u32,
    ) -> Result<KeyPage, StoreError> {
        let sql = filter.statements().list.on(self);
        let range = filter.key_range();
        let cursor = after.map_or_else(first_page, |c| (c.at, c.key.clone()));
        // One row more than asked tells whether there is a next page.
        let fetch = i64::from(limit) + 1;
        let rows: Vec<KeySummary> = on_pool!(self, pool => {
            bind_listing!(
                sqlx::query_as(sql).persistent(filter.plan_is_reusable()),
                filter,
                range,
                cursor,
                fetch
            )
            .fetch_all(pool)
            .await
        })?;
        let (keys, next) = page_of(rows, limit, |k| k.updated_at);
        let count = if filter.count_is_cheap() {
            Some(self.count_keys(filter).await?)
        } else {
            None
        };
        Ok(KeyPage { keys, next, count })
    }

    async fn count_keys(&self, filter: &KeyFilter) -> Result<Count, StoreError> {
        let sql = filter.statements().count.on(self);
        let range = filter.key_range();
        let cursor = first_page();
        let cap = COUNT_CAP + 1;
        let n: i64 = on_pool!(self, pool => {
            bind_listing!(
                sqlx::query_scalar(sql).persistent(filter.plan_is_reusable()),
                filter,
                range,
                cursor,
                cap
            )
            .fetch_one(pool)
            .await
        })?;
        Ok(if n > COUNT_CAP {
            Count::AtLeast(COUNT_CAP)
        } else {
            Count::Exact(n)
        })
    }
}
