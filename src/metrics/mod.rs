//! What /metrics exports: the [`Metrics`] struct owns its registry (no globals), each
//! family is a typed field whose doc comment is its HELP text. Event counters are
//! updated by the tailer ([`crate::tail`]) as it reads the attempt log; table-state
//! gauges by the backlog refresher ([`backlog`]). A scrape never touches the database.
//! The names, labels and meaning of every family are public contract: docs/METRICS.md.

pub mod backlog;
mod labels;
mod macros;
pub mod mcp;
pub mod port;

pub use labels::{Folded, OTHER_TENANT, OTHER_TOOL, Slot};

use crate::guard::{
    AdmissionOutcome, AttemptKind, NOT_LOGGED, RefusalsNotLogged, Resolution, Status,
};
use labels::LabelSpace;
use macros::metric_families;
use std::sync::{Mutex, PoisonError};

/// Why a login was refused (`idemwatch_login_refusals_total`), as
/// `auth::throttle::Refusal::reason` names them.
pub(crate) const LOGIN_REFUSALS: [&str; 4] = [
    "busy",
    "throttled_user",
    "throttled_address",
    "bad_credentials",
];

/// Provider call latency buckets (seconds). Dense around the usual client deadlines
/// of 10 s and 30 s, so `le="10"` and `le="30"` read off the share within each.
pub(crate) const DURATION_BUCKETS: &[f64] = &[
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 60.0,
];

metric_families! {
    /// The exported families. Field names are the metric names.
    pub struct Families {
        /// Admissions to the guard, one per request, by outcome: new (claimed the key),
        /// replay (stored result returned), replay_failure (stored definitive failure
        /// returned), conflict (same key, other payload), in_flight (refused while the
        /// first attempt runs), takeover (took over an UNKNOWN key or an expired lease).
        idempotency_requests_total: IntCounterVec["tool", "tenant", "outcome"],
        /// Records entering DONE, FAILED or UNKNOWN (a settled call, a reconciliation,
        /// an escalation or a manual resolution).
        idempotency_transitions_total: IntCounterVec["tool", "tenant", "status"],
        /// Manual resolutions of undecided keys by a person: done, failed, release.
        idempotency_resolutions_total: IntCounterVec["tool", "tenant", "resolution"],
        /// Escalation events, not keys: a key left UNKNOWN for a person (not found at a
        /// provider that has already forgotten it); every redelivery counts again.
        idempotency_escalations_total: IntCounterVec["tool", "tenant"],
        /// Suspected duplicates: claims whose tenant, tool, business ref and fingerprint
        /// match another key's within the tool's duplicate window (docs/GUARD.md, 4a).
        /// A second intent for the same action the intent key could not see.
        idempotency_suspected_duplicates_total: IntCounterVec["tool"],
        /// Keys in UNKNOWN now: the provider may or may not have performed the effect.
        idempotency_unknown_backlog: IntGaugeVec["tool", "tenant"],
        /// IN_PROGRESS keys whose lease has expired: their worker died or hung mid-call
        /// and no retry has taken them over yet.
        idempotency_expired_leases: IntGaugeVec["tool", "tenant"],
        /// Creation time (Unix seconds) of the oldest UNKNOWN key; 0 when there is none.
        idempotency_unknown_oldest_created_timestamp_seconds: GaugeVec["tool", "tenant"],
        /// Earliest instant (Unix seconds) after which a resend of an UNKNOWN key is no
        /// longer safe (its resend_safe_until: the provider's key retention deadline less
        /// the safety margin), among those not passed yet; 0 when there is none.
        idempotency_unknown_earliest_retention_deadline_timestamp_seconds: GaugeVec["tool", "tenant"],
        /// UNKNOWN keys past retention (resend_safe_until passed): a resend could
        /// perform the effect twice, only a person can resolve them.
        idempotency_unknown_past_retention: IntGaugeVec["tool", "tenant"],
        /// Provider call latency as the guard measured it (completed, failed and
        /// marked_unknown attempts).
        idempotency_attempt_duration_seconds: HistogramVec["tool"] buckets = DURATION_BUCKETS,
        /// 1 when the last database query of the tailer or the backlog refresher
        /// succeeded, 0 when it failed.
        idemwatch_db_up: IntGauge,
        /// Unix time of the tailer's last successful poll of the attempt log (heartbeat).
        idemwatch_tail_last_success_timestamp_seconds: Gauge,
        /// Age of the oldest attempt row committed but not yet counted; 0 when caught up.
        idemwatch_tail_lag_seconds: Gauge,
        /// Attempt rows the tailer has read since this process started.
        idemwatch_tail_events_total: IntCounter,
        /// Failed tailer polls (database errors); the tailer retries with backoff.
        idemwatch_tail_errors_total: IntCounter,
        /// PostgreSQL: age of the oldest open write transaction in the cluster, which
        /// holds the tail back until it ends; 0 on SQLite.
        idemwatch_tail_held_back_seconds: Gauge,
        /// Duration of the last backlog gauge refresh.
        idemwatch_backlog_refresh_duration_seconds: Gauge,
        /// PostgreSQL hot standby: how far its replay is behind the primary (now minus
        /// the commit time of the last replayed transaction; 0 when it has replayed
        /// all it received). 0 on a primary and on SQLite. Refreshed with the backlog.
        idemwatch_replica_lag_seconds: Gauge,
        /// Sign-ins refused, by reason: busy (every password check slot was in use),
        /// throttled_user and throttled_address (too many recent failures for the user
        /// name or from the address; the password was not checked), bad_credentials
        /// (checked, and wrong or no such user).
        idemwatch_login_refusals_total: IntCounterVec["reason"],
        /// Requests refused by authentication or authorisation, by reason: bad_token, expired_token, duplicate_identity (401), forbidden, csrf, cross_site (403), foreign_host (421).
        idemwatch_auth_refusals_total: IntCounterVec["reason"],
        /// Refusals the guard answered without appending a row, because each repeated
        /// its key's newest row (docs/GUARD.md, "What the attempt log records"), by the
        /// refusal answered: stale_write_rejected, payload_mismatch, in_flight_rejected.
        /// The same count is on each key (`refusals_not_logged`).
        idemwatch_guard_refusals_not_logged_total: IntCounterVec["tool", "reason"],
        /// Events counted under `other` rather than their own label value because the
        /// label's cap was reached, by label: `tool` (--metrics-tool-cap; the tools
        /// file's tools are always labelled) or `tenant` (--metrics-tenant-cap).
        idemwatch_metrics_label_overflow_total: IntCounterVec["label"],
        /// Start time of the process since unix epoch in seconds. The alerts on counters
        /// read it: a process younger than their window has all its counts within it,
        /// including events before Prometheus first scraped it.
        process_start_time_seconds: Gauge,
        /// Always 1; the version label says which idemwatch this is.
        idemwatch_build_info: IntGaugeVec["version"],
    }
}

