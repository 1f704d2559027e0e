//! Who may do what. Five roles; `resolver` and `auditor` each add one power to
//! `viewer`, `admin` has all; `worker` (bearer tokens only) calls the guard and
//! nothing else.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Viewer,
    Resolver,
    Auditor,
    Admin,
    /// A service account's: `/api/v1/guard/*` only (no page, no resolve, no export).
    Worker,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Resolver => "resolver",
            Role::Auditor => "auditor",
            Role::Admin => "admin",
            Role::Worker => "worker",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Role, String> {
        match s.trim() {
            "viewer" => Ok(Role::Viewer),
            "resolver" => Ok(Role::Resolver),
            "auditor" => Ok(Role::Auditor),
            "admin" => Ok(Role::Admin),
            "worker" => Ok(Role::Worker),
            other => Err(format!(
                "unknown role {other:?} (expected viewer, resolver, auditor, admin or worker)"
            )),
        }
    }
}

/// What a request may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    /// Read every page and the read-only API.
    View,
    /// Resolve UNKNOWN keys.
    Resolve,
    /// Download exports of the attempt log.
    Export,
    /// Call the guard (`/api/v1/guard/*`): bearer tokens with `worker` or `admin`, and
    /// the local admin. Sessions and proxy users never: a browser must not be able to
    /// claim keys with a person's ambient credentials.
    Guard,
}

/// How the caller proved who they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Via {
    /// No authentication configured: loopback only, the local user is admin.
    Local,
    /// A trusted reverse proxy's headers.
    Proxy,
    /// A login session cookie.
    Session,
    /// A bearer API token.
    Token,
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Principal {
    pub name: String,
    pub roles: BTreeSet<Role>,
    pub via: Via,
    /// A token limited to some tenants and/or tools (every route: `web::limits`).
    pub scope: Scope,
}

/// The tenants and tools a token may reach, on the guard and every other route; `None`: any.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Scope {
    pub tenants: Option<BTreeSet<String>>,
    pub tools: Option<BTreeSet<String>>,
}

impl Scope {
    /// Whether a key of `tenant` and `tool` is inside the scope; otherwise which of
    /// the two is outside it.
    pub fn check(&self, tenant: &str, tool: &str) -> Result<(), &'static str> {
        if self.tenants.as_ref().is_some_and(|t| !t.contains(tenant)) {
            return Err("tenant");
        }
        if self.tools.as_ref().is_some_and(|t| !t.contains(tool)) {
            return Err("tool");
        }
        Ok(())
    }

    pub(crate) fn is_limited(&self) -> bool {
        self.tenants.is_some() || self.tools.is_some()
    }
}

impl Principal {
    pub(crate) fn local_admin() -> Self {
        Self {
            name: "local".into(),
            roles: BTreeSet::from([Role::Admin]),
            via: Via::Local,
            scope: Scope::default(),
        }
    }

    pub fn can(&self, permission: Permission) -> bool {
        let has = |r| self.roles.contains(&r) || self.roles.contains(&Role::Admin);
        match permission {
            Permission::View => self.roles.iter().any(|r| *r != Role::Worker),
            Permission::Resolve => has(Role::Resolver),
            Permission::Export => has(Role::Auditor),
            Permission::Guard => matches!(self.via, Via::Token | Via::Local) && has(Role::Worker),
        }
    }

    /// The name recorded as `actor` in the attempt log: `token:NAME` for an API
    /// token, a person's name as it is. A person (proxy or built-in user) whose name
    /// itself starts with `token:` or `user:` is written `user:NAME`, so no person can
    /// pass for a token in the log, and two callers never share an actor.
    pub fn actor(&self) -> String {
        match self.via {
            Via::Token => format!("token:{}", self.name),
            _ if self.name.starts_with("token:") || self.name.starts_with("user:") => {
                format!("user:{}", self.name)
            }
            _ => self.name.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(roles: &[Role]) -> Principal {
        Principal {
            name: "p".into(),
            roles: roles.iter().copied().collect(),
            via: Via::Token,
            scope: Scope::default(),
        }
    }

    #[test]
    fn each_role_has_exactly_its_powers() {
        use Permission::*;
        let table = [
            (vec![Role::Viewer], [true, false, false, false]),
            (vec![Role::Resolver], [true, true, false, false]),
            (vec![Role::Auditor], [true, false, true, false]),
            (vec![Role::Admin], [true, true, true, true]),
            (vec![Role::Worker], [false, false, false, true]),
            (vec![], [false, false, false, false]),
        ];
        for (roles, expected) in table {
            let p = with(&roles);
            assert_eq!(
                [p.can(View), p.can(Resolve), p.can(Export), p.can(Guard)],
                expected,
                "{roles:?}"
            );
        }
    }

    #[test]
    fn only_tokens_and_the_local_admin_call_the_guard() {
        for via in [Via::Session, Via::Proxy] {
            let p = Principal {
                via,
                ..with(&[Role::Admin, Role::Worker])
            };
            assert!(!p.can(Permission::Guard), "{via:?}");
        }
        assert!(Principal::local_admin().can(Permission::Guard));
    }

    #[test]
    fn a_person_named_like_a_token_is_never_logged_as_one() {
        let actor = |name: &str, via| {
            Principal {
                name: name.into(),
                via,
                ..with(&[Role::Resolver])
            }
            .actor()
        };
        assert_eq!(actor("nightly", Via::Token), "token:nightly");
        assert_eq!(actor("token:nightly", Via::Proxy), "user:token:nightly");
        assert_eq!(
            actor("user:token:nightly", Via::Proxy),
            "user:user:token:nightly"
        );
        assert_eq!(actor("token:x", Via::Session), "user:token:x");
        assert_eq!(actor("ana", Via::Proxy), "ana");
    }

    #[test]
    fn a_scope_names_what_is_outside_it() {
        let s = Scope {
            tenants: Some(BTreeSet::from(["acme".to_string()])),
            tools: None,
        };
        assert_eq!(s.check("acme", "any"), Ok(()));
        assert_eq!(s.check("globex", "any"), Err("tenant"));
        assert!(Scope::default().check("x", "y").is_ok());
    }

    #[test]
    fn roles_parse_from_their_names_only() {
        assert_eq!("auditor".parse::<Role>(), Ok(Role::Auditor));
        assert!(
            "root"
                .parse::<Role>()
                .unwrap_err()
                .contains("expected viewer")
        );
    }
}
