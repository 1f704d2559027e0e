//! The transitions panel's links (`/keys?entered=…`) open exactly the keys
//! `idempotency_transitions_total{status}` counted in the window, and the resolutions
//! series' links (`/keys?resolution=…`) those `idempotency_resolutions_total{resolution}`
//! counted: keys enter each status by every path (a settle, a takeover that finds the
//! effect, an escalation, a person's resolution, a release of an expired lease), some keys
//! settle again after the window, and the set each link lists is compared with the set
//! read off the attempt rows the real tailer counted (its counters must agree with that
//! reading, row for row).

use crate::both_backends;
use crate::metrics::{catch_up_all, ids_now, resolve, scrape};
use crate::support::app::{get, linked_keys};
use crate::support::as_key;
use crate::support::fixture::{DEADLINE, Fixture, refund};
use crate::support::provider::Fault;
use axum::http::StatusCode;
use chrono::{DateTime, TimeDelta, Utc};
use idemwatch::guard::{AttemptKind, Clock, GuardError, Resolution, Status, ToolCall, rfc3339};
use idemwatch::metrics::Metrics;
use idemwatch::store::Store;
use idemwatch::tail::events::{MetricUpdate, effects};
use idemwatch::tail::{TailSettings, Tailer};
use idemwatch::web::{self, AppState};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

const REFUND: &str = "issue_refund";
/// A tool whose name a link must percent-encode.
const SMS: &str = "send sms";
const ENTERED: [Status; 3] = [Status::Done, Status::Failed, Status::Unknown];

fn call(order: &str) -> ToolCall {
    refund(order, 4500, "1")
}

fn key(call: &ToolCall) -> String {
    call.intent.key().unwrap().to_string()
}

/// What the tailer counted for the rows in [from, to): per (tool, status) the number of
/// transitions, and the keys (with the kind of the attempt) behind them. Read from the
/// rows with the tailer's own mapping, as the tailer reads them (kind, and the detail's
/// resolution and previous status).
struct Counted {
    transitions: BTreeMap<(String, Status), f64>,
    keys: BTreeMap<(String, Status), BTreeSet<(String, AttemptKind)>>,
    resolutions: BTreeMap<(String, Resolution), f64>,
    resolved_keys: BTreeMap<(String, Resolution), BTreeSet<String>>,
}

impl Counted {
    async fn read(store: &Store, keys: &[String], from: DateTime<Utc>, to: DateTime<Utc>) -> Self {
        let mut out = Counted {
            transitions: BTreeMap::new(),
            keys: BTreeMap::new(),
            resolutions: BTreeMap::new(),
            resolved_keys: BTreeMap::new(),
        };
        for k in keys {
            for a in store.attempts(&as_key(k)).await.unwrap() {
                if a.occurred_at < from || a.occurred_at >= to {
                    continue;
                }
                let text = |name: &str| a.detail.get(name).and_then(|v| v.as_str());
                let updates = effects(
                    a.kind,
                    text("resolution"),
                    text("previous_status"),
                    a.duration_ms,
                    false,
                );
                for u in updates {
                    match u {
                        MetricUpdate::Transition(status) => {
                            let slot = (a.tool.clone(), status);
                            *out.transitions.entry(slot.clone()).or_default() += 1.0;
                            out.keys
                                .entry(slot)
                                .or_default()
                                .insert((k.clone(), a.kind));
                        }
                        MetricUpdate::Resolution(r) => {
                            let slot = (a.tool.clone(), r);
                            *out.resolutions.entry(slot.clone()).or_default() += 1.0;
                            out.resolved_keys.entry(slot).or_default().insert(k.clone());
                        }
                        _ => {}
                    }
                }
            }
        }
        out
    }

    /// The keys counted for `tool` entering any of `statuses`, by an attempt `kind_ok`.
    fn keys_of(
        &self,
        tool: &str,
        statuses: &[Status],
        kind_ok: impl Fn(AttemptKind) -> bool,
    ) -> BTreeSet<String> {
        statuses
            .iter()
            .flat_map(|s| self.keys.get(&(tool.to_string(), *s)).into_iter().flatten())
            .filter(|(_, kind)| kind_ok(*kind))
            .map(|(k, _)| k.clone())
            .collect()
    }
}

/// The keys `uri` lists, after checking it answers 200.
async fn listed(app: &axum::Router, uri: &str) -> BTreeSet<String> {
    let page = get(app, uri).await;
    assert_eq!(page.status, StatusCode::OK, "{uri}: {}", page.body);
    linked_keys(&page.body).into_iter().collect()
}

