//! The auth file (`--auth-file`, TOML): built-in users with argon2 hashes, or trusted
//! reverse-proxy headers; API tokens (stored hashed) in both modes.

use super::roles::Role;
use ipnet::IpNet;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Users and passwords from this file; a login page; signed session cookies.
    Builtin,
    /// Identity from a reverse proxy (oauth2-proxy and the like), believed only when
    /// the request comes from one of `proxy.trusted`.
    Proxy,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthFile {
    pub mode: Mode,
    #[serde(default)]
    pub proxy: Option<ProxySettings>,
    #[serde(default)]
    pub users: Vec<User>,
    #[serde(default)]
    pub tokens: Vec<ApiToken>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxySettings {
    #[serde(default = "default_user_header")]
    pub user_header: String,
    #[serde(default = "default_groups_header")]
    pub groups_header: String,
    /// Addresses or CIDR ranges of the proxies whose headers are believed.
    pub trusted: Vec<String>,
    /// Group name → role.
    #[serde(default)]
    pub group_roles: BTreeMap<String, Role>,
    /// Role of an authenticated user none of whose groups map to a role.
    #[serde(default)]
    pub default_role: Option<Role>,
}

fn default_user_header() -> String {
    "X-Forwarded-User".into()
}
fn default_groups_header() -> String {
    "X-Forwarded-Groups".into()
}

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct User {
    pub name: String,
    /// PHC string from `idemwatch hash-password`.
    pub password_hash: String,
    pub roles: Vec<Role>,
}

impl std::fmt::Debug for User {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("User")
            .field("name", &self.name)
            .field("roles", &self.roles)
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiToken {
    pub name: String,
    /// Lowercase hex SHA-256 of the token, from `idemwatch new-token`.
    pub sha256: String,
    pub roles: Vec<Role>,
    /// Only keys of these tenants, on every route (absent: any): web::limits, and the
    /// guard's own check.
    #[serde(default)]
    pub tenants: Option<Vec<String>>,
    /// Only keys of these tools, on every route (absent: any).
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// When the token stops working, an RFC 3339 time in quotes
    /// (`"2027-03-01T00:00:00Z"`); absent: never. `idemwatch new-token --expires-in`
    /// writes it, `idemwatch tokens` lists it.
    #[serde(default)]
    pub expires: Option<chrono::DateTime<chrono::Utc>>,
}

impl std::fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiToken")
            .field("name", &self.name)
            .field("roles", &self.roles)
            .field("tenants", &self.tenants)
            .field("tools", &self.tools)
            .field("expires", &self.expires)
            .finish_non_exhaustive()
    }
}

