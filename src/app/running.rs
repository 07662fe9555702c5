//! A started server's handle: its bound addresses, its rule loader, and its shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admin::Tokens;
use crate::telemetry::CallTracer;

use super::parts::Parts;
use super::store::StoreHandle;
use super::{AppError, FileReload, Reloader, ServerTls, shutdown};

/// Longest wait for the trace exporter's last export at shutdown.
const TRACE_FLUSH: Duration = Duration::from_secs(5);

/// A started server.
pub struct Running {
    /// The bound gRPC address.
    pub grpc_addr: SocketAddr,
    /// The bound HTTP address.
    pub http_addr: SocketAddr,
    /// The unix socket gRPC listens on instead of `grpc_addr`, if any.
    pub grpc_socket: Option<std::path::PathBuf>,
    /// The bound address of the separate metrics listener, if any.
    pub metrics_addr: Option<SocketAddr>,
    /// The bound address of the admin listener, if any.
    pub admin_addr: Option<SocketAddr>,
    /// Cancel to shut down.
    pub shutdown: CancellationToken,
    /// The rule loader (its generation tells how many rule sets have loaded).
    pub reloader: Arc<Reloader>,
    /// The live TLS state (reload status), when serving TLS.
    pub tls: Option<ServerTls>,
    admin: Option<Tokens>,
    tasks: TaskTracker,
    store: StoreHandle,
    grace: Duration,
    delay: Duration,
    tracer: Option<CallTracer>,
}

/// The bound addresses, as `Running` reports them (the ports the OS chose for port 0).
pub(super) struct Addrs {
    pub(super) grpc: SocketAddr,
    pub(super) http: SocketAddr,
    pub(super) metrics: Option<SocketAddr>,
    pub(super) admin: Option<SocketAddr>,
}

/// The handle of a launched server: what `Running::wait` and `Running::stop` need.
pub(super) fn running(
    parts: Parts,
    addrs: Addrs,
    shutdown: CancellationToken,
    tasks: TaskTracker,
    tracer: Option<CallTracer>,
) -> Running {
    Running {
        grpc_addr: addrs.grpc,
        http_addr: addrs.http,
        grpc_socket: parts.settings.grpc_socket.clone(),
        metrics_addr: addrs.metrics,
        admin_addr: addrs.admin,
        shutdown,
        reloader: parts.reloader,
        tls: parts.tls,
        admin: parts.admin,
        tasks,
        store: StoreHandle::start(parts.store, parts.clock, parts.metrics),
        grace: parts.settings.shutdown_grace,
        delay: parts.settings.shutdown_delay,
        tracer,
    }
}

impl Running {
    /// A handle that re-reads the rule, TLS and admin token files on request (SIGHUP).
    pub fn file_reload(&self) -> FileReload {
        FileReload {
            reloader: self.reloader.clone(),
            tls: self.tls.clone(),
            admin: self.admin.clone(),
        }
    }

    /// Waits until shutdown is requested, then for in-flight calls to finish (bounded by the
    /// shutdown delay plus the grace period) and the store's last flush. (Neither server fails
    /// as a whole: a connection's error ends that connection only.)
    pub async fn wait(self) -> Result<(), AppError> {
        self.shutdown.cancelled().await;
        shutdown::finish(self.tasks, self.store, self.delay, self.grace).await;
        if let Some(tracer) = self.tracer {
            // The last spans are exported before the process ends (bounded: a collector that
            // is down must not hold up the exit).
            let _ = tokio::task::spawn_blocking(move || tracer.shutdown(TRACE_FLUSH)).await;
        }
        Ok(())
    }

    /// Requests shutdown and waits for it.
    pub async fn stop(self) -> Result<(), AppError> {
        self.shutdown.cancel();
        self.wait().await
    }
}
