//! The label values idemwatch has handed out: the tools named in the tools file, at
//! most `tool_cap` other tools plus `other`, and (when the tenant label is on) at most
//! `cap` tenants plus `other`. Every (tool, tenant) pair is exported from the moment
//! either half is first seen, so a first conflict shows in `increase()`.
//!
//! Tool names come from workers (any name under the tools file's `[default]` policy),
//! so without the cap one worker could add series without end (issue 47: 3,000 names
//! grew /metrics from 10 KB to 58 MB). The tools file is the operator's, not a
//! worker's: its tools are always labelled and do not count against the cap.

use std::collections::BTreeSet;

/// The tenant value that every tenant beyond the cap folds into.
pub const OTHER_TENANT: &str = "other";
/// The tool value that every tool beyond the cap folds into.
pub const OTHER_TOOL: &str = "other";

/// Where one event's series live: the tool and, with the tenant label on, the
/// tenant's label value (itself or `other`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Slot {
    pub tool: String,
    pub tenant: Option<String>,
}

impl Slot {
    /// The label values for a family declared as `[tool, tenant, rest…]`.
    pub fn values<'a>(&'a self, rest: &[&'a str]) -> Vec<&'a str> {
        let mut v = Vec::with_capacity(2 + rest.len());
        v.push(self.tool.as_str());
        if let Some(t) = &self.tenant {
            v.push(t.as_str());
        }
        v.extend_from_slice(rest);
        v
    }
}

/// Which labels of one event were folded into `other` by their cap.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Folded {
    pub tool: bool,
    pub tenant: bool,
}

#[derive(Debug)]
pub(super) struct LabelSpace {
    tenant_label: bool,
    cap: usize,
    tool_cap: usize,
    /// Tools named in the tools file: labelled whatever the cap.
    configured: BTreeSet<String>,
    /// Labelled tools, `other` included once something has folded into it.
    tools: BTreeSet<String>,
    /// Labelled tenants, `other` included once something has folded into it.
    tenants: BTreeSet<String>,
}

impl LabelSpace {
    pub(super) fn new(tenant_label: bool, cap: usize, tool_cap: usize) -> Self {
        Self {
            tenant_label,
            cap,
            tool_cap,
            configured: BTreeSet::new(),
            tools: BTreeSet::new(),
            tenants: BTreeSet::new(),
        }
    }

    /// The slot of (tool, tenant), which labels of it were folded into `other`, and
    /// the slots that exist for the first time because of it (to be created at zero).
    pub(super) fn slot(&mut self, tool: &str, tenant: &str) -> (Slot, Folded, Vec<Slot>) {
        let mut fresh = Vec::new();
        let tenant_value = self.tenant_value(tenant, &mut fresh);
        let tool_value = self.add_tool(tool, &mut fresh);
        fresh.sort();
        fresh.dedup();
        let folded = Folded {
            tool: tool_value != tool,
            tenant: tenant_value.as_deref().is_some_and(|t| t != tenant),
        };
        let slot = Slot {
            tool: tool_value,
            tenant: tenant_value,
        };
        (slot, folded, fresh)
    }

    /// The tools of the tools file: labelled from the start, whatever the cap, so
    /// that their first event already moves a series that was exported at 0.
    /// Returns the new slots.
    pub(super) fn configure(&mut self, tools: &[String]) -> Vec<Slot> {
        let mut fresh = Vec::new();
        for tool in tools {
            self.configured.insert(tool.clone());
            self.add_tool(tool, &mut fresh);
        }
        fresh.sort();
        fresh.dedup();
        fresh
    }

    /// Tools and tenants known before any event (from the database at start): the
    /// tenants in the order given, up to the cap. Returns the new slots.
    pub(super) fn seed(&mut self, tools: &[String], tenants: &[String]) -> Vec<Slot> {
        let mut fresh = Vec::new();
        for tenant in tenants {
            if self.tenants.len() >= self.cap {
                break;
            }
            self.tenant_value(tenant, &mut fresh);
        }
        for tool in tools {
            self.add_tool(tool, &mut fresh);
        }
        fresh.sort();
        fresh.dedup();
        fresh
    }

    /// The label value of `tool` (itself, or `other` past the cap), labelling it if new.
    fn add_tool(&mut self, tool: &str, fresh: &mut Vec<Slot>) -> String {
        if self.tools.contains(tool) {
            return tool.to_string();
        }
        let unconfigured = self
            .tools
            .iter()
            .filter(|t| *t != OTHER_TOOL && !self.configured.contains(*t))
            .count();
        let value = if self.configured.contains(tool) || unconfigured < self.tool_cap {
            tool
        } else {
            OTHER_TOOL
        };
        if self.tools.insert(value.to_string()) {
            fresh.extend(self.tenant_values().map(|t| Slot {
                tool: value.to_string(),
                tenant: t,
            }));
        }
        value.to_string()
    }

    /// Every slot handed out so far: all tools × all tenant values.
    pub(super) fn all(&self) -> Vec<Slot> {
        self.tools
            .iter()
            .flat_map(|tool| {
                self.tenant_values().map(move |t| Slot {
                    tool: tool.clone(),
                    tenant: t,
                })
            })
            .collect()
    }

