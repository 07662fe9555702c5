//! The listeners, bound before anything is served (a taken port stops the start), and the gRPC,
//! HTTP, metrics and admin servers on them, which stop accepting when `close` is cancelled.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::net::{TcpListener, UnixListener};
use tokio::runtime::Handle;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::UnixListenerStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::service::Routes;
use tonic::transport::server::TcpIncoming;
use tonic_health::pb::health_server::{Health as HealthApi, HealthServer};

use super::file_limit::SIDE_LISTENER_MAX_CONNECTIONS;
use super::grpc::{self, ConnectionAge};
use super::routes::GrpcRoutes;
use super::{AppError, MetricsListener, Settings, side};
use crate::admin::{self, AdminState, Tokens};
use crate::http::serve::ConnLimits;
use crate::http::{self, HealthCheck, HttpState};
use crate::insight::Insight;
use crate::keepalive;
use crate::limiter::Limiter;
use crate::metrics::ConnectionFigures;
use crate::rlqs::Rlqs;
use crate::service::RlsService;
use crate::service::rlqs::RlqsService;
use crate::telemetry::CallTracer;
use crate::tls::{ServerTls, TlsIncoming};

/// Every listener, bound.
pub(super) struct Listeners {
    grpc: GrpcListener,
    http: TcpListener,
    metrics: Option<(TcpListener, String)>,
    admin: Option<TcpListener>,
    /// The bound gRPC address (the real port when 0 was asked for; the unspecified address
    /// with port 0 when gRPC listens on a unix socket).
    pub grpc_addr: SocketAddr,
    /// The bound HTTP address.
    pub http_addr: SocketAddr,
    /// The bound metrics address, when metrics have a listener of their own.
    pub metrics_addr: Option<SocketAddr>,
    /// The bound admin address, when the admin listener is on.
    pub admin_addr: Option<SocketAddr>,
}

/// Where gRPC listens.
enum GrpcListener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

impl Listeners {
    /// Binds every listener `settings` asks for.
    pub(super) async fn bind(settings: &Settings) -> Result<Self, AppError> {
        let (grpc, grpc_addr) = match &settings.grpc_socket {
            Some(path) => (
                GrpcListener::Unix(bind_unix(path)?),
                SocketAddr::from(([0, 0, 0, 0], 0)),
            ),
            None => {
                let listener = bind(settings.grpc_addr)?;
                let addr = local_addr(&listener, settings.grpc_addr)?;
                (GrpcListener::Tcp(listener), addr)
            }
        };
        let http = bind(settings.http_addr)?;
        let http_addr = local_addr(&http, settings.http_addr)?;
        let (metrics, metrics_addr) = match &settings.metrics_listener {
            Some(MetricsListener { addr, path }) => {
                let listener = bind(*addr)?;
                let bound = local_addr(&listener, *addr)?;
                (Some((listener, path.clone())), Some(bound))
            }
            None => (None, None),
        };
        let (admin, admin_addr) = match &settings.admin {
            Some(admin) => {
                let listener = bind(admin.addr)?;
                let bound = local_addr(&listener, admin.addr)?;
                (Some(listener), Some(bound))
            }
            None => (None, None),
        };
        Ok(Self {
            grpc,
            http,
            metrics,
            admin,
            grpc_addr,
            http_addr,
            metrics_addr,
            admin_addr,
        })
    }
}

