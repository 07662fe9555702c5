//! The composition root: builds the store, the rules, the limiter and both servers from
//! [`Settings`], serves until shutdown, and owns the shutdown sequence (one cancellation token
//! for every task).
//!
//! [`start`] loads the rules ([`Reloader::load`], or with an xDS source [`Reloader::pending`]
//! until the control plane sends them) and the certificates, builds the store (`store::build`)
//! and the [`Limiter`], binds both listeners (`listen::Listeners::bind`) and spawns the tasks:
//! the gRPC and HTTP servers (`listen::spawn`), the rule watcher or the xDS client, the
//! certificate watcher, the store's background work, housekeeping (`tasks::sweep`), the statsd
//! sink (`statsd::run`), gRPC health
//! (`health::follow_store`) and the shutdown sequence (`shutdown`). [`Running::wait`] returns once
//! the server has stopped and the store's last flush has run.

pub mod defaults;
mod file_reload;
mod grpc;
mod health;
mod listen;
mod routes;
mod settings;
mod shutdown;
mod store;
mod tasks;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admin::Tokens;
use crate::clock::Clock;
use crate::insight::Insight;
use crate::limiter::Limiter;
use crate::metrics::Metrics;
use crate::quota::{Portion, QuotaBook, QuotaExchange, SharedPortions, WholeLimit};
use crate::rules::ConfigErrors;
use crate::service::quota::QuotaService;
use crate::store::persist::PersistError;
use crate::store::{Store, StoreError};
use crate::telemetry::{CallTracer, TraceError};
use crate::tls::TlsError;
use crate::xds::{XdsError, XdsSource};

/// Longest wait for the trace exporter's last export at shutdown.
const TRACE_FLUSH: Duration = Duration::from_secs(5);

pub use self::file_reload::FileReload;
pub use self::settings::{
    AdminSettings, HealthOptions, MemorySettings, MetricsListener, Settings, StoreSettings,
};
pub use crate::admin::TokenError as AdminTokenError;
pub use crate::reload::{Reloader, RuleSource, WatchError};
pub use crate::statsd::mapper::MapperError;
pub use crate::statsd::{Mogrifier, MogrifierError, StatsdFormat, StatsdProtocol, StatsdSettings};
pub use crate::tls::{ReloadOutcome, ServerTls, TlsSettings, TlsStatus};
pub use crate::xds::{Backoff, XdsSettings, XdsTls};

use self::listen::{Listeners, Serving};
use self::shutdown::Lifecycle;
use self::store::StoreHandle;

