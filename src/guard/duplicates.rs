//! A resolver's review of a suspected duplicate (docs/GUARD.md, 4a): intended (a
//! genuine repeat, with a reason) or confirmed (a real duplicate, to be undone at the
//! provider). Written under the later key's lock with a `duplicate_reviewed` attempt.

use super::engine::Guard;
use super::error::GuardError;
use super::key::IdempotencyKey;
use super::port::{PairReview, Storage, StoreError};
use super::record::AttemptDraft;
use super::status::{AttemptKind, DuplicateVerdict};
use serde_json::json;

/// The longest reason a review keeps.
const MAX_REASON: usize = 2000;

/// A resolver's review of the pair whose later key is the one reviewed.
#[derive(Debug, Clone, PartialEq)]
pub struct DuplicateReview {
    /// The earlier key the resolver saw the pair with.
    pub other_key: IdempotencyKey,
    pub verdict: DuplicateVerdict,
    pub reason: String,
    pub actor: String,
}

impl DuplicateReview {
    /// The checks made before anything is written: an intended repeat needs a reason.
    pub(crate) fn validate(&self) -> Result<(), GuardError> {
        let invalid = |field, message: &str| GuardError::Invalid {
            field,
            message: message.to_string(),
        };
        if self.verdict == DuplicateVerdict::Intended && self.reason.trim().is_empty() {
            return Err(invalid(
                "reason",
                "say why both effects were wanted (a genuine repeat needs a reason)",
            ));
        }
        if self.reason.len() > MAX_REASON {
            return Err(invalid("reason", "must be at most 2000 characters"));
        }
        if self.actor.trim().is_empty() {
            return Err(invalid("actor", "the reviewing person must be named"));
        }
        Ok(())
    }
}

impl<S: Storage> Guard<S> {
    /// Records `review` of the suspected pair of `key`. Refused when the pair is not
    /// open any more (someone reviewed it first) or names another earlier key.
    #[tracing::instrument(skip_all, fields(key = %key, verdict = %review.verdict))]
    pub async fn review_duplicate(
        &self,
        key: &IdempotencyKey,
        review: &DuplicateReview,
    ) -> Result<(), GuardError> {
        review.validate()?;
        let written = self
            .store
            .review_duplicate(key, |rec| {
                let now = self.clock.now();
                rec.updated_at = now;
                let draft = AttemptDraft::new(
                    AttemptKind::DuplicateReviewed,
                    rec.fencing_token,
                    &review.actor,
                    now,
                )
                .detail(json!({
                    "verdict": review.verdict.as_str(),
                    "suspected_duplicate_of": review.other_key.as_str(),
                    "reason": review.reason.trim(),
                }));
                let pair = PairReview {
                    other_key: review.other_key.clone(),
                    verdict: review.verdict,
                    reviewed_by: review.actor.clone(),
                    reviewed_at: now,
                    reason: review.reason.trim().to_string(),
                };
                (draft, pair)
            })
            .await;
        match written {
            Ok(()) => Ok(()),
            Err(StoreError::NotFound) => Err(GuardError::NotFound(key.to_string())),
            Err(StoreError::Conflict(why)) => {
                let Some(rec) = self.store.record(key).await? else {
                    return Err(GuardError::NotFound(key.to_string()));
                };
                Err(GuardError::NotResolvable {
                    key: key.to_string(),
                    status: rec.status,
                    why,
                })
            }
            Err(e) => Err(e.into()),
        }
    }
}
