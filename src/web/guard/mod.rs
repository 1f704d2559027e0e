//! The guard over HTTP (docs/GUARD.md): the engine's steps as routes, for workers in
//! any language. The server derives the key and the fingerprint, takes the tool's
//! policy from its tools file, and does every write; the worker calls the provider.
//!
//! - `POST /api/v1/guard/admit`: claim, or the decision for an existing key;
//! - `POST /api/v1/guard/settle`: the outcome of the provider call, fenced;
//! - `POST /api/v1/guard/reconcile`: what the lookup after a takeover found;
//! - `GET /api/v1/guard/keys/{key}?after_token=N&wait=S`: a key's state, long-polled.
//!
//! Handlers are thin: parse (`body`), check the caller (`access`), one engine step,
//! answer (`answer`). Refusals are `GuardError`s, mapped once by `Error::guard`.

mod access;
mod answer;
mod body;
mod status;
mod wait;
mod wire;

use crate::auth::Principal;
use crate::web::{AppState, Error};
use access::{Caller, require_json};
use answer::Answer;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::routing::{get, post};
use body::{AdmitBody, ReconcileBody, SettleBody, WaitQuery};

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
    principal: Principal,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Answer, Error> {
    require_json(&headers)?;
    let req = AdmitBody::parse(&body)?;
    let caller = Caller::new(&principal, req.worker.as_deref());
    caller.may_call(&req.intent.tenant, &req.intent.tool)?;
    let policy = access::policy(&state, &req.intent.tool)?;
    let call = crate::guard::ToolCall {
        intent: req.intent,
        business_ref: req.business_ref,
        args: req.args,
        actor: caller.actor,
    };
    let now = || state.clock.now();
    let admitted = state
        .guard
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
    principal: Principal,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Answer, Error> {
    require_json(&headers)?;
    let req = SettleBody::parse(&body)?;
    let caller = Caller::new(&principal, req.worker.as_deref());
    caller.may_touch(&state, &req.key).await?;
    let record = state
        .guard
        .settle_call(
            &req.key,
            crate::guard::FencingToken(req.fencing_token),
            req.outcome,
            req.duration_ms,
            &caller.actor,
        )
        .await
        .map_err(|e| Error::guard(e, state.clock.now()))?;
    Ok(Answer::settled(req.key.as_str(), record.status))
}

async fn reconcile(
    State(state): State<AppState>,
    principal: Principal,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Answer, Error> {
    use crate::guard::Reconciled;
    require_json(&headers)?;
    let req = ReconcileBody::parse(&body)?;
    let caller = Caller::new(&principal, req.worker.as_deref());
    caller.may_touch(&state, &req.key).await?;
    let reconciled = state
        .guard
        .report_lookup(
            &req.key,
            crate::guard::FencingToken(req.fencing_token),
            req.lookup,
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

async fn key_state(
    State(state): State<AppState>,
    principal: Principal,
    Path(key): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Answer, Error> {
    let key = body::parse_key(&key)?;
    let query = WaitQuery::parse(query.as_deref())?;
    let caller = Caller::new(&principal, None);
    caller.may_touch(&state, &key).await?;
    wait::key_state(&state, &key, query).await
}
