//! `idemwatch demo`: synthetic traffic through the real guard against a simulated
//! payments provider, so that every page, metric and backlog has live data.
//!
//! Nothing here is a mock of idemwatch: the guard, the store and the tables are the
//! real ones. Only the agents and the provider are simulated, in "story time" running
//! `speed` times faster than the clock (a 10 s client deadline is 1 s at the default
//! 10x). Times written to the database stay real wall-clock times.

mod calls;
mod latency;
mod mcp;
mod over_http;
mod provider;
mod scenario;
mod stats;
mod traffic;
mod web;

pub use latency::{
    CLIENT_DEADLINE, IncidentSchedule, LEASE_MARGIN, LatencyModel, PROVIDER_RETENTION,
    PROVIDER_TIMEOUT,
};
pub use mcp::MCP_CLIENT;
pub use provider::{Effect, Fault, Provider, ProviderClient, ProviderError};
pub use scenario::{REPEAT_ORDER, SHOWCASE, Scenario};
pub use stats::{Admissions, CallResult, DemoStats, StatusLine, clock};
pub use web::{PROVIDER_LOOKUP, router};

use crate::guard::{Guard, GuardSettings, SystemClock};
use crate::store::{Store, StoreError};
use chrono::{DateTime, TimeDelta, Utc};
use rand::RngExt;
use stats::Counters;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// How the demo runs. Durations are real time.
#[derive(Debug, Clone)]
pub struct DemoConfig {
    /// New tool calls (intents) per second; retries and redeliveries come on top.
    pub rate: f64,
    /// Story seconds per real second.
    pub speed: f64,
    /// How long the provider remembers a key.
    pub provider_retention: Duration,
    pub incident: IncidentSchedule,
    /// Start with one intent of every scenario (see [`SHOWCASE`]).
    pub showcase: bool,
    /// One showcase intent every this many intents, the plain mix between them: 12 at
    /// once made the opening's replay ratio read 7–9 % against a normal 0.4 %.
    pub showcase_every: u64,
    /// After a stop, how long in-flight calls may finish before they are abandoned.
    pub drain: Duration,
    /// The demo's own server: when set, a quarter of the plain intents go through its
    /// HTTP guard API instead of `Guard::run` (docs/DEMO.md).
    pub guard_api: Option<std::net::SocketAddr>,
}

impl DemoConfig {
    /// The defaults at `speed`: story-time constants scaled, the provider's retention
    /// included, no incident schedule.
    pub fn new(rate: f64, speed: f64) -> Self {
        Self {
            rate,
            speed,
            provider_retention: PROVIDER_RETENTION.div_f64(speed),
            incident: IncidentSchedule::OFF,
            showcase: true,
            // Every 3 seconds of traffic: the whole showcase within the first ~40 s.
            showcase_every: (rate * 3.0).round().max(1.0) as u64,
            drain: PROVIDER_TIMEOUT.div_f64(speed) + Duration::from_secs(1),
            guard_api: None,
        }
    }
}

/// What the traffic tasks share.
#[derive(Debug)]
pub(crate) struct TrafficContext {
    guard: Guard<Store>,
    provider: Provider,
    counters: Counters,
    config: DemoConfig,
    /// Distinguishes this run's workflow ids from an earlier run's in the same database.
    run_id: String,
    stop: watch::Receiver<bool>,
    started: Instant,
    started_at: DateTime<Utc>,
}

/// A demo: its provider, its counters, its traffic.
#[derive(Debug, Clone)]
pub struct Demo {
    shared: Arc<TrafficContext>,
    stop: Arc<watch::Sender<bool>>,
}

impl Demo {
    pub fn new(store: Store, config: DemoConfig) -> Self {
        let settings = GuardSettings {
            lease_margin: TimeDelta::from_std(config.lease_margin()).unwrap_or(TimeDelta::MAX),
        };
        let guard = Guard::new(store, Arc::new(SystemClock), settings);
        let provider = Provider::new(config.provider_retention, config.speed);
        let (stop, stop_rx) = watch::channel(false);
        let run_id = format!("{:04x}", rand::rng().random_range(0..0x1_0000u32));
        Self {
            shared: Arc::new(TrafficContext {
                guard,
                provider,
                counters: Counters::default(),
                config,
                run_id,
                stop: stop_rx,
                started: Instant::now(),
                started_at: Utc::now(),
            }),
            stop: Arc::new(stop),
        }
    }

    pub fn config(&self) -> &DemoConfig {
        &self.shared.config
    }

    pub fn provider(&self) -> &Provider {
        &self.shared.provider
    }

    pub fn store(&self) -> &Store {
        self.shared.guard.store()
    }

