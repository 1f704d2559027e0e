//! The guarded wrapper: claim, execute, settle, take over, reconcile, resolve.

use super::call::{Admitted, CallOutcome, Outcome, Reconciled, ToolCall};
use super::deadline::LeaseState;
use super::decide::{self, Admission, Lookup, Refusal, ResolveRequest};
use super::error::GuardError;
use super::heads::Heads;
use super::key::{BusinessArgs, FencingToken, IdempotencyKey};
use super::operation::{ErrorClass, Operation};
use super::policy::ToolPolicy;
use super::port::Storage;
use super::record::Record;
use super::repeats::RefusalsNotLogged;
use super::status::Status;
use crate::base::canonical::holds_nul;
use crate::base::clock::Clock;
use crate::base::time::rfc3339;
use chrono::{DateTime, TimeDelta, Utc};
use futures::FutureExt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::broadcast;

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

/// What a worker holds while it calls the provider: the key, the fencing token its
/// writes name, the end of its lease, the arguments to send and who it is.
#[derive(Clone, Copy)]
struct Held<'a> {
    key: &'a IdempotencyKey,
    token: FencingToken,
    lease_until: DateTime<Utc>,
    args: &'a BusinessArgs,
    actor: &'a str,
}

/// The guard over its storage `S` (in this crate, `crate::store::Store`).
#[derive(Debug, Clone)]
pub struct Guard<S> {
    pub(super) store: S,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) settings: GuardSettings,
    /// Keys whose fencing token moved (a takeover, a resolution), for waiters in this
    /// process (the HTTP long poll).
    changes: broadcast::Sender<IdempotencyKey>,
    /// Records this guard claimed, for the settle's single conditional write.
    pub(super) heads: Heads,
    /// Told of each refusal answered without a row (repeats.rs); none by default.
    pub(super) not_logged: Option<Arc<dyn RefusalsNotLogged>>,
}

impl<S: Storage> Guard<S> {
    pub fn new(store: S, clock: Arc<dyn Clock>, settings: GuardSettings) -> Self {
        Self {
            store,
            clock,
            settings,
            changes: broadcast::channel(256).0,
            heads: Heads::default(),
            not_logged: None,
        }
    }

    /// The same guard telling `to` of each refusal it answers without a row.
    pub fn reporting_refusals_not_logged(mut self, to: Arc<dyn RefusalsNotLogged>) -> Self {
        self.not_logged = Some(to);
        self
    }

