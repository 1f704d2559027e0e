//! The traffic: agents calling refund tools through the real guard, and every way a
//! side effect gets requested twice (background/002 and /003).
//!
//! Each intent is one flow. The agent sends a request to the tool server, which runs
//! `Guard::run` in its own task; the agent waits at most its client deadline and then
//! retries with the same intent, while the server carries on, as servers do when a
//! client hangs up. Waits between deliveries end early when the demo stops.

use super::calls::{Plan, buggy, redelivered, rephrased};
use super::latency::{CLIENT_DEADLINE, LEASE_MARGIN, PROVIDER_TIMEOUT};
use super::provider::{Fault, ProviderClient};
use super::scenario::{SHOWCASE, Scenario, showcase_index};
use super::stats::{CallResult, Counters};
use super::{DemoConfig, TrafficContext};
use crate::guard::{GuardError, Outcome, ToolCall};
use rand::RngExt;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::{AbortHandle, JoinHandle};

/// The normal mix, per 10,000 intents; the rest are `Plain`.
const MIX: [(Scenario, u32); 10] = [
    (Scenario::Redelivery, 10),
    (Scenario::ModelReissue, 5),
    (Scenario::DroppedResponse, 10),
    (Scenario::Unavailable, 10),
    (Scenario::WorkerCrash, 5),
    (Scenario::PayloadMismatchBug, 2),
    (Scenario::Declined, 10),
    (Scenario::LateRetry, 5),
    (Scenario::ForgottenKey, 3),
    (Scenario::RepeatRefund, 5),
];

/// The agents' retry policy: 0.5 s after the first failure, then 2 s, 4 s, 8 s, 8 s…
/// (a 409 means "later", not "now").
const MAX_TRIES: u32 = 8;

pub(crate) fn pick_scenario(n: u64, config: &super::DemoConfig) -> Scenario {
    if let Some(i) = showcase_index(n, config) {
        return SHOWCASE[i];
    }
    let mut roll = rand::rng().random_range(0..10_000u32);
    for (scenario, weight) in MIX {
        if roll < weight {
            return scenario;
        }
        roll -= weight;
    }
    Scenario::Plain
}

/// What the agent saw for one request.
enum Seen {
    Answer(Result<Outcome, GuardError>),
    /// The client deadline passed first.
    Timeout,
}

impl Seen {
    /// Timeouts, unknown outcomes, 409s and an unavailable database are retried with
    /// the same intent; everything else is an answer.
    fn retryable(&self) -> bool {
        match self {
            Seen::Timeout => true,
            Seen::Answer(Err(GuardError::OutcomeUnknown { .. } | GuardError::InFlight { .. })) => {
                true
            }
            Seen::Answer(Err(GuardError::Store(e))) => e.is_unavailable(),
            Seen::Answer(_) => false,
        }
    }
}

/// The tasks one flow started. Dropping the flow (the demo stopped and gave up
/// waiting) aborts them; a finished flow has awaited them all.
#[derive(Default)]
struct Flow {
    started: Vec<AbortHandle>,
    detached: Vec<JoinHandle<Result<Outcome, GuardError>>>,
}

impl Drop for Flow {
    fn drop(&mut self) {
        for task in &self.started {
            task.abort();
        }
    }
}

impl Flow {
    async fn finish(mut self) {
        for task in std::mem::take(&mut self.detached) {
            let _ = task.await;
        }
    }
}

impl DemoConfig {
    pub fn story(&self, d: Duration) -> Duration {
        d.div_f64(self.speed)
    }
    pub fn client_deadline(&self) -> Duration {
        self.story(CLIENT_DEADLINE)
    }
    pub(crate) fn provider_timeout(&self) -> Duration {
        self.story(PROVIDER_TIMEOUT)
    }
    pub fn lease_margin(&self) -> Duration {
        self.story(LEASE_MARGIN)
    }
}

pub(crate) async fn run_intent(shared: Arc<TrafficContext>, n: u64, scenario: Scenario) {
    Counters::bump(&shared.counters.intents);
    let plan = shared.plan(n, scenario);
    let call = shared.call(&plan);
    let mut flow = Flow::default();
    shared.play(&mut flow, scenario, &plan, &call).await;
    flow.finish().await;
}

