//! The engine's steps: admit, settle, and report a reconciliation lookup. None of them
//! calls a provider. [`Guard::run`] strings them around its [`Operation`]'s calls;
//! the HTTP routes (`/api/v1/guard/*`) expose each one, the caller making the provider
//! calls in between. Both write the same rows through the same decisions.
//!
//! [`Operation`]: super::Operation

use super::call::{Admitted, CallOutcome, Reconciled, ToolCall};
use super::chain::GENESIS_HASH;
use super::deadline::resend_safe_until;
use super::decide::{self, Admission, Lookup, Settlement};
use super::engine::Guard;
use super::error::GuardError;
use super::key::{BusinessArgs, FencingToken, IdempotencyKey};
use super::natural::NaturalKey;
use super::policy::ToolPolicy;
use super::port::{Claim, ClaimChecks, Storage, StoreError};
use super::record::{AttemptDraft, Record};
use super::repeats::{Repeat, repeat};
use super::status::{AttemptKind, Status};
use serde_json::json;

impl<S: Storage> Guard<S> {
    /// Step 1: derives the key and the business arguments of `call` under `policy`,
    /// then claims the key or decides what the caller gets.
    #[tracing::instrument(skip_all, fields(tool = %call.intent.tool, key))]
    pub async fn admit_call(
        &self,
        call: &ToolCall,
        policy: &ToolPolicy,
    ) -> Result<Admitted, GuardError> {
        let key = call.intent.key()?;
        tracing::Span::current().record("key", key.as_str());
        let args = BusinessArgs::new(&call.args, &policy.free_text_fields)?;
        let natural = NaturalKey::of(&args, &policy.natural_key)?;
        let (held_by, admission) = self
            .admit_with(&key, call, &args, policy, natural.as_ref())
            .await?;
        Ok(match held_by {
            Some(holder) => Admitted {
                key: holder,
                intent_key: Some(key),
                args,
                admission,
            },
            None => Admitted {
                key,
                intent_key: None,
                args,
                admission,
            },
        })
    }

