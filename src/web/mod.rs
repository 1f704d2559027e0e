//! HTTP: one [`AppState`], one router per page family, one error type.

mod assets;
pub mod auth;
pub mod auth_log;
pub mod checkpoints;
mod error;
mod export;
pub mod filters;
mod guard;
mod health;
mod layout;
mod limits;
/// Who reads a page: an extractor for page handlers (the demo's too).
pub use auth::Viewer;
/// The page layout, for pages outside `web` (the demo's provider lookup).
pub use layout::Layout;
mod links;
mod login;
mod metrics;
pub mod openapi;
mod pages;
pub mod problem;
mod refusal;
pub mod server;
mod site;
mod slow_bodies;
/// The Host and Origin rules of every route, for another HTTP edge (the MCP proxy).
pub use metrics::exposition as metrics_exposition;
pub use site::check as site_check;

pub use error::Error;
pub use guard::{GuardLimits, MAX_VALUES as GUARD_MAX_VALUES};
pub use site::{check as check_site, same_site_only};

use crate::auth::Authenticator;
use crate::auth::sessions::{SessionSettings, Sessions};
use crate::auth::throttle::LoginLimiter;
use crate::guard::{Clock, Guard, GuardSettings, SystemClock, ToolPolicies};
use crate::metrics::Metrics;
use crate::store::Store;
use axum::Router;
use std::sync::Arc;

/// Concurrent export downloads by default: a quarter of the default pool of 16.
pub const MAX_EXPORTS: usize = 4;

/// `--hsts`: browsers use only HTTPS for this host for a year after seeing it. Not
/// `includeSubDomains` (other hosts under the same name are not ours to decide for),
/// nor `preload`.
pub(crate) const HSTS: &str = "max-age=31536000";

/// Everything a handler needs, shared through `State`: one `Arc`, so the clone each
/// `from_fn_with_state` middleware and each `State` extractor makes per request is a
/// reference count, not a dozen (profiled on the guard's routes: docs/PERFORMANCE.md,
/// "Guard over HTTP"). Handlers read the fields through `Deref`; only the builders
/// below change them, before the router is built.
#[derive(Debug, Clone)]
pub struct AppState(Arc<Shared>);

/// The fields of [`AppState`].
#[derive(Debug, Clone)]
pub struct Shared {
    pub store: Store,
    /// What /metrics renders; the tailer and the backlog refresher update it.
    pub metrics: Arc<Metrics>,
    /// What pages call "now" (relative times, leases, retention, the overview's windows).
    pub clock: Arc<dyn Clock>,
    /// The overview's counts, reused for half a minute.
    pub(crate) overview: pages::OverviewCache,
    /// Who may do what (docs/AUTH.md). Without an auth file: the local user is admin.
    pub auth: Arc<Authenticator>,
    /// `--cookie-secure`: cookies only over HTTPS, with `__Host-` names.
    pub cookie_secure: bool,
    /// Built-in users' sign-in sessions, in the database (docs/AUTH.md, Sessions).
    pub sessions: Arc<Sessions>,
    /// `--hsts`: the `Strict-Transport-Security` value sent on every response; None
    /// (the default): not sent.
    pub hsts: Option<axum::http::HeaderValue>,
    /// The one guard of this process, on `clock`: resolves and the guard routes go
    /// through it, and it wakes the long polls of `/api/v1/guard/keys/{key}`.
    pub guard: Guard<Store>,
    /// The tools file (`--tools-file`): each guarded tool's policy. Empty: every tool
    /// is refused over HTTP.
    pub tools: Arc<ToolPolicies>,
    /// Password checks at once, and failures per user and address (docs/AUTH.md).
    pub logins: Arc<LoginLimiter>,
    /// Downloads under `/export/` at once: each holds a pooled connection and a
    /// snapshot while its client reads, so a few stalled clients must not take the
    /// pool from the pages (docs/AUTH.md, Security).
    pub exports: Arc<tokio::sync::Semaphore>,
    /// Refused requests: counted, and logged without flooding (docs/AUTH.md).
    pub auth_log: Arc<auth_log::AuthLog>,
    /// The checkpointer of a server that signs (`--signing-key`): its key signs export
    /// manifests, and `?checkpoint=true` takes a checkpoint before an export.
    pub checkpointer: Option<crate::evidence::Checkpointer<crate::store::Store>>,
    /// Each guard caller's body size, requests in progress and rate (web/guard/limits.rs).
    pub guard_limiter: Arc<guard::Limiter>,
    /// Where the key page sends a person to look a key up at its provider: a path the
    /// key is appended to. Only the demo's provider has one (`/demo/provider/`).
    pub provider_lookup: Option<&'static str>,
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl AppState {
    /// The fields, for a builder: copied first only if a router already shares them.
    fn fields(&mut self) -> &mut Shared {
        Arc::make_mut(&mut self.0)
    }

    /// State with metrics of its own (nothing updates them unless a tailer is given
    /// the same `Arc`: see [`AppState::with_metrics`]).
    pub fn new(store: Store) -> Self {
        Self::with_metrics(store, Arc::new(Metrics::default()))
    }

    pub fn with_metrics(store: Store, metrics: Arc<Metrics>) -> Self {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let auth_log = Arc::new(auth_log::AuthLog::new(metrics.clone()));
        Self(Arc::new(Shared {
            guard: guard_on(&store, &clock, GuardSettings::default(), &metrics),
            sessions: Arc::new(Sessions::new(store.clone(), SessionSettings::default())),
            store,
            metrics,
            clock,
            overview: pages::OverviewCache::default(),
            auth: Arc::new(Authenticator::new(None, None)),
            cookie_secure: false,
            hsts: None,
            tools: Arc::default(),
            logins: Arc::new(LoginLimiter::default()),
            exports: Arc::new(tokio::sync::Semaphore::new(MAX_EXPORTS)),
            auth_log,
            checkpointer: None,
            guard_limiter: Arc::default(),
            provider_lookup: None,
        }))
    }

    /// The same state signing exports with `checkpointer`'s key (docs/EXPORT.md).
    pub fn with_checkpointer(
        mut self,
        checkpointer: Option<crate::evidence::Checkpointer<crate::store::Store>>,
    ) -> Self {
        self.fields().checkpointer = checkpointer;
        self
    }

    /// The same state allowing `n` concurrent export downloads.
    pub fn with_max_exports(mut self, n: usize) -> Self {
        self.fields().exports = Arc::new(tokio::sync::Semaphore::new(n));
        self
    }

    /// The same state with authentication (see `cli::AuthArgs::authenticator`).
    pub fn with_auth(mut self, auth: Authenticator, cookie_secure: bool) -> Self {
        let f = self.fields();
        f.auth = Arc::new(auth);
        f.cookie_secure = cookie_secure;
        self
    }

    /// The same state with sessions lasting as `settings` says.
    pub(crate) fn with_session_settings(mut self, settings: SessionSettings) -> Self {
        let f = self.fields();
        f.sessions = Arc::new(Sessions::new(f.store.clone(), settings));
        self
    }

    /// The same state with these sessions (tests put them on a manual clock).
    pub fn with_sessions(mut self, sessions: Sessions) -> Self {
        self.fields().sessions = Arc::new(sessions);
        self
    }

    /// The same state sending `Strict-Transport-Security` (`--hsts`) or not.
    pub fn with_hsts(mut self, on: bool) -> Self {
        self.fields().hsts = on.then(|| axum::http::HeaderValue::from_static(HSTS));
        self
    }

    /// The same state with another login limiter (tests size its slots and thresholds).
    pub fn with_login_limiter(mut self, logins: LoginLimiter) -> Self {
        self.fields().logins = Arc::new(logins);
        self
    }

    /// The same state on another clock (tests move it past leases and retention).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        let f = self.fields();
        f.guard = guard_on(&f.store, &clock, f.guard.settings().clone(), &f.metrics);
        f.clock = clock;
        self
    }

