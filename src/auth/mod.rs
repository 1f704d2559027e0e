//! Authentication and roles. Three ways in:
//! - no auth file: loopback only, the local user is `admin` (the secure default; a
//!   non-loopback bind without auth is refused unless `--insecure-no-auth`);
//! - `mode = "builtin"`: users with argon2 password hashes, a login page, signed
//!   HttpOnly SameSite=Strict session cookies;
//! - `mode = "proxy"`: user and groups from a trusted reverse proxy's headers.
//!
//! Bearer API tokens (stored as SHA-256) work in every mode. CSRF tokens are an HMAC
//! of a per-browser random cookie (double submit, signed), so they work with every
//! mode, sessions or not.

mod config;
mod hosts;
mod password_checks;
mod roles;
pub mod secrets;
pub mod throttle;

pub use config::{ApiToken, AuthFile, Mode, ProxySettings, User};
pub use hosts::AllowedHosts;
pub use roles::{Permission, Principal, Role, Scope, Via};

use axum::http::HeaderMap;
use ipnet::IpNet;
use secrets::Signer;
use std::collections::BTreeSet;
use std::net::IpAddr;

pub const SESSION_COOKIE: &str = "idemwatch_session";
pub const CSRF_COOKIE: &str = "idemwatch_csrf";
/// How long a login lasts.
pub const SESSION_SECONDS: i64 = 12 * 3600;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("the bearer token is not valid")]
    BadToken,
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

    pub fn allowed_hosts(&self) -> &AllowedHosts {
        &self.allowed_hosts
    }

    pub fn mode(&self) -> Option<Mode> {
        self.file.as_ref().map(|f| f.mode)
    }

    pub fn is_configured(&self) -> bool {
        self.file.is_some()
    }

    /// Who is calling: `Ok(None)` when nobody has proven anything (401 or a login
    /// redirect), an error for a bad bearer token. `peer` is the TCP peer; without one
    /// (an in-process request) proxy headers are never believed.
    pub fn authenticate(
        &self,
        headers: &HeaderMap,
        peer: Option<IpAddr>,
        now_unix: i64,
    ) -> Result<Option<Principal>, AuthError> {
        if let Some(token) = bearer(headers) {
            return self
                .token_principal(token)
                .map(Some)
                .ok_or(AuthError::BadToken);
        }
        let Some(file) = &self.file else {
            return Ok(Some(Principal::local_admin()));
        };
        Ok(match file.mode {
            Mode::Builtin => {
                cookie(headers, SESSION_COOKIE).and_then(|c| self.session_principal(c, now_unix))
            }
            Mode::Proxy => self.proxy_principal(headers, peer),
        })
    }

    fn token_principal(&self, token: &str) -> Option<Principal> {
        let hash = secrets::hash_token(token);
        let file = self.file.as_ref()?;
        let t = file.tokens.iter().find(|t| t.sha256 == hash)?;
        let set = |l: &Option<Vec<String>>| l.as_ref().map(|l| l.iter().cloned().collect());
        Some(Principal {
            name: t.name.clone(),
            roles: t.roles.iter().copied().collect(),
            via: Via::Token,
            scope: Scope {
                tenants: set(&t.tenants),
                tools: set(&t.tools),
            },
        })
    }

    fn proxy_principal(&self, headers: &HeaderMap, peer: Option<IpAddr>) -> Option<Principal> {
        let proxy = self.file.as_ref()?.proxy.as_ref()?;
        let peer = peer?;
        // Headers from anyone else are exactly what an attacker would send.
        if !self.trusted.iter().any(|net| net.contains(&peer)) {
            return None;
        }
        let user = header(headers, &proxy.user_header)?.trim();
        if user.is_empty() {
            return None;
        }
        let mut roles: BTreeSet<Role> = header(headers, &proxy.groups_header)
            .unwrap_or_default()
            .split(',')
            .filter_map(|g| proxy.group_roles.get(g.trim()).copied())
            .collect();
        if roles.is_empty() {
            roles.extend(proxy.default_role);
        }
        Some(Principal {
            name: user.to_string(),
            roles,
            via: Via::Proxy,
            scope: Scope::default(),
        })
    }

    /// The user name typed at sign-in, as it may be logged. A configured user's name is
    /// quoted and escaped (`"sam"`), so a newline or an ANSI escape cannot forge a log
    /// line. Any other text is often a password typed into the name field, so only a
    /// tag is logged, `unknown#` and 8 characters of an HMAC under the session secret:
    /// the same text gives the same tag (a guessing run shows up) while the log
    /// reveals nothing that could be checked against a password list.
    pub fn loggable_name(&self, name: &str) -> String {
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

    /// Checks a password; on success returns the session cookie value.
    pub fn login(&self, name: &str, password: &str, now_unix: i64) -> Option<String> {
        let file = self.file.as_ref().filter(|f| f.mode == Mode::Builtin)?;
        let user = file.users.iter().find(|u| u.name == name);
        // Verify against something even for an unknown user, so the response time
        // does not reveal which user names exist.
        let ok = secrets::verify_password(
            password,
            user.map_or(self.dummy_hash.as_str(), |u| u.password_hash.as_str()),
        );
        let user = user.filter(|_| ok)?;
        let nonce = hex::encode(&secrets::random_bytes()[..8]);
        let expires = now_unix + SESSION_SECONDS;
        Some(
            self.signer
                .sign(format!("v1|{}|{expires}|{nonce}", user.name).as_bytes()),
        )
    }

    fn session_principal(&self, cookie_value: &str, now_unix: i64) -> Option<Principal> {
        let payload = String::from_utf8(self.signer.verify(cookie_value)?).ok()?;
        let mut parts = payload.split('|');
        let (Some("v1"), Some(name), Some(expires)) = (parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        if expires.parse::<i64>().ok()? <= now_unix {
            return None;
        }
        // Roles come from the file now, so removing a user ends their sessions.
        let user = self.file.as_ref()?.users.iter().find(|u| u.name == name)?;
        Some(Principal {
            name: user.name.clone(),
            roles: user.roles.iter().copied().collect(),
            via: Via::Session,
            scope: Scope::default(),
        })
    }

    /// The token a form must carry, bound to this browser's CSRF cookie.
    pub fn csrf_token(&self, csrf_cookie: &str) -> String {
        self.signer.sign(format!("csrf|{csrf_cookie}").as_bytes())
    }

    pub fn csrf_valid(&self, csrf_cookie: Option<&str>, token: &str) -> bool {
        let Some(cookie) = csrf_cookie.filter(|c| !c.is_empty()) else {
            return false;
        };
        self.signer
            .verify(token)
            .is_some_and(|payload| payload == format!("csrf|{cookie}").as_bytes())
    }
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
    fn a_session_cookie_logs_in_until_it_expires_or_is_forged() {
        let a = builtin();
        assert!(a.login("sam", "wrong", 0).is_none());
        assert!(a.login("nobody", "pw", 0).is_none());
        let cookie = a.login("sam", "pw", 1000).unwrap();
        let h = headers(&[("cookie", &format!("x=1; {SESSION_COOKIE}={cookie}"))]);
        let p = a.authenticate(&h, LOOPBACK, 1001).unwrap().unwrap();
        assert_eq!((p.name.as_str(), p.via), ("sam", Via::Session));
        assert!(
            a.authenticate(&h, LOOPBACK, 1000 + SESSION_SECONDS)
                .unwrap()
                .is_none(),
            "expired"
        );
        let other = Authenticator::new(a.file.clone(), Some(b"other key"));
        assert!(
            other.authenticate(&h, LOOPBACK, 1001).unwrap().is_none(),
            "forged"
        );
        assert!(
            a.authenticate(&HeaderMap::new(), LOOPBACK, 1001)
                .unwrap()
                .is_none()
        );
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
    fn a_csrf_token_is_bound_to_its_cookie() {
        let a = builtin();
        let token = a.csrf_token("abc");
        assert!(a.csrf_valid(Some("abc"), &token));
        assert!(!a.csrf_valid(Some("abd"), &token));
        assert!(!a.csrf_valid(None, &token));
        assert!(!a.csrf_valid(Some("abc"), "forged"));
    }
}
