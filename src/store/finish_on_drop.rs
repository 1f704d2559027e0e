//! A future that is finished in a task of its own when its caller stops waiting.
//!
//! A statement sent to SQLite's connection thread runs there whether or not anyone
//! waits for its answer, and stops at the first answer nobody takes. A caller that
//! gives up half way (a client that disconnects, a timeout) would leave a write call
//! in a state nobody knows. Wrapped in [`FinishOnDrop`], the work runs in the
//! caller's own task while the caller waits, costing no task of its own, and is
//! handed to a new task only if the caller leaves before it is done.

use futures::future::BoxFuture;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// `work`, polled by whoever awaits this, and spawned to its end if this is dropped
/// first (its output then dropped there). Without a runtime to spawn on, dropping it
/// drops `work` unfinished.
pub struct FinishOnDrop<T: Send + 'static> {
    work: Option<BoxFuture<'static, T>>,
}

impl<T: Send + 'static> FinishOnDrop<T> {
    pub fn new(work: impl Future<Output = T> + Send + 'static) -> Self {
        Self {
            work: Some(Box::pin(work)),
        }
    }
}

impl<T: Send + 'static> Future for FinishOnDrop<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let work = self
            .work
            .as_mut()
            .expect("a FinishOnDrop polled after it was done");
        let output = std::task::ready!(work.as_mut().poll(cx));
        self.work = None;
        Poll::Ready(output)
    }
}

impl<T: Send + 'static> Drop for FinishOnDrop<T> {
    fn drop(&mut self) {
        if let Some(work) = self.work.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(work);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::sync::oneshot;

    #[tokio::test]
    async fn awaited_work_gives_its_output_to_the_caller() {
        assert_eq!(FinishOnDrop::new(async { 7 }).await, 7);
    }

    #[tokio::test]
    async fn work_whose_caller_gave_up_still_runs_to_its_end() {
        let (started, wait_started) = oneshot::channel();
        let (done, wait_done) = oneshot::channel();
        let work = FinishOnDrop::new(async move {
            started.send(()).unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
            done.send("finished").unwrap();
        });
        let gave_up = tokio::time::timeout(Duration::from_millis(5), work).await;
        assert!(gave_up.is_err(), "the work ended before the caller gave up");
        wait_started.await.expect("the work never started");
        assert_eq!(wait_done.await, Ok("finished"));
    }
}
