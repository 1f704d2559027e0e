//! What `idemwatch mcp-proxy --listen` exports at `/metrics` (docs/METRICS.md): its own
//! registry, apart from `serve`'s. Keys the proxy writes are counted by the `serve`
//! (or tailer) on the same database like any other key; these families are what only
//! the proxy knows.

use super::macros::metric_families;

metric_families! {
    /// The proxy's families. Field names are the metric names.
    pub struct McpFamilies {
        /// 1 for each annotation of an upstream tool that contradicts the tools file's
        /// `kind` (readOnlyHint, idempotentHint, destructiveHint), found when the proxy
        /// started; the tools file decides, the annotation is the server's declaration.
        /// Only tools the file names are compared, so the tool label is bounded by it.
        idemwatch_mcp_annotation_disagreements: IntGaugeVec["tool", "annotation"],
        /// Always 1; the version label says which idemwatch this is.
        idemwatch_build_info: IntGaugeVec["version"],
    }
}

pub struct McpMetrics {
    registry: prometheus::Registry,
    pub families: McpFamilies,
}

impl McpMetrics {
    /// The families, with one series per `(tool, annotation)` disagreement.
    pub fn new<'a>(
        disagreements: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, prometheus::Error> {
        let registry = prometheus::Registry::new();
        let families = McpFamilies::register(&registry, false)?;
        families
            .idemwatch_build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        for (tool, annotation) in disagreements {
            families
                .idemwatch_mcp_annotation_disagreements
                .with_label_values(&[tool, annotation])
                .set(1);
        }
        Ok(Self { registry, families })
    }

    pub fn render(&self) -> Result<String, prometheus::Error> {
        prometheus::TextEncoder::new().encode_to_string(&self.registry.gather())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_disagreement_is_one_series_at_one() {
        let m = McpMetrics::new([
            ("cancel_order", "destructiveHint"),
            ("cancel_order", "readOnlyHint"),
        ])
        .unwrap();
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
    }
}