/// What the servers need besides their listeners and gRPC health.
#[derive(Clone)]
pub(super) struct Serving {
    /// Checks the calls of both servers.
    pub limiter: Arc<Limiter>,
    /// The RLQS service, on the gRPC listener beside RLS.
    pub rlqs: RlqsService,
    /// The RLQS wing, whose shares `/ui` shows.
    pub rlqs_wing: Rlqs,
    /// Live traffic figures (`/ui`), fed by both servers.
    pub insight: Arc<Insight>,
    /// Traces gRPC calls, when tracing is on.
    pub tracer: Option<CallTracer>,
    /// TLS on gRPC, when configured.
    pub tls: Option<ServerTls>,
    /// Health, as `/healthcheck` reports it.
    pub health: HealthCheck,
    /// gRPC connections are closed gracefully after about this age (±10 %, see `grpc`), then
    /// forcibly after the grace.
    pub connection_age: ConnectionAge,
    /// The most gRPC and HTTP connections open at once, within the file limit.
    pub caps: super::file_limit::Caps,
    /// The host names a browser may reach the HTTP listener by.
    pub hosts: Arc<http::guard::AllowedHosts>,
    /// The admin listener's tokens, when it is on.
    pub admin: Option<Tokens>,
    /// Cancelled when the listeners should stop accepting.
    pub close: CancellationToken,
    /// Cancelled at shutdown (the TLS acceptor stops on it).
    pub shutdown: CancellationToken,
}

/// Serves gRPC (plain, TLS or a unix socket), HTTP and metrics on `listeners` as tasks on
/// `tasks`.
pub(super) fn spawn(
    listeners: Listeners,
    serving: Serving,
    health: HealthServer<impl HealthApi>,
    tasks: &TaskTracker,
) -> Result<(), AppError> {
    let grpc = match (listeners.grpc, &serving.tls) {
        // Handshakes run in their own tasks (see tls::incoming).
        (GrpcListener::Tcp(listener), Some(tls)) => {
            GrpcIncoming::Tls(tls.incoming(listener, tasks, serving.shutdown.clone()))
        }
        // serve_with_incoming ignores the builder's tcp_nodelay (on by default), so set it here:
        // with Nagle on, small answers wait for the peer's delayed ACK.
        (GrpcListener::Tcp(listener), None) => {
            GrpcIncoming::Plain(TcpIncoming::from(listener).with_nodelay(Some(true)))
        }
        (GrpcListener::Unix(_), Some(_)) => return Err(AppError::TlsOnUnixSocket),
        (GrpcListener::Unix(listener), None) => {
            GrpcIncoming::Unix(UnixListenerStream::new(listener))
        }
    };
    tasks.spawn(serve_grpc(grpc, health, serving.clone(), tasks.clone()));
    // Every HTTP listener is served on the side runtime, below the gRPC calls' priority.
    let runtime = side::start(tasks.clone()).map_err(AppError::HttpRuntime)?;
    let side = ConnLimits {
        max_connections: SIDE_LISTENER_MAX_CONNECTIONS,
        ..ConnLimits::default()
    };
    if let Some((listener, path)) = listeners.metrics {
        let router = http::metrics_router(serving.limiter.clone(), &path);
        let listener = moved(listener, &runtime)?;
        let serve = serve_http(listener, router, side, None, serving.clone());
        tasks.spawn_on(serve, &runtime);
    }
    if let (Some(listener), Some(tokens)) = (listeners.admin, serving.admin.clone()) {
        let router = admin::router(AdminState {
            limiter: serving.limiter.clone(),
            tokens,
        });
        let listener = moved(listener, &runtime)?;
        let serve = serve_http(listener, router, side, None, serving.clone());
        tasks.spawn_on(serve, &runtime);
    }
    let router = http::router(HttpState {
        limiter: serving.limiter.clone(),
        insight: serving.insight.clone(),
        health: serving.health.clone(),
        rlqs: serving.rlqs_wing.clone(),
        hosts: serving.hosts.clone(),
    });
    let limits = ConnLimits {
        max_connections: serving.caps.http,
        ..ConnLimits::default()
    };
    let figures = Some(serving.limiter.metrics().http_connections());
    let listener = moved(listeners.http, &runtime)?;
    let serve = serve_http(listener, router, limits, figures, serving);
    tasks.spawn_on(serve, &runtime);
    Ok(())
}

/// The gRPC connections: plain TCP, TLS after the handshake, or a unix socket.
enum GrpcIncoming {
    Plain(TcpIncoming),
    Tls(TlsIncoming),
    Unix(UnixListenerStream),
}

