//! Which host names a request may be addressed to, and whether a request's `Origin`
//! is this site (docs/AUTH.md, "Security").
//!
//! Without an auth file everyone who reaches the port is the local admin, so the
//! port must only be reachable under a loopback name: a web page that points its own
//! DNS name at 127.0.0.1 (DNS rebinding) reaches the port too, but its requests carry
//! its own name in `Host`. Loopback names (`localhost`, `127.0.0.0/8`, `[::1]`) cannot
//! be rebound, so they and the names given with `--allowed-host` are the only ones
//! served in that mode.

use axum::http::uri::{Authority, Scheme, Uri};
use std::net::{IpAddr, Ipv6Addr};
use std::str::FromStr;

/// A host name with an optional port; without one, every port matches.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HostName {
    /// Lower case; IPv6 literals keep their brackets (`[::1]`).
    host: String,
    port: Option<u16>,
}

impl HostName {
    fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        // `Authority` also accepts `user@host`: a host name never has one.
        if text.is_empty() || text.contains('@') {
            return None;
        }
        let authority = Authority::from_str(text).ok()?;
        let has_port = authority.as_str().len() > authority.host().len();
        let host = authority.host().trim_end_matches('.').to_ascii_lowercase();
        if host.is_empty() || (has_port && authority.port_u16().is_none()) {
            return None;
        }
        Some(Self {
            host,
            port: authority.port_u16(),
        })
    }

    fn is_loopback(&self) -> bool {
        if self.host == "localhost" {
            return true;
        }
        let ip = match self.host.strip_prefix('[') {
            Some(v6) => v6
                .strip_suffix(']')
                .and_then(|a| a.parse::<Ipv6Addr>().ok())
                .map(IpAddr::V6),
            None => self.host.parse::<IpAddr>().ok(),
        };
        // `[::ffff:127.0.0.1]` is IPv4 loopback written as IPv6.
        ip.is_some_and(|ip| ip.to_canonical().is_loopback())
    }

    /// `self` is a configured name: does `other` (from a request) match it?
    fn matches(&self, other: &HostName) -> bool {
        self.host == other.host && self.port.is_none_or(|p| Some(p) == other.port)
    }
}

/// The names given with `--allowed-host`, besides the loopback names.
#[derive(Debug, Clone, Default)]
pub struct AllowedHosts {
    names: Vec<HostName>,
}

impl AllowedHosts {
    /// `idemwatch.internal`, `idemwatch.internal:8080`, `10.0.0.5`: a name, or an
    /// address, with an optional port.
    pub fn parse<S: AsRef<str>>(names: &[S]) -> Result<Self, String> {
        let names = names
            .iter()
            .map(AsRef::as_ref)
            .filter(|n| !n.trim().is_empty())
            .map(|n| {
                HostName::parse(n).ok_or_else(|| {
                    format!(
                        "--allowed-host {n:?} is not a host name: give a name or an address \
                         with an optional port (idemwatch.internal, idemwatch.internal:8080)"
                    )
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { names })
    }

    /// Whether the local admin may be reached under `host` (a `Host` header value): a
    /// loopback name, or a configured one.
    pub fn allows(&self, host: &str) -> bool {
        HostName::parse(host)
            .is_some_and(|h| h.is_loopback() || self.names.iter().any(|n| n.matches(&h)))
    }

    /// Whether `origin` (an `Origin` header value) is this site: the same host and port
    /// as `host` (the `Host` header), or a configured name (a proxy in front that
    /// rewrites `Host`). `null` (a sandboxed frame, a redirect across sites) never is.
    pub(crate) fn same_origin(&self, origin: &str, host: Option<&str>) -> bool {
        let Some(origin) = origin_host(origin) else {
            return false;
        };
        // A `Host` without a port was sent to the scheme's default port.
        let same_host = host.and_then(HostName::parse).is_some_and(|h| {
            h.host == origin.host
                && h.port.map_or(matches!(origin.port, Some(80 | 443)), |p| {
                    origin.port == Some(p)
                })
        });
        same_host || self.names.iter().any(|n| n.matches(&origin))
    }
}

/// `https://idemwatch.example:8443` → its host name, with the port the scheme implies
/// when none is written.
fn origin_host(origin: &str) -> Option<HostName> {
    let uri = Uri::from_str(origin.trim()).ok()?;
    let default_port = match uri.scheme()? {
        s if *s == Scheme::HTTP => 80,
        s if *s == Scheme::HTTPS => 443,
        _ => return None,
    };
    let mut host = HostName::parse(uri.authority()?.as_str())?;
    host.port = Some(host.port.unwrap_or(default_port));
    Some(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configured(names: &[&str]) -> AllowedHosts {
        AllowedHosts::parse(names).unwrap()
    }

    #[test]
    fn loopback_names_are_always_allowed_with_or_without_a_port() {
        let none = AllowedHosts::default();
        for host in [
            "localhost",
            "LOCALHOST:8080",
            "127.0.0.1",
            "127.0.0.1:8080",
            "127.1.2.3:1",
            "[::1]",
            "[::1]:8080",
            "[::ffff:127.0.0.1]:8080",
            "localhost.",
        ] {
            assert!(none.allows(host), "{host}");
        }
    }

    #[test]
    fn other_names_are_refused_unless_configured() {
        let none = AllowedHosts::default();
        for host in [
            "rebind.attacker.example",
            "rebind.attacker.example:8080",
            "localhost.attacker.example",
            "127.0.0.1.attacker.example",
            "10.0.0.5:8080",
            "[::2]:8080",
            "0.0.0.0:8080",
            "user@localhost",
            "",
            "a b",
        ] {
            assert!(!none.allows(host), "{host}");
        }
        let some = configured(&["idemwatch.internal", "box.lan:8080"]);
        assert!(some.allows("idemwatch.internal"));
        assert!(some.allows("IDEMWATCH.internal:9999"));
        assert!(some.allows("box.lan:8080"));
        assert!(!some.allows("box.lan:8081"), "the configured port only");
        assert!(!some.allows("rebind.attacker.example"));
    }

    #[test]
    fn a_configured_name_must_be_a_host_name() {
        assert!(AllowedHosts::parse(&["ok.example", "10.0.0.1:80", "[::1]"]).is_ok());
        for bad in ["http://x.example", "a b", "user@x", "x:notaport"] {
            let err = AllowedHosts::parse(&[bad]).unwrap_err();
            assert!(err.contains("--allowed-host"), "{bad}: {err}");
        }
    }

    #[test]
    fn an_origin_is_this_site_only_with_the_same_host_and_port() {
        let none = AllowedHosts::default();
        let host = Some("127.0.0.1:8080");
        assert!(none.same_origin("http://127.0.0.1:8080", host));
        assert!(none.same_origin("http://idemwatch.example", Some("idemwatch.example")));
        assert!(none.same_origin("https://idemwatch.example", Some("idemwatch.example:443")));
        for other in [
            "http://rebind.attacker.example:8080",
            "http://127.0.0.1:8081",
            "http://localhost:8080",
            "null",
            "",
            "file://",
            "chrome-extension://abc",
        ] {
            assert!(!none.same_origin(other, host), "{other}");
        }
        assert!(!none.same_origin("http://127.0.0.1:8080", None));
        assert!(!none.same_origin("http://idemwatch.example:8080", Some("idemwatch.example")));
        let behind_proxy = configured(&["idemwatch.example"]);
        assert!(behind_proxy.same_origin("https://idemwatch.example", Some("10.0.0.5:8080")));
        assert!(!behind_proxy.same_origin("https://evil.example", Some("10.0.0.5:8080")));
    }
}