    /// The same state with these bounds on each guard caller (`serve --guard-*`).
    pub fn with_guard_limits(mut self, limits: GuardLimits) -> Self {
        self.fields().guard_limiter = Arc::new(guard::Limiter::new(limits));
        self
    }

    /// The same state with a provider lookup on every key page: `prefix` + the key.
    pub fn with_provider_lookup(mut self, prefix: &'static str) -> Self {
        self.fields().provider_lookup = Some(prefix);
        self
    }

    /// The same state with the tools file's policies and the guard's settings.
    pub fn with_guard(mut self, tools: ToolPolicies, settings: GuardSettings) -> Self {
        let f = self.fields();
        f.guard = guard_on(&f.store, &f.clock, settings, &f.metrics);
        f.tools = Arc::new(tools);
        self
    }
}

/// The process's guard, telling `metrics` of the refusals it answers without a row.
fn guard_on(
    store: &Store,
    clock: &Arc<dyn Clock>,
    settings: GuardSettings,
    metrics: &Arc<Metrics>,
) -> Guard<Store> {
    Guard::new(store.clone(), clock.clone(), settings)
        .reporting_refusals_not_logged(metrics.clone())
}

pub fn app(state: AppState) -> Router {
    app_with(state, Router::new())
}

/// [`app`] with `extra` routes (their state applied) behind the same layers: the
/// demo's `/demo/stats` is authenticated, host-checked and gets the security headers
/// like every other route.
pub fn app_with(state: AppState, extra: Router) -> Router {
    Router::new()
        .merge(health::router())
        .merge(pages::router())
        .merge(export::router())
        .merge(login::router())
        .merge(metrics::router())
        .merge(guard::router())
        .merge(openapi::router())
        .merge(assets::router())
        .fallback(error::no_such_page)
        .with_state(state.clone())
        .merge(extra)
        // A panic becomes a 500 page; around it, what every request goes through.
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            error::panicked,
        ))
        .layer(axum::middleware::from_fn_with_state(state, every_request))
        .layer(tower_http::trace::TraceLayer::new_for_http())
}

/// Middleware, outer to inner: every response, a refusal included, gets the security
/// headers; errors under /api/ and /export/ become problem documents; a request for
/// another host name or a state-changing one from another site is refused (site.rs);
/// then the caller is authenticated before any route runs (auth.rs). One middleware,
/// not four layers: each `from_fn` layer costs a state clone and a boxed future per
/// request (docs/PERFORMANCE.md, "Guard over HTTP").
async fn every_request(
    axum::extract::State(state): axum::extract::State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let script_path = error::is_script_path(request.uri().path());
    let hsts = state.hsts.clone();
    let handled = async move {
        match site::same_site_only(&state, &request) {
            Ok(()) => auth::authenticate(axum::extract::State(state), request, next).await,
            Err(refused) => refused.into_response(),
        }
    };
    let mut response = error::json_under_api(script_path, handled).await;
    auth::security_headers(&mut response, hsts.as_ref());
    response
}
