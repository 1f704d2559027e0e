//! The key page's reads beyond the key itself: the other keys of its business ref.

use super::KeySummary;
use super::summary::summary_columns;
use crate::store::{Store, StoreError, on_pool};

/// Other keys with the same business ref, newest first (idempotency_records_business_ref).
pub(in crate::store) const SAME_BUSINESS_REF: &str = concat!(
    "SELECT ",
    summary_columns!(),
    " FROM idempotency_records WHERE business_ref = $1 ORDER BY created_at DESC, key DESC LIMIT $2"
);

impl Store {
    /// Keys whose business ref is exactly `business_ref`, newest first.
    pub(crate) async fn keys_with_business_ref(
        &self,
        business_ref: &str,
        limit: u32,
    ) -> Result<Vec<KeySummary>, StoreError> {
        Ok(on_pool!(self, pool => {
            sqlx::query_as(SAME_BUSINESS_REF)
                .bind(business_ref)
                .bind(i64::from(limit))
                .fetch_all(pool)
                .await
        })?)
    }
}
