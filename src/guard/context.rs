//! The storage a guard writes through for one caller: the store, plus the caller's
//! context (for the MCP proxy: the session id, the JSON-RPC request id and the client)
//! as `detail.context` of every attempt row the call writes, so support sees which
//! host and which call it was. Both ends record it alike: the proxy's in-process guard
//! with its own context, `serve` with the `context` a worker sends in its guard
//! request (docs/GUARD.md). The guard's decisions and statements are untouched: this
//! only adds a member to each row's detail before the store seals it into the chain.

use super::{
    Attempt, AttemptDraft, Claim, ClaimChecks, IdempotencyKey, PairReview, Record, Storage,
    StoreError,
};
use serde_json::Value;
use std::sync::Arc;

/// The member of an attempt's detail that holds the caller's context.
pub const CONTEXT_MEMBER: &str = "context";

#[derive(Clone)]
pub struct WithContext<S> {
    inner: S,
    /// `None`: the caller sent none, the rows are written as they are.
    context: Option<Arc<Value>>,
}

impl<S> WithContext<S> {
    pub fn new(inner: S, context: Option<Value>) -> Self {
        Self {
            inner,
            context: context.map(Arc::new),
        }
    }

    fn mark(&self, draft: AttemptDraft) -> AttemptDraft {
        match &self.context {
            Some(context) => draft.with(CONTEXT_MEMBER, (**context).clone()),
            None => draft,
        }
    }
}

impl<S: Storage> Storage for WithContext<S> {
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
