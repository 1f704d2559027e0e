//! Authentication and roles. Three ways in:
//! - no auth file: loopback only, the local user is `admin` (the secure default; a
//!   non-loopback bind without auth is refused unless `--insecure-no-auth`);
//! - `mode = "builtin"`: users with argon2 password hashes, a login page, and
//!   server-side sessions ([`sessions`]) named by an HttpOnly SameSite=Strict cookie;
//! - `mode = "proxy"`: user and groups from a trusted reverse proxy's headers.
//!
//! Bearer API tokens (stored as SHA-256, optionally with an expiry) work in every
//! mode. CSRF tokens are an HMAC of a binding and the time they were issued: for a
//! signed-in session, the binding recorded in its row at sign-in; otherwise the
//! browser's random CSRF cookie (signed double submit). They expire after
//! [`CSRF_TOKEN_SECONDS`].

mod config;
mod hosts;
mod password_checks;
mod roles;
pub mod secrets;
pub mod sessions;
pub mod throttle;

pub use config::{ApiToken, AuthFile, Mode, ProxySettings, User};
pub use hosts::AllowedHosts;
pub use roles::{Permission, Principal, Role, Scope, Via};

use axum::http::HeaderMap;
use ipnet::IpNet;
use secrets::Signer;
use std::collections::BTreeSet;
use std::net::IpAddr;

pub(crate) const SESSION_COOKIE: &str = "idemwatch_session";
pub const CSRF_COOKIE: &str = "idemwatch_csrf";
/// Prefix of cookie names when cookies are `Secure`: a browser accepts a `__Host-`
/// cookie only from this host, over HTTPS, with `Path=/` and no `Domain`, so a
/// sibling subdomain cannot plant one.
pub(crate) const HOST_PREFIX: &str = "__Host-";
/// How long a CSRF token is accepted after the page that carries it was rendered.
pub(crate) const CSRF_TOKEN_SECONDS: i64 = 12 * 3600;

/// The name of cookie `base` (`SESSION_COOKIE`, `CSRF_COOKIE`): `__Host-` prefixed
/// when cookies are `Secure`. Only that name is read then, so a plain-named cookie
/// planted over HTTP or by a sibling subdomain is ignored.
pub(crate) fn cookie_name(base: &str, secure: bool) -> String {
    if secure {
        format!("{HOST_PREFIX}{base}")
    } else {
        base.to_string()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("the bearer token is not valid")]
    BadToken,
    /// A token of the auth file past its `expires`.
    #[error("the bearer token {name:?} expired at {expired}")]
    ExpiredToken { name: String, expired: String },
    /// Proxy mode: the identity header came more than once. The proxy may have
    /// appended its value to one the client sent; which one is true is unknowable.
    #[error("the {0} header appears more than once")]
    DuplicateIdentity(String),
}

/// A password that checked out: who, and the tag of the password hash the session
/// records (a changed password ends the session).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignIn {
    pub name: String,
    pub password_tag: String,
}

#[derive(Debug, Clone)]
pub struct Authenticator {
    file: Option<AuthFile>,
    trusted: Vec<IpNet>,
    signer: Signer,
    /// A real hash to verify against for unknown user names.
    dummy_hash: String,
    /// `--allowed-host`: names besides loopback the local admin answers under, and
    /// origins besides this one's own accepted on state-changing requests.
    allowed_hosts: AllowedHosts,
}

impl Authenticator {
    /// `file` None means no authentication (local admin). `secret` signs sessions and
    /// CSRF tokens; without one, a random secret is used and logins end at restart.
    pub fn new(file: Option<AuthFile>, secret: Option<&[u8]>) -> Self {
        let trusted = file
            .as_ref()
            .and_then(|f| f.proxy.as_ref())
            .and_then(|p| p.trusted_nets().ok())
            .unwrap_or_default();
        let signer = match secret {
            Some(s) => Signer::new(s),
            None => Signer::new(&secrets::random_bytes()),
        };
        let dummy_hash = match file.as_ref().map(|f| f.mode) {
            Some(Mode::Builtin) => secrets::hash_password("no such user").unwrap_or_default(),
            _ => String::new(),
        };
        Self {
            file,
            trusted,
            signer,
            dummy_hash,
            allowed_hosts: AllowedHosts::default(),
        }
    }