    /// The atomic claim, or the decision for an existing key. The claim's attempt
    /// records the policy in force, so an auditor sees which rules applied. When
    /// another key holds the call's natural key, the decision is that key's (a
    /// replay, a 422 for other arguments, a takeover…), recorded on that key with
    /// the caller's intent key, and the holder is returned with it.
    async fn admit_with(
        &self,
        key: &IdempotencyKey,
        call: &ToolCall,
        args: &BusinessArgs,
        policy: &ToolPolicy,
        natural: Option<&NaturalKey>,
    ) -> Result<(Option<IdempotencyKey>, Admission), GuardError> {
        let lease = policy.lease(self.settings.lease_margin);
        // The clock is read inside the store's transaction, after any wait for the
        // lock: a row written after a wait carries the time it was written, and a
        // takeover's lease starts when the takeover does.
        let build = || {
            let now = self.clock.now();
            // The provider starts remembering the key at the first send.
            let provider_retention_until = now + policy.key_retention;
            let record = Record {
                key: key.clone(),
                intent: call.intent.clone(),
                business_ref: call.business_ref.clone(),
                fingerprint: args.fingerprint.0.clone(),
                business_args: args.value.clone(),
                status: Status::InProgress,
                fencing_token: FencingToken::FIRST,
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
            let mut claimed =
                AttemptDraft::new(AttemptKind::Claimed, FencingToken::FIRST, &call.actor, now)
                    .detail(json!({
                        "lease_until": record.lease_until,
                        "policy": policy.to_json(&call.intent.tool),
                    }));
            if let Some(natural) = natural {
                claimed = claimed.with("natural_key", natural.fields.clone());
            }
            (record, claimed)
        };
        let checks = ClaimChecks {
            natural_key: natural.map(|n| n.hash.as_str()),
            duplicate_window: policy.duplicate_window,
        };
        loop {
            let (at, held_by) = match self.store.claim(&build, checks).await? {
                Claim::Created { record } => {
                    let admission = Admission::New {
                        token: record.fencing_token,
                        lease_until: record.lease_until,
                    };
                    self.heads.remember(*record);
                    return Ok((None, admission));
                }
                Claim::Exists => (key.clone(), None),
                Claim::NaturalKeyHeld { key: holder } => (holder.clone(), Some(holder)),
            };
            let decide = |rec: &mut Record| {
                let (mut drafts, admission) =
                    decide::admit_existing(rec, args, &call.actor, self.clock.now(), lease);
                if let (Some(natural), Some(_)) = (natural, &held_by) {
                    // On the holder's log: which intent arrived with its natural key.
                    drafts = drafts
                        .into_iter()
                        .map(|d| {
                            d.with("natural_key", natural.fields.clone())
                                .with("intent_key", json!(key.as_str()))
                                .with("intent_id", json!(call.intent.intent_id))
                        })
                        .collect();
                }
                (drafts, admission)
            };
            match self.locked_once(&at, decide).await {
                Ok(admission) => return Ok((held_by, admission)),
                // Pruned between the two statements: claim again.
                Err(GuardError::NotFound(_)) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Step 2: the fenced write of a provider call's outcome under `token`. Returns the
    /// record as written; a stale token is recorded and answered with
    /// [`GuardError::LeaseLost`].
    pub async fn settle_call(
        &self,
        key: &IdempotencyKey,
        token: FencingToken,
        outcome: CallOutcome,
        duration_ms: Option<i64>,
        actor: &str,
    ) -> Result<Record, GuardError> {
        let settlement = match outcome {
            CallOutcome::Done { result } => Settlement::Completed {
                result,
                duration_ms,
            },
            CallOutcome::Failed { error } => Settlement::Failed { error, duration_ms },
            CallOutcome::Unknown { reason } => Settlement::Unknown {
                reason,
                duration_ms,
            },
        };
        self.settle(key, token, actor, false, |_, _| settlement.clone())
            .await
            .map(|(_, record)| record)
    }

    /// Step 3: after a takeover, what the lookup at the provider found, decided and
    /// written under the row lock.
    pub async fn report_lookup(
        &self,
        key: &IdempotencyKey,
        token: FencingToken,
        lookup: Lookup,
        duration_ms: Option<i64>,
        actor: &str,
    ) -> Result<Reconciled, GuardError> {
        let (settlement, record) = self
            .settle(key, token, actor, true, |rec, now| {
                decide::after_lookup(rec, lookup.clone(), duration_ms, now)
            })
            .await?;
        match settlement {
            Settlement::ReconciledFound { result, .. } => Ok(Reconciled::Found { result }),
            Settlement::Resent { .. } => Ok(Reconciled::Resend {
                record: Box::new(record),
            }),
            Settlement::Unknown { reason, .. } => Ok(Reconciled::Unknown { reason }),
            Settlement::Escalated { .. } => Err(GuardError::NeedsHumanReview {
                key: key.to_string(),
                provider_retention_until: record.provider_retention_until,
            }),
            Settlement::Completed { .. } | Settlement::Failed { .. } => {
                unreachable!("a lookup settles as found, resent, unknown or escalated")
            }
        }
    }

    /// The fenced write of the settlement `choose` makes from the locked record and
    /// the time (a `lookup`'s also on a key UNKNOWN under `token`: decide::settle_lookup);
    /// returns what it chose and the record as written.
    async fn settle(
        &self,
        key: &IdempotencyKey,
        token: FencingToken,
        actor: &str,
        lookup: bool,
        choose: impl Fn(&Record, chrono::DateTime<chrono::Utc>) -> Settlement + Send + Sync,
    ) -> Result<(Settlement, Record), GuardError> {
        let write = if lookup {
            decide::settle_lookup
        } else {
            decide::settle
        };
        let decide = |rec: &mut Record| {
            let now = self.clock.now();
            let settlement = choose(rec, now);
            let (attempts, written) = write(rec, token, settlement.clone(), actor, now);
            (attempts, written.map(|()| (settlement, rec.clone())))
        };
        // A key this guard claimed and nobody touched since: the decision on the record
        // as claimed, written if the stored head is still that one; otherwise (or on
        // another replica) the locked read.
        let unchanged = match self.heads.take(key, token) {
            Some(expected) => self.store.write_if_unchanged(&expected, decide).await?,
            None => None,
        };
        let written = match unchanged {
            Some(written) => written,
            None => self.locked_once(key, decide).await?,
        };
        if written.is_ok() {
            // A settled key wakes whoever long-polls it (a second delivery waiting for
            // this one to finish), not only a moved token.
            self.changed(key);
        }
        written.map_err(|stale| {
            tracing::warn!(key = %key, fencing_token = token.0, current = stale.current.0, "stale write rejected");
            GuardError::LeaseLost {
                key: key.to_string(),
                token,
                current: stale.current,
            }
        })
    }

    /// [`Guard::locked`] for a decision that may refuse: a refusal identical to the
    /// key's newest row is answered but not appended again (`repeats.rs`). The newest
    /// row is read only when the decision is a refusal, then the decision is made again
    /// under the lock (a key that keeps moving is simply recorded, after two reads).
    pub(super) async fn locked_once<T: Send>(
        &self,
        key: &IdempotencyKey,
        decide: impl Fn(&mut Record) -> (Vec<AttemptDraft>, T) + Send + Sync,
    ) -> Result<T, GuardError> {
        let mut newest = None;
        for reads in 0.. {
            let decided = self
                .locked(key, |rec| {
                    let before = rec.clone();
                    let (drafts, value) = decide(rec);
                    match repeat(&drafts, &before, newest.as_ref()) {
                        Repeat::New => (drafts, Some(value)),
                        Repeat::Unread if reads >= 2 => (drafts, Some(value)),
                        // No row. An admission still counts on the record
                        // (`attempt_count`, `updated_at`); a stale write changed nothing.
                        Repeat::Same => (Vec::new(), Some(value)),
                        Repeat::Unread => {
                            *rec = before;
                            (Vec::new(), None)
                        }
                    }
                })
                .await?;
            match decided {
                Some(value) => return Ok(value),
                None => newest = self.store.newest_attempt(key).await?,
            }
        }
        unreachable!("the loop returns by its third read")
    }

    /// [`Storage::with_locked`] for the guard: a missing key is
    /// [`GuardError::NotFound`], and a write that moves the fencing token (a takeover,
    /// a resolution) wakes whoever waits on the key in this process.
    pub(super) async fn locked<T: Send>(
        &self,
        key: &IdempotencyKey,
        decide: impl FnOnce(&mut Record) -> (Vec<AttemptDraft>, T) + Send,
    ) -> Result<T, GuardError> {
        let mut moved = false;
        let decided = self
            .store
            .with_locked(key, |rec| {
                let before = rec.fencing_token;
                let out = decide(rec);
                moved = rec.fencing_token != before;
                out
            })
            .await;
        match decided {
            Ok(value) => {
                if moved {
                    self.changed(key);
                }
                Ok(value)
            }
            Err(StoreError::NotFound) => Err(GuardError::NotFound(key.to_string())),
            Err(e) => Err(e.into()),
        }
    }
}
