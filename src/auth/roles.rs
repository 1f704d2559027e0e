//! Who may do what. Four roles; `resolver` and `auditor` each add one power to
//! `viewer`, `admin` has all.

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
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Resolver => "resolver",
            Role::Auditor => "auditor",
            Role::Admin => "admin",
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
            other => Err(format!(
                "unknown role {other:?} (expected viewer, resolver, auditor or admin)"
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
}

impl Principal {
    pub fn local_admin() -> Self {
        Self {
            name: "local".into(),
            roles: BTreeSet::from([Role::Admin]),
            via: Via::Local,
        }
    }

    pub fn can(&self, permission: Permission) -> bool {
        let has = |r| self.roles.contains(&r) || self.roles.contains(&Role::Admin);
        match permission {
            Permission::View => !self.roles.is_empty(),
            Permission::Resolve => has(Role::Resolver),
            Permission::Export => has(Role::Auditor),
        }
    }

    /// The name recorded as `actor` in the attempt log.
    pub fn actor(&self) -> String {
        match self.via {
            Via::Token => format!("token:{}", self.name),
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
            via: Via::Session,
        }
    }

    #[test]
    fn each_role_has_exactly_its_powers() {
        use Permission::*;
        let table = [
            (vec![Role::Viewer], [true, false, false]),
            (vec![Role::Resolver], [true, true, false]),
            (vec![Role::Auditor], [true, false, true]),
            (vec![Role::Admin], [true, true, true]),
            (vec![], [false, false, false]),
        ];
        for (roles, expected) in table {
            let p = with(&roles);
            assert_eq!(
                [p.can(View), p.can(Resolve), p.can(Export)],
                expected,
                "{roles:?}"
            );
        }
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