impl TrafficContext {
    async fn play(
        self: &Arc<Self>,
        flow: &mut Flow,
        scenario: Scenario,
        plan: &Plan,
        call: &ToolCall,
    ) {
        let story = |secs: f64| self.config.story(Duration::from_secs_f64(secs));
        let retention = self.provider.retention();
        let between = |lo: f64, hi: f64| rand::rng().random_range(lo..hi);
        match scenario {
            Scenario::Plain => match self.config.guard_api {
                Some(addr) if rand::rng().random_bool(0.25) => {
                    self.deliver_over_http(addr, call).await;
                }
                _ => self.deliver(flow, call, Fault::None).await,
            },
            Scenario::SlowResponse => {
                self.deliver(flow, call, Fault::Latency(Duration::from_secs(15)))
                    .await;
            }
            Scenario::ProviderTimeout => {
                self.deliver(flow, call, Fault::Latency(Duration::from_secs(40)))
                    .await;
            }
            Scenario::Redelivery => {
                if n_is_showcase(plan) || rand::rng().random_bool(0.5) {
                    // After the first delivery was acknowledged too late.
                    self.deliver(flow, call, Fault::None).await;
                    if self.wait(story(between(3.0, 20.0))).await {
                        self.deliver(flow, &redelivered(call), Fault::None).await;
                    }
                } else {
                    // The visibility timeout passed while the first still runs.
                    let second = async {
                        let mut flow2 = Flow::default();
                        if self.wait(story(between(0.3, 2.0))).await {
                            self.deliver(&mut flow2, &redelivered(call), Fault::None)
                                .await;
                        }
                        flow2.finish().await;
                    };
                    tokio::join!(self.deliver(flow, call, Fault::None), second);
                }
            }
            Scenario::ModelReissue => {
                self.deliver(flow, call, Fault::None).await;
                if self.wait(story(between(2.0, 10.0))).await {
                    self.deliver(flow, &rephrased(call), Fault::None).await;
                }
            }
            Scenario::DroppedResponse => self.deliver(flow, call, Fault::DropResponse).await,
            Scenario::Unavailable => self.deliver(flow, call, Fault::Unavailable).await,
            Scenario::WorkerCrash => {
                self.crash(flow, call).await;
                // The queue redelivers after its visibility timeout (45 s), before the
                // lease (60 s) runs out: 409 until then, a takeover after.
                if self.wait(story(45.0)).await {
                    self.deliver(flow, &redelivered(call), Fault::None).await;
                }
            }
            Scenario::PayloadMismatchBug => {
                self.deliver(flow, call, Fault::None).await;
                if self.wait(story(between(1.0, 5.0))).await {
                    self.deliver(flow, &buggy(call), Fault::None).await;
                }
            }
            Scenario::Declined => {
                self.deliver(flow, call, Fault::Decline).await;
                if self.wait(story(between(5.0, 20.0))).await {
                    self.deliver(flow, &redelivered(call), Fault::None).await;
                }
            }
            Scenario::LateRetry => {
                self.request(flow, call, Fault::DropResponse).await;
                if self.wait(retention.mul_f64(between(0.3, 0.6))).await {
                    self.deliver(flow, &redelivered(call), Fault::None).await;
                }
            }
            Scenario::ForgottenKey => {
                let fault = if rand::rng().random_bool(0.5) {
                    Fault::DropResponse
                } else {
                    Fault::Unavailable
                };
                self.request(flow, call, fault).await;
                if self.wait(retention.mul_f64(between(1.2, 1.5))).await {
                    self.deliver(flow, &redelivered(call), Fault::None).await;
                }
            }
            Scenario::RepeatRefund => {
                self.deliver(flow, call, Fault::None).await;
                // "Weeks later": past the provider's retention and the tool's duplicate
                // window, both the story's 24 h compressed to `retention`, so the
                // second refund is no suspected duplicate, as it would not be for real.
                if self.wait(retention.mul_f64(between(1.2, 1.5))).await {
                    // The customer writes back about a second problem: a new run of
                    // the agent, a new ticket, the same order and amount.
                    let mut again = plan.clone();
                    again.ticket += 1;
                    again.workflow += 1_000_000;
                    again.reason = "Second problem with the same order: refund again.";
                    self.deliver(flow, &self.call(&again), Fault::None).await;
                }
            }
        }
    }