    /// The same guard writing through `store` (a view of its own store, such as
    /// [`super::WithContext`] for one caller): the waiters, the claimed records and
    /// the refusal counter are shared, so a claim made through one view is settled
    /// through another in a single write, and a long poll hears it.
    pub fn over<T: Storage>(&self, store: T) -> Guard<T> {
        Guard {
            store,
            clock: self.clock.clone(),
            settings: self.settings.clone(),
            changes: self.changes.clone(),
            heads: self.heads.clone(),
            not_logged: self.not_logged.clone(),
        }
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    pub fn settings(&self) -> &GuardSettings {
        &self.settings
    }

    /// Keys whose fencing token this guard (or a clone of it) moves from now on. A
    /// lagging receiver has missed some: it should re-read what it waits for.
    pub fn subscribe(&self) -> broadcast::Receiver<IdempotencyKey> {
        self.changes.subscribe()
    }

    pub(super) fn changed(&self, key: &IdempotencyKey) {
        // No receiver is not an error: nobody is waiting.
        let _ = self.changes.send(key.clone());
    }

    /// Runs `op` for `call` at most once per intent.
    #[tracing::instrument(skip_all, fields(tool = %call.intent.tool, key))]
    pub async fn run<O: Operation>(&self, call: &ToolCall, op: &O) -> Result<Outcome, GuardError> {
        let policy = ToolPolicy::of(op);
        let admitted = self.admit_call(call, &policy).await?;
        if let Admission::Mismatch {
            lookup_token: Some(token),
            ..
        } = admitted.admission
        {
            // Other arguments on a key whose outcome is unknown: look the effect up by
            // key (never resend) so a found effect settles the key, then refuse.
            return Err(self
                .look_up_then_refuse(admitted, token, op, &call.actor)
                .await);
        }
        let Admitted {
            key,
            args,
            admission,
            ..
        } = admitted.refuse()?;
        tracing::Span::current().record("key", key.as_str());
        match admission {
            Admission::New { token, lease_until } => {
                let held = Held {
                    key: &key,
                    token,
                    lease_until,
                    args: &args,
                    actor: &call.actor,
                };
                self.execute(&held, op).await
            }
            Admission::Replay { result } => Ok(Outcome {
                key,
                result,
                replayed: true,
            }),
            Admission::ReplayFailure { error } => Err(GuardError::OperationFailed {
                key: key.to_string(),
                error,
            }),
            Admission::TakeOver {
                token, lease_until, ..
            } => {
                let held = Held {
                    key: &key,
                    token,
                    lease_until,
                    args: &args,
                    actor: &call.actor,
                };
                self.reconcile(&held, op).await
            }
            Admission::InFlight { .. } | Admission::Mismatch { .. } => {
                unreachable!("refused by Admitted::refuse")
            }
        }
    }

    /// Calls the provider under the held token and settles the outcome.
    async fn execute<O: Operation>(&self, held: &Held<'_>, op: &O) -> Result<Outcome, GuardError> {
        let Held {
            key,
            token,
            lease_until,
            args,
            actor,
        } = *held;
        // The lease is what keeps every other worker from sending under this key. Once
        // it has run out another may have taken the key over and resent, and the
        // provider may since have forgotten that send: a worker stalled after its claim
        // or its lookup (a pause, a starved thread) sends nothing now and leaves the key
        // to a retry's lookup. Read on the guard's clock with nothing awaited before the
        // call starts.
        let now = self.clock.now();
        if LeaseState::of(Status::InProgress, lease_until, now) == LeaseState::Expired {
            let reason = format!(
                "the lease ran out at {} before the provider was called; nothing was sent",
                rfc3339(lease_until)
            );
            let outcome = CallOutcome::Unknown {
                reason: reason.clone(),
            };
            self.settle_call(key, token, outcome, None, actor).await?;
            return Err(GuardError::OutcomeUnknown {
                key: key.to_string(),
                reason,
            });
        }
        let (called, duration_ms) = provider_call(op, op.execute(key, &args.value)).await;
        let outcome = match called {
            Ok(Ok(Ok(result))) => CallOutcome::Done { result },
            Ok(Ok(Err(e))) => match op.classify(&e) {
                ErrorClass::Definitive => CallOutcome::Failed {
                    error: e.to_string(),
                },
                ErrorClass::Ambiguous => CallOutcome::Unknown {
                    reason: format!("ambiguous provider error: {e}"),
                },
            },
            Ok(Err(_panic)) => CallOutcome::Unknown {
                reason: "the operation panicked".into(),
            },
            Err(_elapsed) => CallOutcome::Unknown {
                reason: format!("timed out after {} ms", op.call_timeout().as_millis()),
            },
        };
        let answer = match &outcome {
            CallOutcome::Done { result } => Ok(Outcome {
                key: key.clone(),
                result: result.clone(),
                replayed: false,
            }),
            CallOutcome::Failed { error } => Err(GuardError::OperationFailed {
                key: key.to_string(),
                error: error.clone(),
            }),
            CallOutcome::Unknown { reason } => Err(GuardError::OutcomeUnknown {
                key: key.to_string(),
                reason: reason.clone(),
            }),
        };
        self.settle_call(key, token, outcome, duration_ms, actor)
            .await?;
        answer
    }

    /// After a takeover: look the effect up at the provider before any resend.
    async fn reconcile<O: Operation>(
        &self,
        held: &Held<'_>,
        op: &O,
    ) -> Result<Outcome, GuardError> {
        let Held {
            key, token, actor, ..
        } = *held;
        let (lookup, duration_ms) = look_up(op, key).await;
        match self
            .report_lookup(key, token, lookup, duration_ms, actor)
            .await?
        {
            Reconciled::Found { result } => Ok(Outcome {
                key: key.clone(),
                result,
                replayed: true,
            }),
            // The resend runs under the takeover's lease, as the row lock left it.
            Reconciled::Resend { record } => {
                let held = Held {
                    lease_until: record.lease_until,
                    ..*held
                };
                self.execute(&held, op).await
            }
            Reconciled::Unknown { reason } => Err(GuardError::OutcomeUnknown {
                key: key.to_string(),
                reason,
            }),
        }
    }

    /// The lookup offered to a call with other arguments on a key whose outcome is
    /// unknown, reported under `token`; then the payload mismatch, with the key's status
    /// as the lookup left it (DONE if the effect was found, else UNKNOWN with a person).
    async fn look_up_then_refuse<O: Operation>(
        &self,
        admitted: Admitted,
        token: FencingToken,
        op: &O,
        actor: &str,
    ) -> GuardError {
        let key = admitted.key.clone();
        let (lookup, duration_ms) = look_up(op, &key).await;
        let found = matches!(lookup, Lookup::Found(_));
        let reported = self
            .report_lookup(&key, token, lookup, duration_ms, actor)
            .await;
        match (reported, admitted.refuse()) {
            (Err(e @ GuardError::Store(_)), _) => e,
            (
                _,
                Err(GuardError::PayloadMismatch {
                    key,
                    stored_fingerprint,
                    fingerprint,
                    differing_fields,
                    intent_key,
                    ..
                }),
            ) if found => GuardError::PayloadMismatch {
                key,
                stored_fingerprint,
                fingerprint,
                differing_fields,
                intent_key,
                stored_status: super::status::Status::Done,
                lookup_token: None,
            },
            (_, Err(refused)) => refused,
            (_, Ok(_)) => unreachable!("a mismatch is refused"),
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
            .locked(key, |rec| {
                let (attempts, outcome) = decide::resolve(rec, req, self.clock.now());
                (
                    attempts,
                    outcome
                        .map(|()| rec.clone())
                        .map_err(|r| (r, rec.status, rec.fencing_token)),
                )
            })
            .await?;
        decided.map_err(|(refusal, status, token)| refused(key.as_str(), refusal, status, token))
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
            .map_err(|r| refused(record.key.as_str(), r, record.status, record.fencing_token))
    }
}

impl ResolveRequest {
    /// The checks [`Guard::resolve`] makes before touching the store (reason, evidence,
    /// result), for forms that want to answer before a confirmation step.
    pub(crate) fn validate(&self) -> Result<(), GuardError> {
        validate_resolution(self)
    }
}

fn refused(
    key: &str,
    refusal: Refusal,
    status: super::status::Status,
    token: FencingToken,
) -> GuardError {
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
        crate::base::canonical::canonical_json(result)
            .map_err(|e| invalid("result", &e.to_string()))?;
    }
    let texts = [
        ("reason", Some(req.reason.as_str())),
        ("actor", Some(req.actor.as_str())),
        ("evidence", req.evidence.as_deref()),
    ];
    let nul = "must not contain the NUL character (U+0000)";
    if let Some((field, _)) = texts
        .iter()
        .find(|(_, t)| t.is_some_and(|t| t.contains('\0')))
    {
        return Err(invalid(field, nul));
    }
    if req.result.as_ref().is_some_and(holds_nul) {
        return Err(invalid("result", nul));
    }
    Ok(())
}

/// The reconciliation lookup at the provider by `key`, under the call's deadline, as
/// the guard records it.
async fn look_up<O: Operation>(op: &O, key: &IdempotencyKey) -> (Lookup, Option<i64>) {
    let (lookup, duration_ms) = provider_call(op, op.find_by_key(key)).await;
    let lookup = match lookup {
        Ok(Ok(Ok(Some(found)))) => Lookup::Found(found),
        Ok(Ok(Ok(None))) => Lookup::NotFound,
        Ok(Ok(Err(e))) => Lookup::Failed(format!("provider lookup failed: {e}")),
        Ok(Err(_panic)) => Lookup::Failed("provider lookup panicked".to_string()),
        Err(_elapsed) => Lookup::Failed("provider lookup timed out".to_string()),
    };
    (lookup, duration_ms)
}

/// One call to the provider under the operation's deadline, a panic caught as such
/// (the outer `Err` is the deadline, the middle one a panic), and how long it took.
async fn provider_call<O: Operation, T>(
    op: &O,
    call: impl Future<Output = Result<T, O::Error>>,
) -> (
    Result<std::thread::Result<Result<T, O::Error>>, tokio::time::error::Elapsed>,
    Option<i64>,
) {
    let started = Instant::now();
    let called =
        tokio::time::timeout(op.call_timeout(), AssertUnwindSafe(call).catch_unwind()).await;
    let elapsed = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
    (called, Some(elapsed))
}
