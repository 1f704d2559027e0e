//! Only this site's own pages, under a name this server answers to, get
//! through (docs/AUTH.md, "Security"). It runs before authentication, on every route
//! (pages, `/api/…`, `/export/…`, the login, and routes added later), so a route cannot
//! forget it.
//!
//! - **Host** (no auth file only): everyone who reaches the port is the local admin,
//!   so a web page that points its own name at 127.0.0.1 (DNS rebinding) must not get
//!   an answer. Only loopback names and `--allowed-host` names are served; any other
//!   `Host` gets 421. A request without a `Host` (an in-process call) passes: every
//!   browser sends one. With an auth file a rebound page has no session and gets
//!   nothing it could not get anyway, so the name is not checked.
//! - **Origin and Sec-Fetch-Site** (every mode, every state-changing method): a
//!   browser names the site a request came from; one from another site, including a
//!   sibling subdomain, is refused with 403 before anything is read or written.
//!   Clients that send neither (curl, scripts, the guard's harnesses) pass, and are
//!   held to the authentication and CSRF rules as before.
//!
//! Probes are exempt from the Host check: `/healthz`, `/readyz` and `/metrics` (a
//! kubelet or Prometheus addresses the pod by its IP) and `/static/*` (the stylesheet
//! of the refusal page itself). They are public in every mode and change nothing.

use super::{AppState, Error};
use crate::auth::AllowedHosts;
use axum::extract::Request;
use axum::http::{HeaderMap, Method, Uri, header};

/// [`check`] for a request to this app, before authentication
/// (`super::every_request`).
pub fn same_site_only(state: &AppState, request: &Request) -> Result<(), Error> {
    let local_admin = !state.auth.is_configured();
    let checked = check(
        state.auth.allowed_hosts(),
        local_admin,
        request.method(),
        request.uri(),
        request.headers(),
    );
    if let Err(e) = &checked {
        // Logged here, through the limiter: a flood of such requests must not flood
        // the log (super::auth_log). Header values are quoted by `?`.
        let reason = match e {
            Error::MisdirectedHost(_) => "foreign_host",
            _ => "cross_site",
        };
        let header = |name: &str| request.headers().get(name);
        state.auth_log.refused(reason, || {
            tracing::info!(
                reason,
                host = ?header("host"),
                origin = ?header("origin"),
                sec_fetch_site = ?header("sec-fetch-site"),
                "refused: another site's request or a name this server does not answer to"
            );
        });
    }
    checked
}

/// Refuses a request addressed to a name this server does not answer to (when
/// `check_host`), and a state-changing request that a browser says came from
/// another site.
pub fn check(
    hosts: &AllowedHosts,
    check_host: bool,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
) -> Result<(), Error> {
    // HTTP/2 and absolute-form requests carry the name in the URI, HTTP/1.1 in `Host`.
    let host = uri
        .authority()
        .map(|a| a.as_str())
        .or_else(|| headers.get(header::HOST).and_then(|v| v.to_str().ok()));
    if check_host
        && !is_probe(uri.path())
        && let Some(host) = host.filter(|h| !hosts.allows(h))
    {
        return Err(Error::MisdirectedHost(format!(
            "This idemwatch has no auth file, so everyone who reaches it is admin, and it \
                 answers only under loopback names (localhost, 127.0.0.1, [::1]). This request \
                 was addressed to {host:?}: another site's page can point its own name at this \
                 machine (DNS rebinding), so other names are refused. If you reach idemwatch \
                 under this name on purpose, start it with --allowed-host {} \
                 (or IDEMWATCH_ALLOWED_HOSTS; see docs/AUTH.md).",
            host.rsplit_once(':')
                .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
                .map_or(host, |(name, _)| name)
        )));
    }
    if method.is_safe() {
        return Ok(());
    }
    let fetch_site = headers
        .get("sec-fetch-site")
        .map(|v| v.to_str().unwrap_or("?"));
    // `same-site` is a sibling subdomain: another origin, refused too. `none` is a
    // person's own action (a bookmark, the address bar).
    if let Some(site) = fetch_site.filter(|s| !matches!(*s, "same-origin" | "none")) {
        return Err(Error::Forbidden(format!(
            "The browser says this request came from a page on another site \
             (Sec-Fetch-Site: {site}). Only idemwatch's own pages may change anything \
             (cross-site request refused). Nothing was changed."
        )));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("?");
        if !hosts.same_origin(origin, host) {
            return Err(Error::Forbidden(format!(
                "This request came from a page on another site (Origin: {origin}), not from \
                 idemwatch's own pages (cross-site request refused). Nothing was changed. If \
                 idemwatch is reached under that name through a proxy that rewrites Host, \
                 start it with --allowed-host NAME (docs/AUTH.md)."
            )));
        }
    }
    Ok(())
}

