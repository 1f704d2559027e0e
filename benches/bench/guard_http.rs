//! The guard over HTTP against the in-process guard, interleaved in one run: the same
//! claim-and-complete workload (a new intent, admitted, executed by an instant provider,
//! settled done) as `POST /api/v1/guard/admit` + `POST /api/v1/guard/settle` from a
//! keep-alive Rust client (one connection per worker), and as `Guard::run` in this
//! process. Targets (issue 11) on PostgreSQL at 8 workers: throughput ≥ 0.6× the
//! in-process guard, added p50 ≤ 0.5 ms, added p99 ≤ 2 ms.
//!
//! Each worker count is also run at a fixed offered rate, half and three quarters of
//! what the in-process guard reached, on both legs: the closed loop's added p50 is the
//! queue of saturated cores, the paced one what a caller waits at a load a service is
//! run at.
//!
//! The server is `web::app` with a tools file, served on a loopback port by this process
//! (the same runtime as the clients): what is added is the HTTP round trips, JSON both
//! ways, the policy lookup and the access checks, not a second machine.

use super::guard::{Instant0, call};
use super::http::{self, Pool};
use super::report::Figure;
use super::slices::{Plan, alternate, alternate_paced};
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, header};
use chrono::TimeDelta;
use http_body_util::BodyExt;
use hyper::body::Bytes;
use idemwatch::guard::{Guard, GuardSettings, SystemClock, ToolPolicies, ToolPolicy};
use idemwatch::store::Store;
use idemwatch::web::{self, AppState};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

fn tools() -> ToolPolicies {
    let mut tools = ToolPolicies::default();
    tools.tools.insert(
        "issue_refund".into(),
        ToolPolicy {
            key_retention: TimeDelta::hours(24),
            call_timeout: Duration::from_secs(10),
            free_text_fields: vec![],
            natural_key: vec![],
            duplicate_window: idemwatch::guard::DEFAULT_DUPLICATE_WINDOW,
        },
    );
    tools
}

/// Where the two requests of a guarded call go: a keep-alive TCP connection, or the
/// router itself in this process (no sockets: what the server's own code costs).
trait Transport {
    async fn post(&mut self, path: &str, body: Vec<u8>) -> (u16, Bytes);
}

impl Transport for http::Client {
    async fn post(&mut self, path: &str, body: Vec<u8>) -> (u16, Bytes) {
        self.post_json(path, body).await
    }
}

impl Transport for axum::Router {
    async fn post(&mut self, path: &str, body: Vec<u8>) -> (u16, Bytes) {
        let mut request = Request::post(path)
            .header(header::HOST, "127.0.0.1")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body))
            .unwrap();
        let peer: SocketAddr = ([127, 0, 0, 1], 1).into();
        request.extensions_mut().insert(ConnectInfo(peer));
        let response = self.clone().oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, body)
    }
}

/// The admit request, serialized from the call's own fields (no JSON tree built and
/// walked again): what a lean worker sends. Members in alphabetical order, as the
/// `json!` maps this replaced wrote them, so the bytes on the wire did not change.
#[derive(Serialize)]
struct Admit<'a> {
    args: &'a Value,
    business_ref: Option<&'a str>,
    intent: IntentMembers<'a>,
    worker: &'static str,
}

#[derive(Serialize)]
struct IntentMembers<'a> {
    intent_id: &'a str,
    step_id: &'a str,
    tenant: &'a str,
    tool: &'a str,
    workflow_id: &'a str,
}

/// The `execute` answer, every documented member read into its type (docs/GUARD.md):
/// what a worker needs to call the provider and settle.
#[derive(Deserialize)]
struct Execute<'a> {
    #[serde(borrow)]
    decision: Cow<'a, str>,
    #[serde(borrow)]
    key: Cow<'a, str>,
    fencing_token: i64,
    #[serde(borrow, rename = "lease_until")]
    _lease_until: Cow<'a, str>,
    #[serde(rename = "args")]
    _args: Value,
    #[serde(borrow, rename = "policy")]
    _policy: Policy<'a>,
}

#[derive(Deserialize)]
struct Policy<'a> {
    #[serde(borrow, rename = "tool")]
    _tool: Cow<'a, str>,
    #[serde(rename = "call_timeout_seconds")]
    _call_timeout_seconds: f64,
    #[serde(rename = "key_retention_seconds")]
    _key_retention_seconds: f64,
    #[serde(rename = "duplicate_window_seconds")]
    _duplicate_window_seconds: f64,
    #[serde(rename = "free_text_fields")]
    _free_text_fields: Vec<String>,
    #[serde(rename = "natural_key")]
    _natural_key: Vec<String>,
}

/// The settle request (members in alphabetical order, as above).
#[derive(Serialize)]
struct Settle<'a> {
    fencing_token: i64,
    key: &'a str,
    outcome: &'static str,
    result: Refund,
    worker: &'static str,
}

#[derive(Serialize)]
struct Refund {
    refund_id: &'static str,
}

