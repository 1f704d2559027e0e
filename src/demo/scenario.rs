//! The demo's vocabulary of things that go wrong: each scenario an intent can meet, the
//! opening that shows every one of them once, and the order the seed trace refunds
//! twice. The plan of a call (`calls`) and the traffic that runs it (`traffic`) both
//! read it from here.

/// What happens to one intent, on top of the provider's latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// One delivery. If the provider is slower than the client deadline, the agent's
    /// transport retries meet the call in flight (409) and then replay it.
    Plain,
    /// The provider answers after 15 s against a 10 s deadline (the seed trace).
    SlowResponse,
    /// The provider answers after 40 s: past the guard's own 30 s timeout, so the key
    /// goes UNKNOWN, and a retry takes it over and finds the refund at the provider.
    ProviderTimeout,
    /// The queue redelivers the trigger: while the first delivery runs, or after.
    Redelivery,
    /// The model re-issues the call after losing the observation, rephrasing `reason`.
    ModelReissue,
    /// The refund happens, the connection drops; the retry reconciles.
    DroppedResponse,
    /// A 503 before anything happened; the retry finds nothing and resends.
    Unavailable,
    /// The worker dies after the refund; the redelivery waits out the lease, takes over.
    WorkerCrash,
    /// A client bug retries with another amount under the same intent: refused (422).
    PayloadMismatchBug,
    /// The card is declined; the resumed run replays the stored failure.
    Declined,
    /// The response is lost and the message parked; it is retried well inside the
    /// provider's retention, so the guard reconciles.
    LateRetry,
    /// The response is lost and the message only comes back after the provider
    /// forgot the key: the guard cannot know and asks a person (NeedsHumanReview).
    ForgottenKey,
    /// A genuine second refund on the same order, weeks later: a new intent, a new
    /// key, a second real effect.
    RepeatRefund,
}

/// The opening: every scenario once, in the first seconds, so that a new user (and
/// the tests) see every kind of event without waiting for chance.
/// The forgotten key goes first: its redelivery comes 1.2–1.5 retentions later (36–45 s
/// at the default 10x), so the human-review path shows within the first minute.
pub const SHOWCASE: [Scenario; 12] = [
    Scenario::ForgottenKey,
    Scenario::RepeatRefund,
    Scenario::SlowResponse,
    Scenario::ProviderTimeout,
    Scenario::DroppedResponse,
    Scenario::Unavailable,
    Scenario::WorkerCrash,
    Scenario::Redelivery,
    Scenario::ModelReissue,
    Scenario::PayloadMismatchBug,
    Scenario::Declined,
    Scenario::LateRetry,
];

/// The order of the seed trace: refunded twice, genuinely, in the showcase.
pub const REPEAT_ORDER: &str = "A-88214";

/// Which showcase scenario intent `n` plays, if any: one every `showcase_every`.
pub(super) fn showcase_index(n: u64, config: &super::DemoConfig) -> Option<usize> {
    let every = config.showcase_every.max(1);
    let i = usize::try_from(n / every).ok()?;
    (config.showcase && n.is_multiple_of(every) && i < SHOWCASE.len()).then_some(i)
}