    /// Generates traffic until `stop` resolves, then lets in-flight calls finish for
    /// up to `config.drain` and abandons the rest (as a killed worker would).
    pub async fn run(&self, stop: impl Future<Output = ()>) {
        let shared = &self.shared;
        let mut tasks = JoinSet::new();
        tasks.spawn(schedule_incidents(Arc::clone(shared)));
        tasks.spawn(mcp::run(Arc::clone(shared)));
        tokio::pin!(stop);
        let mut n: u64 = 0;
        let mut next = tokio::time::Instant::now();
        loop {
            // Poisson arrivals at `rate`, on a timeline of their own, so that a busy
            // machine delays calls but does not lower the rate.
            let u: f64 = 1.0 - rand::rng().random::<f64>();
            next += Duration::from_secs_f64((-u.ln() / shared.config.rate.max(0.01)).min(60.0));
            // After a long stall (a suspended laptop) start afresh rather than burst.
            if let Some(floor) = tokio::time::Instant::now().checked_sub(Duration::from_secs(1)) {
                next = next.max(floor);
            }
            tokio::select! {
                () = &mut stop => break,
                () = tokio::time::sleep_until(next) => {}
            }
            let scenario = traffic::pick_scenario(n, &shared.config);
            tasks.spawn(traffic::run_intent(Arc::clone(shared), n, scenario));
            n += 1;
            while let Some(done) = tasks.try_join_next() {
                report(done);
            }
        }
        self.stop.send_replace(true);
        let drained = tokio::time::timeout(shared.config.drain, async {
            while let Some(done) = tasks.join_next().await {
                report(done);
            }
        })
        .await;
        if drained.is_err() {
            tracing::info!(
                abandoned = tasks.len(),
                "demo: abandoning calls still in flight"
            );
            tasks.shutdown().await;
        }
    }

    /// The console's line: cheap (two indexed queries).
    pub async fn status(&self) -> Result<StatusLine, StoreError> {
        let s = &self.shared;
        let minute_ago = Utc::now() - TimeDelta::seconds(60);
        let window = self.store().attempt_kind_counts(Some(minute_ago)).await?;
        let elapsed = s.started.elapsed();
        Ok(StatusLine {
            elapsed,
            requests: Counters::get(&s.counters.guard_calls),
            replay_ratio_1m: Admissions::from_kinds(&window).replay_ratio(),
            unknown_backlog: self.store().unknown_backlog().await?,
            effects: s.provider.effect_count(),
            duplicates: s.provider.duplicates(),
            incident: s.provider.incident(),
            next_change: s.config.incident.next_change(elapsed).map(|(_, d)| d),
        })
    }

    /// Everything `/demo/stats` shows, for this run.
    pub async fn snapshot(&self) -> Result<DemoStats, StoreError> {
        let s = &self.shared;
        let store = self.store();
        let kinds = store.attempt_kind_counts(Some(s.started_at)).await?;
        let minute_ago = Utc::now() - TimeDelta::seconds(60);
        let window = store.attempt_kind_counts(Some(minute_ago)).await?;
        let admissions = Admissions::from_kinds(&kinds);
        Ok(DemoStats {
            effects: s.provider.effect_count(),
            duplicates: s.provider.duplicates(),
            requests: admissions.requests,
            replays: admissions.replays,
            replay_ratio: admissions.replay_ratio(),
            replay_ratio_1m: Admissions::from_kinds(&window).replay_ratio(),
            by_outcome: admissions.by_outcome,
            attempts: kinds.iter().map(|(k, n)| (k.as_str(), *n)).collect(),
            results: s.counters.results(),
            unknown_backlog: store.unknown_backlog().await?,
            intents: Counters::get(&s.counters.intents),
            http_guard_calls: Counters::get(&s.counters.http_calls),
            client_timeouts: Counters::get(&s.counters.client_timeouts),
            worker_crashes: Counters::get(&s.counters.worker_crashes),
            incident: s.provider.incident(),
            uptime_seconds: s.started.elapsed().as_secs_f64(),
        })
    }
}

fn report(done: Result<(), tokio::task::JoinError>) {
    if let Err(e) = done
        && e.is_panic()
    {
        tracing::error!(error = %e, "demo: a traffic task panicked");
    }
}

/// Switches the provider in and out of its incident on the schedule.
async fn schedule_incidents(shared: Arc<TrafficContext>) {
    let schedule = &shared.config.incident;
    loop {
        let active = schedule.active_at(shared.started.elapsed());
        if active != shared.provider.incident() {
            shared.provider.set_incident(active);
            // The console announces it (`StatusLine::incident`); this is for log files.
            tracing::debug!(active, "demo: provider incident switched");
        }
        if !shared.wait(Duration::from_millis(100)).await {
            return;
        }
    }
}