/// One guarded call: admit (execute), then settle done.
async fn admit_and_settle(to: &mut impl Transport) {
    let c = call("http");
    let i = &c.intent;
    let admit = Admit {
        args: &c.args,
        business_ref: c.business_ref.as_deref(),
        intent: IntentMembers {
            intent_id: &i.intent_id,
            step_id: &i.step_id,
            tenant: &i.tenant,
            tool: &i.tool,
            workflow_id: &i.workflow_id,
        },
        worker: "bench",
    };
    let (status, body) = to
        .post("/api/v1/guard/admit", serde_json::to_vec(&admit).unwrap())
        .await;
    assert_eq!(status, 200, "admit: {}", String::from_utf8_lossy(&body));
    let answer: Execute = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("admit: {e}: {}", String::from_utf8_lossy(&body)));
    assert_eq!(answer.decision, "execute");
    let settle = Settle {
        fencing_token: answer.fencing_token,
        key: &answer.key,
        outcome: "done",
        result: Refund {
            refund_id: "rf_bench",
        },
        worker: "bench",
    };
    let (status, body) = to
        .post("/api/v1/guard/settle", serde_json::to_vec(&settle).unwrap())
        .await;
    assert_eq!(status, 200, "settle: {}", String::from_utf8_lossy(&body));
}

/// One guarded call over HTTP, on a connection of `pool`.
async fn over_http(pool: &Pool) {
    let mut conn = pool.take();
    admit_and_settle(&mut conn).await;
    pool.give_back(conn);
}

pub async fn run(store: &Store, backend: &str, plan: Plan, figures: &mut Vec<Figure>) {
    let settings = GuardSettings::default();
    let state = AppState::new(store.clone()).with_guard(tools(), settings.clone());
    let app = web::app(state);
    let addr = http::serve(app.clone()).await;
    let guard = Guard::new(store.clone(), Arc::new(SystemClock), settings);
    for workers in [1usize, 8, 32] {
        let pool = Pool::new(addr, workers).await;
        let subject = move || {
            let pool = pool.clone();
            async move { over_http(&pool).await }
        };
        let g = guard.clone();
        let baseline = move || {
            let g = g.clone();
            async move {
                g.run(&call("inproc"), &Instant0).await.unwrap();
            }
        };
        let (http, inproc) = alternate(plan, workers, subject.clone(), baseline.clone()).await;
        let (rate, base_rate) = (http.median_rate(), inproc.median_rate());
        let gated = backend == "PostgreSQL" && workers == 8;
        let target = |what, met| gated.then_some((what, met));
        figures.push(Figure::ratio(
            format!("guard over HTTP admit+settle, {workers} workers ({backend})"),
            "ops/s",
            rate,
            base_rate,
            target(">= 0.6 of in-process", rate / base_rate >= 0.6),
        ));
        let (h, b) = (&http.latencies, &inproc.latencies);
        let added_p50 = h.p50_ms() - b.p50_ms();
        let added_p99 = h.p99_ms() - b.p99_ms();
        let detail = format!(
            "HTTP p50 {:.2} / p99 {:.2} ms, in-process p50 {:.2} / p99 {:.2} ms",
            h.p50_ms(),
            h.p99_ms(),
            b.p50_ms(),
            b.p99_ms()
        );
        figures.push(Figure::plain(
            format!("guard over HTTP added p50, {workers} workers ({backend})"),
            "ms",
            added_p50,
            detail.clone(),
            target("<= 0.5 ms", added_p50 <= 0.5),
        ));
        figures.push(Figure::plain(
            format!("guard over HTTP added p99, {workers} workers ({backend})"),
            "ms",
            added_p99,
            detail,
            target("<= 2 ms", added_p99 <= 2.0),
        ));
        // The same two legs offered a fixed rate below what the in-process guard
        // reaches as fast as it can: with `workers` callers in a closed loop on cores
        // that the client, the server and the database share, every extra microsecond
        // of CPU is multiplied by the queue (Little's law), so the closed-loop added
        // p50 is a throughput figure. A latency target means something at a load the
        // service is run at (docs/PERFORMANCE.md, guard over HTTP).
        for load in [0.5, 0.75] {
            let rate = base_rate * load;
            let (h, b) =
                alternate_paced(plan, workers, rate, subject.clone(), baseline.clone()).await;
            let added = h.p50_ms() - b.p50_ms();
            let gated = gated && load == 0.5;
            figures.push(Figure::plain(
                format!(
                    "guard over HTTP added p50 at {:.0} % of in-process capacity, {workers} workers ({backend})",
                    load * 100.0
                ),
                "ms",
                added,
                format!(
                    "{rate:.0} calls/s offered to each; HTTP p50 {:.2} / p99 {:.2} ms, in-process p50 {:.2} / p99 {:.2} ms; added p99 {:.2} ms",
                    h.p50_ms(),
                    h.p99_ms(),
                    b.p50_ms(),
                    b.p99_ms(),
                    h.p99_ms() - b.p99_ms()
                ),
                gated.then_some(("<= 0.5 ms", added <= 0.5)),
            ));
        }
        // The same calls through the router in this process, no sockets: splits what
        // HTTP adds into the server's own code (auth, routing, JSON) and the rest
        // (TCP on loopback, hyper on both ends, the client).
        let (routed, inproc) = alternate(
            plan,
            workers,
            {
                let app = app.clone();
                move || {
                    let mut app = app.clone();
                    async move { admit_and_settle(&mut app).await }
                }
            },
            baseline,
        )
        .await;
        let (r, b) = (&routed.latencies, &inproc.latencies);
        figures.push(Figure::plain(
            format!("guard through the router without TCP added p50, {workers} workers ({backend})"),
            "ms",
            r.p50_ms() - b.p50_ms(),
            format!(
                "router p50 {:.2} / p99 {:.2} ms ({:.0} ops/s), in-process p50 {:.2} / p99 {:.2} ms ({:.0} ops/s)",
                r.p50_ms(),
                r.p99_ms(),
                routed.median_rate(),
                b.p50_ms(),
                b.p99_ms(),
                inproc.median_rate()
            ),
            None,
        ));
    }
}
