//! gRPC connection age with per-connection jitter and a grace period, on top of tonic.
//!
//! tonic closes connections gracefully after one `max_connection_age` for the whole server,
//! while grpc-go (envoyproxy/ratelimit) moves each connection's age by a random ±10 % so that
//! connections opened together do not close together; and tonic's `max_connection_age_grace`,
//! once set, replaces the graceful close by a hard one at age + grace. So: accepted connections
//! are dealt round-robin to [`LANES`] tonic servers whose ages are spread evenly over ±10 %
//! (from a random offset drawn once per process), each closing its connections gracefully
//! (GOAWAY) at its age; and each connection is wrapped in [`Aged`], which fails its I/O once
//! age + grace has passed, the hard limit for calls that do not finish.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};
use tonic::transport::server::Connected;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How many servers the connections are dealt to.
pub(super) const LANES: usize = 8;

/// Accepted connections waiting for their lane's server.
const QUEUE: usize = 16;

/// The age of each lane: `age` × 0.9 … 1.1, evenly spread, shifted by a random offset.
pub(super) fn ages(age: Duration) -> Vec<Duration> {
    ages_from(age, random_fraction())
}

fn ages_from(age: Duration, offset: f64) -> Vec<Duration> {
    (0..LANES)
        .map(|lane| age.mul_f64(0.9 + 0.2 * (lane as f64 + offset) / LANES as f64))
        .collect()
}

/// A random number in [0, 1), from the standard library's randomly keyed hasher (no RNG crate
/// for one draw).
fn random_fraction() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    (random >> 11) as f64 / (1u64 << 53) as f64
}

/// Deals the connections of `incoming` round-robin to [`LANES`] streams, each wrapped to fail
/// once `limits[lane]` has passed, until `close` is cancelled or `incoming` ends (the dealer runs
/// as a task on `tasks`). Accept errors go to the next lane, for its server to handle.
pub(super) fn deal<S, IO, E>(
    incoming: S,
    limits: Vec<Duration>,
    close: CancellationToken,
    tasks: &TaskTracker,
) -> Vec<ReceiverStream<Result<Aged<IO>, E>>>
where
    S: Stream<Item = Result<IO, E>> + Send + 'static,
    IO: Send + 'static,
    E: Send + 'static,
{
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..LANES).map(|_| mpsc::channel(QUEUE)).unzip();
    tasks.spawn(async move {
        let mut incoming = std::pin::pin!(incoming);
        for lane in (0..LANES).cycle() {
            let next = tokio::select! {
                _ = close.cancelled() => break,
                next = incoming.next() => next,
            };
            let Some(accepted) = next else { break };
            let connection = accepted.map(|io| Aged::new(io, limits[lane]));
            if senders[lane].send(connection).await.is_err() {
                break;
            }
        }
    });
    receivers.into_iter().map(ReceiverStream::new).collect()
}

/// A connection whose reads and writes fail once its time is up, which closes it.
pub(super) struct Aged<IO> {
    io: IO,
    deadline: Pin<Box<Sleep>>,
}

impl<IO> Aged<IO> {
    fn new(io: IO, limit: Duration) -> Self {
        // Saturating: the limit comes from flags, and no sum of them may panic.
        let at = Instant::now()
            .checked_add(limit)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(100 * 365 * 86_400));
        Self {
            io,
            deadline: Box::pin(tokio::time::sleep_until(at)),
        }
    }

    /// An error once the deadline has passed (the caller is woken when it does).
    fn expired(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        self.deadline.as_mut().poll(cx).is_ready().then(|| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                "connection closed: past its maximum age and grace",
            )
        })
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Aged<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(error) = self.expired(cx) {
            return Poll::Ready(Err(error));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Aged<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if let Some(error) = self.expired(cx) {
            return Poll::Ready(Err(error));
        }
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl<IO: Connected> Connected for Aged<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lanes' ages cover ±10 % of the age evenly, whatever the offset.
    #[test]
    fn ages_spread_over_ten_percent() {
        let day = Duration::from_secs(86_400);
        for offset in [0.0, 0.5, 0.999] {
            let ages = ages_from(day, offset);
            assert_eq!(ages.len(), LANES);
            assert!(ages.windows(2).all(|w| w[0] < w[1]), "{ages:?}");
            assert!(ages[0] >= day.mul_f64(0.9) && ages[LANES - 1] < day.mul_f64(1.1));
        }
        assert!((0.0..1.0).contains(&random_fraction()));
    }

    /// Consecutive connections go to consecutive lanes, and every lane ends when the input does.
    #[tokio::test]
    async fn deals_round_robin() {
        let tasks = TaskTracker::new();
        let accepted = (0..LANES * 2).map(Ok::<usize, ()>);
        let limits = vec![Duration::from_secs(1); LANES];
        let lanes = deal(
            tokio_stream::iter(accepted),
            limits,
            CancellationToken::new(),
            &tasks,
        );
        for (lane, stream) in lanes.into_iter().enumerate() {
            let items: Vec<usize> = stream.map(|c| c.unwrap().io).collect().await;
            assert_eq!(items, [lane, lane + LANES]);
        }
    }

    /// Past its limit a connection's reads and writes fail (on a paused clock: no sleeping).
    #[tokio::test(start_paused = true)]
    async fn aged_connection_fails_after_its_limit() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (ours, mut theirs) = tokio::io::duplex(64);
        let mut aged = Aged::new(ours, Duration::from_secs(10));
        theirs.write_all(b"x").await.unwrap();
        let mut byte = [0u8; 1];
        aged.read_exact(&mut byte).await.unwrap();
        tokio::time::advance(Duration::from_secs(11)).await;
        let error = aged.read(&mut byte).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert!(aged.write(b"y").await.is_err());
    }
}