    /// The same authenticator answering under `hosts` too (`--allowed-host`).
    pub fn with_allowed_hosts(mut self, hosts: AllowedHosts) -> Self {
        self.allowed_hosts = hosts;
        self
    }

    pub(crate) fn allowed_hosts(&self) -> &AllowedHosts {
        &self.allowed_hosts
    }

    pub fn mode(&self) -> Option<Mode> {
        self.file.as_ref().map(|f| f.mode)
    }

    pub(crate) fn is_configured(&self) -> bool {
        self.file.is_some()
    }

    /// Who is calling by bearer token, proxy headers or the local admin: `Ok(None)`
    /// when nobody has proven anything that way (in built-in mode the web layer then
    /// looks up the session cookie: [`sessions::Sessions`], [`Self::session_principal`]),
    /// an error for a bad or expired bearer token or a duplicated proxy header. `peer`
    /// is the TCP peer; without one (an in-process request) proxy headers are never
    /// believed.
    pub fn authenticate(
        &self,
        headers: &HeaderMap,
        peer: Option<IpAddr>,
        now_unix: i64,
    ) -> Result<Option<Principal>, AuthError> {
        if let Some(token) = bearer(headers) {
            return self.token_principal(token, now_unix).map(Some);
        }
        let Some(file) = &self.file else {
            return Ok(Some(Principal::local_admin()));
        };
        match file.mode {
            Mode::Builtin => Ok(None),
            Mode::Proxy => self.proxy_principal(headers, peer),
        }
    }

    fn token_principal(&self, token: &str, now_unix: i64) -> Result<Principal, AuthError> {
        let hash = secrets::hash_token(token);
        let file = self.file.as_ref().ok_or(AuthError::BadToken)?;
        let t = file
            .tokens
            .iter()
            .find(|t| t.sha256 == hash)
            .ok_or(AuthError::BadToken)?;
        if let Some(expires) = t.expires.filter(|e| e.timestamp() <= now_unix) {
            return Err(AuthError::ExpiredToken {
                name: t.name.clone(),
                expired: expires.to_rfc3339(),
            });
        }
        let set = |l: &Option<Vec<String>>| l.as_ref().map(|l| l.iter().cloned().collect());
        Ok(Principal {
            name: t.name.clone(),
            roles: t.roles.iter().copied().collect(),
            via: Via::Token,
            scope: Scope {
                tenants: set(&t.tenants),
                tools: set(&t.tools),
            },
        })
    }

    fn proxy_principal(
        &self,
        headers: &HeaderMap,
        peer: Option<IpAddr>,
    ) -> Result<Option<Principal>, AuthError> {
        let Some(proxy) = self.file.as_ref().and_then(|f| f.proxy.as_ref()) else {
            return Ok(None);
        };
        // A dual-stack listener sees an IPv4 proxy as `::ffff:a.b.c.d`.
        let Some(peer) = peer.map(|p| p.to_canonical()) else {
            return Ok(None);
        };
        // Headers from anyone else are exactly what an attacker would send.
        if !self.trusted.iter().any(|net| net.contains(&peer)) {
            return Ok(None);
        }
        // A proxy that appends instead of replacing passes the client's own header on
        // too; `headers.get` would return the client's, the first.
        for name in [&proxy.user_header, &proxy.groups_header] {
            if headers.get_all(name.as_str()).iter().count() > 1 {
                return Err(AuthError::DuplicateIdentity(name.clone()));
            }
        }
        let Some(user) = header(headers, &proxy.user_header).map(str::trim) else {
            return Ok(None);
        };
        if user.is_empty() {
            return Ok(None);
        }
        let mut roles: BTreeSet<Role> = header(headers, &proxy.groups_header)
            .unwrap_or_default()
            .split(',')
            .filter_map(|g| proxy.group_roles.get(g.trim()).copied())
            .collect();
        if roles.is_empty() {
            roles.extend(proxy.default_role);
        }
        Ok(Some(Principal {
            name: user.to_string(),
            roles,
            via: Via::Proxy,
            scope: Scope::default(),
        }))
    }

