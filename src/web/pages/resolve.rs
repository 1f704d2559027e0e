//! `POST /keys/{key}/resolve`: a person records what happened to an undecided key.
//!
//! Two steps, both posts of the same form. The first shows a confirmation page: the
//! key's state now and exactly what will change, computed by the guard without
//! writing (`Guard::preview_resolve`). The second (`confirm=yes`) calls
//! `Guard::resolve` with the fencing token the person saw, so if a worker or another
//! person acted in between, nothing is overwritten and the person sees the key's state
//! now (409). Refusals map to statuses in one place (`From<GuardError> for Error`).

use super::params;
use super::{Badge, Layout, Retention, lease_note, status_badge};
use crate::auth::Principal;
use crate::guard::{GuardError, IdempotencyKey, Record, Resolution, ResolveRequest, Status};
use crate::web::auth::{Csrf, CsrfForm, checked_form, require_resolve};
use crate::web::filters::{When, compact, pretty, short_key, when};
use crate::web::{AppState, Error, Viewer};
use askama::Template;
use axum::Router;
use axum::extract::rejection::FormRejection;
use axum::extract::{Form, Path, State};
use axum::http::StatusCode;
use axum::middleware::from_fn;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::post;
use chrono::{DateTime, Utc};
use serde::Deserialize;

pub fn router() -> Router<AppState> {
    Router::new().route(
        "/keys/{key}/resolve",
        post(resolve).layer(from_fn(require_resolve)),
    )
}

/// The form as typed; every field optional so a bad one is named, not a rejection.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ResolveForm {
    pub resolution: Option<String>,
    pub reason: Option<String>,
    pub evidence: Option<String>,
    pub result: Option<String>,
    pub expected_token: Option<String>,
    /// `yes` on the confirmation page's button.
    pub confirm: Option<String>,
    pub csrf_token: Option<String>,
}

impl CsrfForm for ResolveForm {
    fn csrf_token(&self) -> Option<&str> {
        self.csrf_token.as_deref()
    }
}

impl ResolveForm {
    /// The guard's request, or the first field that cannot be read. A confirming post
    /// (`confirm`) must say which state the person confirmed: its fencing token.
    fn request(&self, actor: String, confirm: bool) -> Result<ResolveRequest, Error> {
        let resolution = params::parse_resolution(self.resolution.as_deref())?;
        let text = |v: &Option<String>| {
            v.as_deref()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        let result = match text(&self.result) {
            Some(json) => Some(
                serde_json::from_str(&json)
                    .map_err(|e| Error::bad_request("result", format!("is not valid JSON: {e}")))?,
            ),
            None => None,
        };
        let expected_token = match text(&self.expected_token) {
            Some(t) => Some(t.parse().map_err(|_| {
                Error::bad_request(
                    "expected_token",
                    "expected a whole number (a fencing token)",
                )
            })?),
            None => None,
        };
        let req = ResolveRequest {
            resolution,
            reason: text(&self.reason).unwrap_or_default(),
            evidence: text(&self.evidence),
            result,
            actor,
            expected_token,
        };
        req.validate()?;
        if confirm && req.expected_token.is_none() {
            return Err(Error::bad_request(
                "expected_token",
                "the confirmation must carry the fencing token you saw; start again from the key page",
            ));
        }
        Ok(req)
    }
}

/// A key's state as the resolve pages show it.
pub struct KeyStateView {
    pub key: String,
    pub short: String,
    pub tool: String,
    pub business_ref: Option<String>,
    pub badge: Badge,
    pub token: i64,
    pub lease: When,
    pub lease_note: &'static str,
    pub retention: When,
    /// "23 h left" or "forgotten 3 h ago".
    pub retention_left: String,
    pub past_retention: bool,
    pub release_approved: bool,
}

impl KeyStateView {
    pub fn new(r: &Record, now: DateTime<Utc>) -> Self {
        let retention = Retention::new(r.resend_safe_until, r.provider_retention_until, now);
        Self {
            key: r.key.to_string(),
            short: short_key(r.key.as_str()),
            tool: r.intent.tool.clone(),
            business_ref: r.business_ref.clone(),
            badge: status_badge(r.status, r.lease_expired(now)),
            token: r.fencing_token.0,
            lease: when(r.lease_until, now),
            lease_note: lease_note(r.lease_state(now)),
            retention: when(r.provider_retention_until, now),
            retention_left: retention.long,
            past_retention: retention.past,
            release_approved: r.release_approved,
        }
    }
}

/// What the resolve form (templates/resolve_form.html) needs.
pub struct FormView {
    pub action: String,
    pub csrf_token: String,
    /// The token the person sees now; the confirmation carries it to the guard.
    pub expected_token: i64,
    /// Release is offered only while the provider still remembers the key.
    pub release_allowed: bool,
    pub retention_left: String,
    pub resolution: String,
    pub reason: String,
    pub evidence: String,
    pub result: String,
    /// The field to correct and why, after a 400.
    pub error: Option<(&'static str, String)>,
}

impl FormView {
    pub fn new(r: &Record, now: DateTime<Utc>, csrf_token: String) -> Self {
        let state = KeyStateView::new(r, now);
        Self {
            action: format!("/keys/{}/resolve", r.key),
            csrf_token,
            expected_token: r.fencing_token.0,
            release_allowed: !state.past_retention,
            retention_left: state.retention_left,
            resolution: String::new(),
            reason: String::new(),
            evidence: String::new(),
            result: String::new(),
            error: None,
        }
    }