async fn serve_grpc<H: HealthApi>(
    incoming: GrpcIncoming,
    health: HealthServer<H>,
    serving: Serving,
    tasks: TaskTracker,
) {
    let service = RlsService::new(
        serving.limiter.clone(),
        serving.insight.clone(),
        serving.tracer.clone(),
    );
    let others = Routes::new(health).add_service(serving.rlqs.clone().into_server());
    let routes = GrpcRoutes::new(service.into_server(), others);
    let lifetime = serving.connection_age;
    let cap = grpc::ConnectionCap {
        max: serving.caps.grpc,
        figures: serving.limiter.metrics().grpc_connections(),
    };
    let close = serving.close.clone();
    match incoming {
        GrpcIncoming::Plain(incoming) => {
            let incoming = incoming.map(|accepted| accepted.inspect(keepalive::detect_dead_peer));
            grpc::serve(incoming, routes, lifetime, cap, close, tasks).await
        }
        GrpcIncoming::Tls(incoming) => {
            grpc::serve(incoming, routes, lifetime, cap, close, tasks).await
        }
        GrpcIncoming::Unix(incoming) => {
            grpc::serve(incoming, routes, lifetime, cap, close, tasks).await
        }
    }
}

/// Serves `router` with bounded connections (a cap, header and request timeouts: see
/// `http::serve`), counted by `figures` if given.
async fn serve_http(
    listener: TcpListener,
    router: axum::Router,
    limits: ConnLimits,
    figures: Option<ConnectionFigures>,
    serving: Serving,
) {
    http::serve::serve(listener, router, limits, serving.close, figures).await;
}

/// `listener`, bound on the runtime that ran the start-up, registered with `runtime` instead, so
/// that its readiness is driven by the threads that serve it.
fn moved(listener: TcpListener, runtime: &Handle) -> Result<TcpListener, AppError> {
    let addr = local_addr(&listener, SocketAddr::from(([0, 0, 0, 0], 0)))?;
    let error = |error| AppError::Bind { addr, error };
    let std = listener.into_std().map_err(error)?;
    let _inside = runtime.enter();
    TcpListener::from_std(std).map_err(error)
}

/// Binds `addr`. The unspecified IPv6 address (`[::]`, envoyproxy/ratelimit's `HOST=::`) accepts
/// IPv4 connections too, whatever the system's default for IPv6 sockets.
fn bind(addr: SocketAddr) -> Result<TcpListener, AppError> {
    let error = |error| AppError::Bind { addr, error };
    let domain = socket2::Domain::for_address(addr);
    let socket = socket2::Socket::new(domain, socket2::Type::STREAM, None).map_err(error)?;
    if addr.is_ipv6() && addr.ip().is_unspecified() {
        socket.set_only_v6(false).map_err(error)?;
    }
    socket.set_reuse_address(true).map_err(error)?;
    socket.set_nonblocking(true).map_err(error)?;
    socket.bind(&addr.into()).map_err(error)?;
    socket.listen(1024).map_err(error)?;
    TcpListener::from_std(socket.into()).map_err(error)
}

/// Binds a unix socket at `path`, replacing a stale socket left by an earlier run (never any
/// other kind of file).
fn bind_unix(path: &Path) -> Result<UnixListener, AppError> {
    use std::os::unix::fs::FileTypeExt;
    let error = |error| AppError::BindUnix {
        path: PathBuf::from(path),
        error,
    };
    if let Ok(meta) = std::fs::symlink_metadata(path)
        && meta.file_type().is_socket()
    {
        std::fs::remove_file(path).map_err(error)?;
    }
    UnixListener::bind(path).map_err(error)
}

fn local_addr(listener: &TcpListener, addr: SocketAddr) -> Result<SocketAddr, AppError> {
    listener
        .local_addr()
        .map_err(|error| AppError::Bind { addr, error })
}