    /// One delivery: a request, then transport retries with the same intent while the
    /// answer is a timeout, an unknown outcome or a 409.
    async fn deliver(self: &Arc<Self>, flow: &mut Flow, call: &ToolCall, fault: Fault) {
        let mut fault = fault;
        for attempt in 0..MAX_TRIES {
            let seen = self
                .request(flow, call, std::mem::replace(&mut fault, Fault::None))
                .await;
            if !seen.retryable() || attempt + 1 == MAX_TRIES {
                return;
            }
            let backoff = if attempt == 0 {
                Duration::from_millis(500)
            } else {
                Duration::from_millis(1000 << attempt.min(3))
            };
            let jitter = rand::rng().random_range(0.8..1.2);
            if !self.wait(self.config.story(backoff.mul_f64(jitter))).await {
                return;
            }
        }
    }

    /// One request to the tool server, which guards the call in its own task.
    async fn request(self: &Arc<Self>, flow: &mut Flow, call: &ToolCall, fault: Fault) -> Seen {
        let client = self.client(call, fault);
        let mut task = self.spawn_guarded(flow, call, client);
        match tokio::time::timeout(self.config.client_deadline(), &mut task).await {
            Ok(Ok(answer)) => Seen::Answer(answer),
            Ok(Err(e)) => {
                tracing::error!(error = %e, "demo: a guarded call panicked");
                Seen::Timeout
            }
            Err(_deadline) => {
                Counters::bump(&self.counters.client_timeouts);
                flow.detached.push(task);
                Seen::Timeout
            }
        }
    }

    /// The worker performs the refund and dies before it hears back: its task is
    /// aborted mid-call, its lease left to run out.
    async fn crash(self: &Arc<Self>, flow: &mut Flow, call: &ToolCall) {
        let client = self.client(call, Fault::CrashAfterEffect);
        let crashed = client.crashed.clone();
        let mut task = self.spawn_guarded(flow, call, client);
        tokio::select! {
            () = crashed.notified() => {
                task.abort();
                Counters::bump(&self.counters.worker_crashes);
            }
            _ = &mut task => {}
        }
    }

    fn client(&self, call: &ToolCall, fault: Fault) -> ProviderClient {
        ProviderClient::new(
            &self.provider,
            &call.intent.tool,
            self.config.provider_timeout(),
            fault,
        )
    }

    fn spawn_guarded(
        self: &Arc<Self>,
        flow: &mut Flow,
        call: &ToolCall,
        client: ProviderClient,
    ) -> JoinHandle<Result<Outcome, GuardError>> {
        let me = Arc::clone(self);
        let call = call.clone();
        let task = tokio::spawn(async move {
            Counters::bump(&me.counters.guard_calls);
            let answer = me.guard.run(&call, &client).await;
            let result = CallResult::of(&answer);
            me.counters.record(result);
            match &answer {
                Err(
                    e @ (GuardError::Store(_)
                    | GuardError::InvalidCall(_)
                    | GuardError::Invalid { .. }),
                ) => {
                    tracing::warn!(error = %e, "demo: guarded call failed");
                }
                Err(e) => tracing::debug!(error = %e, "demo: guarded call"),
                Ok(_) => {}
            }
            answer
        });
        flow.started.push(task.abort_handle());
        task
    }

    /// Sleeps `d`; false if the demo stopped meanwhile.
    pub async fn wait(&self, d: Duration) -> bool {
        let mut stop = self.stop.clone();
        tokio::select! {
            () = tokio::time::sleep(d) => true,
            _ = stop.wait_for(|stopped| *stopped) => false,
        }
    }
}

/// Showcase flows take the deterministic path of their scenario.
fn n_is_showcase(plan: &Plan) -> bool {
    plan.showcase
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_showcase_comes_first_then_mostly_plain_traffic() {
        let mut config = crate::demo::DemoConfig::new(10.0, 10.0);
        assert_eq!(config.showcase_every, 30);
        for (i, s) in SHOWCASE.iter().enumerate() {
            assert_eq!(pick_scenario(i as u64 * 30, &config), *s);
        }
        config.showcase_every = 1;
        for (n, s) in SHOWCASE.iter().enumerate() {
            assert_eq!(pick_scenario(n as u64, &config), *s);
        }
        let plain = (0..10_000)
            .filter(|n| pick_scenario(100 + n, &config) == Scenario::Plain)
            .count();
        assert!(plain > 9_800, "{plain}");
        let total: u32 = MIX.iter().map(|(_, w)| w).sum();
        assert!(total < 100, "the mix leaves most traffic plain");
    }
}
