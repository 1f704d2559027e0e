//! The guard's engine on the database, in this process (`--database-url`).

use super::{
    AfterLookup, CallContext, Fenced, GuardCall, GuardPort, KeyState, NaturalRef, PortAdmission,
    PortAdmitted, Step,
};
use crate::guard::WithContext;
use crate::guard::{
    self, CallOutcome, Clock, Guard, GuardSettings, IdempotencyKey, Lookup, Reconciled, ToolCall,
    ToolPolicy,
};
use crate::store::Store;
use futures::FutureExt;
use futures::future::BoxFuture;
use std::sync::Arc;

pub struct LocalGuard {
    guard: Guard<Store>,
}

impl LocalGuard {
    pub fn new(store: Store, clock: Arc<dyn Clock>, settings: GuardSettings) -> Self {
        Self {
            guard: Guard::new(store, clock, settings),
        }
    }

    /// The same guard telling `to` of each refusal it answers without a row (the
    /// proxy's `/metrics`).
    pub fn reporting_refusals_not_logged(self, to: Arc<dyn guard::RefusalsNotLogged>) -> Self {
        Self {
            guard: self.guard.reporting_refusals_not_logged(to),
        }
    }

    fn store(&self) -> &Store {
        self.guard.store()
    }
}

impl GuardPort for LocalGuard {
    fn check<'a>(&'a self, _tenant: &'a str) -> BoxFuture<'a, anyhow::Result<()>> {
        // The database was opened (and migrated) before the proxy started.
        async { Ok(()) }.boxed()
    }

    fn call(&self, context: CallContext) -> Box<dyn GuardCall> {
        Box::new(LocalCall {
            // The proxy's one guard, seen through this call's context.
            guard: self
                .guard
                .over(WithContext::new(self.store().clone(), Some(context.detail))),
            actor: context.actor,
        })
    }

    fn key_state<'a>(&'a self, key: &'a IdempotencyKey) -> Step<'a, Option<KeyState>> {
        async move {
            let Some(rec) = self
                .store()
                .record(key)
                .await
                .map_err(guard::GuardError::from)?
            else {
                return Ok(None);
            };
            let awaiting_person = self
                .store()
                .awaiting_person(&rec)
                .await
                .map_err(guard::GuardError::from)?;
            Ok(Some(KeyState {
                key: rec.key,
                tool: Some(rec.intent.tool),
                status: rec.status,
                result: rec.result,
                error: rec.error,
                lease_until: Some(rec.lease_until),
                awaiting_person,
            }))
        }
        .boxed()
    }

    fn holder_of<'a>(&'a self, natural: NaturalRef<'a>) -> Step<'a, Option<IdempotencyKey>> {
        async move {
            let keys = self
                .store()
                .keys_with_business_ref(natural.reference, 20)
                .await
                .map_err(guard::GuardError::from)?;
            Ok(keys
                .into_iter()
                .find(|k| k.intent.tenant == natural.tenant && k.intent.tool == natural.tool)
                .map(|k| k.key))
        }
        .boxed()
    }
}

struct LocalCall {
    guard: Guard<WithContext<Store>>,
    actor: String,
}

impl GuardCall for LocalCall {
    fn admit<'a>(&'a self, call: &'a ToolCall, policy: &'a ToolPolicy) -> Step<'a, PortAdmitted> {
        async move {
            use guard::Admission as A;
            let admitted = self.guard.admit_call(call, policy).await?;
            let call_timeout = policy.call_timeout;
            let admission = match admitted.admission {
                A::New { token, .. } => PortAdmission::Execute {
                    token,
                    call_timeout,
                },
                A::TakeOver { token, .. } => PortAdmission::Reconcile {
                    token,
                    call_timeout,
                },
                A::Replay { result } => PortAdmission::Replay { result },
                A::ReplayFailure { error } => PortAdmission::Failed { error },
                A::Mismatch {
                    differing_fields,
                    lookup_token,
                    ..
                } => PortAdmission::Mismatch {
                    differing_fields,
                    natural: admitted.intent_key.is_some(),
                    lookup_token,
                },
                A::InFlight { lease_until } => PortAdmission::InFlight { lease_until },
            };
            Ok(PortAdmitted {
                key: admitted.key,
                admission,
            })
        }
        .boxed()
    }

    fn settle<'a>(&'a self, at: Fenced<'a>, outcome: CallOutcome) -> Step<'a, ()> {
        async move {
            self.guard
                .settle_call(at.key, at.token, outcome, at.duration_ms, &self.actor)
                .await?;
            Ok(())
        }
        .boxed()
    }

    fn report_lookup<'a>(&'a self, at: Fenced<'a>, lookup: Lookup) -> Step<'a, AfterLookup> {
        async move {
            let reconciled = self
                .guard
                .report_lookup(at.key, at.token, lookup, at.duration_ms, &self.actor)
                .await?;
            Ok(match reconciled {
                Reconciled::Found { result } => AfterLookup::Found { result },
                Reconciled::Resend { .. } => AfterLookup::Resend,
                Reconciled::Unknown { reason } => AfterLookup::Unknown { reason },
            })
        }
        .boxed()
    }
}