    /// The user name typed at sign-in, as it may be logged. A configured user's name is
    /// quoted and escaped (`"sam"`), so a newline or an ANSI escape cannot forge a log
    /// line. Any other text is often a password typed into the name field, so only a
    /// tag is logged, `unknown#` and 8 characters of an HMAC under the session secret:
    /// the same text gives the same tag (a guessing run shows up) while the log
    /// reveals nothing that could be checked against a password list.
    pub(crate) fn loggable_name(&self, name: &str) -> String {
        let known = self
            .file
            .as_ref()
            .is_some_and(|f| f.users.iter().any(|u| u.name == name));
        if known {
            return format!("{name:?}");
        }
        let signed = self.signer.sign(format!("log|{name}").as_bytes());
        let tag = signed.rsplit('.').next().unwrap_or_default();
        format!("unknown#{}", tag.chars().take(8).collect::<String>())
    }

    /// Checks a password; on success, who signed in (the caller starts the session).
    pub fn login(&self, name: &str, password: &str) -> Option<SignIn> {
        let file = self.file.as_ref().filter(|f| f.mode == Mode::Builtin)?;
        let user = file.users.iter().find(|u| u.name == name);
        // Verify against something even for an unknown user, so the response time
        // does not reveal which user names exist.
        let ok = secrets::verify_password(
            password,
            user.map_or(self.dummy_hash.as_str(), |u| u.password_hash.as_str()),
        );
        let user = user.filter(|_| ok)?;
        Some(SignIn {
            name: user.name.clone(),
            password_tag: password_tag(&user.password_hash),
        })
    }

    /// The person a stored session belongs to, if it may still be used: the user is
    /// still in the auth file (removing one ends their sessions), with the password
    /// they signed in with (changing it ends them), and roles as the file says now.
    pub(crate) fn session_principal(
        &self,
        session: &crate::store::SessionRow,
    ) -> Option<Principal> {
        let file = self.file.as_ref().filter(|f| f.mode == Mode::Builtin)?;
        let user = file.users.iter().find(|u| u.name == session.user_name)?;
        let same_password: bool = secrets::constant_time_eq(
            password_tag(&user.password_hash).as_bytes(),
            session.password_tag.as_bytes(),
        );
        if !same_password {
            return None;
        }
        Some(Principal {
            name: user.name.clone(),
            roles: user.roles.iter().copied().collect(),
            via: Via::Session,
            scope: Scope::default(),
        })
    }

    /// The token a form must carry, bound to `binding` ([`csrf_binding`] of the CSRF
    /// cookie, or a session's recorded binding) and issued at `now_unix`.
    pub fn csrf_token(&self, binding: &str, now_unix: i64) -> String {
        self.signer
            .sign(format!("csrf2|{binding}|{now_unix}").as_bytes())
    }

    /// Whether `token` was made by [`Self::csrf_token`] for `binding`, at most
    /// [`CSRF_TOKEN_SECONDS`] ago (and not more than a minute ahead: replicas' clocks).
    pub(crate) fn csrf_valid(&self, binding: Option<&str>, token: &str, now_unix: i64) -> bool {
        let Some(binding) = binding.filter(|b| !b.is_empty()) else {
            return false;
        };
        let Some(payload) = self.signer.verify(token) else {
            return false;
        };
        let Ok(payload) = String::from_utf8(payload) else {
            return false;
        };
        let mut parts = payload.splitn(3, '|');
        let (Some("csrf2"), Some(bound), Some(issued)) = (parts.next(), parts.next(), parts.next())
        else {
            return false;
        };
        let Ok(issued) = issued.parse::<i64>() else {
            return false;
        };
        bound == binding && issued <= now_unix + 60 && now_unix - issued <= CSRF_TOKEN_SECONDS
    }
}

/// What a CSRF token is bound to for a browser without a session: the SHA-256 of its
/// CSRF cookie. A session records the same value for the cookie issued at sign-in.
pub fn csrf_binding(csrf_cookie: &str) -> String {
    crate::base::hash::sha256_hex(format!("csrf|{csrf_cookie}").as_bytes())
}