/// Paths a load balancer, kubelet or Prometheus reaches by address, not by name.
fn is_probe(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/metrics") || path.starts_with("/static/")
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn status(check_host: bool, method: Method, path: &str, pairs: &[(&'static str, &str)]) -> u16 {
        let uri: Uri = path.parse().unwrap();
        let hosts = AllowedHosts::parse(&["idemwatch.internal"]).unwrap();
        match check(&hosts, check_host, &method, &uri, &headers(pairs)) {
            Ok(()) => 200,
            Err(e) => e.status().as_u16(),
        }
    }

    #[test]
    fn without_auth_only_loopback_and_configured_names_are_served() {
        let foreign = [("host", "rebind.attacker.example:8080")];
        assert_eq!(status(true, Method::GET, "/", &foreign), 421);
        assert_eq!(status(true, Method::GET, "/api/v1/csrf", &foreign), 421);
        assert_eq!(status(false, Method::GET, "/", &foreign), 200, "with auth");
        for probe in ["/healthz", "/readyz", "/metrics", "/static/app.css"] {
            assert_eq!(status(true, Method::GET, probe, &foreign), 200, "{probe}");
        }
        assert_eq!(
            status(true, Method::GET, "/", &[("host", "localhost:8080")]),
            200
        );
        assert_eq!(
            status(true, Method::GET, "/", &[("host", "idemwatch.internal")]),
            200
        );
        assert_eq!(
            status(true, Method::GET, "/", &[]),
            200,
            "no Host: not a browser"
        );
        assert_eq!(
            status(
                true,
                Method::GET,
                "http://rebind.attacker.example/",
                &[("host", "localhost")]
            ),
            421,
            "the URI's authority counts first"
        );
    }

    #[test]
    fn a_state_changing_request_from_another_site_is_refused_in_every_mode() {
        let host = ("host", "127.0.0.1:8080");
        for check_host in [true, false] {
            for method in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
                let s = |pairs: &[(&'static str, &str)]| {
                    status(check_host, method.clone(), "/keys/k/resolve", pairs)
                };
                assert_eq!(s(&[host, ("origin", "http://evil.example")]), 403);
                assert_eq!(s(&[host, ("origin", "null")]), 403);
                assert_eq!(s(&[host, ("sec-fetch-site", "cross-site")]), 403);
                assert_eq!(s(&[host, ("sec-fetch-site", "same-site")]), 403);
                assert_eq!(
                    s(&[
                        host,
                        ("origin", "http://127.0.0.1:8080"),
                        ("sec-fetch-site", "same-origin")
                    ]),
                    200
                );
                assert_eq!(s(&[host, ("origin", "http://idemwatch.internal")]), 200);
                assert_eq!(s(&[host]), 200, "no Origin: not a browser");
            }
            assert_eq!(
                status(
                    check_host,
                    Method::GET,
                    "/",
                    &[
                        host,
                        ("origin", "http://evil.example"),
                        ("sec-fetch-site", "cross-site")
                    ]
                ),
                200,
                "reading is not changing (and SameSite cookies stay home)"
            );
        }
    }
}
