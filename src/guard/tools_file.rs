//! The tools file (`serve --tools-file`, TOML): each guarded tool's policy, and an
//! optional default for tools it does not name. Checked whole at start-up; every error
//! names the tool and the field.
//!
//! ```toml
//! [default]                      # optional: without it, unknown tools are refused
//! key_retention = "24h"
//! call_timeout = "10s"
//!
//! [tools.issue_refund]
//! key_retention = "24h"          # how long the provider remembers a key
//! call_timeout = "10s"           # the client deadline of one call; the lease adds a margin
//! free_text_fields = ["reason"]  # left out of the fingerprint, never sent
//! natural_key = ["invoice_id"]   # one effect per invoice, whatever the intent key
//! duplicate_window = "24h"       # how far back a claim looks for a suspected duplicate
//!
//! [tools.send_email]
//! provider_dedupes = false       # the provider ignores keys: never resend after an
//! call_timeout = "10s"           # ambiguous outcome; look up by tag, or ask a person
//! amount = { field = "amount_p", currency = "GBP", minor_unit = 2 }  # pages show £25.00
//! ```
//!
//! The MCP proxy (`idemwatch mcp-proxy`, docs/MCP.md) reads the same file and three more
//! keys per tool: `kind` (`"read_only"` tools need no policy and pass through unguarded),
//! `key_argument` and `lookup`, and an `[mcp]` table (`tenant`, `trust_annotations`).
//! `serve` checks them and ignores them.

use super::MoneyField;
use super::operation::DEFAULT_DUPLICATE_WINDOW;
use super::policy::{ToolPolicies, ToolPolicy};
use crate::duration::HumanDuration;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The longest call timeout a tools file may declare: a lease is held this long (plus
/// the margin) by a worker that died, so a typo such as `10d` would park a key for days.
const MAX_CALL_TIMEOUT_SECONDS: i64 = 3600;
/// The longest field name, and a tool name's limit (an intent field's).
const MAX_NAME_BYTES: usize = 512;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    default: Option<Entry>,
    #[serde(default)]
    tools: BTreeMap<String, Entry>,
    #[serde(default)]
    mcp: Option<McpSection>,
}

/// The `[mcp]` table: what only the MCP proxy reads.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct McpSection {
    tenant: Option<String>,
    #[serde(default)]
    trust_annotations: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    key_retention: Option<String>,
    call_timeout: Option<String>,
    #[serde(default)]
    free_text_fields: Vec<String>,
    #[serde(default)]
    natural_key: Vec<String>,
    duplicate_window: Option<String>,
    /// `false`: the provider does not deduplicate by key (docs/OPERATIONS.md).
    provider_dedupes: Option<bool>,
    /// Presentation only: which argument is money (pages show `amount_p: 2500` as £25.00).
    amount: Option<Amount>,
    kind: Option<ToolKind>,
    key_argument: Option<String>,
    lookup: Option<LookupEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Amount {
    field: String,
    currency: String,
    minor_unit: u8,
}

impl Amount {
    fn money(self, what: &str) -> Result<MoneyField, String> {
        MoneyField::new(self.field, self.currency, self.minor_unit)
            .map_err(|e| format!("{what}: {e}"))
    }
}

/// What a tool does to the world (seed 003's checklist: read-only, convergent,
/// non-idempotent). A tool without a `kind` is non-idempotent: guarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    ReadOnly,
    Convergent,
    NonIdempotent,
}

impl ToolKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ToolKind::ReadOnly => "read_only",
            ToolKind::Convergent => "convergent",
            ToolKind::NonIdempotent => "non_idempotent",
        }
    }
}

/// A tool's reconciliation query on the same MCP server: `tool` called with
/// `arguments` (each string `"{key}"` replaced by the key); `found` is a JSON pointer
/// into its answer (the structured content, or its text read as JSON) whose value is
/// the effect: absent, `null`, `false` or empty means not found.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LookupEntry {
    pub tool: String,
    #[serde(default)]
    pub arguments: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    pub found: String,
}

/// A tool's entry as the MCP proxy reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct McpToolEntry {
    pub kind: ToolKind,
    pub key_argument: Option<String>,
    pub lookup: Option<LookupEntry>,
}

