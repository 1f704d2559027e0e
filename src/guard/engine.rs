//! The guarded wrapper: claim, execute, settle, take over, reconcile, resolve.

use super::clock::Clock;
use super::deadline::resend_safe_until;
use super::decide::{self, Admission, Refusal, ResolveRequest, Settlement};
use super::error::GuardError;
use super::key::{BusinessArgs, IdempotencyKey, Intent};
use super::operation::{ErrorClass, Operation};
use super::record::{AttemptDraft, GENESIS_HASH, Record};
use super::status::{AttemptKind, Status};
use crate::store::{Claim, Store, StoreError};
use chrono::{DateTime, TimeDelta, Utc};
use futures::FutureExt;
use serde_json::Value;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

/// One call of a tool, as the orchestrator recorded the intent.
#[derive(Debug, Clone)]
pub struct ToolCall {
    pub intent: Intent,
    /// What support staff search by, e.g. `order:A-88214`.
    pub business_ref: Option<String>,
    /// All arguments, free text included; the guard strips the tool's free-text fields.
    pub args: Value,
    /// Who is calling: a worker id.
    pub actor: String,
}

/// A successful call. `replayed` is true when the result comes from an earlier
/// attempt (a stored DONE, or an effect found at the provider by reconciliation), so
/// an agent that never sees HTTP headers still learns it.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub key: IdempotencyKey,
    pub result: Value,
    pub replayed: bool,
}

#[derive(Debug, Clone)]
pub struct GuardSettings {
    /// Added to the operation's call timeout to make the lease: the lease must
    /// outlive the provider call, or a slow success looks like a dead worker.
    pub lease_margin: TimeDelta,
}

