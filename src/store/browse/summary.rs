//! One row of a listing: a record without its JSON payloads. Its columns are written
//! once ([`summary_columns!`]) and decoded straight into [`KeySummary`].

use crate::guard::{FencingToken, IdempotencyKey, Intent, Status, UnknownName};
use chrono::{DateTime, Utc};
use serde::Serialize;

/// The columns of a listing row, in [`KeySummary`]'s order.
macro_rules! summary_columns {
    () => {
        "key, tenant, tool, workflow_id, step_id, intent_id, business_ref, status, \
         fencing_token, lease_until, attempt_count, provider_retention_until, resend_safe_until, \
         created_at, updated_at"
    };
}
pub(super) use summary_columns;

/// One row of a listing. Whether its lease ran out or a resend is still safe is read
/// the way the guard reads a [`Record`](crate::guard::Record)'s
/// ([`LeaseState::of`](crate::guard::LeaseState::of),
/// [`resend_safe`](crate::guard::resend_safe)).
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct KeySummary {
    /// A stored key that is not one makes the row corrupt, as a bad status does.
    #[sqlx(try_from = "String")]
    pub key: IdempotencyKey,
    /// Flattened both ways: decoded from its five columns by name, serialised as
    /// top-level members.
    #[sqlx(flatten)]
    #[serde(flatten)]
    pub intent: Intent,
    pub business_ref: Option<String>,
    /// A stored status this version cannot read makes the row corrupt
    /// (`StoreError::Corrupt`, naming the column and the value).
    #[sqlx(try_from = "String")]
    pub status: Status,
    #[sqlx(try_from = "i64")]
    pub fencing_token: FencingToken,
    pub lease_until: DateTime<Utc>,
    pub attempt_count: i64,
    pub provider_retention_until: DateTime<Utc>,
    pub resend_safe_until: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Lets the row decode its status column as text and then read it: the stored form
/// is the vocabulary's string form.
impl TryFrom<String> for Status {
    type Error = UnknownName;
    fn try_from(text: String) -> Result<Status, UnknownName> {
        text.parse()
    }
}