/// The data links of the dashboard panel titled `title`: (the matcher of the series an
/// override applies to, or None for the panel's own link, URL).
fn panel_links(title: &str) -> Vec<(Option<String>, String)> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/grafana/dashboards/idemwatch.json"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let panel = json["panels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["title"] == title)
        .unwrap_or_else(|| panic!("no panel {title}"));
    let config = &panel["fieldConfig"];
    let url = |link: &serde_json::Value| link["url"].as_str().unwrap().to_string();
    let mut out: Vec<(Option<String>, String)> = config["defaults"]["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (None, url(l)))
        .collect();
    for o in config["overrides"].as_array().into_iter().flatten() {
        let matcher = o["matcher"]["options"].as_str().unwrap().to_string();
        for p in o["properties"].as_array().unwrap() {
            for l in p["value"].as_array().into_iter().flatten() {
                out.push((Some(matcher.clone()), url(l)));
            }
        }
    }
    out
}

/// The transitions panel's links: (the status of the series, None for the panel's).
fn transition_links() -> Vec<(Option<Status>, String)> {
    panel_links("Transitions into DONE / FAILED / UNKNOWN")
        .into_iter()
        .map(|(matcher, url)| {
            // A series matcher like "/ UNKNOWN$/": the series' status label.
            let status = matcher.map(|m| {
                m.trim_matches('/')
                    .trim_start()
                    .trim_end_matches('$')
                    .parse::<Status>()
                    .unwrap_or_else(|_| panic!("matcher {m}"))
            });
            (status, url)
        })
        .collect()
}

/// A link with the panel's variables filled in: the tool (percent-encoded), the
/// series' resolution, and the window.
fn fill(url: &str, tool: &str, resolution: &str, from: DateTime<Utc>, to: DateTime<Utc>) -> String {
    url.replace("${idemwatch_url}", "")
        .replace(
            "${__field.labels.tool:percentencode}",
            &tool.replace(' ', "%20"),
        )
        .replace("${__field.labels.resolution}", resolution)
        .replace("${__from:date:iso}", &rfc3339(from))
        .replace("${__to:date:iso}", &rfc3339(to))
}