/// What the MCP proxy reads from the tools file besides the policies.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct McpToolsFile {
    pub tenant: Option<String>,
    pub trust_annotations: bool,
    /// Every tool the file names, read-only ones included.
    pub tools: BTreeMap<String, McpToolEntry>,
}

impl ToolPolicies {
    pub fn load(path: &Path) -> Result<ToolPolicies, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read tools file {}: {e}", path.display()))?;
        ToolPolicies::parse(&text).map_err(|e| format!("tools file {}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<ToolPolicies, String> {
        Self::parse_with_mcp(text).map(|(policies, _)| policies)
    }

    /// [`ToolPolicies::load`] with the keys only the MCP proxy reads.
    pub fn load_with_mcp(path: &Path) -> Result<(ToolPolicies, McpToolsFile), String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read tools file {}: {e}", path.display()))?;
        ToolPolicies::parse_with_mcp(&text)
            .map_err(|e| format!("tools file {}: {e}", path.display()))
    }

    /// The policies and the MCP keys, checked whole. A `read_only` tool gets no policy:
    /// it is not guarded.
    pub fn parse_with_mcp(text: &str) -> Result<(ToolPolicies, McpToolsFile), String> {
        let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
        if file.tools.is_empty() && file.default.is_none() {
            return Err("declares no tools: add a [tools.NAME] table or a [default]".into());
        }
        let mut tools = BTreeMap::new();
        let mut amounts = BTreeMap::new();
        let mut mcp_tools = BTreeMap::new();
        for (name, mut entry) in file.tools {
            let what = format!("tool {name:?}");
            if name.trim().is_empty() || name.len() > MAX_NAME_BYTES {
                return Err(format!(
                    "{what}: a tool name must be non-empty and at most {MAX_NAME_BYTES} bytes"
                ));
            }
            if let Some(amount) = entry.amount.take() {
                amounts.insert(Some(name.clone()), amount.money(&what)?);
            }
            let mcp = entry.mcp(&what)?;
            if mcp.kind != ToolKind::ReadOnly {
                tools.insert(name.clone(), entry.policy(&what)?);
            }
            mcp_tools.insert(name, mcp);
        }
        let default = match file.default {
            Some(mut entry) => {
                if entry.kind.is_some() || entry.key_argument.is_some() || entry.lookup.is_some() {
                    return Err(
                        "[default]: kind, key_argument and lookup belong to a [tools.NAME] entry"
                            .to_string(),
                    );
                }
                if let Some(amount) = entry.amount.take() {
                    amounts.insert(None, amount.money("[default]")?);
                }
                Some(entry.policy("[default]")?)
            }
            None => None,
        };
        let mcp = file.mcp.unwrap_or_default();
        if let Some(tenant) = &mcp.tenant
            && (tenant.trim().is_empty() || tenant.len() > MAX_NAME_BYTES)
        {
            return Err(format!(
                "[mcp]: tenant must be non-empty and at most {MAX_NAME_BYTES} bytes"
            ));
        }
        let mcp = McpToolsFile {
            tenant: mcp.tenant,
            trust_annotations: mcp.trust_annotations,
            tools: mcp_tools,
        };
        Ok((
            ToolPolicies {
                tools,
                default,
                amounts,
            },
            mcp,
        ))
    }
}

impl Entry {
    /// The MCP keys, taken out of the entry. A read-only tool is never guarded, so it
    /// may not name a key argument or a lookup.
    fn mcp(&mut self, what: &str) -> Result<McpToolEntry, String> {
        let kind = self.kind.unwrap_or(ToolKind::NonIdempotent);
        let key_argument = self.key_argument.take();
        let lookup = self.lookup.take();
        if kind == ToolKind::ReadOnly && (key_argument.is_some() || lookup.is_some()) {
            return Err(format!(
                "{what}: a read_only tool is not guarded: key_argument and lookup do not apply"
            ));
        }
        if let Some(arg) = &key_argument {
            field_names(what, "key_argument", std::slice::from_ref(arg))?;
        }
        if let Some(lookup) = &lookup {
            if lookup.tool.trim().is_empty() || lookup.tool.len() > MAX_NAME_BYTES {
                return Err(format!("{what}: lookup.tool must be a tool name"));
            }
            if !(lookup.found.is_empty() || lookup.found.starts_with('/')) {
                return Err(format!(
                    "{what}: lookup.found {:?} must be a JSON pointer (\"/refund\") or empty",
                    lookup.found
                ));
            }
            let names_key = lookup
                .arguments
                .values()
                .any(|v| v.as_str().is_some_and(|s| s.contains("{key}")));
            if !names_key {
                return Err(format!(
                    "{what}: lookup.arguments must pass the key somewhere (a value \"{{key}}\")"
                ));
            }
        }
        Ok(McpToolEntry {
            kind,
            key_argument,
            lookup,
        })
    }