    fn with_values(mut self, f: &ResolveForm, error: (&'static str, String)) -> Self {
        let v = |o: &Option<String>| o.clone().unwrap_or_default();
        self.resolution = v(&f.resolution);
        self.reason = v(&f.reason);
        self.evidence = v(&f.evidence);
        self.result = v(&f.result);
        if let Some(t) = f
            .expected_token
            .as_deref()
            .and_then(|t| t.trim().parse().ok())
        {
            self.expected_token = t;
        }
        self.error = Some(error);
        self
    }

    /// For the template: is this resolution the one chosen?
    pub fn chosen(&self, value: &str) -> bool {
        self.resolution == value
    }
}

#[derive(Template)]
#[template(path = "resolve.html")]
struct FormPage {
    layout: Layout,
    s: KeyStateView,
    form: FormView,
}

/// One line of "what will change".
pub struct FieldChange {
    pub field: &'static str,
    pub before: String,
    pub after: String,
}

fn changes(before: &Record, after: &Record, now: DateTime<Utc>) -> Vec<FieldChange> {
    let mut out = Vec::new();
    let mut add = |field, b: String, a: String| {
        if b != a {
            out.push(FieldChange {
                field,
                before: b,
                after: a,
            });
        }
    };
    add(
        "status",
        before.status.to_string(),
        after.status.to_string(),
    );
    add(
        "fencing_token",
        before.fencing_token.to_string(),
        after.fencing_token.to_string(),
    );
    let at = |t| when(t, now).utc;
    add("lease_until", at(before.lease_until), at(after.lease_until));
    let json = |v: &Option<serde_json::Value>| v.as_ref().map_or("none".into(), compact);
    add("result", json(&before.result), json(&after.result));
    let text = |v: &Option<String>| v.clone().unwrap_or_else(|| "none".into());
    add("error", text(&before.error), text(&after.error));
    add(
        "release_approved",
        before.release_approved.to_string(),
        after.release_approved.to_string(),
    );
    out
}

#[derive(Template)]
#[template(path = "resolve_confirm.html")]
struct ResolveConfirmPage {
    layout: Layout,
    s: KeyStateView,
    resolution: &'static str,
    /// One sentence on what the resolution means for the next retry.
    meaning: &'static str,
    reason: String,
    evidence: Option<String>,
    result: Option<String>,
    changes: Vec<FieldChange>,
    actor: String,
    /// Carried unchanged to the second post.
    form: ResolveForm,
    expected_token: i64,
    csrf_token: String,
}

impl ResolveConfirmPage {
    /// Step 1 of a resolve: what `req` would change, from `before` to `after`.
    fn new(
        viewer: &Viewer,
        before: &Record,
        after: &Record,
        req: &ResolveRequest,
        form: ResolveForm,
        csrf_token: String,
        now: DateTime<Utc>,
    ) -> Self {
        Self {
            layout: Layout::new(
                format!("Confirm: {}", label(req.resolution)),
                "keys",
                viewer,
            ),
            s: KeyStateView::new(before, now),
            resolution: label(req.resolution),
            meaning: meaning(req.resolution),
            changes: changes(before, after, now),
            reason: req.reason.clone(),
            evidence: req.evidence.clone(),
            result: after
                .result
                .as_ref()
                .filter(|_| req.resolution == Resolution::Done)
                .map(pretty),
            actor: req.actor.clone(),
            expected_token: before.fencing_token.0,
            form,
            csrf_token,
        }
    }
}

pub fn meaning(r: Resolution) -> &'static str {
    match r {
        Resolution::Done => {
            "The effect happened: retries get the result below and nothing is sent again."
        }
        Resolution::Failed => {
            "The effect never happened and will not: retries get this failure and nothing is sent."
        }
        Resolution::Release => {
            "The effect did not happen: the next retry resends with the same key (the provider still remembers it, so a resend cannot pay twice)."
        }
    }
}

pub fn label(r: Resolution) -> &'static str {
    match r {
        Resolution::Done => "Mark DONE",
        Resolution::Failed => "Mark FAILED",
        Resolution::Release => "Release for resend",
    }
}

#[derive(Template)]
#[template(path = "resolve_refused.html")]
struct RefusedPage {
    layout: Layout,
    status: u16,
    title: &'static str,
    message: String,
    /// The key as it is now.
    s: KeyStateView,
    /// Whether the guard wrote the refused try to the attempt log (only the
    /// confirming post reaches the guard's write path).
    logged: bool,
}

async fn resolve(
    State(state): State<AppState>,
    viewer: Viewer,
    principal: Principal,
    csrf: Csrf,
    Path(key): Path<String>,
    form: Result<Form<ResolveForm>, FormRejection>,
) -> Result<Response, Error> {
    let form = checked_form(&state, &principal, form)?;
    let key = params::parse_key(&key)?;
    let now = state.clock.now();
    let record = record_of(&state, &key).await?;
    let confirm = form.confirm.as_deref() == Some("yes");
    let req = match form.request(principal.actor(), confirm) {
        Ok(req) => req,
        Err(e) => return form_again(&viewer, &record, &form, e, now, csrf.token),
    };
    // Step 1 writes nothing (the guard says what it would do); step 2 writes.
    let done = if confirm {
        state.guard.resolve(&key, &req).await.map(|_| None)
    } else {
        state.guard.preview_resolve(&record, &req).map(Some)
    };
    match done {
        Ok(Some(after)) => {
            let page =
                ResolveConfirmPage::new(&viewer, &record, &after, &req, form, csrf.token, now);
            Ok(Html(page.render()?).into_response())
        }
        Ok(None) => Ok(Redirect::to(&format!("/keys/{key}#timeline-h")).into_response()),
        Err(e) => refused(&state, &viewer, &key, e, &form, csrf.token, confirm).await,
    }
}

async fn record_of(state: &AppState, key: &IdempotencyKey) -> Result<Record, Error> {
    state
        .store
        .record(key)
        .await?
        .ok_or_else(|| Error::NotFound(format!("No key {key} is recorded.")))
}

/// 400: the form again with the values typed and the field to correct.
fn form_again(
    viewer: &Viewer,
    record: &Record,
    form: &ResolveForm,
    e: Error,
    now: DateTime<Utc>,
    csrf_token: String,
) -> Result<Response, Error> {
    let Error::BadRequest { field, message } = e else {
        return Err(e);
    };
    let page = FormPage {
        layout: Layout::new(
            format!("Resolve key {}", short_key(record.key.as_str())),
            "keys",
            viewer,
        ),
        s: KeyStateView::new(record, now),
        form: FormView::new(record, now, csrf_token).with_values(form, (field, message)),
    };
    Ok((StatusCode::BAD_REQUEST, Html(page.render()?)).into_response())
}

/// A refusal: 409 or 422 with the key's state now; 400 re-shows the form.
async fn refused(
    state: &AppState,
    viewer: &Viewer,
    key: &IdempotencyKey,
    e: GuardError,
    form: &ResolveForm,
    csrf_token: String,
    logged: bool,
) -> Result<Response, Error> {
    let now = state.clock.now();
    let current = record_of(state, key).await?;
    let error = Error::from(e);
    let status = error.status();
    let title = match (&error, status) {
        (Error::BadRequest { .. }, _) => {
            return form_again(viewer, &current, form, error, now, csrf_token);
        }
        (_, StatusCode::CONFLICT) if current.status == Status::InProgress => {
            "A worker holds this key"
        }
        (_, StatusCode::CONFLICT) => "Someone else acted first",
        (_, StatusCode::UNPROCESSABLE_ENTITY) => "This key cannot be resolved that way",
        _ => return Err(error),
    };
    let page = RefusedPage {
        layout: Layout::new(title, "keys", viewer),
        status: status.as_u16(),
        title,
        message: error.to_string(),
        s: KeyStateView::new(&current, now),
        logged,
    };
    Ok((status, Html(page.render()?)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(resolution: &str, reason: &str, evidence: &str, result: &str) -> ResolveForm {
        ResolveForm {
            resolution: Some(resolution.into()),
            reason: Some(reason.into()),
            evidence: Some(evidence.into()),
            result: Some(result.into()),
            ..ResolveForm::default()
        }
    }

    fn field(f: &ResolveForm) -> &'static str {
        match f.request("sam".into(), false) {
            Err(Error::BadRequest { field, .. }) => field,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn each_bad_field_is_named() {
        assert_eq!(field(&form("", "r", "", "")), "resolution");
        assert_eq!(field(&form("refund", "r", "", "")), "resolution");
        assert_eq!(field(&form("done", " ", "rf_1", "")), "reason");
        assert_eq!(field(&form("done", "r", "", "")), "evidence");
        assert_eq!(field(&form("done", "r", "rf_1", "{nope")), "result");
        assert_eq!(field(&form("failed", "r", "", "{}")), "result");
        let bad_token = ResolveForm {
            expected_token: Some("three".into()),
            ..form("failed", "r", "", "")
        };
        assert_eq!(field(&bad_token), "expected_token");
    }

    #[test]
    fn a_good_form_becomes_the_guards_request() {
        let f = ResolveForm {
            expected_token: Some(" 3 ".into()),
            ..form(
                "done",
                " checked ",
                " rf_8XM1 ",
                "{\"refund_id\":\"rf_8XM1\"}",
            )
        };
        let req = f.request("sam".into(), false).unwrap();
        assert_eq!(req.resolution, Resolution::Done);
        assert_eq!(req.reason, "checked");
        assert_eq!(req.evidence.as_deref(), Some("rf_8XM1"));
        assert_eq!(
            req.result,
            Some(serde_json::json!({"refund_id": "rf_8XM1"}))
        );
        assert_eq!(req.expected_token, Some(crate::guard::FencingToken(3)));
        assert_eq!(req.actor, "sam");
    }
}
