//! gRPC serving: every accepted connection is served by hyper's HTTP/2 on a task of its own and
//! closed gracefully (GOAWAY) at its own jittered age, then forcibly once the grace has passed.
//!
//! Why not tonic's own server: it applies one `max_connection_age` to every connection (grpc-go,
//! and so envoyproxy/ratelimit, moves each connection's age by a random ±10 % so that connections
//! opened together do not close together), its grace replaces the graceful close by a hard one,
//! and without a grace it polls its finished age timer again and panics ("`async fn` resumed after
//! completion"). Serving each connection here keeps all three decisions in one place, and the
//! cap on open connections (`--grpc-max-connections`) with them.

use std::error::Error;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Semaphore;
use tokio_stream::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::routes::GrpcRoutes;
use crate::metrics::ConnectionFigures;

/// The most calls in flight on one connection (HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS`); Envoy
/// opens another connection when it needs more.
const MAX_STREAMS: u32 = 1024;
/// How long to pause accepting after an accept error that is not about one connection (out of
/// file descriptors, out of memory): retrying at once would spin until one is freed.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(250);
/// The least time between two warnings of refused connections (a flood must not flood the log).
const REFUSAL_WARNING_EVERY: Duration = Duration::from_secs(60);

/// How many connections may be open at once, and what counts them.
#[derive(Clone, Debug)]
pub(super) struct ConnectionCap {
    /// Past this many open connections a new one is closed as soon as it is accepted, so the
    /// established ones keep their file descriptors, memory and CPU.
    pub max: usize,
    /// Open and refused connections.
    pub figures: ConnectionFigures,
}

/// How long connections live.
#[derive(Clone, Copy, Debug)]
pub(super) struct ConnectionAge {
    /// Connections close gracefully after about this long (±10 %, drawn per connection).
    pub age: Duration,
    /// Then calls still in flight have this long before the connection is closed.
    pub grace: Duration,
}

impl ConnectionAge {
    /// This connection's age: `age` × a random factor in [0.9, 1.1).
    fn draw(&self) -> Duration {
        jittered(self.age, fastrand::f64())
    }
}

/// `age` × (0.9 + 0.2 × `fraction`), saturating (ages come from flags and may be huge).
fn jittered(age: Duration, fraction: f64) -> Duration {
    let factor = 0.9 + 0.2 * fraction.clamp(0.0, 1.0);
    Duration::try_from_secs_f64(age.as_secs_f64() * factor).unwrap_or(Duration::MAX)
}

/// Serves `routes` on every connection of `incoming`, each on a task of `tasks`, until `close` is
/// cancelled or `incoming` ends. Connections open at `close` finish their calls (GOAWAY first).
pub(super) async fn serve<S, IO, E>(
    incoming: S,
    routes: GrpcRoutes,
    lifetime: ConnectionAge,
    cap: ConnectionCap,
    close: CancellationToken,
    tasks: TaskTracker,
) where
    S: Stream<Item = Result<IO, E>>,
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    E: Into<Box<dyn Error + Send + Sync>>,
{
    let builder = builder();
    let slots = Arc::new(Semaphore::new(cap.max));
    let mut refusals = Refusals::default();
    let mut incoming = std::pin::pin!(incoming);
    loop {
        let next = tokio::select! {
            _ = close.cancelled() => break,
            next = incoming.next() => next,
        };
        match next {
            None => break,
            Some(Ok(io)) => {
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    // Dropping it closes it: the peer sees a reset and retries, or goes to
                    // another replica; the connections already open are not touched.
                    drop(io);
                    cap.figures.capped();
                    refusals.note(cap.max);
                    continue;
                };
                let figures = cap.figures.clone();
                figures.opened();
                let connection = serve_connection(
                    io,
                    routes.clone(),
                    builder.clone(),
                    lifetime.draw(),
                    lifetime.grace,
                    close.clone(),
                );
                tasks.spawn(async move {
                    connection.await;
                    figures.closed();
                    drop(slot);
                });
            }
            Some(Err(error)) => accept_failed(error.into()).await,
        }
    }
}