impl Default for GuardSettings {
    fn default() -> Self {
        Self {
            lease_margin: TimeDelta::seconds(30),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Guard {
    store: Store,
    clock: Arc<dyn Clock>,
    settings: GuardSettings,
}

impl Guard {
    pub fn new(store: Store, clock: Arc<dyn Clock>, settings: GuardSettings) -> Self {
        Self {
            store,
            clock,
            settings,
        }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    fn lease<O: Operation>(&self, op: &O) -> TimeDelta {
        TimeDelta::from_std(op.call_timeout()).unwrap_or(TimeDelta::MAX)
            + self.settings.lease_margin
    }

    /// Runs `op` for `call` at most once per intent.
    #[tracing::instrument(skip_all, fields(tool = %call.intent.tool, key))]
    pub async fn run<O: Operation>(&self, call: &ToolCall, op: &O) -> Result<Outcome, GuardError> {
        let key = call.intent.key()?;
        tracing::Span::current().record("key", key.as_str());
        let args = BusinessArgs::new(&call.args, op.free_text_fields())?;
        match self.admit(&key, call, &args, op).await? {
            Admission::New { token } => self.execute(&key, token, &args, op, &call.actor).await,
            Admission::Replay { result } => Ok(Outcome {
                key,
                result,
                replayed: true,
            }),
            Admission::ReplayFailure { error } => Err(GuardError::OperationFailed {
                key: key.to_string(),
                error,
            }),
            Admission::InFlight { lease_until } => Err(GuardError::InFlight {
                key: key.to_string(),
                lease_until,
            }),
            Admission::Mismatch { stored_fingerprint } => Err(GuardError::PayloadMismatch {
                key: key.to_string(),
                stored_fingerprint,
                fingerprint: args.fingerprint.0.clone(),
            }),
            Admission::TakeOver { token, before } => {
                self.reconcile(&key, token, &before, &args, op, &call.actor)
                    .await
            }
        }
    }

    /// The atomic claim, or the decision for an existing key. The clock is read
    /// inside the store's transaction, after any wait for the lock: a row written
    /// after a wait carries the time it was written, and a takeover's lease starts
    /// when the takeover does.
    pub async fn admit<O: Operation>(
        &self,
        key: &IdempotencyKey,
        call: &ToolCall,
        args: &BusinessArgs,
        op: &O,
    ) -> Result<Admission, GuardError> {
        let lease = self.lease(op);
        let build = || {
            let now = self.clock.now();
            // The provider starts remembering the key at the first send.
            let provider_retention_until = now + op.key_retention();
            let record = Record {
                key: key.to_string(),
                tenant: call.intent.tenant.clone(),
                tool: call.intent.tool.clone(),
                workflow_id: call.intent.workflow_id.clone(),
                step_id: call.intent.step_id.clone(),
                intent_id: call.intent.intent_id.clone(),
                business_ref: call.business_ref.clone(),
                fingerprint: args.fingerprint.0.clone(),
                business_args: args.value.clone(),
                status: Status::InProgress,
                fencing_token: 1,
                lease_until: now + lease,
                attempt_count: 1,
                result: None,
                error: None,
                provider_retention_until,
                resend_safe_until: resend_safe_until(now, provider_retention_until),
                release_approved: false,
                created_at: now,
                updated_at: now,
                log_seq: 0,
                log_hash: GENESIS_HASH.to_string(),
            };
            let claimed = AttemptDraft::new(AttemptKind::Claimed, 1, &call.actor, now)
                .detail(serde_json::json!({ "lease_until": record.lease_until }));
            (record, claimed)
        };
        loop {
            if let Claim::Created = self.store.claim(build).await? {
                return Ok(Admission::New { token: 1 });
            }
            let decided = self.store.with_locked(key.as_str(), |rec| {
                decide::admit_existing(rec, args, &call.actor, self.clock.now(), lease)
            });
            match decided.await {
                Ok(admission) => return Ok(admission),
                // Pruned between the two statements: claim again.
                Err(StoreError::NotFound) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Calls the provider under `token` and settles the outcome.
    async fn execute<O: Operation>(
        &self,
        key: &IdempotencyKey,
        token: i64,
        args: &BusinessArgs,
        op: &O,
        actor: &str,
    ) -> Result<Outcome, GuardError> {
        let started = Instant::now();
        let called = tokio::time::timeout(
            op.call_timeout(),
            AssertUnwindSafe(op.execute(key, &args.value)).catch_unwind(),
        )
        .await;
        let duration_ms = elapsed_ms(started);
        let settlement = match called {
            Ok(Ok(Ok(result))) => Settlement::Completed {
                result,
                duration_ms,
            },
            Ok(Ok(Err(e))) => match op.classify(&e) {
                ErrorClass::Definitive => Settlement::Failed {
                    error: e.to_string(),
                    duration_ms,
                },
                ErrorClass::Ambiguous => Settlement::Unknown {
                    reason: format!("ambiguous provider error: {e}"),
                    duration_ms: Some(duration_ms),
                },
            },
            Ok(Err(_panic)) => Settlement::Unknown {
                reason: "the operation panicked".into(),
                duration_ms: Some(duration_ms),
            },
            Err(_elapsed) => Settlement::Unknown {
                reason: format!("timed out after {} ms", op.call_timeout().as_millis()),
                duration_ms: Some(duration_ms),
            },
        };
        let answer = match &settlement {
            Settlement::Completed { result, .. } => Ok(Outcome {
                key: key.clone(),
                result: result.clone(),
                replayed: false,
            }),
            Settlement::Failed { error, .. } => Err(GuardError::OperationFailed {
                key: key.to_string(),
                error: error.clone(),
            }),
            Settlement::Unknown { reason, .. } => Err(GuardError::OutcomeUnknown {
                key: key.to_string(),
                reason: reason.clone(),
            }),
            _ => unreachable!("execute settles only completed, failed or unknown"),
        };
        self.settle(key, token, settlement, actor).await?;
        answer
    }

    /// The fenced write of a settlement.
    async fn settle(
        &self,
        key: &IdempotencyKey,
        token: i64,
        settlement: Settlement,
        actor: &str,
    ) -> Result<(), GuardError> {
        self.settle_with(key, token, actor, |_| settlement)
            .await
            .map(drop)
    }

    /// The fenced write of the settlement `choose` makes from the time read under the
    /// row lock; returns what it chose.
    async fn settle_with(
        &self,
        key: &IdempotencyKey,
        token: i64,
        actor: &str,
        choose: impl FnOnce(DateTime<Utc>) -> Settlement,
    ) -> Result<Settlement, GuardError> {
        let written = self
            .store
            .with_locked(key.as_str(), |rec| {
                let now = self.clock.now();
                let settlement = choose(now);
                let (attempts, written) =
                    decide::settle(rec, token, settlement.clone(), actor, now);
                (attempts, written.map(|()| settlement))
            })
            .await?;
        written.map_err(|stale| {
            tracing::warn!(key = %key, fencing_token = token, current = stale.current, "stale write rejected");
            GuardError::LeaseLost {
                key: key.to_string(),
                token,
                current: stale.current,
            }
        })
    }

    /// After a takeover: look the effect up at the provider before any resend. What
    /// follows the lookup (record the effect found, resend, stay UNKNOWN or ask a
    /// person) is decided under the row lock, at the time the row is written.
    async fn reconcile<O: Operation>(
        &self,
        key: &IdempotencyKey,
        token: i64,
        before: &Record,
        args: &BusinessArgs,
        op: &O,
        actor: &str,
    ) -> Result<Outcome, GuardError> {
        let started = Instant::now();
        let lookup = tokio::time::timeout(
            op.call_timeout(),
            AssertUnwindSafe(op.find_by_key(key)).catch_unwind(),
        )
        .await;
        let duration_ms = elapsed_ms(started);
        let lookup = match lookup {
            Ok(Ok(Ok(found))) => Ok(found),
            Ok(Ok(Err(e))) => Err(format!("provider lookup failed: {e}")),
            Ok(Err(_panic)) => Err("provider lookup panicked".to_string()),
            Err(_elapsed) => Err("provider lookup timed out".to_string()),
        };
        let settled = self
            .settle_with(key, token, actor, |now| {
                decide::after_lookup(before, lookup, duration_ms, now)
            })
            .await?;
        match settled {
            Settlement::ReconciledFound { result, .. } => Ok(Outcome {
                key: key.clone(),
                result,
                replayed: true,
            }),
            Settlement::Resent { .. } => self.execute(key, token, args, op, actor).await,
            Settlement::Unknown { reason, .. } => Err(GuardError::OutcomeUnknown {
                key: key.to_string(),
                reason,
            }),
            Settlement::Escalated { .. } => Err(GuardError::NeedsHumanReview {
                key: key.to_string(),
                provider_retention_until: before.provider_retention_until,
            }),
            Settlement::Completed { .. } | Settlement::Failed { .. } => {
                unreachable!("a lookup settles as found, resent, unknown or escalated")
            }
        }
    }

    /// A person's decision on an undecided key, through the same compare-and-swap and
    /// fenced write as a worker's takeover. Returns the record as written.
    #[tracing::instrument(skip_all, fields(key = %key, actor = %req.actor, resolution = %req.resolution))]
    pub async fn resolve(
        &self,
        key: &IdempotencyKey,
        req: &ResolveRequest,
    ) -> Result<Record, GuardError> {
        validate_resolution(req)?;
        let decided = self
            .store
            .with_locked(key.as_str(), |rec| {
                let (attempts, outcome) = decide::resolve(rec, req, self.clock.now());
                (
                    attempts,
                    outcome
                        .map(|()| rec.clone())
                        .map_err(|r| (r, rec.status, rec.fencing_token)),
                )
            })
            .await;
        match decided {
            Ok(Ok(record)) => Ok(record),
            Ok(Err((refusal, status, token))) => Err(refused(key.as_str(), refusal, status, token)),
            Err(StoreError::NotFound) => Err(GuardError::NotFound(key.to_string())),
            Err(e) => Err(e.into()),
        }
    }

    /// What [`Guard::resolve`] would write over `record` now, or why it would refuse,
    /// without writing anything: the confirmation step shows this before a person
    /// commits. The real resolve decides again under the row lock, at its own time.
    pub fn preview_resolve(
        &self,
        record: &Record,
        req: &ResolveRequest,
    ) -> Result<Record, GuardError> {
        validate_resolution(req)?;
        let mut after = record.clone();
        let (_, outcome) = decide::resolve(&mut after, req, self.clock.now());
        outcome
            .map(|()| after)
            .map_err(|r| refused(&record.key, r, record.status, record.fencing_token))
    }
}

impl ResolveRequest {
    /// The checks [`Guard::resolve`] makes before touching the store (reason, evidence,
    /// result), for forms that want to answer before a confirmation step.
    pub fn validate(&self) -> Result<(), GuardError> {
        validate_resolution(self)
    }
}

fn refused(key: &str, refusal: Refusal, status: super::status::Status, token: i64) -> GuardError {
    match refusal {
        Refusal::Moved => GuardError::Conflict {
            key: key.to_string(),
            status,
            token,
        },
        Refusal::InFlight { lease_until } => GuardError::InFlight {
            key: key.to_string(),
            lease_until,
        },
        Refusal::NotResolvable { why } => GuardError::NotResolvable {
            key: key.to_string(),
            status,
            why,
        },
    }
}

/// Checks a resolution before anything is written: a refused one writes nothing.
fn validate_resolution(req: &ResolveRequest) -> Result<(), GuardError> {
    use super::status::Resolution;
    let invalid = |field, message: &str| GuardError::Invalid {
        field,
        message: message.to_string(),
    };
    if req.reason.trim().is_empty() {
        return Err(invalid(
            "reason",
            "a reason is required for every resolution",
        ));
    }
    if req.reason.len() > 2000 {
        return Err(invalid("reason", "must be at most 2000 characters"));
    }
    if req.actor.trim().is_empty() {
        return Err(invalid("actor", "the resolving person must be named"));
    }
    let evidence = req.evidence.as_deref().map(str::trim).unwrap_or_default();
    if req.resolution == Resolution::Done && evidence.is_empty() {
        return Err(invalid(
            "evidence",
            "marking a key done needs evidence: the provider's resource id (e.g. rf_8XM1)",
        ));
    }
    if evidence.len() > 500 {
        return Err(invalid("evidence", "must be at most 500 characters"));
    }
    if req.result.is_some() && req.resolution != Resolution::Done {
        return Err(invalid(
            "result",
            "a result can only be given when marking a key done",
        ));
    }
    if let Some(result) = &req.result {
        super::canonical::canonical_json(result).map_err(|e| invalid("result", &e.to_string()))?;
    }
    Ok(())
}

fn elapsed_ms(started: Instant) -> i64 {
    i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX)
}
