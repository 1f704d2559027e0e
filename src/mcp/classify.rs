//! Which upstream tools the proxy guards (seed 003's checklist: read-only, convergent,
//! non-idempotent). The tools file decides; the server's annotations are its own
//! declaration, compared with the file and reported when they disagree, never trusted
//! unless the operator says so (`[mcp] trust_annotations = true`).

use crate::guard::{LookupEntry, McpToolsFile, ToolKind, ToolPolicies, ToolPolicy};
use rmcp::model::Tool;
use serde::Serialize;
use std::collections::BTreeMap;

/// What the proxy does with calls of one tool.
#[derive(Debug, Clone)]
pub enum Treatment {
    /// Sent to the upstream as is: the tools file calls it read-only, or the operator
    /// trusts the server's `readOnlyHint` for tools the file does not name.
    PassThrough,
    /// Through the guard under this policy.
    Guarded(Box<Guarded>),
    /// Never sent: why, in words for the model and the operator.
    Refused(String),
}

#[derive(Debug, Clone)]
pub struct Guarded {
    pub kind: ToolKind,
    pub policy: ToolPolicy,
    /// The argument the idemwatch key is passed in, for a server that dedupes by key.
    pub key_argument: Option<String>,
    /// The reconciliation query; without one an UNKNOWN key waits for a person.
    pub lookup: Option<LookupEntry>,
}

/// One annotation of the server that contradicts the tools file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Disagreement {
    pub tool: String,
    /// The tools file's `kind`.
    pub file_kind: &'static str,
    /// The annotation and the value the server declares.
    pub annotation: &'static str,
    pub server_value: bool,
    /// What the proxy does about it.
    pub consequence: &'static str,
}

pub struct Classification {
    pub tools: BTreeMap<String, Treatment>,
    pub disagreements: Vec<Disagreement>,
}

const GUARDED_ANYWAY: &str = "guarded as the tools file says";
const REFUSED: &str = "refused until the tools file is fixed";

/// Classifies every upstream tool. A lookup naming a tool the upstream does not list
/// is an error: the proxy must not start with a reconciliation it cannot run.
pub fn classify(
    upstream: &[Tool],
    policies: &ToolPolicies,
    file: &McpToolsFile,
    tools_file: &str,
) -> Result<Classification, String> {
    let listed = |name: &str| upstream.iter().any(|t| t.name == name);
    for (name, entry) in &file.tools {
        if let Some(lookup) = &entry.lookup
            && !listed(&lookup.tool)
        {
            return Err(format!(
                "tools file {tools_file}: tool {name:?}: lookup.tool {:?} is not a tool of the upstream server",
                lookup.tool
            ));
        }
    }
    let mut tools = BTreeMap::new();
    let mut disagreements = Vec::new();
    for tool in upstream {
        let name = tool.name.to_string();
        let hints = tool.annotations.clone().unwrap_or_default();
        let treatment = match file.tools.get(&name) {
            Some(entry) => {
                let mut found = compare(&name, entry.kind, &hints);
                let refused = found.iter().any(|d| d.consequence == REFUSED);
                disagreements.append(&mut found);
                if refused {
                    Treatment::Refused(format!(
                        "the tools file {tools_file} calls {name} read-only, but the server marks it destructive (destructiveHint); idemwatch refuses it until the file is fixed"
                    ))
                } else if entry.kind == ToolKind::ReadOnly {
                    Treatment::PassThrough
                } else {
                    let policy = policies
                        .tools
                        .get(&name)
                        .cloned()
                        .expect("every guarded entry of the tools file has a policy");
                    Treatment::Guarded(Box::new(Guarded {
                        kind: entry.kind,
                        policy,
                        key_argument: entry.key_argument.clone(),
                        lookup: entry.lookup.clone(),
                    }))
                }
            }
            None if file.trust_annotations && hints.read_only_hint == Some(true) => {
                Treatment::PassThrough
            }
            None => match &policies.default {
                Some(policy) => Treatment::Guarded(Box::new(Guarded {
                    kind: ToolKind::NonIdempotent,
                    policy: policy.clone(),
                    key_argument: None,
                    lookup: None,
                })),
                None => Treatment::Refused(format!(
                    "{name} is not in the tools file {tools_file} and the file has no [default] policy, so idemwatch does not let it run: the operator must classify it there"
                )),
            },
        };
        tools.insert(name, treatment);
    }
    for name in file.tools.keys().filter(|n| !listed(n)) {
        tracing::warn!(tool = %name, "the tools file names a tool the upstream server does not list");
    }
    for d in &disagreements {
        tracing::warn!(tool = %d.tool, file_kind = d.file_kind, annotation = d.annotation, server_value = d.server_value, consequence = d.consequence, "the upstream's annotation disagrees with the tools file");
    }
    Ok(Classification {
        tools,
        disagreements,
    })
}

