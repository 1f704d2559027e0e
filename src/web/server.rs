//! The HTTP server loop: `axum::serve` with bounded waits. axum's own loop gives hyper
//! no timer, so a client that sends half a request (or opens a connection and sends
//! nothing) holds a connection and a task for as long as it likes; a few thousand
//! such clients exhaust file descriptors. Here a new connection must send its first
//! byte, and then its whole request head (hyper's HTTP/1 `header_read_timeout`), each
//! within the header timeout, and request bodies get a deadline from tower-http. A
//! kept-alive connection idle between requests is not timed out here (hyper starts
//! its timer at a head's first byte): that is left to a reverse proxy. Everything else is as in `axum::serve`: the peer address
//! as `ConnectInfo`, and graceful shutdown.

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::extract::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower::ServiceExt;

/// How long a client may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// For a new connection's first byte, and again from the first byte of a request's
    /// head to its end; past either the connection is closed without an answer.
    pub header_read: Duration,
    /// For a request's whole body, once the handler reads it; past it, 408.
    pub request_body: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            header_read: Duration::from_secs(30),
            request_body: Duration::from_secs(60),
        }
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
    let app = app.layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
        timeouts.request_body,
    ));
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
        let service =
            TowerToHyperService::new(tower::service_fn(move |request: Request<Incoming>| {
                let mut request = request.map(Body::new);
                request.extensions_mut().insert(ConnectInfo(peer));
                app.clone().oneshot(request)
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
