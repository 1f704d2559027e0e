//! Suspected duplicates (docs/GUARD.md, 4a): the pairs the claim recorded, and a
//! resolver's review of one, written with its attempt row under the key's lock.

use super::{Store, StoreError, on_pool};
use crate::guard::IdempotencyKey;

use chrono::{DateTime, Utc};

/// One suspected pair: `key` was claimed while `other_key` (same tenant, tool,
/// business ref and fingerprint) was within the tool's window.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct SuspectedPair {
    pub key: String,
    pub other_key: String,
    pub tenant: String,
    pub tool: String,
    pub business_ref: Option<String>,
    pub detected_at: DateTime<Utc>,
    /// `open`, `intended` or `confirmed`.
    pub state: String,
    pub reviewed_by: Option<String>,
    pub reviewed_at: Option<DateTime<Utc>>,
    pub reason: Option<String>,
}

impl SuspectedPair {
    pub fn is_open(&self) -> bool {
        self.state == "open"
    }
}

macro_rules! pair_select {
    ($where:literal) => {
        concat!(
            "SELECT d.key, d.other_key, d.tenant, d.tool, r.business_ref, d.detected_at, d.state, \
             d.reviewed_by, d.reviewed_at, d.reason \
             FROM idempotency_suspected_duplicates d \
             JOIN idempotency_records r ON r.key = d.key ",
            $where
        )
    };
}

/// Both keys' pages: every pair a key is in, newest first.
pub(super) const PAIRS_OF_KEY: &str =
    pair_select!("WHERE d.key = $1 OR d.other_key = $1 ORDER BY d.detected_at DESC LIMIT 50");
/// `/duplicates`: open pairs, newest first (`idempotency_suspected_duplicates_state`),
/// of one tool when `$2` is not empty.
const OPEN_PAIRS: &str = pair_select!(
    "WHERE d.state = 'open' AND (COALESCE($2, '') = '' OR d.tool = $2) \
     ORDER BY d.detected_at DESC, d.key DESC LIMIT $1"
);
const PAIR: &str = pair_select!("WHERE d.key = $1");

/// The review: only an open pair with the other key the resolver saw.
pub(super) const REVIEW_PAIR: &str = "UPDATE idempotency_suspected_duplicates \
    SET state = $2, reviewed_by = $3, reviewed_at = $4, reason = $5 \
    WHERE key = $1 AND other_key = $6 AND state = 'open'";

impl Store {
    pub async fn suspected_pairs_of(
        &self,
        key: &IdempotencyKey,
    ) -> Result<Vec<SuspectedPair>, StoreError> {
        Ok(
            on_pool!(self, pool => sqlx::query_as(PAIRS_OF_KEY).bind(key.as_str()).fetch_all(pool).await)?,
        )
    }

    /// Open pairs, newest first; of `tool` only, if given.
    pub async fn open_suspected_pairs(
        &self,
        tool: Option<&str>,
        limit: i64,
    ) -> Result<Vec<SuspectedPair>, StoreError> {
        Ok(
            on_pool!(self, pool => sqlx::query_as(OPEN_PAIRS).bind(limit).bind(tool).fetch_all(pool).await)?,
        )
    }

    pub async fn suspected_pair(
        &self,
        key: &IdempotencyKey,
    ) -> Result<Option<SuspectedPair>, StoreError> {
        Ok(
            on_pool!(self, pool => sqlx::query_as(PAIR).bind(key.as_str()).fetch_optional(pool).await)?,
        )
    }
}
