//! Samples a running service from the outside every 100 ms, as a load balancer and
//! Prometheus would: `/readyz`'s status and `idemwatch_db_up`.

use super::load::metric_sum;
use crate::support::server::get;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub at: Instant,
    /// `/readyz` status; 0 when the service did not answer.
    pub ready: u16,
    pub db_up: Option<f64>,
}

pub struct Monitor {
    samples: Arc<Mutex<Vec<Sample>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Monitor {
    pub async fn start(addr: &str) -> Monitor {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let (addr, s) = (addr.to_string(), samples.clone());
        let task = tokio::spawn(async move {
            loop {
                let ready = get(&addr, "/readyz").await.map_or(0, |r| r.0);
                let db_up = match get(&addr, "/metrics").await {
                    Ok((200, text)) if text.contains("\nidemwatch_db_up ") => {
                        Some(metric_sum(&text, "idemwatch_db_up"))
                    }
                    _ => None,
                };
                s.lock().unwrap().push(Sample {
                    at: Instant::now(),
                    ready,
                    db_up,
                });
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Monitor { samples, task }
    }

    /// Waits until a sample taken after `since` satisfies `ok`.
    pub async fn wait_for(&self, ok: impl Fn(&Sample) -> bool, since: Instant, within: Duration) {
        let started = Instant::now();
        while Monitor::first(&self.samples.lock().unwrap(), since, &ok).is_none() {
            assert!(
                started.elapsed() < within,
                "the service did not reach the awaited state within {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn stop(self) -> Vec<Sample> {
        self.task.abort();
        let _ = self.task.await;
        std::mem::take(&mut *self.samples.lock().unwrap())
    }

    /// When the first sample after `since` satisfied `ok`.
    pub fn first(
        samples: &[Sample],
        since: Instant,
        ok: impl Fn(&Sample) -> bool,
    ) -> Option<Instant> {
        samples
            .iter()
            .find(|s| s.at >= since && ok(s))
            .map(|s| s.at)
    }
}
