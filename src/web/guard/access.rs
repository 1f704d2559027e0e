//! Who calls the guard, for which tenants and tools, and under which policy.

use crate::auth::{Principal, Scope, Via};
use crate::guard::{GuardError, IdempotencyKey, ToolPolicy};
use crate::web::problem::Problem;
use crate::web::{AppState, Error};
use axum::http::StatusCode;
use std::borrow::Cow;

/// The caller as the attempt log records it, and what its token may touch.
pub(crate) struct Caller<'a> {
    /// `token:NAME/worker-3`, or `local/worker-3` without an auth file: the caller's
    /// identity plus the worker id it gives, never a person's name.
    pub actor: String,
    name: &'a str,
    scope: &'a Scope,
}

impl<'a> Caller<'a> {
    pub fn new(principal: &'a Principal, worker: Option<&str>) -> Self {
        // Borrowed for the local admin: one allocation for the actor, not two.
        let who: Cow<str> = match principal.via {
            Via::Local => "local".into(),
            _ => principal.actor().into(),
        };
        Self {
            actor: match worker {
                Some(w) => format!("{who}/{w}"),
                None => who.into_owned(),
            },
            name: &principal.name,
            scope: &principal.scope,
        }
    }

    /// 403 unless a key of `tenant` and `tool` is inside the token's scope.
    pub(crate) fn may_call(&self, tenant: &str, tool: &str) -> Result<(), Error> {
        self.scope.check(tenant, tool).map_err(|outside| {
            let value = if outside == "tenant" { tenant } else { tool };
            Error::Forbidden(format!(
                "The token {:?} may not call the guard for {outside} {value:?} (its `{outside}s` in the auth file). Nothing was written.",
                self.name
            ))
        })
    }

    /// [`Caller::may_call`] for an existing key: a limited token reads the key's
    /// tenant and tool first (they never change).
    pub(crate) async fn may_touch(
        &self,
        state: &AppState,
        key: &IdempotencyKey,
    ) -> Result<(), Error> {
        if !self.scope.is_limited() {
            return Ok(());
        }
        match state.store.record(key).await? {
            // Without the key's tenant or tool: a limited token must not learn them.
            Some(r) => self
                .scope
                .check(&r.intent.tenant, &r.intent.tool)
                .map_err(|_| {
                    Error::Forbidden(format!(
                        "The token {:?} may not touch key {key}: its tenant or tool is outside the \
                     token's `tenants`/`tools` in the auth file. Nothing was written.",
                        self.name
                    ))
                }),
            None => Err(Error::guard(
                GuardError::NotFound(key.to_string()),
                state.clock.now(),
            )),
        }
    }
}

/// The policy of `tool` from the tools file, or 400 `unknown_tool`.
pub fn policy<'s>(state: &'s AppState, tool: &str) -> Result<&'s ToolPolicy, Error> {
    state.tools.get(tool).ok_or_else(|| {
        Error::refused(
            Problem::new(
                StatusCode::BAD_REQUEST,
                "unknown_tool",
                "Unknown tool",
                format!(
                    "The tool {tool:?} is not in the server's tools file and no default policy is configured; add [tools.{tool}] to the tools file (docs/OPERATIONS.md)."
                ),
            )
            .field("intent.tool"),
        )
    })
}
