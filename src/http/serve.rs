//! The HTTP listener's connections, bounded in number and in time, so idle or slow clients
//! cannot take the file descriptors gRPC and `/healthcheck` need.
//!
//! - At most [`MAX_CONNECTIONS`] are open. A new connection past the cap is still accepted
//!   (a probe must get through) and the oldest one is asked to close: at once if it sits idle
//!   or is still sending its request head, after its response if a request is in progress.
//! - A request head must arrive within [`HEADER_TIMEOUT`] of the connection being ready for
//!   it, which is also how long a keep-alive connection may sit idle.
//! - A request (reading its body and answering) must finish within [`REQUEST_TIMEOUT`];
//!   past it the answer is 408 and the connection closes.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use parking_lot::Mutex;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower_service::Service;

/// The most HTTP connections open at once (probes, scrapes and `/json` clients need few).
pub const MAX_CONNECTIONS: usize = 256;
/// How long a request head may take to arrive, and a keep-alive connection may sit idle.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request may take, body included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The pause after a failed accept (out of file descriptors): the error is not the
/// listener's, and retrying at once would spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// The client's address, in every request's extensions (the admin listener's audit line names
/// it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer(pub std::net::SocketAddr);

/// How the listener bounds its connections.
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    /// See [`MAX_CONNECTIONS`].
    pub max_connections: usize,
    /// See [`HEADER_TIMEOUT`].
    pub header_timeout: Duration,
    /// See [`REQUEST_TIMEOUT`].
    pub request_timeout: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        Self {
            max_connections: MAX_CONNECTIONS,
            header_timeout: HEADER_TIMEOUT,
            request_timeout: REQUEST_TIMEOUT,
        }
    }
}

/// Serves `router` on `listener` until `close` is cancelled, then lets the requests in
/// progress finish (idle connections close at once) and returns.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnLimits,
    close: CancellationToken,
) {
    let open = Arc::new(Open::default());
    let tasks = TaskTracker::new();
    loop {
        let (stream, peer) = tokio::select! {
            _ = close.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::debug!(error = %e, "HTTP accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        let (id, evicted) = open.admit(limits.max_connections);
        let connection = serve_connection(
            (stream, Peer(peer)),
            router.clone(),
            limits,
            evicted,
            close.clone(),
        );
        let open = open.clone();
        tasks.spawn(async move {
            connection.await;
            open.remove(id);
        });
    }
    drop(listener);
    tasks.close();
    tasks.wait().await;
}

/// The open connections by accept order, each with the token that asks it to close.
#[derive(Default)]
struct Open {
    inner: Mutex<(u64, BTreeMap<u64, CancellationToken>)>,
}

impl Open {
    /// Registers a new connection; past `max`, asks the oldest to close.
    fn admit(&self, max: usize) -> (u64, CancellationToken) {
        let mut inner = self.inner.lock();
        let (next, open) = &mut *inner;
        while open.len() >= max.max(1) {
            match open.pop_first() {
                Some((_, oldest)) => oldest.cancel(),
                None => break,
            }
        }
        let id = *next;
        *next += 1;
        let token = CancellationToken::new();
        open.insert(id, token.clone());
        (id, token)
    }

    fn remove(&self, id: u64) {
        self.inner.lock().1.remove(&id);
    }
}

/// One HTTP/1 connection with the header and request timeouts; it closes gracefully when
/// evicted or when the server closes.
async fn serve_connection(
    (stream, peer): (TcpStream, Peer),
    router: Router,
    limits: ConnLimits,
    evicted: CancellationToken,
    close: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
        let mut router = router.clone();
        request.extensions_mut().insert(peer);
        async move {
            let answer = router.call(request.map(Body::new));
            let response = match tokio::time::timeout(limits.request_timeout, answer).await {
                Ok(Ok(response)) => response,
                Ok(Err(never)) => match never {},
                Err(_) => timed_out(),
            };
            Ok::<_, Infallible>(response)
        }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => return,
        _ = evicted.cancelled() => {}
        _ = close.cancelled() => {}
    }
    // Idle, or still reading a head: closes now. A request in progress: after its answer.
    connection.as_mut().graceful_shutdown();
    let _ = connection.await;
}

fn timed_out() -> Response<Body> {
    let mut response = Response::new(Body::from("request timed out\n"));
    *response.status_mut() = StatusCode::REQUEST_TIMEOUT;
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Past the cap, admitting a connection asks the oldest ones to close.
    #[test]
    fn the_oldest_connection_is_evicted_at_the_cap() {
        let open = Open::default();
        let (first, first_token) = open.admit(2);
        let (_, second_token) = open.admit(2);
        assert!(!first_token.is_cancelled());
        let (_, third_token) = open.admit(2);
        assert!(first_token.is_cancelled());
        assert!(!second_token.is_cancelled() && !third_token.is_cancelled());
        open.remove(first);
        assert_eq!(open.inner.lock().1.len(), 2);
    }
}
