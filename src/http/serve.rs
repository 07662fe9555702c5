//! The HTTP listener's connections, bounded in number and in time, so idle or slow clients
//! cannot take the file descriptors gRPC and `/healthcheck` need.
//!
//! - At most [`MAX_CONNECTIONS`] (`--http-max-connections`) are open, and one more while it
//!   closes. A new connection past the cap is still accepted (a probe must get through) and
//!   the oldest one is asked to close: at once if it sits idle or is still sending its request
//!   head, after its response if a request is in progress. A connection still closing when the
//!   cap is full again is cut, whatever it was doing: clients that send a body slowly cannot
//!   hold more descriptors than the cap, the process's file limit is never reached through
//!   this listener.
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

use crate::metrics::ConnectionFigures;

/// The most HTTP connections open at once by default (probes, scrapes and `/json` clients
/// need few).
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
/// progress finish (idle connections close at once) and returns. `figures` counts the
/// connections (the HTTP listener's; the side listeners' are not counted).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnLimits,
    close: CancellationToken,
    figures: Option<ConnectionFigures>,
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
        let (id, ends, evicted) = open.admit(limits.max_connections);
        let connection = serve_connection(
            (stream, Peer(peer)),
            router.clone(),
            limits,
            ends,
            close.clone(),
        );
        let open = open.clone();
        let figures = figures.clone();
        if let Some(figures) = &figures {
            figures.opened();
            (0..evicted).for_each(|_| figures.capped());
        }
        tasks.spawn(async move {
            connection.await;
            open.remove(id);
            if let Some(figures) = figures {
                figures.closed();
            }
        });
    }
    drop(listener);
    tasks.close();
    tasks.wait().await;
}

/// The connections that hold a descriptor, by accept order.
#[derive(Default)]
struct Open {
    inner: Mutex<(u64, BTreeMap<u64, Ends>)>,
}

/// How a connection is ended early: asked to close (after a request in progress), or cut.
#[derive(Clone, Default)]
struct Ends {
    close: CancellationToken,
    cut: CancellationToken,
}

impl Open {
    /// Registers a new connection; returns its id, its ends and how many connections were
    /// asked to close for it. At `max`, a connection already asked to close is cut; else the
    /// oldest is asked to close (and this one is let in: one over the cap until it has).
    fn admit(&self, max: usize) -> (u64, Ends, usize) {
        let mut inner = self.inner.lock();
        let (next, open) = &mut *inner;
        let mut evicted = 0;
        while open.len() >= max.max(1) {
            let closing = open.iter().find(|(_, e)| e.close.is_cancelled());
            if let Some(id) = closing.map(|(id, _)| *id) {
                if let Some(ends) = open.remove(&id) {
                    ends.cut.cancel();
                }
                continue;
            }
            if let Some((_, oldest)) = open.first_key_value() {
                oldest.close.cancel();
                evicted += 1;
            }
            break;
        }
        let id = *next;
        *next += 1;
        let ends = Ends::default();
        open.insert(id, ends.clone());
        (id, ends, evicted)
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
    ends: Ends,
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
        _ = ends.close.cancelled() => {}
        _ = ends.cut.cancelled() => return,
        _ = close.cancelled() => {}
    }
    // Idle, or still reading a head: closes now. A request in progress: after its answer,
    // unless it is cut first (dropping the connection closes its socket).
    connection.as_mut().graceful_shutdown();
    tokio::select! {
        _ = connection => {}
        _ = ends.cut.cancelled() => {}
    }
}

fn timed_out() -> Response<Body> {
    let mut response = Response::new(Body::from("request timed out\n"));
    *response.status_mut() = StatusCode::REQUEST_TIMEOUT;
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Past the cap, admitting a connection asks the oldest to close; if it is still open at
    /// the next admission it is cut, so at most one over the cap holds a descriptor.
    #[test]
    fn the_oldest_connection_is_evicted_then_cut_at_the_cap() {
        let open = Open::default();
        let (_, first, _) = open.admit(2);
        let (_, second, _) = open.admit(2);
        assert!(!first.close.is_cancelled());
        let (_, third, evicted) = open.admit(2);
        assert_eq!(evicted, 1);
        assert!(first.close.is_cancelled() && !first.cut.is_cancelled());
        assert!(!second.close.is_cancelled() && !third.close.is_cancelled());
        assert_eq!(
            open.inner.lock().1.len(),
            3,
            "one over the cap while it closes"
        );
        // The first is still open (a slow body): the next connection cuts it.
        let (_, _, evicted) = open.admit(2);
        assert!(first.cut.is_cancelled());
        assert!(second.close.is_cancelled() && !second.cut.is_cancelled());
        assert_eq!(evicted, 1);
        assert_eq!(open.inner.lock().1.len(), 3);
        for _ in 0..100 {
            open.admit(2);
        }
        assert_eq!(open.inner.lock().1.len(), 3, "never more");
    }
}