    fn policy(self, what: &str) -> Result<ToolPolicy, String> {
        let duration = |field: &str, value: Option<String>| -> Result<HumanDuration, String> {
            let text = value.ok_or_else(|| format!("{what}: {field} is missing (e.g. \"24h\")"))?;
            let d: HumanDuration = text.parse().map_err(|e| format!("{what}: {field}: {e}"))?;
            if d.0 <= chrono::TimeDelta::zero() {
                return Err(format!("{what}: {field} must be more than 0"));
            }
            Ok(d)
        };
        let dedupes = self.provider_dedupes.unwrap_or(true);
        if !dedupes && self.key_retention.is_some() {
            return Err(format!(
                "{what}: key_retention does not go with provider_dedupes = false: a provider that \
                 does not deduplicate remembers no key"
            ));
        }
        let call_timeout = duration("call_timeout", self.call_timeout)?;
        let key_retention = match dedupes {
            true => duration("key_retention", self.key_retention)?.0,
            // Zero: a resend is never safe (policy.rs, `provider_dedupes`).
            false => chrono::TimeDelta::zero(),
        };
        if call_timeout.0.num_seconds() > MAX_CALL_TIMEOUT_SECONDS {
            return Err(format!(
                "{what}: call_timeout {call_timeout} is longer than 1h: a worker that dies holds the key that long"
            ));
        }
        if dedupes && call_timeout.0 >= key_retention {
            let key_retention = HumanDuration(key_retention);
            return Err(format!(
                "{what}: call_timeout ({call_timeout}) must be shorter than key_retention ({key_retention}): \
                 the provider would forget the key before the first call ends"
            ));
        }
        field_names(what, "free_text_fields", &self.free_text_fields)?;
        field_names(what, "natural_key", &self.natural_key)?;
        if let Some(free) = self
            .natural_key
            .iter()
            .find(|f| self.free_text_fields.contains(f))
        {
            return Err(format!(
                "{what}: natural_key: {free:?} is also a free-text field: free text is never compared"
            ));
        }
        let duplicate_window = match self.duplicate_window {
            None => DEFAULT_DUPLICATE_WINDOW,
            Some(text) => duration("duplicate_window", Some(text))?.0,
        };
        Ok(ToolPolicy {
            key_retention,
            call_timeout: call_timeout.to_std(),
            free_text_fields: self.free_text_fields,
            natural_key: self.natural_key,
            duplicate_window,
        })
    }
}