both_backends!(
    async fn each_transition_link_opens_exactly_the_keys_the_metric_counted(db: TestDb) {
        let f = Fixture::new(&db);
        let store = &db.store;
        let lease = TimeDelta::seconds(31) + TimeDelta::from_std(DEADLINE).unwrap();
        let step = || f.clock.advance(TimeDelta::seconds(1));
        let sms = |order: &str| {
            let mut c = call(order);
            c.intent.tool = SMS.into();
            c
        };

        // Before the window. Settled, and left UNKNOWN for the window's people and retries.
        let settled_before = call("before");
        f.guard.run(&settled_before, &f.client([])).await.unwrap();
        let escalates = call("escalates");
        let resolved_done = call("resolved-done");
        let resolved_failed = call("resolved-failed");
        let released_unknown = call("released-unknown");
        f.guard
            .run(&escalates, &f.client([Fault::DropResponse]))
            .await
            .unwrap_err();
        for c in [&resolved_done, &resolved_failed] {
            f.guard
                .run(c, &f.client([Fault::Unavailable]))
                .await
                .unwrap_err();
        }
        // Two days on, the provider has forgotten `escalates`; two workers die after their
        // effect, and their leases run out before the window; one more key goes UNKNOWN.
        f.clock.advance(TimeDelta::days(2));
        let taken_over = call("taken-over");
        let released_expired = call("released-expired");
        f.crash_after_effect(&taken_over).await;
        f.crash_after_effect(&released_expired).await;
        // UNKNOWN inside the provider's retention, so a person may release it.
        f.guard
            .run(&released_unknown, &f.client([Fault::Unavailable]))
            .await
            .unwrap_err();
        f.clock.advance(lease);

        // The tailer counts from here: the rows of the window only.
        let metrics = Arc::new(Metrics::default());
        let mut tailer = Tailer::new(metrics.clone(), TailSettings::default());
        tailer.poll(store).await.unwrap();
        let before = ids_now(store).await;
        let from = f.clock.now();

        // The window: every way into DONE, FAILED and UNKNOWN.
        step();
        let done = call("done");
        f.guard.run(&done, &f.client([])).await.unwrap();
        step();
        let failed = call("failed");
        f.guard
            .run(&failed, &f.client([Fault::Decline]))
            .await
            .unwrap_err();
        step();
        let unknown_then_done = call("unknown-then-done");
        f.guard
            .run(&unknown_then_done, &f.client([Fault::Unavailable]))
            .await
            .unwrap_err();
        step();
        // A takeover that finds the effect: reconciled_found enters DONE.
        assert!(
            f.guard
                .run(&taken_over, &f.client([]))
                .await
                .unwrap()
                .replayed
        );
        step();
        let escalated = f.guard.run(&escalates, &f.client([])).await;
        assert!(
            matches!(escalated, Err(GuardError::NeedsHumanReview { .. })),
            "{escalated:?}"
        );
        step();
        resolve(&f, &resolved_done.intent.key().unwrap(), Resolution::Done)
            .await
            .unwrap();
        step();
        resolve(
            &f,
            &resolved_failed.intent.key().unwrap(),
            Resolution::Failed,
        )
        .await
        .unwrap();
        step();
        // Released while UNKNOWN: stays UNKNOWN, no entry.
        resolve(
            &f,
            &released_unknown.intent.key().unwrap(),
            Resolution::Release,
        )
        .await
        .unwrap();
        step();
        // Released from an expired lease: enters UNKNOWN.
        resolve(
            &f,
            &released_expired.intent.key().unwrap(),
            Resolution::Release,
        )
        .await
        .unwrap();
        step();
        let sms_done = sms("sms-done");
        f.guard.run(&sms_done, &f.client([])).await.unwrap();
        step();
        let sms_unknown = sms("sms-unknown");
        f.guard
            .run(&sms_unknown, &f.client([Fault::Unavailable]))
            .await
            .unwrap_err();
        step();
        let to = f.clock.now();
        catch_up_all(&mut tailer, store, &metrics, &before).await;
        let scraped = scrape(store, &metrics).await;

        // After the window: the released key and the UNKNOWN one settle DONE, one more
        // key completes. None of this is in the window's counts.
        f.clock.advance(TimeDelta::minutes(1));
        f.guard.run(&released_expired, &f.client([])).await.unwrap();
        f.guard
            .run(&unknown_then_done, &f.client([]))
            .await
            .unwrap();
        f.guard.run(&call("after"), &f.client([])).await.unwrap();
        for c in [&released_expired, &unknown_then_done] {
            assert_eq!(f.status(&key(c)).await, Status::Done);
        }

        let all: Vec<String> = [
            &settled_before,
            &escalates,
            &resolved_done,
            &resolved_failed,
            &released_unknown,
            &taken_over,
            &released_expired,
            &done,
            &failed,
            &unknown_then_done,
            &sms_done,
            &sms_unknown,
            &call("after"),
        ]
        .into_iter()
        .map(key)
        .collect();
        let counted = Counted::read(store, &all, from, to).await;
        // The reading of the rows is the tailer's: every counter agrees with it.
        for tool in [REFUND, SMS] {
            for status in ENTERED {
                let labels = [("tool", tool), ("status", status.as_str())];
                let metric = scraped.get("idempotency_transitions_total", &labels);
                let rows = counted.transitions.get(&(tool.to_string(), status));
                assert_eq!(
                    metric.unwrap_or(0.0),
                    rows.copied().unwrap_or(0.0),
                    "{labels:?}"
                );
            }
        }
        // The scenario reaches every path (facts of the scenario, not of the SQL).
        let any = |_: AttemptKind| true;
        let keys = |s: Status| counted.keys_of(REFUND, &[s], any);
        for (status, c, entered) in [
            (Status::Done, &done, true),
            (Status::Done, &taken_over, true),
            (Status::Done, &resolved_done, true),
            (Status::Done, &released_expired, false),
            (Status::Done, &unknown_then_done, false),
            (Status::Done, &settled_before, false),
            (Status::Failed, &failed, true),
            (Status::Failed, &resolved_failed, true),
            (Status::Unknown, &unknown_then_done, true),
            (Status::Unknown, &escalates, true),
            (Status::Unknown, &released_expired, true),
            (Status::Unknown, &released_unknown, false),
        ] {
            assert_eq!(
                keys(status).contains(&key(c)),
                entered,
                "{status} {}",
                c.intent.intent_id
            );
        }

        // Each of the panel's links, for each tool, lists exactly the counted keys.
        let app = web::app(AppState::new(store.clone()).with_clock(Arc::new(f.clock.clone())));
        let links = transition_links();
        assert_eq!(links.len(), 1 + ENTERED.len(), "{links:?}");
        for (status, url) in &links {
            let statuses: Vec<Status> = status.map_or(ENTERED.to_vec(), |s| vec![s]);
            for tool in [REFUND, SMS] {
                let uri = fill(url, tool, "", from, to);
                let want = counted.keys_of(tool, &statuses, any);
                assert_eq!(listed(&app, &uri).await, want, "{uri}");
            }
        }

        // The resolutions series: each resolution's link lists the keys it counted.
        for tool in [REFUND, SMS] {
            for r in Resolution::ALL {
                let labels = [("tool", tool), ("resolution", r.as_str())];
                let metric = scraped.get("idempotency_resolutions_total", &labels);
                let rows = counted.resolutions.get(&(tool.to_string(), *r));
                assert_eq!(
                    metric.unwrap_or(0.0),
                    rows.copied().unwrap_or(0.0),
                    "{labels:?}"
                );
            }
        }
        let people = panel_links("Takeovers, escalation events and manual resolutions");
        let (_, resolved_link) = people
            .iter()
            .find(|(matcher, _)| matcher.as_deref() == Some("C"))
            .expect("the resolutions series' link");
        for tool in [REFUND, SMS] {
            for r in Resolution::ALL {
                let uri = fill(resolved_link, tool, r.as_str(), from, to);
                let want = counted
                    .resolved_keys
                    .get(&(tool.to_string(), *r))
                    .cloned()
                    .unwrap_or_default();
                assert_eq!(listed(&app, &uri).await, want, "{uri}");
            }
        }
        let released: BTreeSet<String> = [&released_unknown, &released_expired]
            .into_iter()
            .map(key)
            .collect();
        assert_eq!(
            counted.resolved_keys[&(REFUND.to_string(), Resolution::Release)],
            released
        );

        // Narrowed to one kind: the people who released a key into UNKNOWN.
        let uri = format!(
            "/keys?attempt_kind=resolved&entered=unknown&from={}&to={}",
            rfc3339(from),
            rfc3339(to)
        );
        let want = counted.keys_of(REFUND, &[Status::Unknown], |k| k == AttemptKind::Resolved);
        assert_eq!(listed(&app, &uri).await, want, "{uri}");
        assert_eq!(want, BTreeSet::from([key(&released_expired)]));
        let uri = format!(
            "/keys?entered=UNKNOWN&resolution=release&from={}&to={}",
            rfc3339(from),
            rfc3339(to)
        );
        assert_eq!(listed(&app, &uri).await, want, "{uri}");
    }
);

