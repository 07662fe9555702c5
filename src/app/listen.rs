//! The two listeners, bound before anything is served (a taken port stops the start), and the
//! gRPC and HTTP servers on them, which stop accepting when `close` is cancelled.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::transport::server::TcpIncoming;
use tonic_health::pb::health_server::{Health as HealthApi, HealthServer};

use super::AppError;
use crate::http::{self, HttpState};
use crate::limiter::Limiter;
use crate::service::RlsService;
use crate::tls::{ServerTls, TlsIncoming};

/// Both listeners, bound.
pub(super) struct Listeners {
    grpc: TcpListener,
    http: TcpListener,
    /// The bound gRPC address (the real port when 0 was asked for).
    pub grpc_addr: SocketAddr,
    /// The bound HTTP address.
    pub http_addr: SocketAddr,
}

impl Listeners {
    /// Binds both addresses.
    pub(super) async fn bind(grpc: SocketAddr, http: SocketAddr) -> Result<Self, AppError> {
        let (grpc_listener, http_listener) = (bind(grpc).await?, bind(http).await?);
        Ok(Self {
            grpc_addr: local_addr(&grpc_listener, grpc)?,
            http_addr: local_addr(&http_listener, http)?,
            grpc: grpc_listener,
            http: http_listener,
        })
    }
}

/// What the servers need besides their listeners and gRPC health.
#[derive(Clone)]
pub(super) struct Serving {
    /// Decides the calls of both servers.
    pub limiter: Arc<Limiter>,
    /// TLS on gRPC, when configured.
    pub tls: Option<ServerTls>,
    /// Set when shutdown begins: `/healthcheck` answers 503.
    pub draining: Arc<AtomicBool>,
    /// Cancelled when the listeners should stop accepting.
    pub close: CancellationToken,
    /// Cancelled to request shutdown (a server that fails does).
    pub shutdown: CancellationToken,
    /// Where a failing server reports why.
    pub failures: UnboundedSender<AppError>,
}

/// Serves gRPC (plain or TLS) and HTTP on `listeners` as tasks on `tasks`.
pub(super) fn spawn(
    listeners: Listeners,
    serving: Serving,
    health: HealthServer<impl HealthApi>,
    tasks: &TaskTracker,
) {
    let grpc = match &serving.tls {
        // Handshakes run in their own tasks (see tls::incoming).
        Some(tls) => {
            GrpcIncoming::Tls(tls.incoming(listeners.grpc, tasks, serving.shutdown.clone()))
        }
        // serve_with_incoming ignores the builder's tcp_nodelay (on by default), so set it here:
        // with Nagle on, small answers wait for the peer's delayed ACK.
        None => GrpcIncoming::Plain(TcpIncoming::from(listeners.grpc).with_nodelay(Some(true))),
    };
    tasks.spawn(serve_grpc(grpc, health, serving.clone()));
    tasks.spawn(serve_http(listeners.http, serving));
}

/// The gRPC connections: plain TCP, or TLS after the handshake.
enum GrpcIncoming {
    Plain(TcpIncoming),
    Tls(TlsIncoming),
}

/// gRPC keepalive: a PING after this long without frames...
const GRPC_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// ...must be answered within this long, or the connection is closed (a peer that vanished
/// without a FIN does not keep its connection, and its file descriptor, forever).
const GRPC_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// The most calls in flight on one gRPC connection (HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS`);
/// Envoy opens another connection when it needs more.
const GRPC_MAX_STREAMS: u32 = 1024;

async fn serve_grpc(
    incoming: GrpcIncoming,
    health: HealthServer<impl HealthApi>,
    serving: Serving,
) {
    let router = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(GRPC_KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(GRPC_KEEPALIVE_TIMEOUT))
        .max_concurrent_streams(GRPC_MAX_STREAMS)
        .add_service(health)
        .add_service(RlsService::new(serving.limiter.clone()).into_server());
    let close = serving.close.cancelled_owned();
    let served = match incoming {
        GrpcIncoming::Plain(incoming) => router.serve_with_incoming_shutdown(incoming, close).await,
        GrpcIncoming::Tls(incoming) => router.serve_with_incoming_shutdown(incoming, close).await,
    };
    if let Err(e) = served {
        let _ = serving.failures.send(AppError::Grpc(e));
        serving.shutdown.cancel();
    }
}

async fn serve_http(listener: TcpListener, serving: Serving) {
    let router = http::router(HttpState {
        limiter: serving.limiter,
        draining: serving.draining,
    });
    // Bounded connections (a cap, header and request timeouts): see http::serve.
    http::serve::serve(listener, router, Default::default(), serving.close).await;
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, AppError> {
    TcpListener::bind(addr)
        .await
        .map_err(|error| AppError::Bind { addr, error })
}

fn local_addr(listener: &TcpListener, addr: SocketAddr) -> Result<SocketAddr, AppError> {
    listener
        .local_addr()
        .map_err(|error| AppError::Bind { addr, error })
}
