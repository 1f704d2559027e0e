//! Guard calls over HTTP while the database misbehaves: workers drive refunds through a
//! real `serve` (admit, send, settle; reconcile when asked) against a provider that
//! counts effects per key, record every answer, and retry what was cut off the way a
//! caller would. [`HttpLoad::finish_and_check`] then retries every unfinished intent
//! (past its lease: it reconciles) and checks the books.

use crate::support::as_key;
use crate::support::effects::Effects;
use idemwatch::guard::Status;
use idemwatch::store::Store;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// What the HTTP callers saw.
#[derive(Debug, Default)]
pub struct HttpTally {
    /// (key, result, when) for every success (settle answered 200, or a replay).
    pub acked: Vec<(String, Value, Instant)>,
    /// Requests cut off by the database: (when, 503 `unavailable` or connection error).
    pub cut_off: Vec<(Instant, String)>,
    /// Anything else (a 500, an unknown answer): each one is a defect.
    pub unexpected: Vec<String>,
    /// Intents (admit bodies) not finished when the load stopped.
    pub pending: Vec<Value>,
}

impl HttpTally {
    /// The first success at or after `t`.
    pub fn first_success_after(&self, t: Instant) -> Option<Instant> {
        self.acked.iter().map(|a| a.2).filter(|a| *a >= t).min()
    }
}

/// One answer: a status and a JSON body, or why there was none.
type Answer = Result<(u16, Value), String>;

/// `POST /api/v1/guard/{path}` over a fresh connection, at most 15 s.
async fn post(addr: &str, path: &str, body: &Value) -> Answer {
    let exchange = async {
        let body = body.to_string();
        let mut stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let request = format!(
            "POST /api/v1/guard/{path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("write: {e}"))?;
        let mut raw = Vec::new();
        stream
            .read_to_end(&mut raw)
            .await
            .map_err(|e| format!("read: {e}"))?;
        let text = String::from_utf8_lossy(&raw);
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| "connection closed without an answer".to_string())?;
        let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        Ok((status, serde_json::from_str(body).unwrap_or(Value::Null)))
    };
    tokio::time::timeout(Duration::from_secs(15), exchange)
        .await
        .unwrap_or_else(|_| Err("no answer in 15 s".into()))
}

/// How one request ended, for the caller.
enum Step {
    /// The intent (key) is finished with this result.
    Done(String, Value),
    /// Cut off (retryable): try again.
    Retry,
    /// The key is held by a lease (an earlier try was cut off after its claim).
    InFlight,
}

struct World {
    addr: String,
    provider: Effects,
    tally: Mutex<HttpTally>,
}

impl World {
    /// Classifies an answer that is not the expected success.
    fn other(&self, what: &str, key: &str, answer: &Answer) -> Step {
        let mut t = self.tally.lock().unwrap();
        match answer {
            Err(e) => {
                t.cut_off.push((Instant::now(), e.clone()));
                Step::Retry
            }
            Ok((503, p)) if p["code"] == "unavailable" => {
                t.cut_off
                    .push((Instant::now(), format!("503 {}", p["title"])));
                Step::Retry
            }
            Ok((409, p)) if p["code"] == "in_flight" => Step::InFlight,
            Ok((409, p)) if p["code"] == "lease_lost" => Step::Retry,
            Ok((status, p)) => {
                t.unexpected.push(format!("{key} {what}: {status} {p}"));
                Step::InFlight
            }
        }
    }

    /// Sends under the execute decision `d` and settles.
    async fn execute(&self, d: &Value, worker: &str) -> Step {
        let key = d["key"].as_str().unwrap();
        let result = self.provider.send(key);
        let body = json!({"key": key, "fencing_token": d["fencing_token"], "worker": worker,
                          "outcome": "done", "result": result});
        let answer = post(&self.addr, "settle", &body).await;
        match &answer {
            Ok((200, _)) => Step::Done(key.to_string(), result),
            _ => self.other("settle", key, &answer),
        }
    }