/// The explicit hints that contradict `kind` (an absent hint claims nothing).
fn compare(tool: &str, kind: ToolKind, hints: &rmcp::model::ToolAnnotations) -> Vec<Disagreement> {
    let read_only = hints.read_only_hint;
    let destructive = hints.destructive_hint;
    let idempotent = hints.idempotent_hint;
    let checks: [(&'static str, Option<bool>, bool, &'static str); 2] = match kind {
        ToolKind::ReadOnly => [
            (
                "readOnlyHint",
                read_only,
                false,
                "passed through as the tools file says",
            ),
            ("destructiveHint", destructive, true, REFUSED),
        ],
        ToolKind::Convergent => [
            ("readOnlyHint", read_only, true, GUARDED_ANYWAY),
            ("idempotentHint", idempotent, false, GUARDED_ANYWAY),
        ],
        ToolKind::NonIdempotent => [
            ("readOnlyHint", read_only, true, GUARDED_ANYWAY),
            ("idempotentHint", idempotent, true, GUARDED_ANYWAY),
        ],
    };
    checks
        .into_iter()
        .filter(|(_, declared, contradicting, _)| *declared == Some(*contradicting))
        .map(|(annotation, _, server_value, consequence)| Disagreement {
            tool: tool.to_string(),
            file_kind: kind.as_str(),
            annotation,
            server_value,
            consequence,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, annotations: serde_json::Value) -> Tool {
        serde_json::from_value(json!({
            "name": name, "inputSchema": {"type": "object"}, "annotations": annotations
        }))
        .unwrap()
    }

    fn file(text: &str) -> (ToolPolicies, McpToolsFile) {
        ToolPolicies::parse_with_mcp(text).unwrap()
    }

    const FILE: &str = r#"
[tools.get_order]
kind = "read_only"
[tools.issue_refund]
key_retention = "24h"
call_timeout = "5s"
[tools.set_address]
kind = "convergent"
key_retention = "24h"
call_timeout = "5s"
"#;

    #[test]
    fn the_tools_file_decides_and_every_contradicting_hint_is_reported() {
        let (policies, mcp) = file(FILE);
        let upstream = [
            tool("get_order", json!({"readOnlyHint": true})),
            tool("issue_refund", json!({"idempotentHint": true})),
            tool("set_address", json!({"idempotentHint": true})),
            tool("delete_all", json!({"readOnlyHint": true})),
        ];
        let c = classify(&upstream, &policies, &mcp, "tools.toml").unwrap();
        assert!(matches!(c.tools["get_order"], Treatment::PassThrough));
        assert!(matches!(c.tools["issue_refund"], Treatment::Guarded(_)));
        assert!(matches!(c.tools["set_address"], Treatment::Guarded(_)));
        let Treatment::Refused(why) = &c.tools["delete_all"] else {
            panic!("an unlisted tool without a default is refused")
        };
        assert!(why.contains("tools.toml"), "{why}");
        assert_eq!(c.disagreements.len(), 1);
        assert_eq!(c.disagreements[0].tool, "issue_refund");
        assert_eq!(c.disagreements[0].annotation, "idempotentHint");
    }

    #[test]
    fn a_read_only_tool_the_server_marks_destructive_is_refused() {
        let (policies, mcp) = file(FILE);
        let upstream = [tool(
            "get_order",
            json!({"readOnlyHint": false, "destructiveHint": true}),
        )];
        let c = classify(&upstream, &policies, &mcp, "tools.toml").unwrap();
        assert!(matches!(c.tools["get_order"], Treatment::Refused(_)));
        assert_eq!(c.disagreements.len(), 2);
    }

    #[test]
    fn read_only_hints_pass_only_when_trusted_and_the_default_guards_the_rest() {
        let text = format!(
            "{FILE}\n[default]\nkey_retention = \"1h\"\ncall_timeout = \"5s\"\n[mcp]\ntrust_annotations = true\n"
        );
        let (policies, mcp) = file(&text);
        let upstream = [
            tool("list_things", json!({"readOnlyHint": true})),
            tool("send_mail", json!({})),
        ];
        let c = classify(&upstream, &policies, &mcp, "tools.toml").unwrap();
        assert!(matches!(c.tools["list_things"], Treatment::PassThrough));
        assert!(matches!(c.tools["send_mail"], Treatment::Guarded(_)));
    }

    #[test]
    fn a_lookup_naming_a_tool_the_server_lacks_is_refused_at_start() {
        let text = r#"
[tools.issue_refund]
key_retention = "24h"
call_timeout = "5s"
lookup = { tool = "find_refund", arguments = { idempotency_key = "{key}" } }
"#;
        let (policies, mcp) = file(text);
        let err = match classify(
            &[tool("issue_refund", json!({}))],
            &policies,
            &mcp,
            "t.toml",
        ) {
            Err(e) => e,
            Ok(_) => panic!("accepted a lookup tool the server does not list"),
        };
        assert!(
            err.contains("\"find_refund\" is not a tool of the upstream"),
            "{err}"
        );
    }
}