both_backends!(
    async fn a_filter_no_attempt_meets_is_a_400_naming_the_parameter(db: TestDb) {
        let app = web::app(AppState::new(db.store.clone()));
        for (uri, text) in [
            (
                "/keys?entered=IN_PROGRESS",
                "entered: no attempt enters IN_PROGRESS",
            ),
            (
                "/keys?entered=DONE,finished",
                "entered: &#34;finished&#34; is not a status; expected one or more of DONE, FAILED, UNKNOWN",
            ),
            (
                "/keys?entered=DONE&outcome=replay",
                "entered: no attempt kind given in attempt_kind or outcome enters these statuses",
            ),
            (
                "/keys?entered=UNKNOWN&resolution=done",
                "resolution: no attempt that attempt_kind, outcome or entered selects records these resolutions",
            ),
            (
                "/keys?resolution=refund",
                "resolution: &#34;refund&#34; is not a resolution; expected one or more of done, failed, release",
            ),
        ] {
            let page = get(&app, uri).await;
            assert_eq!(page.status, StatusCode::BAD_REQUEST, "{uri}: {}", page.body);
            assert!(
                page.body.contains(text),
                "{uri}: want {text:?} in {}",
                page.body
            );
        }
        // The filter shows in the form, as a chip, and in the sentence over the list.
        let page = get(&app, "/keys?entered=UNKNOWN&from=now-1h").await;
        assert_eq!(page.status, StatusCode::OK);
        for text in [
            "name=\"entered\" type=\"text\" value=\"UNKNOWN\"",
            "Entered status: <strong>UNKNOWN</strong>",
            "Showing keys with a transition into UNKNOWN at or after ",
        ] {
            assert!(page.body.contains(text), "want {text:?} in {}", page.body);
        }
    }
);
