//! The HTTP server loop: `axum::serve` with bounded waits. axum's own loop gives hyper
//! no timer, so a client that sends half a request (or opens a connection and sends
//! nothing) holds a connection and a task for as long as it likes; a few thousand
//! such clients exhaust file descriptors. Here a new connection must send its first
//! byte, and then its whole request head (hyper's HTTP/1 `header_read_timeout`), each
//! within the header timeout, and request bodies must arrive by a deadline, with a cap
//! on the bodies waiting for the network at once (`super::slow_bodies`). A
//! kept-alive connection idle between requests is not timed out here (hyper starts
//! its timer at a head's first byte): that is left to a reverse proxy. A client that
//! stops reading its response (a stalled export download) is cut off once no byte of
//! it could be written for the write timeout ([`WriteDeadline`]): the response body
//! is dropped with the connection, and with it the export's pooled connection, its
//! snapshot and its slot. Everything else is as in `axum::serve`: the peer address as
//! `ConnectInfo`, and graceful shutdown.

pub use super::slow_bodies::MAX_SLOW_BODIES;
use axum::Router;
use axum::extract::ConnectInfo;
use axum::extract::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tower::ServiceExt;

/// How long a client may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// For a new connection's first byte, and again from the first byte of a request's
    /// head to its end; past either the connection is closed without an answer.
    pub header_read: Duration,
    /// For a request's whole body, from the end of its head, however steadily it
    /// trickles; past it, 408 and the connection is closed.
    pub request_body: Duration,
    /// For the client to take any byte of the response while the server has bytes to
    /// send; past it the connection is closed. Progress, however slow, resets it.
    pub write: Duration,
    /// Request bodies waiting for the network at once; beyond them, 503 at once.
    pub slow_bodies: usize,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            header_read: Duration::from_secs(30),
            request_body: Duration::from_secs(60),
            write: Duration::from_secs(60),
            slow_bodies: super::slow_bodies::MAX_SLOW_BODIES,
        }
    }
}

/// A connection whose writes fail with `TimedOut` once the peer has accepted nothing
/// for `timeout` while a write waited: hyper then ends the connection and drops the
/// response. Reads pass through untouched (their limits are the header and body
/// timeouts). tower-http's timeouts cannot do this: a stalled write never polls the
/// body again, so nothing above the socket notices.
struct WriteDeadline {
    inner: TcpStream,
    timeout: Duration,
    /// Armed when a write first waits; cleared when one succeeds.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl WriteDeadline {
    fn new(inner: TcpStream, timeout: Duration) -> Self {
        Self {
            inner,
            timeout,
            stalled: None,
        }
    }

    /// After the socket said Pending: Pending, or the timeout's error.
    fn wait<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let timeout = self.timeout;
        let sleep = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client read nothing for the write timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    /// A write's result: bytes taken reset the deadline; a wait arms it.
    fn wrote(
        &mut self,
        result: Poll<io::Result<usize>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<usize>> {
        match result {
            Poll::Pending => self.wait(cx),
            Poll::Ready(Ok(n)) if n > 0 => {
                self.stalled = None;
                Poll::Ready(Ok(n))
            }
            ready => ready,
        }
    }

    /// A flush or shutdown: a wait counts against the same deadline; being done
    /// proves nothing about the client reading, so it resets nothing.
    fn flushed(
        &mut self,
        result: Poll<io::Result<()>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        match result {
            Poll::Pending => self.wait(cx),
            ready => ready,
        }
    }
}

impl AsyncRead for WriteDeadline {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for WriteDeadline {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.wrote(result, cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.wrote(result, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_flush(cx);
        this.flushed(result, cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.flushed(result, cx)
    }
}

/// Serves `app` on `listener` until `shutdown` resolves, then waits for the requests
/// in flight.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    timeouts: Timeouts,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let bodies = super::slow_bodies::BodyLimits::new(timeouts.request_body, timeouts.slow_bodies);
    // Closed when the loop stops accepting: each connection then shuts down
    // gracefully. Each connection holds a receiver; the loop waits for all of them.
    let (stop_tx, stop_rx) = watch::channel(());
    let (done_tx, done_rx) = watch::channel(());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: pass, as axum does.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let bodies = bodies.clone();
        let service =
            TowerToHyperService::new(tower::service_fn(move |request: Request<Incoming>| {
                let (mut request, verdict) = bodies.wrap(request);
                request.extensions_mut().insert(ConnectInfo(peer));
                let answer = app.clone().oneshot(request);
                async move { answer.await.map(|response| verdict.apply(response)) }
            }));
        let mut stop = stop_rx.clone();
        let done = done_rx.clone();
        tokio::spawn(async move {
            // hyper's timer starts with the first byte of a head: a connection that
            // sends nothing at all gets the same time to start.
            let mut first = [0u8; 1];
            if tokio::time::timeout(timeouts.header_read, stream.peek(&mut first))
                .await
                .is_err()
            {
                tracing::debug!(peer = %peer, "connection sent nothing: closed");
                return;
            }
            let mut builder = Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(timeouts.header_read);
            let stream = WriteDeadline::new(stream, timeouts.write);
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!(error = %e, peer = %peer, "connection ended");
                    }
                }
                _ = stop.changed() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
            drop(done);
        });
    }
    drop(listener);
    drop(stop_tx);
    drop(done_rx);
    done_tx.closed().await;
    Ok(())
}
