//! The far end of the alerting path, in the test: an HTTP server on a free loopback
//! port that stands in for the operator's pager and ticket queue (Alertmanager's
//! webhook receivers post to `/<receiver>`) and for the web server that hosts their
//! copy of docs/RUNBOOK.md (`GET /docs/RUNBOOK.md`).

use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// One webhook notification: the path it was posted to (the receiver) and its JSON
/// body (Alertmanager's webhook payload, version 4).
#[derive(Debug, Clone)]
pub struct Notification {
    pub receiver: String,
    pub body: Value,
}

impl Notification {
    pub fn alerts(&self) -> impl Iterator<Item = &Value> {
        self.body["alerts"].as_array().into_iter().flatten()
    }

    /// The alert `name` in this notification.
    pub fn alert(&self, name: &str) -> Value {
        self.alerts()
            .find(|a| a["labels"]["alertname"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} in {}", self.body))
    }
}

type Received = Arc<Mutex<Vec<Notification>>>;

pub struct Webhook {
    pub addr: SocketAddr,
    received: Received,
    server: JoinHandle<()>,
}

impl Webhook {
    /// Serves `runbook` (the text of docs/RUNBOOK.md) and records every POST.
    pub async fn start(runbook: String) -> Webhook {
        let received = Received::default();
        let app = Router::new()
            .route("/docs/RUNBOOK.md", get(move || async move { runbook }))
            .route("/{receiver}", post(record))
            .with_state(received.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Webhook {
            addr,
            received,
            server,
        }
    }

    /// The first notification posted to `receiver` that holds the alert `name`,
    /// waiting up to a minute for it.
    pub async fn wait_for(&self, receiver: &str, name: &str) -> Notification {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let found = self.received().into_iter().find(|n| {
                n.receiver == receiver && n.alerts().any(|a| a["labels"]["alertname"] == name)
            });
            if let Some(notification) = found {
                return notification;
            }
            assert!(
                Instant::now() < deadline,
                "no notification of {name} to {receiver}; received: {:?}",
                self.received()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Every notification so far, oldest first.
    pub fn received(&self) -> Vec<Notification> {
        self.received.lock().unwrap().clone()
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn record(
    State(received): State<Received>,
    Path(receiver): Path<String>,
    Json(body): Json<Value>,
) {
    received
        .lock()
        .unwrap()
        .push(Notification { receiver, body });
}
