//! Several `idemwatch serve` replicas on one PostgreSQL are one guard: sixteen workers
//! drive fifty intents through two real processes at once, alternating between them,
//! with injected faults (a timeout after the effect, a crash after the effect with no
//! settle, a 503 before it), against a provider that does NOT deduplicate by key (it
//! only tags what it creates with the key, for the lookup). Every intent must end DONE
//! with exactly one effect.

use crate::support::TestDb;
use crate::support::as_key;
use crate::support::effects::Effects;
use crate::support::server::{Server, refund_tools_file};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const INTENTS: usize = 50;
const WORKERS: usize = 16;

/// `POST path` with a JSON body over a fresh connection: (status, body as JSON).
async fn post(addr: &str, path: &str, body: &Value) -> (u16, Value) {
    let body = body.to_string();
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8_lossy(&raw);
    let status = text.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    Ok,
    /// The effect happens, the answer is lost: settle unknown.
    Timeout,
    /// The effect happens, the worker dies: no settle; the lease runs out.
    Crash,
    /// Refused before anything happened, ambiguously: settle unknown.
    Unavailable,
}

fn fault(intent: usize, execution: u32) -> Fault {
    match (intent % 5, execution) {
        (0, 0) => Fault::Crash,
        (1, 0) => Fault::Timeout,
        (2, 0) => Fault::Unavailable,
        (2, 1) => Fault::Timeout,
        _ => Fault::Ok,
    }
}

struct World {
    servers: [String; 2],
    provider: Effects,
    executions: Vec<AtomicU32>,
    requests: AtomicU32,
}

impl World {
    async fn call(&self, path: &str, body: &Value) -> (u16, Value) {
        let n = self.requests.fetch_add(1, Ordering::Relaxed) as usize;
        post(&self.servers[n % 2], &format!("/api/v1/guard/{path}"), body).await
    }

    /// Sends under `d` (an execute decision) and settles, unless the worker "dies".
    async fn execute(&self, intent: usize, d: &Value, worker: &str) {
        let key = d["key"].as_str().unwrap();
        let n = self.executions[intent].fetch_add(1, Ordering::SeqCst);
        let settle = |outcome: Value| {
            let mut body =
                json!({"key": key, "fencing_token": d["fencing_token"], "worker": worker});
            body.as_object_mut()
                .unwrap()
                .extend(outcome.as_object().unwrap().clone());
            body
        };
        let body = match fault(intent, n) {
            Fault::Ok => settle(json!({"outcome": "done", "result": self.provider.send(key)})),
            Fault::Timeout => {
                self.provider.send(key);
                settle(json!({"outcome": "unknown", "reason": "timeout after 1 s"}))
            }
            Fault::Unavailable => {
                settle(json!({"outcome": "unknown", "reason": "503 from provider"}))
            }
            Fault::Crash => {
                self.provider.send(key);
                return;
            }
        };
        let (status, answer) = self.call("settle", &body).await;
        // A stale token (the lease ran out and someone took over) is fine: recorded.
        assert!(
            status == 200 || (status == 409 && answer["code"] == "lease_lost"),
            "settle: {status} {answer}"
        );
    }

    /// One worker's run of one intent, until it has the result.
    async fn run(&self, intent: usize, worker: &str) -> Value {
        let admit = json!({
            "intent": {"tenant": "acme", "tool": "issue_refund", "workflow_id": "run-r",
                       "step_id": "1", "intent_id": format!("refund:{intent}")},
            "business_ref": format!("order:{intent}"),
            "args": {"order": intent, "amount_p": 100 + intent, "reason": format!("{worker} says so")},
            "worker": worker,
        });
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            assert!(Instant::now() < deadline, "intent {intent} never finished");
            let (status, d) = self.call("admit", &admit).await;
            let decision = d["decision"].as_str().unwrap_or_default();
            match (status, decision) {
                (200, "replay") => return d["result"].clone(),
                (200, "execute") => self.execute(intent, &d, worker).await,
                (200, "reconcile") => {
                    let body = self.provider.reconcile_request(&d, worker);
                    let (status, r) = self.call("reconcile", &body).await;
                    match (status, r["decision"].as_str().unwrap_or_default()) {
                        (200, "replay") => return r["result"].clone(),
                        (200, "execute") => self.execute(intent, &r, worker).await,
                        (409, _) if r["code"] == "lease_lost" => {}
                        other => panic!("reconcile answered {other:?}: {r}"),
                    }
                }
                (409, _) if d["code"] == "in_flight" => {
                    assert!(d["retry_after"].as_u64().unwrap() >= 1);
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                _ => panic!("admit answered {status}: {d}"),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_on_one_database_perform_each_intent_exactly_once() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let tools = refund_tools_file(dir.path());
    let args = [
        "--tools-file",
        tools.to_str().unwrap(),
        // A lease of 6 s: long enough that a worker slowed by a loaded machine still
        // sends inside it (the guard's one assumption), short enough for crashes.
        "--lease-margin",
        "5s",
        "--db-max-connections",
        "8",
    ];
    let a = Server::start("serve", &db.url, &args).await;
    let b = Server::start("serve", &db.url, &args).await;
    let world = Arc::new(World {
        servers: [a.addr.clone(), b.addr.clone()],
        provider: Effects::default(),
        executions: (0..INTENTS).map(|_| AtomicU32::new(0)).collect(),
        requests: AtomicU32::new(0),
    });

    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..WORKERS {
        let world = world.clone();
        tasks.spawn(async move {
            let worker = format!("worker-{w}");
            let mut results = vec![];
            for j in 0..INTENTS {
                let intent = (j + w * 7) % INTENTS;
                results.push((intent, world.run(intent, &worker).await));
            }
            results
        });
    }
    let mut seen: HashMap<usize, Value> = HashMap::new();
    while let Some(done) = tasks.join_next().await {
        for (intent, result) in done.unwrap() {
            let first = seen.entry(intent).or_insert_with(|| result.clone());
            assert_eq!(
                first, &result,
                "every worker gets the same result for intent {intent}"
            );
        }
    }

    let effects = world.provider.snapshot();
    assert_eq!(effects.len(), INTENTS, "one key per intent");
    for (key, ids) in &effects {
        assert_eq!(ids.len(), 1, "key {key}: {ids:?}");
        let record = db.store.record(&as_key(key)).await.unwrap().unwrap();
        assert_eq!(record.status, idemwatch::guard::Status::Done, "{key}");
    }
    assert!(
        world.requests.load(Ordering::Relaxed) as usize >= INTENTS * WORKERS,
        "every worker ran every intent"
    );
    drop((a, b));
}