    /// One try of an intent: admit, then execute or reconcile.
    async fn attempt(&self, admit: &Value, worker: &str) -> Step {
        let answer = post(&self.addr, "admit", admit).await;
        let d = match &answer {
            Ok((200, d)) => d.clone(),
            _ => return self.other("admit", "", &answer),
        };
        match d["decision"].as_str().unwrap_or_default() {
            "replay" => Step::Done(d["key"].as_str().unwrap().to_string(), d["result"].clone()),
            "execute" => self.execute(&d, worker).await,
            "reconcile" => {
                let key = d["key"].as_str().unwrap();
                let body = self.provider.reconcile_request(&d, worker);
                let answer = post(&self.addr, "reconcile", &body).await;
                match &answer {
                    Ok((200, r)) if r["decision"] == "replay" => {
                        Step::Done(key.to_string(), r["result"].clone())
                    }
                    Ok((200, r)) if r["decision"] == "execute" => self.execute(r, worker).await,
                    _ => self.other("reconcile", key, &answer),
                }
            }
            other => {
                let mut t = self.tally.lock().unwrap();
                t.unexpected.push(format!("admit decision {other:?}: {d}"));
                Step::InFlight
            }
        }
    }

    fn acked(&self, key: String, result: Value) {
        let mut t = self.tally.lock().unwrap();
        t.acked.push((key, result, Instant::now()));
    }
}

fn admit_body(w: usize, n: usize) -> Value {
    let worker = format!("http-{w}");
    json!({
        "intent": {"tenant": "acme", "tool": "issue_refund", "workflow_id": format!("run-h{w}"),
                   "step_id": "1", "intent_id": format!("refund:H{w}-{n}")},
        "business_ref": format!("order:H{w}-{n}"),
        "args": {"order": n, "amount_p": 100 + n, "reason": format!("{worker} says so")},
        "worker": worker,
    })
}

pub struct HttpLoad {
    world: Arc<World>,
    stop: watch::Sender<bool>,
    workers: JoinSet<()>,
}

impl HttpLoad {
    /// Starts `workers` HTTP callers on the guard routes of the serve at `addr`.
    pub fn start(addr: &str, workers: usize) -> HttpLoad {
        let world = Arc::new(World {
            addr: addr.to_string(),
            provider: Effects::default(),
            tally: Mutex::new(HttpTally::default()),
        });
        let (stop, stopped) = watch::channel(false);
        let mut set = JoinSet::new();
        for w in 0..workers {
            let (world, stopped) = (world.clone(), stopped.clone());
            set.spawn(async move {
                let worker = format!("http-{w}");
                for n in 0.. {
                    if *stopped.borrow() {
                        return;
                    }
                    let admit = admit_body(w, n);
                    loop {
                        match world.attempt(&admit, &worker).await {
                            Step::Done(key, result) => {
                                world.acked(key, result);
                                break;
                            }
                            Step::InFlight => {
                                world.tally.lock().unwrap().pending.push(admit.clone());
                                break;
                            }
                            Step::Retry if *stopped.borrow() => {
                                world.tally.lock().unwrap().pending.push(admit.clone());
                                break;
                            }
                            Step::Retry => tokio::time::sleep(Duration::from_millis(50)).await,
                        }
                    }
                }
            });
        }
        HttpLoad {
            world,
            stop,
            workers: set,
        }
    }

    /// Stops the callers, finishes every pending intent (retrying with the same intent
    /// until it replays: past the lease it reconciles) and checks the books: no 500 or
    /// other defect, every success DONE in the log with its result, one effect per
    /// intent. Returns what the callers saw before the finish.
    pub async fn finish_and_check(mut self, store: &Store) -> HttpTally {
        let _ = self.stop.send(true);
        while let Some(joined) = self.workers.join_next().await {
            joined.expect("an HTTP caller panicked");
        }
        let world = self.world;
        let tally = std::mem::take(&mut *world.tally.lock().unwrap());
        assert!(tally.unexpected.is_empty(), "{:#?}", tally.unexpected);
        let mut finished = vec![];
        for admit in &tally.pending {
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                assert!(Instant::now() < deadline, "never finished: {admit}");
                if let Step::Done(key, _) = world.attempt(admit, "http-finisher").await {
                    finished.push(key);
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        let after = std::mem::take(&mut *world.tally.lock().unwrap());
        assert!(after.unexpected.is_empty(), "{:#?}", after.unexpected);
        for (key, result, _) in &tally.acked {
            let record = store
                .record(&as_key(key))
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("{key}: acknowledged over HTTP but not in the log"));
            assert_eq!(record.status, Status::Done, "{key}");
            assert_eq!(record.result.as_ref(), Some(result), "{key}");
        }
        let effects = world.provider.snapshot();
        for (key, ids) in &effects {
            assert_eq!(ids.len(), 1, "{key}: {ids:?}");
            let record = store.record(&as_key(key)).await.unwrap().unwrap();
            assert_eq!(record.status, Status::Done, "{key}");
        }
        assert_eq!(
            effects.len(),
            tally.acked.len() + tally.pending.len(),
            "HTTP effects vs intents"
        );
        tally
    }
}
