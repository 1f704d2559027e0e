//! The storage the proxy's guard writes through: the store, plus the MCP call's
//! context (session id, JSON-RPC request id, client) in the detail of every attempt
//! row the call writes, so support sees which host and which call it was. The guard's
//! decisions and statements are untouched: this only adds a member to each row's
//! detail before the store seals it into the chain.

use crate::guard::{
    Attempt, AttemptDraft, Claim, ClaimChecks, IdempotencyKey, PairReview, Record, Storage,
    StoreError,
};
use serde_json::Value;
use std::sync::Arc;

#[derive(Clone)]
pub struct WithCallContext<S> {
    inner: S,
    context: Arc<Value>,
}

impl<S> WithCallContext<S> {
    pub fn new(inner: S, context: Value) -> Self {
        Self {
            inner,
            context: Arc::new(context),
        }
    }

    fn mark(&self, draft: AttemptDraft) -> AttemptDraft {
        draft.with("mcp", (*self.context).clone())
    }
}

impl<S: Storage> Storage for WithCallContext<S> {
    async fn claim(
        &self,
        build: impl FnOnce() -> (Record, AttemptDraft) + Send,
        checks: ClaimChecks<'_>,
    ) -> Result<Claim, StoreError> {
        let build = || {
            let (record, draft) = build();
            (record, self.mark(draft))
        };
        self.inner.claim(build, checks).await
    }

    async fn with_locked<T: Send>(
        &self,
        key: &IdempotencyKey,
        decide: impl FnOnce(&mut Record) -> (Vec<AttemptDraft>, T) + Send,
    ) -> Result<T, StoreError> {
        let decide = |rec: &mut Record| {
            let (drafts, out) = decide(rec);
            (drafts.into_iter().map(|d| self.mark(d)).collect(), out)
        };
        self.inner.with_locked(key, decide).await
    }

    async fn write_if_unchanged<T: Send>(
        &self,
        expected: &Record,
        decide: impl FnOnce(&mut Record) -> (Vec<AttemptDraft>, T) + Send,
    ) -> Result<Option<T>, StoreError> {
        let decide = |rec: &mut Record| {
            let (drafts, out) = decide(rec);
            (drafts.into_iter().map(|d| self.mark(d)).collect(), out)
        };
        self.inner.write_if_unchanged(expected, decide).await
    }

    async fn review_duplicate(
        &self,
        key: &IdempotencyKey,
        decide: impl FnOnce(&mut Record) -> (AttemptDraft, PairReview) + Send,
    ) -> Result<(), StoreError> {
        self.inner.review_duplicate(key, decide).await
    }

    async fn record(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        self.inner.record(key).await
    }

    async fn newest_attempt(&self, key: &IdempotencyKey) -> Result<Option<Attempt>, StoreError> {
        self.inner.newest_attempt(key).await
    }
}