/// Why the server could not start or stopped badly. Each message holds its cause, so no
/// variant is also a `source`: `main` prints the error chain, which would print it twice.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The rules did not load.
    #[error("rules did not load:\n{0}")]
    Config(ConfigErrors),
    /// The rule files could not be watched.
    #[error(transparent)]
    Watch(#[from] WatchError),
    /// A listener could not be bound.
    #[error("cannot listen on {addr}: {error}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        error: std::io::Error,
    },
    /// The gRPC unix socket could not be bound.
    #[error("cannot listen on unix socket {}: {error}", path.display())]
    BindUnix {
        /// The socket's path.
        path: std::path::PathBuf,
        /// The cause.
        error: std::io::Error,
    },
    /// TLS was asked for on a unix socket, which sluice serves in plaintext only.
    #[error("gRPC TLS is not served on a unix socket: use a TCP address, or no TLS")]
    TlsOnUnixSocket,
    /// The TLS certificates did not load or cannot be watched. Not a `source`: the message
    /// already holds the cause, and an error chain would print it twice.
    #[error("TLS: {0}")]
    Tls(TlsError),
    /// The xDS rule source is misconfigured (address, headers, TLS files).
    #[error("{0}")]
    Xds(XdsError),
    /// The data directory could not be opened or locked.
    #[error(transparent)]
    Persist(#[from] PersistError),
    /// The counter store is misconfigured (a bad Redis URL or key prefix).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A start-up task (restoring the embedded store) panicked or was cancelled.
    #[error("start-up task failed: {0}")]
    Task(tokio::task::JoinError),
    /// The statsd_exporter mapping file did not load (its error names file:line:column).
    #[error("prometheus mapper: {0}")]
    Mapper(crate::statsd::mapper::MapperError),
    /// Tracing was asked for but its exporter could not be built.
    #[error(transparent)]
    Tracing(#[from] TraceError),
    /// The admin listener's token file cannot be used (or watched).
    #[error(transparent)]
    Admin(#[from] AdminTokenError),
}

impl From<ConfigErrors> for AppError {
    fn from(errors: ConfigErrors) -> Self {
        Self::Config(errors)
    }
}

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

/// Loads the rules, builds the store `settings.store` asks for (restoring the embedded store's
/// counters before the listeners open), binds both listeners and serves in the background.
pub async fn start(settings: Settings, clock: Arc<dyn Clock>) -> Result<Running, AppError> {
    start_inner(settings, clock, None).await
}

/// As [`start`], counting in `store` instead of the one `settings.store` describes (tests use
/// this for a store they control).
pub async fn start_with_store(
    settings: Settings,
    clock: Arc<dyn Clock>,
    store: Arc<dyn Store>,
) -> Result<Running, AppError> {
    start_inner(settings, clock, Some(store)).await
}

/// The parts of a server, built and checked before anything is served.
struct Parts {
    settings: Settings,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    reloader: Arc<Reloader>,
    xds: Option<XdsSource>,
    tls: Option<ServerTls>,
    store: Arc<dyn Store>,
    limiter: Arc<Limiter>,
    quota: Arc<QuotaBook>,
    /// On a store replicas share: where they split quota limits, and this replica's portions.
    replicas: Option<(Arc<dyn QuotaExchange>, Arc<SharedPortions>)>,
    /// The admin listener's tokens, when it is on.
    admin: Option<Tokens>,
}

/// Builds every part in the order that reports the likeliest mistake first: rules,
/// certificates, then the store (which may take a while to restore), then the listeners.
async fn start_inner(
    settings: Settings,
    clock: Arc<dyn Clock>,
    store: Option<Arc<dyn Store>>,
) -> Result<Running, AppError> {
    let metrics = Arc::new(Metrics::new(
        settings.near_limit_ratio,
        settings.max_metric_series,
    ));
    if let Some(path) = &settings.prometheus_mapper {
        let mapper = crate::statsd::mapper::Mapper::load(path).map_err(AppError::Mapper)?;
        metrics.expose_upstream_with(Arc::new(mapper));
    }
    let xds = (settings.xds.clone())
        .map(|xds| XdsSource::new(xds, settings.load))
        .transpose()
        .map_err(AppError::Xds)?;
    let source = match &settings.runtime {
        Some(layout) => RuleSource::Runtime(layout.clone()),
        None => RuleSource::Files(settings.config.clone()),
    };
    // Rules from xDS arrive once the stream is up; rule files load now.
    let reloader = Arc::new(match &xds {
        Some(xds) => Reloader::pending(metrics.clone(), xds.force_start()),
        None if settings.rules_required => Reloader::load(source, settings.load, metrics.clone())?,
        None => Reloader::load_or_wait(source, settings.load, metrics.clone()),
    });
    let tls = (settings.tls.clone().map(ServerTls::load).transpose()).map_err(AppError::Tls)?;
    // No admin listener without a token that opens it.
    let admin = (settings.admin.as_ref())
        .map(|admin| Tokens::load(&admin.token_file))
        .transpose()?;
    let store = match store {
        Some(store) => store,
        None => store::build(&settings.store, clock.now()).await?,
    };
    // Publish what was restored before anyone can scrape /metrics.
    store::publish(&metrics, store.as_ref());
    let limiter = Arc::new(Limiter::new(
        reloader.rules(),
        store.clone(),
        clock.clone(),
        settings.limiter.clone(),
        metrics.clone(),
    ));
    let replicas = store
        .quota_exchange()
        .map(|exchange| (exchange, Arc::new(SharedPortions::default())));
    let portion: Arc<dyn Portion> = match &replicas {
        Some((_, portions)) => portions.clone(),
        None => Arc::new(WholeLimit),
    };
    let quota = Arc::new(QuotaBook::new(clock.clone(), portion));
    let tracer = settings.tracing.as_ref().map(CallTracer::new).transpose()?;
    let listeners = Listeners::bind(&settings).await?;
    let parts = Parts {
        settings,
        clock,
        metrics,
        reloader,
        xds,
        tls,
        store,
        limiter,
        quota,
        replicas,
        admin,
    };
    launch(parts, listeners, tracer).await
}

/// Spawns every task of a server on one tracker, all stopping on one shutdown token.
async fn launch(
    mut parts: Parts,
    listeners: Listeners,
    tracer: Option<CallTracer>,
) -> Result<Running, AppError> {
    let insight = Arc::new(Insight::default());
    let (grpc_addr, http_addr) = (listeners.grpc_addr, listeners.http_addr);
    let (metrics_addr, admin_addr) = (listeners.metrics_addr, listeners.admin_addr);
    let lifecycle = Lifecycle::default();
    let shutdown = lifecycle.requested.clone();
    let tasks = TaskTracker::new();
    spawn_background(&mut parts, &tasks, &insight, &shutdown)?;
    let readiness = readiness(&parts, &lifecycle);
    let serving_now = readiness.check().is_ok();
    let (health, health_service) = health::Health::new(serving_now).await;
    tasks.spawn(health::follow(
        readiness.clone(),
        health.clone(),
        serving_now,
        shutdown.clone(),
    ));
    let delay = parts.settings.shutdown_delay;
    tasks.spawn(shutdown::announce_then_close(
        lifecycle.clone(),
        health,
        delay,
    ));
    let serving = Serving {
        limiter: parts.limiter.clone(),
        quota: QuotaService::new(
            parts.quota.clone(),
            parts.reloader.rules(),
            parts.metrics.clone(),
            tracer.clone(),
        ),
        insight,
        tracer: tracer.clone(),
        tls: parts.tls.clone(),
        health: Arc::new(move || readiness.check()),
        connection_age: grpc::ConnectionAge {
            age: parts.settings.grpc_max_connection_age,
            grace: parts.settings.grpc_max_connection_age_grace,
        },
        grpc_max_connections: parts.settings.grpc_max_connections,
        admin: parts.admin.clone(),
        close: lifecycle.close,
        shutdown: shutdown.clone(),
    };
    listen::spawn(listeners, serving, health_service, &tasks)?;
    tasks.close();
    let addrs = Addrs {
        grpc: grpc_addr,
        http: http_addr,
        metrics: metrics_addr,
        admin: admin_addr,
    };
    Ok(running(parts, addrs, shutdown, tasks, tracer))
}

/// The work that runs beside the servers: the certificate watcher, the xDS client or the rule
/// watcher, the store's own background work and housekeeping.
fn spawn_background(
    parts: &mut Parts,
    tasks: &TaskTracker,
    insight: &Arc<Insight>,
    shutdown: &CancellationToken,
) -> Result<(), AppError> {
    if let Some(tls) = &parts.tls {
        tls.watch(tasks, shutdown.clone()).map_err(AppError::Tls)?;
    }
    if let Some(tokens) = &parts.admin {
        tokens.watch(tasks, shutdown.clone())?;
    }
    if let Some(xds) = parts.xds.take() {
        let (reloader, metrics) = (parts.reloader.clone(), parts.metrics.clone());
        tasks.spawn(xds.run(reloader, metrics, shutdown.clone()));
    }
    if parts.settings.watch_rules
        && let Some(watch) = parts.reloader.clone().watch(shutdown.clone())?
    {
        tasks.spawn(watch);
    }
    if let Some(statsd) = parts.settings.statsd.clone() {
        tasks.spawn(crate::statsd::run(
            statsd,
            parts.metrics.clone(),
            shutdown.clone(),
            parts.settings.shutdown_delay,
        ));
    }
    if let Some(background) = parts.store.background(shutdown.clone()) {
        tasks.spawn(background);
    }
    tasks.spawn(tasks::sweep(
        parts.store.clone(),
        parts.limiter.clone(),
        insight.clone(),
        parts.clock.clone(),
        parts.metrics.clone(),
        shutdown.clone(),
    ));
    tasks.spawn(tasks::quota(
        parts.quota.clone(),
        parts.reloader.rules(),
        parts.metrics.clone(),
        shutdown.clone(),
    ));
    if let Some((exchange, portions)) = parts.replicas.clone() {
        let book = parts.quota.clone();
        let clock = parts.clock.clone();
        tasks.spawn(tasks::quota_exchange(
            book,
            portions,
            exchange,
            clock,
            shutdown.clone(),
        ));
    }
    Ok(())
}

/// Whether the server is ready to serve, as gRPC health and the HTTP health check report it.
fn readiness(parts: &Parts, lifecycle: &Lifecycle) -> Arc<health::Readiness> {
    Arc::new(health::Readiness {
        draining: lifecycle.draining.clone(),
        reloader: parts.reloader.clone(),
        limiter: parts.limiter.clone(),
        options: parts.settings.health,
    })
}

/// The bound addresses, as `Running` reports them (the ports the OS chose for port 0).
struct Addrs {
    grpc: SocketAddr,
    http: SocketAddr,
    metrics: Option<SocketAddr>,
    admin: Option<SocketAddr>,
}

/// The handle of a launched server: what `Running::wait` and `Running::stop` need.
fn running(
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
