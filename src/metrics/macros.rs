//! `metric_families!`: declares a struct of typed metric fields, each registered in an
//! owned registry under its field name, with its doc comment as HELP. One place names
//! a metric, types it, labels it and explains it.

use prometheus::{
    Gauge, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
    Opts,
};

/// Builds one metric from its name, HELP, labels and (histograms only) buckets.
pub(super) trait FromParts: Sized {
    fn from_parts(
        name: &str,
        help: String,
        labels: &[&str],
        buckets: Option<&[f64]>,
    ) -> Result<Self, prometheus::Error>;
}

macro_rules! single {
    ($($ty:ident),*) => {$(
        impl FromParts for $ty {
            fn from_parts(name: &str, help: String, labels: &[&str], _: Option<&[f64]>) -> Result<Self, prometheus::Error> {
                debug_assert!(labels.is_empty(), "{name} takes no labels");
                $ty::with_opts(Opts::new(name, help))
            }
        }
    )*};
}
single!(IntCounter, IntGauge, Gauge);

macro_rules! labelled {
    ($($ty:ident),*) => {$(
        impl FromParts for $ty {
            fn from_parts(name: &str, help: String, labels: &[&str], _: Option<&[f64]>) -> Result<Self, prometheus::Error> {
                $ty::new(Opts::new(name, help), labels)
            }
        }
    )*};
}
labelled!(IntCounterVec, IntGaugeVec, GaugeVec);

impl FromParts for HistogramVec {
    fn from_parts(
        name: &str,
        help: String,
        labels: &[&str],
        buckets: Option<&[f64]>,
    ) -> Result<Self, prometheus::Error> {
        let mut opts = HistogramOpts::new(name, help);
        if let Some(buckets) = buckets {
            opts = opts.buckets(buckets.to_vec());
        }
        HistogramVec::new(opts, labels)
    }
}

/// A doc comment (one string per line) as a one-line HELP text.
pub(super) fn help(lines: &[&str]) -> String {
    lines
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The label `tenant` exists only when the tenant label is switched on.
pub(super) fn labels<'a>(declared: &[&'a str], tenant_label: bool) -> Vec<&'a str> {
    declared
        .iter()
        .copied()
        .filter(|l| tenant_label || *l != "tenant")
        .collect()
}

macro_rules! metric_families {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $(
                $(#[doc = $doc:literal])+
                $field:ident: $ty:ident $([$($label:literal),*])? $(buckets = $buckets:expr)?
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $(
                $(#[doc = $doc])+
                pub $field: prometheus::$ty,
            )*
        }

        impl $name {
            /// Creates every family and registers it in `registry`.
            fn register(
                registry: &prometheus::Registry,
                tenant_label: bool,
            ) -> Result<Self, prometheus::Error> {
                use $crate::metrics::macros::FromParts;
                $(
                    let declared: &[&str] = &[$($($label),*)?];
                    let buckets: Option<&[f64]> = None $(.or(Some($buckets)))?;
                    let $field = <prometheus::$ty>::from_parts(
                        stringify!($field),
                        $crate::metrics::macros::help(&[$($doc),+]),
                        &$crate::metrics::macros::labels(declared, tenant_label),
                        buckets,
                    )?;
                    registry.register(Box::new($field.clone()))?;
                )*
                Ok(Self { $($field),* })
            }
        }
    };
}
pub(super) use metric_families;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_multi_line_doc_comment_becomes_one_line_of_help() {
        assert_eq!(
            help(&[" Admissions to the guard,", " one per request.", ""]),
            "Admissions to the guard, one per request."
        );
    }

    #[test]
    fn the_tenant_label_is_dropped_unless_switched_on() {
        assert_eq!(
            labels(&["tool", "tenant", "outcome"], false),
            ["tool", "outcome"]
        );
        assert_eq!(
            labels(&["tool", "tenant", "outcome"], true),
            ["tool", "tenant", "outcome"]
        );
    }
}
