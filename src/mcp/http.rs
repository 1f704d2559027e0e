//! The Streamable HTTP downstream (`mcp-proxy --listen`): rmcp's service at `/mcp`,
//! behind the same rules as `serve` (docs/AUTH.md): the Host and Origin checks of
//! `web/site.rs`, and, with an auth file, a bearer token whose principal may call the
//! guard (the `worker` role, or `admin`), limited to its tenants and tools. Without an
//! auth file only a loopback address is accepted (`AuthArgs::authenticator`).
//! `/metrics` is the proxy's Prometheus text: like `serve`'s, without credentials and
//! under any Host name (a probe path of the site rules), so Prometheus scrapes it as
//! it scrapes `serve`.

use super::server::{Proxy, ProxyState};
use crate::auth::{Authenticator, Permission};
use crate::metrics::mcp::McpMetrics;
use axum::Router;
use axum::extract::{ConnectInfo, Request};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::net::SocketAddr;
use std::sync::Arc;

/// The router: `/mcp` for every MCP session, `/metrics` for Prometheus.
pub fn router(
    shared: Arc<ProxyState>,
    auth: Arc<Authenticator>,
    metrics: Arc<McpMetrics>,
) -> Router {
    // The Host check is ours (the site rules every `serve` route follows), so
    // rmcp's own loopback-only default is off.
    let config = StreamableHttpServerConfig::default().disable_allowed_hosts();
    let service = StreamableHttpService::new(
        move || {
            Ok(Proxy::new(
                shared.clone(),
                super::server::new_session_id("http"),
            ))
        },
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let site_auth = auth.clone();
    Router::new()
        .nest_service("/mcp", service)
        .layer(middleware::from_fn(move |req, next| {
            gate(auth.clone(), req, next)
        }))
        .merge(metrics_router(metrics))
        .layer(middleware::from_fn(move |req, next| {
            site(site_auth.clone(), req, next)
        }))
}

/// `/metrics` alone: merged into the `--listen` router, or served by itself on
/// `--metrics-listen` beside a stdio session.
pub fn metrics_router(metrics: Arc<McpMetrics>) -> Router {
    Router::new().route(
        "/metrics",
        get(move || async move { crate::web::metrics_exposition(metrics.render()) }),
    )
}

/// The site rules every route follows (Host, Origin), as `serve`'s.
async fn site(auth: Arc<Authenticator>, req: Request, next: Next) -> Response {
    if let Err(e) = crate::web::site_check(
        auth.allowed_hosts(),
        !auth.is_configured(),
        req.method(),
        req.uri(),
        req.headers(),
    ) {
        return e.into_response();
    }
    next.run(req).await
}

/// Who is calling `/mcp` (after [`site`]); the principal rides in the request's
/// extensions to the tool calls (rmcp hands them the request's parts).
async fn gate(auth: Arc<Authenticator>, mut req: Request, next: Next) -> Response {
    let refused = |status: StatusCode, text: String| (status, text).into_response();
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    let now = chrono::Utc::now().timestamp();
    let principal = match auth.authenticate(req.headers(), peer, now) {
        Ok(Some(p)) => p,
        Ok(None) => {
            return refused(
                StatusCode::UNAUTHORIZED,
                "a bearer token with the worker role is required (Authorization: Bearer …; docs/AUTH.md)".into(),
            );
        }
        Err(e) => return refused(StatusCode::UNAUTHORIZED, e.to_string()),
    };
    if !principal.can(Permission::Guard) {
        return refused(
            StatusCode::FORBIDDEN,
            format!(
                "{:?} may not call the guard: the MCP proxy needs a token with the worker role (docs/AUTH.md)",
                principal.name
            ),
        );
    }
    req.extensions_mut().insert(principal);
    next.run(req).await
}
