//! The TLS connection stream for tonic: an accept loop that hands each TCP connection to its own
//! handshake task (bounded by a timeout), and yields the connections whose handshake succeeded.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::ServerTls;
use crate::keepalive;

/// The longest a client may take to complete its handshake before the connection is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// The pause after a failed accept (e.g. out of file descriptors), so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// Established connections waiting for tonic to pick them up.
const QUEUE: usize = 64;

/// Established TLS connections, for `Server::serve_with_incoming_shutdown`.
///
/// Never yields an error: failed handshakes are logged and dropped, so one bad client cannot
/// stop the server. Ends when shutdown is requested.
#[derive(Debug)]
pub struct TlsIncoming {
    established: mpsc::Receiver<TlsStream<TcpStream>>,
}

impl tokio_stream::Stream for TlsIncoming {
    type Item = Result<TlsStream<TcpStream>, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.established.poll_recv(cx).map(|next| next.map(Ok))
    }
}

pub(super) fn spawn(
    tls: ServerTls,
    listener: TcpListener,
    tasks: &TaskTracker,
    shutdown: CancellationToken,
) -> TlsIncoming {
    let (sender, established) = mpsc::channel(QUEUE);
    tasks.spawn(accept_loop(tls, listener, sender, tasks.clone(), shutdown));
    TlsIncoming { established }
}

async fn accept_loop(
    tls: ServerTls,
    listener: TcpListener,
    established: mpsc::Sender<TlsStream<TcpStream>>,
    tasks: TaskTracker,
    shutdown: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "gRPC accept failed");
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep(ACCEPT_BACKOFF) => continue,
                }
            }
        };
        // Small gRPC frames must not wait for Nagle's algorithm.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "cannot set TCP_NODELAY");
        }
        keepalive::detect_dead_peer(&tcp);
        // The configuration current now: a reload applies to connections accepted after it.
        let acceptor = TlsAcceptor::from(tls.config());
        tasks.spawn(handshake(
            acceptor,
            tcp,
            peer,
            established.clone(),
            shutdown.clone(),
        ));
    }
}

async fn handshake(
    acceptor: TlsAcceptor,
    tcp: TcpStream,
    peer: SocketAddr,
    established: mpsc::Sender<TlsStream<TcpStream>>,
    shutdown: CancellationToken,
) {
    let stream = tokio::select! {
        _ = shutdown.cancelled() => return,
        done = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)) => match done {
            Ok(Ok(stream)) => stream,
            // Debug level: scanners and misconfigured clients must not flood the log.
            Ok(Err(e)) => {
                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                return;
            }
            Err(_) => {
                tracing::debug!(%peer, timeout = ?HANDSHAKE_TIMEOUT, "TLS handshake timed out");
                return;
            }
        },
    };
    tokio::select! {
        _ = shutdown.cancelled() => {}
        // An Err means the server stopped listening: the connection is simply dropped.
        _ = established.send(stream) => {}
    }
}