/// Checks a list of top-level argument names: non-empty, bounded, each once.
fn field_names(what: &str, list: &str, fields: &[String]) -> Result<(), String> {
    let mut seen = BTreeSet::new();
    for field in fields {
        if field.is_empty() || field.len() > MAX_NAME_BYTES {
            return Err(format!(
                "{what}: {list}: {field:?} must be non-empty and at most {MAX_NAME_BYTES} bytes"
            ));
        }
        if !seen.insert(field) {
            return Err(format!("{what}: {list}: {field:?} is listed twice"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_tools_file_declares_each_tools_policy_and_a_default() {
        let p = ToolPolicies::parse(
            "[default]\nkey_retention = \"1h\"\ncall_timeout = \"5s\"\n\
             [tools.issue_refund]\nkey_retention = \"24h\"\ncall_timeout = \"250ms\"\nfree_text_fields = [\"reason\"]\n",
        )
        .unwrap();
        let refund = p.get("issue_refund").unwrap();
        assert_eq!(refund.call_timeout, Duration::from_millis(250));
        assert_eq!(refund.key_retention, chrono::TimeDelta::hours(24));
        assert_eq!(refund.free_text_fields, ["reason"]);
        assert_eq!(p.get("other").unwrap().call_timeout, Duration::from_secs(5));
        assert!(refund.natural_key.is_empty());
        assert_eq!(refund.duplicate_window, chrono::TimeDelta::hours(24));
    }

    #[test]
    fn a_tool_may_name_its_natural_key_and_duplicate_window() {
        let p = ToolPolicies::parse(
            "[tools.issue_refund]\nkey_retention = \"24h\"\ncall_timeout = \"5s\"\n\
             natural_key = [\"invoice_id\"]\nduplicate_window = \"2h\"\n",
        )
        .unwrap();
        let refund = p.get("issue_refund").unwrap();
        assert_eq!(refund.natural_key, ["invoice_id"]);
        assert_eq!(refund.duplicate_window, chrono::TimeDelta::hours(2));
    }

    #[test]
    fn a_provider_that_does_not_deduplicate_has_no_retention_and_is_never_resent_to() {
        let p = ToolPolicies::parse(
            "[tools.send_email]\nprovider_dedupes = false\ncall_timeout = \"10s\"\n",
        )
        .unwrap();
        let email = p.get("send_email").unwrap();
        assert!(!email.provider_dedupes());
        assert_eq!(email.key_retention, chrono::TimeDelta::zero());
        assert_eq!(email.to_json("send_email")["provider_dedupes"], false);
        let err = ToolPolicies::parse(
            "[tools.a]\nprovider_dedupes = false\nkey_retention = \"1h\"\ncall_timeout = \"5s\"\n",
        )
        .unwrap_err();
        assert!(
            err.contains("key_retention does not go with provider_dedupes = false"),
            "{err}"
        );
        let refund = ToolPolicies::parse(
            "[tools.a]\nprovider_dedupes = true\nkey_retention = \"1h\"\ncall_timeout = \"5s\"\n",
        )
        .unwrap();
        assert!(
            refund
                .get("a")
                .unwrap()
                .to_json("a")
                .get("provider_dedupes")
                .is_none()
        );
    }

    #[test]
    fn a_tool_may_name_its_money_field_for_the_pages() {
        let p = ToolPolicies::parse(
            "[tools.issue_refund]\nkey_retention = \"24h\"\ncall_timeout = \"5s\"\n\
             amount = { field = \"amount_p\", currency = \"GBP\", minor_unit = 2 }\n\
             [tools.send_message]\nkey_retention = \"1h\"\ncall_timeout = \"5s\"\n\
             [default]\nkey_retention = \"1h\"\ncall_timeout = \"5s\"\n\
             amount = { field = \"cents\", currency = \"USD\", minor_unit = 2 }\n",
        )
        .unwrap();
        let refund = p.amount("issue_refund").unwrap();
        assert_eq!((refund.currency.as_str(), refund.minor_unit), ("GBP", 2));
        assert_eq!(
            refund.minor_units(&serde_json::json!({"amount_p": 2500})),
            Some(2500)
        );
        assert!(
            p.amount("send_message").is_none(),
            "a named tool without one has none"
        );
        assert_eq!(p.amount("other").unwrap().field, "cents");
    }

    #[test]
    fn each_mistake_names_the_tool_and_the_field() {
        let cases = [
            (
                "[tools.a]\ncall_timeout = \"5s\"\n",
                "tool \"a\": key_retention is missing",
            ),
            (
                "[tools.a]\nkey_retention = \"24\"\ncall_timeout = \"5s\"\n",
                "tool \"a\": key_retention: \"24\" is not a duration",
            ),
            (
                "[tools.a]\nkey_retention = \"1h\"\ncall_timeout = \"0\"\n",
                "tool \"a\": call_timeout must be more than 0",
            ),
            (
                "[tools.a]\nkey_retention = \"1d\"\ncall_timeout = \"2h\"\n",
                "tool \"a\": call_timeout 2h is longer than 1h",
            ),
            (
                "[tools.a]\nkey_retention = \"1m\"\ncall_timeout = \"1m\"\n",
                "must be shorter than key_retention",
            ),
            (
                "[tools.a]\nkey_retention = \"1h\"\ncall_timeout = \"5s\"\nfree_text_fields = [\"r\", \"r\"]\n",
                "tool \"a\": free_text_fields: \"r\" is listed twice",
            ),
            (
                "[tools.a]\nkey_retention = \"1h\"\ncall_timeout = \"5s\"\nnatural_key = [\"\"]\n",
                "tool \"a\": natural_key: \"\" must be non-empty",
            ),
            (
                "[tools.a]\nkey_retention = \"1h\"\ncall_timeout = \"5s\"\nnatural_key = [\"r\"]\nfree_text_fields = [\"r\"]\n",
                "tool \"a\": natural_key: \"r\" is also a free-text field",
            ),
            (
                "[tools.a]\nkey_retention = \"1h\"\ncall_timeout = \"5s\"\nduplicate_window = \"0s\"\n",
                "tool \"a\": duplicate_window must be more than 0",
            ),
            (
                "[default]\nkey_retention = \"1h\"\ncall_timout = \"5s\"\n",
                "unknown field `call_timout`",
            ),
            (
                "[tools.a]\nkey_retention = \"1h\"\ncall_timeout = \"5s\"\namount = { field = \"p\", currency = \"£\", minor_unit = 2 }\n",
                "tool \"a\": amount.currency \"£\" must be an ISO 4217 code",
            ),
            (
                "[default]\nkey_retention = \"1h\"\ncall_timeout = \"5s\"\namount = { field = \"p\", currency = \"GBP\" }\n",
                "missing field `minor_unit`",
            ),
            ("", "declares no tools"),
        ];
        for (text, want) in cases {
            let err = ToolPolicies::parse(text).unwrap_err();
            assert!(err.contains(want), "{text:?}: {err}");
        }
    }

    #[test]
    fn the_mcp_keys_are_read_and_a_read_only_tool_needs_no_policy() {
        let (p, mcp) = ToolPolicies::parse_with_mcp(
            "[mcp]\ntenant = \"acme\"\ntrust_annotations = true\n\
             [tools.get_order]\nkind = \"read_only\"\n\
             [tools.issue_refund]\nkey_retention = \"24h\"\ncall_timeout = \"5s\"\n\
             key_argument = \"idempotency_key\"\n\
             lookup = { tool = \"find_refund\", arguments = { idempotency_key = \"{key}\" }, found = \"/refund\" }\n",
        )
        .unwrap();
        assert!(
            p.get("get_order").is_none(),
            "a read-only tool is not guarded"
        );
        assert!(p.get("issue_refund").is_some());
        assert_eq!(mcp.tenant.as_deref(), Some("acme"));
        assert!(mcp.trust_annotations);
        assert_eq!(mcp.tools["get_order"].kind, ToolKind::ReadOnly);
        let refund = &mcp.tools["issue_refund"];
        assert_eq!(refund.kind, ToolKind::NonIdempotent);
        assert_eq!(refund.key_argument.as_deref(), Some("idempotency_key"));
        let lookup = refund.lookup.as_ref().unwrap();
        assert_eq!(
            (lookup.tool.as_str(), lookup.found.as_str()),
            ("find_refund", "/refund")
        );
    }

    #[test]
    fn each_mcp_mistake_names_the_tool_and_the_key() {
        let cases = [
            (
                "[tools.a]\nkind = \"sometimes\"\n",
                "unknown variant `sometimes`",
            ),
            (
                "[tools.a]\nkind = \"read_only\"\nkey_argument = \"k\"\n",
                "tool \"a\": a read_only tool is not guarded",
            ),
            (
                "[tools.a]\nkey_retention = \"1h\"\ncall_timeout = \"5s\"\nlookup = { tool = \"f\", arguments = { id = \"x\" } }\n",
                "tool \"a\": lookup.arguments must pass the key",
            ),
            (
                "[tools.a]\nkey_retention = \"1h\"\ncall_timeout = \"5s\"\nlookup = { tool = \"f\", arguments = { id = \"{key}\" }, found = \"refund\" }\n",
                "tool \"a\": lookup.found \"refund\" must be a JSON pointer",
            ),
            (
                "[default]\nkey_retention = \"1h\"\ncall_timeout = \"5s\"\nkind = \"convergent\"\n",
                "[default]: kind, key_argument and lookup belong to a [tools.NAME] entry",
            ),
            (
                "[mcp]\ntenant = \"\"\n[tools.a]\nkind = \"read_only\"\n",
                "[mcp]: tenant must be non-empty",
            ),
            ("[mcp]\ntenent = \"a\"\n", "unknown field `tenent`"),
        ];
        for (text, want) in cases {
            let err = ToolPolicies::parse_with_mcp(text).unwrap_err();
            assert!(err.contains(want), "{text:?}: {err}");
        }
    }
}