/// Cardinality settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricsOptions {
    /// Add a `tenant` label to the per-tool families (off by default).
    pub tenant_label: bool,
    /// With the tenant label on: tenants beyond this many get `tenant="other"`.
    pub tenant_cap: usize,
    /// Tools beyond this many, not counting the tools file's, get `tool="other"`.
    pub tool_cap: usize,
}

impl Default for MetricsOptions {
    fn default() -> Self {
        Self {
            tenant_label: false,
            tenant_cap: 20,
            tool_cap: 50,
        }
    }
}

/// The labels `idemwatch_metrics_label_overflow_total` counts.
const CAPPED_LABELS: [&str; 2] = ["tool", "tenant"];

pub struct Metrics {
    registry: prometheus::Registry,
    families: Families,
    options: MetricsOptions,
    labels: Mutex<LabelSpace>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        // The definitions are static; `every_family_registers` proves they register.
        Self::new(MetricsOptions::default()).expect("static metric definitions register")
    }
}

impl Metrics {
    pub fn new(options: MetricsOptions) -> Result<Self, prometheus::Error> {
        let registry = prometheus::Registry::new();
        let families = Families::register(&registry, options.tenant_label)?;
        families
            .idemwatch_build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        for reason in LOGIN_REFUSALS {
            families
                .idemwatch_login_refusals_total
                .with_label_values(&[reason]);
        }
        families.process_start_time_seconds.set(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64().floor()),
        );
        for label in CAPPED_LABELS {
            families
                .idemwatch_metrics_label_overflow_total
                .with_label_values(&[label]);
        }
        Ok(Self {
            registry,
            families,
            options,
            labels: Mutex::new(LabelSpace::new(
                options.tenant_label,
                options.tenant_cap,
                options.tool_cap,
            )),
        })
    }

    /// For metrics that other parts own (the pruner's `idemwatch_pruned_total`).
    pub fn registry(&self) -> &prometheus::Registry {
        &self.registry
    }

    pub fn families(&self) -> &Families {
        &self.families
    }

    /// One refused sign-in (`reason`: one of [`LOGIN_REFUSALS`]).
    pub(crate) fn login_refused(&self, reason: &str) {
        debug_assert!(LOGIN_REFUSALS.contains(&reason), "{reason}");
        self.families
            .idemwatch_login_refusals_total
            .with_label_values(&[reason])
            .inc();
    }

    /// The text exposition format (`text/plain; version=0.0.4`).
    pub fn render(&self) -> Result<String, prometheus::Error> {
        prometheus::TextEncoder::new().encode_to_string(&self.registry.gather())
    }

    /// The series of (tool, tenant), creating at zero every series of every slot that
    /// is new because of it.
    pub fn slot(&self, tool: &str, tenant: &str) -> Slot {
        self.fold(tool, tenant).0
    }

    /// The series of one event of (tool, tenant), as [`Metrics::slot`], counting the
    /// event in `idemwatch_metrics_label_overflow_total` for each label folded into
    /// `other`.
    pub(crate) fn event_slot(&self, tool: &str, tenant: &str) -> Slot {
        let (slot, folded) = self.fold(tool, tenant);
        for (label, folded) in CAPPED_LABELS.into_iter().zip([folded.tool, folded.tenant]) {
            if folded {
                self.families
                    .idemwatch_metrics_label_overflow_total
                    .with_label_values(&[label])
                    .inc();
            }
        }
        slot
    }

    fn fold(&self, tool: &str, tenant: &str) -> (Slot, Folded) {
        let (slot, folded, fresh) = self
            .labels
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .slot(tool, tenant);
        for s in &fresh {
            self.create_at_zero(s);
        }
        (slot, folded)
    }

    /// Exports the tools file's tools at zero before any event (so that the first
    /// event of each moves a series Prometheus has already seen at 0: `increase()`
    /// misses a series' first sample), labelled whatever the tool cap.
    pub fn configure_tools<'a>(&self, tools: impl IntoIterator<Item = &'a String>) {
        let tools: Vec<String> = tools.into_iter().cloned().collect();
        let fresh = self
            .labels
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .configure(&tools);
        for s in &fresh {
            self.create_at_zero(s);
        }
    }

    /// Exports every slot of `tools` × `tenants` (tenants up to the cap) at zero.
    pub fn seed(&self, tools: &[String], tenants: &[String]) {
        let fresh = self
            .labels
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .seed(tools, tenants);
        for s in &fresh {
            self.create_at_zero(s);
        }
    }

    /// Whether the tenant label is on, and its cap.
    pub fn tenant_cap(&self) -> Option<usize> {
        self.options.tenant_label.then_some(self.options.tenant_cap)
    }

    /// Every slot handed out so far.
    pub fn slots(&self) -> Vec<Slot> {
        self.labels
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .all()
    }

    fn create_at_zero(&self, slot: &Slot) {
        let f = &self.families;
        for outcome in AdmissionOutcome::ALL {
            f.idempotency_requests_total
                .with_label_values(&slot.values(&[outcome.as_str()]));
        }
        for status in Status::ENTERED {
            f.idempotency_transitions_total
                .with_label_values(&slot.values(&[status.as_str()]));
        }
        for resolution in Resolution::ALL {
            f.idempotency_resolutions_total
                .with_label_values(&slot.values(&[resolution.as_str()]));
        }
        f.idempotency_escalations_total
            .with_label_values(&slot.values(&[]));
        f.idempotency_unknown_backlog
            .with_label_values(&slot.values(&[]));
        f.idempotency_expired_leases
            .with_label_values(&slot.values(&[]));
        f.idempotency_unknown_oldest_created_timestamp_seconds
            .with_label_values(&slot.values(&[]));
        f.idempotency_unknown_earliest_retention_deadline_timestamp_seconds
            .with_label_values(&slot.values(&[]));
        f.idempotency_unknown_past_retention
            .with_label_values(&slot.values(&[]));
        f.idempotency_attempt_duration_seconds
            .with_label_values(&[slot.tool.as_str()]);
        f.idempotency_suspected_duplicates_total
            .with_label_values(&[slot.tool.as_str()]);
        for kind in NOT_LOGGED {
            f.idemwatch_guard_refusals_not_logged_total
                .with_label_values(&[slot.tool.as_str(), kind.as_str()]);
        }
    }
}

