//! The guard over HTTP (docs/GUARD.md): the engine's steps as routes, for workers in
//! any language. The server derives the key and the fingerprint, takes the tool's
//! policy from its tools file, and does every write; the worker calls the provider.
//!
//! - `POST /api/v1/guard/admit`: claim, or the decision for an existing key;
//! - `POST /api/v1/guard/settle`: the outcome of the provider call, fenced;
//! - `POST /api/v1/guard/reconcile`: what the lookup after a takeover found;
//! - `GET /api/v1/guard/keys/{key}?after_token=N&wait=S`: a key's state, long-polled.
//!
//! Handlers are thin: the request read once (`request`: the caller's bounds from
//! `limits`, the body by its type in `body`), the caller checked (`access`) before any
//! JSON it sent is grown into a tree, one engine step, the answer (`answer`). Refusals
//! are `GuardError`s, mapped once by `Error::guard`.

mod access;
mod answer;
mod body;
mod context;
mod limits;
mod request;
mod status;
mod wait;

pub use body::MAX_VALUES;
pub use limits::{GuardLimits, Limiter};

use crate::auth::Principal;
use crate::guard::{Guard, WithContext};
use crate::store::Store;
use crate::web::{AppState, Error};
use access::Caller;
use answer::Answer;
use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::routing::{get, post};
use body::{AdmitBody, ReconcileBody, SettleBody, WaitQuery};
use request::GuardRequest;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/guard/admit", post(admit))
        .route("/api/v1/guard/settle", post(settle))
        .route("/api/v1/guard/reconcile", post(reconcile))
        .route("/api/v1/guard/keys", get(status::list))
        .route("/api/v1/guard/keys/{key}", get(key_state))
}

async fn admit(
    State(state): State<AppState>,
    GuardRequest {
        principal,
        body: req,
        ..
    }: GuardRequest<AdmitBody>,
) -> Result<Answer, Error> {
    let caller = Caller::new(&principal, req.worker.as_deref());
    // The token's limits and the tool's policy before the arguments are read as a tree.
    caller.may_call(&req.intent.tenant, &req.intent.tool)?;
    let policy = access::policy(&state, &req.intent.tool)?;
    let call = crate::guard::ToolCall {
        args: req.args()?,
        intent: req.intent,
        business_ref: req.business_ref,
        actor: caller.actor,
    };
    let now = || state.clock.now();
    let admitted = with_context(&state, req.context)
        .admit_call(&call, policy)
        .await
        .and_then(|a| a.refuse())
        .map_err(|e| Error::guard(e, now()))?;
    Ok(Answer::admitted(
        admitted.key.as_str(),
        admitted.admission,
        admitted.args.value,
        policy,
        &call.intent.tool,
        now(),
    ))
}

async fn settle(
    State(state): State<AppState>,
    GuardRequest {
        principal,
        body: req,
        ..
    }: GuardRequest<SettleBody>,
) -> Result<Answer, Error> {
    let caller = Caller::new(&principal, req.worker.as_deref());
    caller.may_touch(&state, &req.key).await?;
    let record = with_context(&state, req.context)
        .settle_call(
            &req.key,
            crate::guard::FencingToken(req.fencing_token),
            req.outcome.read()?,
            req.duration_ms,
            &caller.actor,
        )
        .await
        .map_err(|e| Error::guard(e, state.clock.now()))?;
    Ok(Answer::settled(req.key.as_str(), record.status))
}

async fn reconcile(
    State(state): State<AppState>,
    GuardRequest {
        principal,
        body: req,
        ..
    }: GuardRequest<ReconcileBody>,
) -> Result<Answer, Error> {
    use crate::guard::Reconciled;
    let caller = Caller::new(&principal, req.worker.as_deref());
    caller.may_touch(&state, &req.key).await?;
    let reconciled = with_context(&state, req.context)
        .report_lookup(
            &req.key,
            crate::guard::FencingToken(req.fencing_token),
            req.lookup.read()?,
            req.duration_ms,
            &caller.actor,
        )
        .await
        .map_err(|e| Error::guard(e, state.clock.now()))?;
    let key = req.key.as_str();
    Ok(match reconciled {
        Reconciled::Found { result } => Answer::replay(key, result),
        Reconciled::Unknown { reason } => Answer::unknown(key, reason),
        Reconciled::Resend { record } => {
            let policy = access::policy(&state, &record.intent.tool)?;
            Answer::execute(
                key,
                record.fencing_token.0,
                record.lease_until,
                record.business_args,
                policy,
                &record.intent.tool,
            )
        }
    })
}

/// The guard writing the caller's `context` (if it sent one) into each attempt row.
fn with_context(state: &AppState, context: Option<serde_json::Value>) -> Guard<WithContext<Store>> {
    let store = state.guard.store().clone();
    state.guard.over(WithContext::new(store, context))
}

async fn key_state(
    State(state): State<AppState>,
    principal: Principal,
    Path(key): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Answer, Error> {
    // A slot for the reads; the long poll itself waits without one (it holds no body
    // and reads one record a second), so parked runs do not crowd out the calls.
    let slot = request::slot(&state, &principal)?;
    let key = body::parse_key(&key)?;
    let query = WaitQuery::parse(query.as_deref())?;
    let caller = Caller::new(&principal, None);
    caller.may_touch(&state, &key).await?;
    wait::key_state(&state, &key, query, slot).await
}