/// Warns of refused connections at most once a minute, with how many were refused since.
#[derive(Default)]
struct Refusals {
    last_warning: Option<std::time::Instant>,
    since: u64,
}

impl Refusals {
    fn note(&mut self, max: usize) {
        self.since += 1;
        let due = self
            .last_warning
            .is_none_or(|at| at.elapsed() >= REFUSAL_WARNING_EVERY);
        if due {
            tracing::warn!(
                max_connections = max,
                refused = self.since,
                "gRPC connection refused: --grpc-max-connections are open"
            );
            self.last_warning = Some(std::time::Instant::now());
            self.since = 0;
        }
    }
}

/// The HTTP/2 settings of every connection. No HTTP/2 keepalive: hyper's PING timer is checked
/// on every poll of the connection (~850 instructions a call); dead peers are found by the
/// kernel instead (`keepalive.rs`, set on each TCP connection as it is accepted).
fn builder() -> http2::Builder<TokioExecutor> {
    let mut builder = http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_STREAMS);
    builder
}

/// Serves one connection until the peer closes it, it reaches `age` or `close` is cancelled;
/// then asks the peer to go away and lets calls in flight finish, for at most `grace` when the
/// connection aged out (at shutdown the shutdown grace bounds every task).
async fn serve_connection<IO>(
    io: IO,
    routes: GrpcRoutes,
    builder: http2::Builder<TokioExecutor>,
    age: Duration,
    grace: Duration,
    close: CancellationToken,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let connection = builder.serve_connection(TokioIo::new(io), TowerToHyperService::new(routes));
    let mut connection = std::pin::pin!(connection);
    let aged_out = tokio::select! {
        served = connection.as_mut() => return log_end(served),
        _ = tokio::time::sleep(age) => true,
        _ = close.cancelled() => false,
    };
    connection.as_mut().graceful_shutdown();
    if !aged_out {
        return log_end(connection.await);
    }
    match tokio::time::timeout(grace, connection).await {
        Ok(served) => log_end(served),
        // Dropping the connection closes it, and with it the calls that outlived the grace.
        Err(_) => tracing::debug!(?grace, "gRPC connection closed: past its age and grace"),
    }
}

fn log_end(served: Result<(), hyper::Error>) {
    if let Err(error) = served {
        tracing::debug!(%error, "gRPC connection ended with an error");
    }
}

/// An accept error: one about a single connection (reset or aborted before it was accepted) is
/// skipped; any other (no file descriptors or memory left) pauses accepting briefly.
async fn accept_failed(error: Box<dyn Error + Send + Sync>) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset, Interrupted};
    let kind = error.downcast_ref::<std::io::Error>().map(|e| e.kind());
    if matches!(
        kind,
        Some(ConnectionAborted | ConnectionRefused | ConnectionReset | Interrupted)
    ) {
        tracing::debug!(%error, "gRPC connection failed before it was accepted");
        return;
    }
    tracing::warn!(%error, backoff = ?ACCEPT_BACKOFF, "accepting gRPC connections failed");
    tokio::time::sleep(ACCEPT_BACKOFF).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ages cover ±10 % of the configured age and never overflow.
    #[test]
    fn ages_spread_over_ten_percent() {
        let day = Duration::from_secs(86_400);
        assert_eq!(jittered(day, 0.0), day.mul_f64(0.9));
        assert_eq!(jittered(day, 0.5), day);
        assert!(jittered(day, 0.999_999) < day.mul_f64(1.1));
        assert_eq!(jittered(Duration::MAX, 0.9), Duration::MAX);
        for _ in 0..1000 {
            let drawn = ConnectionAge {
                age: day,
                grace: Duration::ZERO,
            }
            .draw();
            assert!(drawn >= day.mul_f64(0.9) && drawn < day.mul_f64(1.1));
        }
    }
}