/// The guard's refusals without a row, counted as they are answered (no row reaches
/// the tailer), under the tool label's cap.
impl RefusalsNotLogged for Metrics {
    fn refusal_not_logged(&self, tool: &str, tenant: &str, kind: AttemptKind) {
        let slot = self.event_slot(tool, tenant);
        self.families
            .idemwatch_guard_refusals_not_logged_total
            .with_label_values(&[slot.tool.as_str(), kind.as_str()])
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_registers_with_and_without_the_tenant_label() {
        for tenant_label in [false, true] {
            let m = Metrics::new(MetricsOptions {
                tenant_label,
                tenant_cap: 3,
                ..MetricsOptions::default()
            })
            .unwrap();
            m.slot("issue_refund", "acme");
            let text = m.render().unwrap();
            assert!(text.contains("# HELP idempotency_requests_total Admissions to the guard, one per request, by outcome: new"), "{text}");
            assert_eq!(text.contains(r#"tenant="acme""#), tenant_label, "{text}");
        }
    }

    #[test]
    fn a_new_tool_exports_every_outcome_at_zero() {
        let m = Metrics::default();
        m.slot("issue_refund", "acme");
        let text = m.render().unwrap();
        for outcome in AdmissionOutcome::ALL {
            let line = format!(
                "idempotency_requests_total{{outcome=\"{outcome}\",tool=\"issue_refund\"}} 0"
            );
            assert!(text.contains(&line), "{line} missing from\n{text}");
        }
        assert!(text.contains("idemwatch_build_info{version=\""));
        assert!(!text.contains("process_start_time_seconds 0\n"), "{text}");
        for reason in LOGIN_REFUSALS {
            let line = format!("idemwatch_login_refusals_total{{reason=\"{reason}\"}} 0");
            assert!(text.contains(&line), "{line} missing from\n{text}");
        }
    }
}
