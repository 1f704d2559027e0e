//! What `idemwatch mcp-proxy --listen` exports at `/metrics` (docs/METRICS.md): its own
//! registry, apart from `serve`'s. Keys the proxy writes are counted by the `serve`
//! (or tailer) on the same database like any other key; these families are what only
//! the proxy knows.

use super::macros::metric_families;
use crate::guard::{AttemptKind, NOT_LOGGED, RefusalsNotLogged};

metric_families! {
    /// The proxy's families. Field names are the metric names.
    pub struct McpFamilies {
        /// 1 for each annotation of an upstream tool that contradicts the tools file's
        /// `kind` (readOnlyHint, idempotentHint, destructiveHint), found when the proxy
        /// started; the tools file decides, the annotation is the server's declaration.
        /// Only tools the file names are compared, so the tool label is bounded by it.
        idemwatch_mcp_annotation_disagreements: IntGaugeVec["tool", "annotation"],
        /// Refusals the proxy's in-process guard answered without appending a row (a run
        /// of identical refusals on one key, docs/GUARD.md), by the refusal's kind; as
        /// `serve`'s family of the same name. Through `--guard-url`, `serve` counts them.
        idemwatch_guard_refusals_not_logged_total: IntCounterVec["tool", "reason"],
        /// Always 1; the version label says which idemwatch this is.
        idemwatch_build_info: IntGaugeVec["version"],
    }
}

pub struct McpMetrics {
    registry: prometheus::Registry,
    pub families: McpFamilies,
}

impl std::fmt::Debug for McpMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("McpMetrics")
    }
}

impl McpMetrics {
    /// The families, made before the guard that reports to them.
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = prometheus::Registry::new();
        let families = McpFamilies::register(&registry, false)?;
        families
            .idemwatch_build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        Ok(Self { registry, families })
    }

    /// What the start found: one series per `(tool, annotation)` disagreement, and the
    /// refusal counters of each guarded tool at 0 (a series that appears only on its
    /// first increase hides that increase from `rate()`).
    pub fn started<'a>(
        &self,
        disagreements: impl IntoIterator<Item = (&'a str, &'a str)>,
        guarded: impl IntoIterator<Item = &'a str>,
    ) {
        let f = &self.families;
        for (tool, annotation) in disagreements {
            f.idemwatch_mcp_annotation_disagreements
                .with_label_values(&[tool, annotation])
                .set(1);
        }
        for tool in guarded {
            for kind in NOT_LOGGED {
                f.idemwatch_guard_refusals_not_logged_total
                    .with_label_values(&[tool, kind.as_str()]);
            }
        }
    }

    pub fn render(&self) -> Result<String, prometheus::Error> {
        prometheus::TextEncoder::new().encode_to_string(&self.registry.gather())
    }
}

/// The proxy's tools are the upstream's, listed once at start: the label is bounded by
/// that list (a tool outside it is refused before the guard sees it).
impl RefusalsNotLogged for McpMetrics {
    fn refusal_not_logged(&self, tool: &str, _tenant: &str, kind: AttemptKind) {
        self.families
            .idemwatch_guard_refusals_not_logged_total
            .with_label_values(&[tool, kind.as_str()])
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_disagreement_is_one_series_at_one() {
        let m = McpMetrics::new().unwrap();
        m.started(
            [
                ("cancel_order", "destructiveHint"),
                ("cancel_order", "readOnlyHint"),
            ],
            ["issue_refund"],
        );
        let text = m.render().unwrap();
        assert!(
            text.contains(r#"idemwatch_mcp_annotation_disagreements{annotation="destructiveHint",tool="cancel_order"} 1"#),
            "{text}"
        );
        assert_eq!(
            text.matches("idemwatch_mcp_annotation_disagreements{")
                .count(),
            2
        );
        assert!(
            text.contains(r#"idemwatch_guard_refusals_not_logged_total{reason="payload_mismatch",tool="issue_refund"} 0"#),
            "{text}"
        );
    }
}
