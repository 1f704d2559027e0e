//! `idemwatch serve` flags for the tailer and the exporter (docs/METRICS.md).

use crate::duration::HumanDuration;
use crate::metrics::MetricsOptions;
use crate::tail::TailSettings;
use clap::Args;
use std::time::Duration;

#[derive(Debug, Clone, Args)]
pub struct MetricsArgs {
    /// Attempt rows the tailer reads per query.
    #[arg(long, env = "IDEMWATCH_TAIL_BATCH_SIZE", default_value_t = 500,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub tail_batch_size: u32,
    /// Longest wait between polls of the attempt log when it is quiet (`1s`, `250ms`).
    /// While rows arrive the tailer polls every 50 ms, or at once when a batch is full.
    #[arg(long, env = "IDEMWATCH_TAIL_POLL_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    pub tail_poll_interval: Duration,
    /// How often the backlog gauges (UNKNOWN keys, expired leases) are recomputed.
    #[arg(long, env = "IDEMWATCH_BACKLOG_REFRESH_INTERVAL", default_value = "15s", value_parser = parse_duration)]
    pub backlog_refresh_interval: Duration,
    /// Add a `tenant` label to the per-tool metrics (off by default: cardinality).
    #[arg(long, env = "IDEMWATCH_METRICS_TENANT_LABEL")]
    pub metrics_tenant_label: bool,
    /// With --metrics-tenant-label: at most this many tenants get their own label value;
    /// the rest are reported as `tenant="other"`.
    #[arg(long, env = "IDEMWATCH_METRICS_TENANT_CAP", default_value_t = 20,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub metrics_tenant_cap: u32,
    /// At most this many tools not named in the tools file get their own `tool` label
    /// value; the rest are reported as `tool="other"` and counted in
    /// `idemwatch_metrics_label_overflow_total{label="tool"}`.
    #[arg(long, env = "IDEMWATCH_METRICS_TOOL_CAP", default_value_t = 50,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub metrics_tool_cap: u32,
}

impl MetricsArgs {
    pub(crate) fn metrics_options(&self) -> MetricsOptions {
        MetricsOptions {
            tenant_label: self.metrics_tenant_label,
            tenant_cap: self.metrics_tenant_cap as usize,
            tool_cap: self.metrics_tool_cap as usize,
        }
    }

    pub(crate) fn tail_settings(&self) -> TailSettings {
        let defaults = TailSettings::default();
        TailSettings {
            batch_size: self.tail_batch_size,
            busy_interval: defaults.busy_interval.min(self.tail_poll_interval),
            idle_interval: self.tail_poll_interval,
            ..defaults
        }
    }
}

/// A positive duration of at most a day, in the one syntax of every duration flag
/// (`250ms`, `1s`, `2m`, `1s500ms`; see [`crate::duration`]).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let d: HumanDuration = text.parse()?;
    if d.is_zero() || d.0 > chrono::TimeDelta::days(1) {
        return Err(format!(
            "{:?} must be above 0 and at most 24 hours",
            text.trim()
        ));
    }
    Ok(d.to_std())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_with_their_unit() {
        for (text, expected) in [
            ("250ms", Duration::from_millis(250)),
            ("1s", Duration::from_secs(1)),
            ("1s500ms", Duration::from_millis(1500)),
            ("2m", Duration::from_secs(120)),
        ] {
            assert_eq!(parse_duration(text), Ok(expected), "{text}");
        }
    }

    #[test]
    fn a_duration_without_a_known_unit_is_refused_with_a_hint() {
        assert!(parse_duration("10").unwrap_err().contains("not a duration"));
        assert!(
            parse_duration("25h")
                .unwrap_err()
                .contains("at most 24 hours")
        );
        assert!(parse_duration("0s").unwrap_err().contains("above 0"));
        assert!(parse_duration("s").unwrap_err().contains("not a duration"));
    }
}
