//! A deadline on each request body, and a cap on bodies waiting for the network at
//! once (docs/AUTH.md, "Slow and half-sent requests"; issue 47).
//!
//! tower-http's `RequestBodyTimeoutLayer` times the gap between two chunks, so a body
//! trickled at 1 byte per 10 s never trips a 60 s timeout (one stayed open past 140 s),
//! and 1,500 such bodies were all held. Here:
//!
//! - the whole body must have arrived `--request-body-timeout` after the request's head
//!   did, however steadily it trickles; past that the request is answered **408** and
//!   the connection closed;
//! - a body that has to wait for the network (it did not come with its head) takes one
//!   of `--max-slow-bodies` slots until it is complete. With every slot taken, the next
//!   such body is answered **503** with `Retry-After` at once, unread. A body that is
//!   already there when the handler reads it (the usual small JSON or form) needs no
//!   slot, so a crowd of slow senders does not stop ordinary requests.

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use hyper::body::Frame;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// Bodies waiting for the network at once, by default: far below the file descriptors
/// a default process may hold (1,024), far above what a healthy client mix needs.
pub const MAX_SLOW_BODIES: usize = 128;

/// `Retry-After` of the 503 when every slot is taken.
const BUSY_RETRY_SECONDS: u64 = 5;

const FINE: u8 = 0;
const TIMED_OUT: u8 = 1;
const BUSY: u8 = 2;

/// The limits of one server: shared by every connection.
#[derive(Debug, Clone)]
pub(crate) struct BodyLimits {
    deadline: Duration,
    slots: Arc<Semaphore>,
}

impl BodyLimits {
    pub fn new(deadline: Duration, slow_bodies: usize) -> Self {
        Self {
            deadline,
            slots: Arc::new(Semaphore::new(slow_bodies)),
        }
    }

    /// The request with its body under the limits, and what to check on the answer.
    pub fn wrap<B>(&self, request: axum::http::Request<B>) -> (axum::http::Request<Body>, Verdict)
    where
        B: hyper::body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<axum::BoxError>,
    {
        let verdict = Verdict(Arc::new(AtomicU8::new(FINE)));
        let deadline = Instant::now() + self.deadline;
        let limits = self.clone();
        let mark = verdict.clone();
        let request = request.map(move |body| {
            Body::new(DeadlineBody {
                inner: Body::new(body),
                deadline,
                sleep: None,
                limits,
                permit: None,
                verdict: mark,
            })
        });
        (request, verdict)
    }
}

/// Whether the body was cut off, read after the handler answered: the handler saw a
/// body error and answered as it does (400 for an unreadable form), so the real reason
/// replaces its answer here.
#[derive(Debug, Clone)]
pub(crate) struct Verdict(Arc<AtomicU8>);

impl Verdict {
    pub fn apply(&self, response: Response) -> Response {
        let (status, code, title, detail) = match self.0.load(Ordering::Acquire) {
            TIMED_OUT => (
                StatusCode::REQUEST_TIMEOUT,
                "timeout",
                "Request timed out",
                "The request body did not arrive in time (--request-body-timeout); nothing was done.",
            ),
            BUSY => (
                StatusCode::SERVICE_UNAVAILABLE,
                "busy",
                "Too many slow requests",
                "Too many request bodies are arriving slowly right now, so this one was not read; nothing was done. Retry later.",
            ),
            _ => return response,
        };
        let mut problem = super::problem::Problem::new(status, code, title, detail);
        if status == StatusCode::SERVICE_UNAVAILABLE {
            problem = problem.member("retry_after", BUSY_RETRY_SECONDS);
        }
        let mut refused = problem.response();
        // The rest of the body may still be on its way: this connection is done.
        refused
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        super::auth::security_headers(&mut refused, None);
        refused
    }
}

struct DeadlineBody {
    inner: Body,
    deadline: Instant,
    /// Made at the first wait: a body that never waits costs no timer.
    sleep: Option<Pin<Box<Sleep>>>,
    limits: BodyLimits,
    /// Held from the first wait until the body ends.
    permit: Option<OwnedSemaphorePermit>,
    verdict: Verdict,
}

impl DeadlineBody {
    fn cut(
        &mut self,
        why: u8,
        message: &'static str,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        self.verdict.0.store(why, Ordering::Release);
        self.permit = None;
        Poll::Ready(Some(Err(axum::Error::new(message))))
    }
}

impl hyper::body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        if let Some(sleep) = &mut this.sleep
            && sleep.as_mut().poll(cx).is_ready()
        {
            return this.cut(TIMED_OUT, "the request body did not arrive in time");
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Pending => {
                if this.permit.is_none() {
                    match this.limits.slots.clone().try_acquire_owned() {
                        Ok(permit) => this.permit = Some(permit),
                        Err(_) => return this.cut(BUSY, "too many slow request bodies"),
                    }
                }
                if this.sleep.is_none() {
                    let mut sleep = Box::pin(tokio::time::sleep_until(this.deadline));
                    if sleep.as_mut().poll(cx).is_ready() {
                        return this.cut(TIMED_OUT, "the request body did not arrive in time");
                    }
                    this.sleep = Some(sleep);
                }
                Poll::Pending
            }
            Poll::Ready(frame) => {
                if !matches!(frame, Some(Ok(_))) {
                    this.permit = None;
                }
                Poll::Ready(frame)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// A body that yields one byte per `gap`, forever.
    fn trickle(gap: Duration) -> Body {
        let stream = futures::stream::unfold((), move |()| async move {
            tokio::time::sleep(gap).await;
            Some((Ok::<_, std::io::Error>(Bytes::from_static(b"a")), ()))
        });
        Body::from_stream(stream)
    }

    #[tokio::test]
    async fn a_trickled_body_is_cut_off_at_the_deadline_however_steady() {
        let limits = BodyLimits::new(Duration::from_millis(300), 4);
        // A byte every 50 ms: no gap comes near the deadline.
        let request = axum::http::Request::new(trickle(Duration::from_millis(50)));
        let (request, verdict) = limits.wrap(request);
        let read = tokio::time::timeout(Duration::from_secs(10), request.into_body().collect())
            .await
            .expect("cut off, not read for ever");
        assert!(read.is_err());
        let answer = verdict.apply(Response::new(Body::empty()));
        assert_eq!(answer.status(), StatusCode::REQUEST_TIMEOUT);
        assert_eq!(answer.headers()[header::CONNECTION], "close");
        assert_eq!(
            limits.slots.available_permits(),
            4,
            "the slot is free again"
        );
    }

    #[tokio::test]
    async fn beyond_the_slots_a_waiting_body_is_refused_and_a_ready_one_is_read() {
        let limits = BodyLimits::new(Duration::from_secs(60), 1);
        let (slow, _) = limits.wrap(axum::http::Request::new(trickle(Duration::from_secs(1))));
        let mut slow = slow.into_body();
        // Its first chunk has to wait: it takes the one slot.
        let first = tokio::time::timeout(Duration::from_millis(10), slow.frame()).await;
        assert!(first.is_err(), "still waiting");
        let (second, verdict) =
            limits.wrap(axum::http::Request::new(trickle(Duration::from_secs(1))));
        assert!(second.into_body().collect().await.is_err());
        let answer = verdict.apply(Response::new(Body::empty()));
        assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(answer.headers()[header::RETRY_AFTER], "5");
        let (ready, verdict) = limits.wrap(axum::http::Request::new(Body::from("name=a")));
        let bytes = ready.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], b"name=a");
        assert_eq!(
            verdict.apply(Response::new(Body::empty())).status(),
            StatusCode::OK
        );
    }
}