impl AuthFile {
    pub fn load(path: &Path) -> Result<AuthFile, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read auth file {}: {e}", path.display()))?;
        AuthFile::parse(&text).map_err(|e| format!("auth file {}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<AuthFile, String> {
        let file: AuthFile = toml::from_str(text).map_err(|e| e.to_string())?;
        file.validate()?;
        Ok(file)
    }

    fn validate(&self) -> Result<(), String> {
        match (self.mode, &self.proxy) {
            (Mode::Proxy, None) => {
                return Err(
                    "mode = \"proxy\" needs a [proxy] table with `trusted` addresses".into(),
                );
            }
            (Mode::Proxy, Some(p)) if p.trusted.is_empty() => {
                return Err("proxy.trusted is empty: no proxy would be believed".into());
            }
            (Mode::Builtin, _) if self.users.is_empty() && self.tokens.is_empty() => {
                return Err(
                    "mode = \"builtin\" needs at least one [[users]] or [[tokens]] entry".into(),
                );
            }
            _ => {}
        }
        if let Some(p) = &self.proxy {
            p.trusted_nets()?;
        }
        // `worker` is for service accounts: a person's session or proxy identity must
        // not be able to claim keys from a browser.
        let worker = "the worker role is for [[tokens]] only (service accounts)";
        if let Some(p) = &self.proxy {
            if let Some((group, _)) = p.group_roles.iter().find(|(_, r)| **r == Role::Worker) {
                return Err(format!("proxy.group_roles: group {group:?}: {worker}"));
            }
            if p.default_role == Some(Role::Worker) {
                return Err(format!("proxy.default_role: {worker}"));
            }
        }
        for u in &self.users {
            if u.name.trim().is_empty() {
                return Err("a user has an empty name".into());
            }
            if u.roles.contains(&Role::Worker) {
                return Err(format!("user {:?}: {worker}", u.name));
            }
            if !u.password_hash.starts_with("$argon2") {
                return Err(format!(
                    "user {:?}: password_hash must be an argon2 PHC string (run `idemwatch hash-password`)",
                    u.name
                ));
            }
        }
        for t in &self.tokens {
            let hex64 = t.sha256.len() == 64
                && t.sha256
                    .bytes()
                    .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
            if !hex64 {
                return Err(format!(
                    "token {:?}: sha256 must be 64 lowercase hex characters",
                    t.name
                ));
            }
            for (field, list) in [("tenants", &t.tenants), ("tools", &t.tools)] {
                if list
                    .as_ref()
                    .is_some_and(|l| l.is_empty() || l.iter().any(|v| v.is_empty()))
                {
                    return Err(format!(
                        "token {:?}: {field} must list at least one non-empty name (leave it out for any)",
                        t.name
                    ));
                }
            }
        }
        Ok(())
    }
}

impl ProxySettings {
    pub(crate) fn trusted_nets(&self) -> Result<Vec<IpNet>, String> {
        self.trusted
            .iter()
            .map(|s| {
                s.parse::<IpNet>()
                    .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| format!("proxy.trusted: {s:?} is not an IP address or CIDR range"))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proxy_file_needs_trusted_addresses_that_parse() {
        let err = AuthFile::parse("mode = \"proxy\"\n[proxy]\ntrusted = []\n").unwrap_err();
        assert!(err.contains("trusted is empty"), "{err}");
        let err =
            AuthFile::parse("mode = \"proxy\"\n[proxy]\ntrusted = [\"nonsense\"]\n").unwrap_err();
        assert!(err.contains("\"nonsense\" is not an IP address"), "{err}");
        let ok = AuthFile::parse("mode = \"proxy\"\n[proxy]\ntrusted = [\"10.0.0.0/8\", \"127.0.0.1\"]\n[proxy.group_roles]\nsre = \"resolver\"\n").unwrap();
        assert_eq!(ok.proxy.unwrap().group_roles["sre"], Role::Resolver);
    }

    #[test]
    fn the_worker_role_is_for_tokens_only() {
        let token = "0".repeat(64);
        let ok = AuthFile::parse(&format!(
            "mode = \"builtin\"\n[[tokens]]\nname = \"w\"\nsha256 = \"{token}\"\nroles = [\"worker\"]\ntenants = [\"acme\"]\n"
        ))
        .unwrap();
        assert_eq!(
            ok.tokens[0].tenants.as_deref(),
            Some(&["acme".to_string()][..])
        );
        let err = AuthFile::parse(
            "mode = \"proxy\"\n[proxy]\ntrusted = [\"10.0.0.0/8\"]\n[proxy.group_roles]\nbots = \"worker\"\n",
        )
        .unwrap_err();
        assert!(
            err.contains("group \"bots\": the worker role is for [[tokens]] only"),
            "{err}"
        );
        let err = AuthFile::parse(&format!(
            "mode = \"builtin\"\n[[tokens]]\nname = \"w\"\nsha256 = \"{token}\"\nroles = [\"worker\"]\ntools = []\n"
        ))
        .unwrap_err();
        assert!(err.contains("token \"w\": tools must list"), "{err}");
    }

    #[test]
    fn plain_text_passwords_and_unknown_fields_are_refused() {
        let err = AuthFile::parse("mode = \"builtin\"\n[[users]]\nname = \"sam\"\npassword_hash = \"hunter2\"\nroles = [\"viewer\"]\n").unwrap_err();
        assert!(err.contains("argon2 PHC"), "{err}");
        let err = AuthFile::parse("mode = \"builtin\"\npasword = 1\n").unwrap_err();
        assert!(err.contains("unknown field"), "{err}");
    }
}