    fn tenant_values(&self) -> Box<dyn Iterator<Item = Option<String>> + '_> {
        if self.tenant_label {
            Box::new(self.tenants.iter().map(|t| Some(t.clone())))
        } else {
            Box::new(std::iter::once(None))
        }
    }

    fn tenant_value(&mut self, tenant: &str, fresh: &mut Vec<Slot>) -> Option<String> {
        if !self.tenant_label {
            return None;
        }
        let labelled = self.tenants.len() - usize::from(self.tenants.contains(OTHER_TENANT));
        let value = if self.tenants.contains(tenant) {
            return Some(tenant.to_string());
        } else if labelled < self.cap {
            tenant
        } else {
            OTHER_TENANT
        };
        if self.tenants.insert(value.to_string()) {
            fresh.extend(self.tools.iter().map(|tool| Slot {
                tool: tool.clone(),
                tenant: Some(value.to_string()),
            }));
        }
        Some(value.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(tool: &str, tenant: Option<&str>) -> Slot {
        Slot {
            tool: tool.into(),
            tenant: tenant.map(Into::into),
        }
    }

    #[test]
    fn without_the_tenant_label_a_new_tool_is_one_new_slot() {
        let mut space = LabelSpace::new(false, 2, 100);
        assert_eq!(
            space.slot("issue_refund", "acme"),
            (
                slot("issue_refund", None),
                Folded::default(),
                vec![slot("issue_refund", None)]
            )
        );
        assert_eq!(space.slot("issue_refund", "globex").2, vec![]);
    }

    #[test]
    fn tenants_beyond_the_cap_fold_into_other() {
        let mut space = LabelSpace::new(true, 2, 100);
        assert_eq!(space.slot("t", "a").0, slot("t", Some("a")));
        assert_eq!(space.slot("t", "b").0, slot("t", Some("b")));
        let (third, folded, fresh) = space.slot("t", "c");
        assert_eq!(third, slot("t", Some(OTHER_TENANT)));
        assert!(folded.tenant && !folded.tool);
        assert_eq!(fresh, vec![slot("t", Some(OTHER_TENANT))]);
        assert_eq!(
            space.slot("t", "d"),
            (
                slot("t", Some(OTHER_TENANT)),
                Folded {
                    tool: false,
                    tenant: true
                },
                vec![]
            )
        );
        assert_eq!(space.slot("t", "a").0, slot("t", Some("a")));
    }

    #[test]
    fn a_new_tool_gets_a_slot_for_every_tenant_value_seen() {
        let mut space = LabelSpace::new(true, 1, 100);
        space.slot("t", "a");
        space.slot("t", "b");
        let (_, _, fresh) = space.slot("u", "a");
        assert_eq!(
            fresh,
            vec![slot("u", Some("a")), slot("u", Some(OTHER_TENANT))]
        );
        assert_eq!(space.all().len(), 4);
    }

    #[test]
    fn seeding_labels_at_most_cap_tenants_for_every_tool() {
        let mut space = LabelSpace::new(true, 2, 100);
        let fresh = space.seed(
            &["t".into(), "u".into()],
            &["a".into(), "b".into(), "c".into()],
        );
        assert_eq!(fresh.len(), 4, "{fresh:?}");
        assert_eq!(space.slot("t", "c").0, slot("t", Some(OTHER_TENANT)));
        let mut plain = LabelSpace::new(false, 2, 100);
        assert_eq!(
            plain.seed(&["t".into()], &["a".into()]),
            vec![slot("t", None)]
        );
    }

    #[test]
    fn tools_beyond_the_cap_fold_into_other_but_the_tools_file_is_always_labelled() {
        let mut space = LabelSpace::new(false, 2, 2);
        assert_eq!(
            space.configure(&["issue_refund".into()]),
            vec![slot("issue_refund", None)]
        );
        assert_eq!(space.slot("a", "x").0, slot("a", None));
        assert_eq!(space.slot("b", "x").0, slot("b", None));
        let (c, folded, fresh) = space.slot("c", "x");
        assert_eq!(c, slot(OTHER_TOOL, None));
        assert!(folded.tool && !folded.tenant);
        assert_eq!(fresh, vec![slot(OTHER_TOOL, None)]);
        assert_eq!(space.slot("d", "x").2, vec![], "other exists already");
        assert_eq!(space.slot("a", "x").0, slot("a", None));
        assert_eq!(space.slot("issue_refund", "x").1, Folded::default());
        assert_eq!(space.all().len(), 4, "issue_refund, a, b, other");
    }

    #[test]
    fn three_thousand_tool_names_make_at_most_cap_plus_one_tools() {
        let mut space = LabelSpace::new(true, 2, 50);
        let names: Vec<String> = (0..3000).map(|i| format!("tool_{i}")).collect();
        space.seed(&names[..1000], &["acme".into()]);
        for name in &names[1000..] {
            space.slot(name, "acme");
        }
        let tools: BTreeSet<String> = space.all().into_iter().map(|s| s.tool).collect();
        assert_eq!(tools.len(), 51, "{tools:?}");
        assert!(tools.contains(OTHER_TOOL));
    }
}