/// What a session records of the password it was opened with: the SHA-256 of the
/// user's PHC string (itself salted), so a new hash in the auth file ends the session
/// on every replica, whatever their `--session-secret`.
pub fn password_tag(password_hash: &str) -> String {
    crate::base::hash::sha256_hex(format!("password|{password_hash}").as_bytes())
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The token of `Authorization: Bearer <token>`; the scheme is case-insensitive
/// (RFC 9110 §11.1), so `bearer` and `BEARER` are read too.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let (scheme, token) = header(headers, "authorization")?.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// The value of cookie `name` in the request's Cookie headers.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all("cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn builtin() -> Authenticator {
        let hash = secrets::hash_password("pw").unwrap();
        let token_hash = secrets::hash_token("iw_script");
        let file = AuthFile::parse(&format!(
            "mode = \"builtin\"\n[[users]]\nname = \"sam\"\npassword_hash = \"{hash}\"\nroles = [\"resolver\"]\n\
             [[tokens]]\nname = \"nightly\"\nsha256 = \"{token_hash}\"\nroles = [\"auditor\"]\n"
        ))
        .unwrap();
        Authenticator::new(Some(file), Some(b"k"))
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    const LOOPBACK: Option<IpAddr> = Some(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));

    #[test]
    fn without_an_auth_file_the_local_user_is_admin() {
        let a = Authenticator::new(None, None);
        let p = a
            .authenticate(&HeaderMap::new(), LOOPBACK, 0)
            .unwrap()
            .unwrap();
        assert_eq!(
            (p.name.as_str(), p.can(Permission::Resolve)),
            ("local", true)
        );
    }

    #[test]
    fn a_password_signs_in_and_its_session_ends_when_the_user_or_password_changes() {
        let a = builtin();
        assert!(a.login("sam", "wrong").is_none());
        assert!(a.login("nobody", "pw").is_none());
        let signed = a.login("sam", "pw").unwrap();
        let row = crate::store::SessionRow {
            id_sha256: "x".into(),
            user_name: signed.name.clone(),
            password_tag: signed.password_tag.clone(),
            csrf_sha256: "c".into(),
            created_at: 0,
            last_seen_at: 0,
            expires_at: 1,
        };
        let p = a.session_principal(&row).unwrap();
        assert_eq!((p.name.as_str(), p.via), ("sam", Via::Session));
        // The same user with a new password hash in the file.
        let mut file = a.file.clone().unwrap();
        file.users[0].password_hash = secrets::hash_password("new").unwrap();
        let changed = Authenticator::new(Some(file.clone()), Some(b"k"));
        assert!(
            changed.session_principal(&row).is_none(),
            "password changed"
        );
        file.users.clear();
        let removed = Authenticator::new(Some(file), Some(b"k"));
        assert!(removed.session_principal(&row).is_none(), "user removed");
        // Sessions are looked up by the web layer: no cookie signs anyone in here.
        let h = headers(&[("cookie", &format!("{SESSION_COOKIE}=anything"))]);
        assert_eq!(a.authenticate(&h, LOOPBACK, 0), Ok(None));
    }

    #[test]
    fn bearer_tokens_are_checked_against_their_hashes() {
        let a = builtin();
        let p = a
            .authenticate(
                &headers(&[("authorization", "Bearer iw_script")]),
                LOOPBACK,
                0,
            )
            .unwrap()
            .unwrap();
        assert_eq!(
            (
                p.actor().as_str(),
                p.can(Permission::Export),
                p.can(Permission::Resolve)
            ),
            ("token:nightly", true, false)
        );
        assert_eq!(
            a.authenticate(&headers(&[("authorization", "Bearer nope")]), LOOPBACK, 0),
            Err(AuthError::BadToken)
        );
    }

    #[test]
    fn proxy_headers_count_only_from_trusted_proxies() {
        let file = AuthFile::parse(
            "mode = \"proxy\"\n[proxy]\ntrusted = [\"10.0.0.0/8\"]\n[proxy.group_roles]\nsupport = \"resolver\"\naudit = \"auditor\"\n",
        )
        .unwrap();
        let a = Authenticator::new(Some(file), Some(b"k"));
        let h = headers(&[
            ("x-forwarded-user", "ana"),
            ("x-forwarded-groups", "staff, support,audit"),
        ]);
        let from_proxy: Option<IpAddr> = Some("10.1.2.3".parse().unwrap());
        let p = a.authenticate(&h, from_proxy, 0).unwrap().unwrap();
        assert_eq!(p.roles, BTreeSet::from([Role::Resolver, Role::Auditor]));
        assert!(
            a.authenticate(&h, LOOPBACK, 0).unwrap().is_none(),
            "spoofed headers from elsewhere"
        );
        assert!(
            a.authenticate(&h, None, 0).unwrap().is_none(),
            "no peer address: never a proxy"
        );
        let no_groups = headers(&[("x-forwarded-user", "ana")]);
        let p = a.authenticate(&no_groups, from_proxy, 0).unwrap().unwrap();
        assert!(
            !p.can(Permission::View),
            "no mapped group and no default role: nothing"
        );
    }

    #[test]
    fn a_csrf_token_is_bound_to_its_binding_and_expires() {
        let a = builtin();
        let token = a.csrf_token("abc", 1000);
        assert!(a.csrf_valid(Some("abc"), &token, 1000));
        assert!(a.csrf_valid(Some("abc"), &token, 1000 + CSRF_TOKEN_SECONDS));
        assert!(
            !a.csrf_valid(Some("abc"), &token, 1001 + CSRF_TOKEN_SECONDS),
            "expired"
        );
        assert!(!a.csrf_valid(Some("abc"), &token, 900), "from the future");
        assert!(!a.csrf_valid(Some("abd"), &token, 1000));
        assert!(!a.csrf_valid(None, &token, 1000));
        assert!(!a.csrf_valid(Some("abc"), "forged", 1000));
        assert_ne!(csrf_binding("abc"), "abc");
    }

    #[test]
    fn secure_cookies_get_host_only_names() {
        assert_eq!(cookie_name(SESSION_COOKIE, false), "idemwatch_session");
        assert_eq!(cookie_name(CSRF_COOKIE, true), "__Host-idemwatch_csrf");
    }

    #[test]
    fn an_expired_token_is_refused_with_its_name() {
        let hash = secrets::hash_token("iw_old");
        let file = AuthFile::parse(&format!(
            "mode = \"builtin\"\n[[tokens]]\nname = \"old\"\nsha256 = \"{hash}\"\nroles = [\"viewer\"]\nexpires = \"2026-01-01T00:00:00Z\"\n"
        ))
        .unwrap();
        let a = Authenticator::new(Some(file), Some(b"k"));
        let h = headers(&[("authorization", "Bearer iw_old")]);
        let before = chrono::DateTime::parse_from_rfc3339("2025-12-31T23:59:59Z")
            .unwrap()
            .timestamp();
        assert!(a.authenticate(&h, LOOPBACK, before).unwrap().is_some());
        assert!(matches!(
            a.authenticate(&h, LOOPBACK, before + 1),
            Err(AuthError::ExpiredToken { name, .. }) if name == "old"
        ));
    }

    #[test]
    fn a_duplicated_identity_header_and_mapped_ipv4_proxies() {
        let file = AuthFile::parse(
            "mode = \"proxy\"\n[proxy]\ntrusted = [\"10.0.0.0/8\"]\ndefault_role = \"viewer\"\n",
        )
        .unwrap();
        let a = Authenticator::new(Some(file), Some(b"k"));
        let mapped: Option<IpAddr> = Some("::ffff:10.1.2.3".parse().unwrap());
        let one = headers(&[("x-forwarded-user", "ana")]);
        let p = a.authenticate(&one, mapped, 0).unwrap().unwrap();
        assert_eq!(p.name, "ana", "an IPv4 proxy seen on a dual-stack socket");
        let two = headers(&[("x-forwarded-user", "admin"), ("x-forwarded-user", "ana")]);
        assert_eq!(
            a.authenticate(&two, mapped, 0),
            Err(AuthError::DuplicateIdentity("X-Forwarded-User".into()))
        );
        let groups = headers(&[
            ("x-forwarded-user", "ana"),
            ("x-forwarded-groups", "admins"),
            ("x-forwarded-groups", "staff"),
        ]);
        assert!(a.authenticate(&groups, mapped, 0).is_err());
    }
}
