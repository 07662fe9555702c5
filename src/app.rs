//! The composition root: loads rules, builds the store and limiter, binds and serves gRPC and
//! HTTP, and owns shutdown (one cancellation token for every task).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::transport::server::TcpIncoming;
use tonic_health::ServingStatus;

use crate::clock::Clock;
use crate::http::{self, HttpState};
use crate::limiter::{Limiter, LimiterOptions};
use crate::metrics::Metrics;
use crate::reload::{Reloader, WatchError};
use crate::rules::{ConfigErrors, LoadOptions};
use crate::service::RlsService;
use crate::store::{MemoryStore, Store};
use crate::tls::{ServerTls, TlsError, TlsSettings};

/// How often idle counters are reclaimed and the counter gauge refreshed.
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// The gRPC health service name envoyproxy/ratelimit registers (besides `""`).
pub const HEALTH_SERVICE: &str = "ratelimit";

/// Everything `serve` needs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Rule files or directories.
    pub config: Vec<PathBuf>,
    /// gRPC listen address (port 0 picks one).
    pub grpc_addr: SocketAddr,
    /// HTTP listen address (port 0 picks one).
    pub http_addr: SocketAddr,
    /// How rules are compiled.
    pub load: LoadOptions,
    /// Limiter switches.
    pub limiter: LimiterOptions,
    /// Longest wait for in-flight calls at shutdown.
    pub shutdown_grace: Duration,
    /// How long to keep serving after health turns NOT_SERVING, so load balancers and
    /// Kubernetes stop sending new calls before the listeners close.
    pub shutdown_delay: Duration,
    /// Upstream's NEAR_LIMIT_RATIO for the near_limit statistic.
    pub near_limit_ratio: f64,
    /// Most per-rule metric series before new ones fold into an overflow series.
    pub max_metric_series: usize,
    /// Reload rules when their files change.
    pub watch_rules: bool,
    /// TLS on gRPC; `None` serves plaintext.
    pub tls: Option<TlsSettings>,
}

impl Settings {
    /// The defaults of `sluice serve` for the rule paths `config`.
    pub fn new(config: Vec<PathBuf>) -> Self {
        Self {
            config,
            grpc_addr: SocketAddr::from(([0, 0, 0, 0], 8081)),
            http_addr: SocketAddr::from(([0, 0, 0, 0], 8080)),
            load: LoadOptions::default(),
            limiter: LimiterOptions::default(),
            shutdown_grace: Duration::from_secs(10),
            shutdown_delay: Duration::ZERO,
            near_limit_ratio: 0.8,
            max_metric_series: 10_000,
            watch_rules: true,
            tls: None,
        }
    }
}

/// Why the server could not start or stopped badly.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The rules did not load.
    #[error("rules did not load:\n{0}")]
    Config(#[from] ConfigErrors),
    /// The rule files could not be watched.
    #[error(transparent)]
    Watch(#[from] WatchError),
    /// A listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// The TLS certificates did not load or cannot be watched. Not a `source`: the message
    /// already holds the cause, and an error chain would print it twice.
    #[error("TLS: {0}")]
    Tls(TlsError),
    /// A server failed while running.
    #[error("{0} server failed: {1}")]
    Serve(&'static str, String),
}

/// A started server.
pub struct Running {
    /// The bound gRPC address.
    pub grpc_addr: SocketAddr,
    /// The bound HTTP address.
    pub http_addr: SocketAddr,
    /// Cancel to shut down.
    pub shutdown: CancellationToken,
    /// The rule loader (its generation tells how many rule sets have loaded).
    pub reloader: Arc<Reloader>,
    /// The live TLS state (reload status), when serving TLS.
    pub tls: Option<ServerTls>,
    tasks: TaskTracker,
    failures: tokio::sync::mpsc::UnboundedReceiver<AppError>,
    grace: Duration,
    delay: Duration,
}

/// Loads rules, binds both listeners and starts serving in the background, counting in the
/// embedded memory store.
pub async fn start(settings: Settings, clock: Arc<dyn Clock>) -> Result<Running, AppError> {
    start_with_store(settings, clock, Arc::new(MemoryStore::new())).await
}

/// As [`start`], counting in `store`.
pub async fn start_with_store(
    settings: Settings,
    clock: Arc<dyn Clock>,
    store: Arc<dyn Store>,
) -> Result<Running, AppError> {
    let metrics = Arc::new(Metrics::new(
        settings.near_limit_ratio,
        settings.max_metric_series,
    ));
    let reloader = Arc::new(Reloader::load(
        settings.config.clone(),
        settings.load,
        metrics.clone(),
    )?);
    let limiter = Arc::new(Limiter::new(
        reloader.rules(),
        store.clone(),
        clock.clone(),
        settings.limiter,
        metrics.clone(),
    ));
    // Certificates are checked before binding, so bad files stop the start.
    let tls = settings
        .tls
        .map(ServerTls::load)
        .transpose()
        .map_err(AppError::Tls)?;

    let grpc = bind(settings.grpc_addr).await?;
    let http = bind(settings.http_addr).await?;
    let grpc_addr = local_addr(&grpc, settings.grpc_addr)?;
    let http_addr = local_addr(&http, settings.http_addr)?;

    let shutdown = CancellationToken::new();
    let tasks = TaskTracker::new();
    let draining = Arc::new(AtomicBool::new(false));
    let (fail, failures) = tokio::sync::mpsc::unbounded_channel();
    // TLS: reload on file changes; handshakes run in their own tasks (see tls::incoming).
    let grpc = match &tls {
        Some(tls) => {
            tls.watch(&tasks, shutdown.clone()).map_err(AppError::Tls)?;
            GrpcIncoming::Tls(tls.incoming(grpc, &tasks, shutdown.clone()))
        }
        None => GrpcIncoming::Plain(TcpIncoming::from(grpc)),
    };

    if settings.watch_rules {
        tasks.spawn(reloader.clone().watch(shutdown.clone())?);
    }
    if let Some(background) = store.background(shutdown.clone()) {
        tasks.spawn(background);
    }
    tasks.spawn(sweep(
        store,
        limiter.clone(),
        clock,
        metrics,
        shutdown.clone(),
    ));

    let (health, health_service) = tonic_health::server::health_reporter();
    for name in ["", HEALTH_SERVICE] {
        health
            .set_service_status(name, ServingStatus::Serving)
            .await;
    }
    tasks.spawn(watch_store_health(
        limiter.clone(),
        health.clone(),
        draining.clone(),
        shutdown.clone(),
    ));
    // Shutdown in order: health turns NOT_SERVING the moment it is requested; the listeners
    // close after the shutdown delay (`stop`); in-flight calls then finish.
    let stop = CancellationToken::new();
    tasks.spawn({
        let (token, stop, draining) = (shutdown.clone(), stop.clone(), draining.clone());
        let delay = settings.shutdown_delay;
        async move {
            token.cancelled().await;
            draining.store(true, Ordering::SeqCst);
            for name in ["", HEALTH_SERVICE] {
                health
                    .set_service_status(name, ServingStatus::NotServing)
                    .await;
            }
            tracing::info!(
                ?delay,
                "health is NOT_SERVING; closing listeners after the delay"
            );
            tokio::time::sleep(delay).await;
            stop.cancel();
        }
    });

    tasks.spawn({
        let (token, fail) = (shutdown.clone(), fail.clone());
        let stop = stop.clone().cancelled_owned();
        let service = RlsService::new(limiter.clone()).into_server();
        async move {
            let router = tonic::transport::Server::builder()
                .add_service(health_service)
                .add_service(service);
            let served = match grpc {
                GrpcIncoming::Plain(incoming) => {
                    router.serve_with_incoming_shutdown(incoming, stop).await
                }
                GrpcIncoming::Tls(incoming) => {
                    router.serve_with_incoming_shutdown(incoming, stop).await
                }
            };
            if let Err(e) = served {
                let _ = fail.send(AppError::Serve("gRPC", e.to_string()));
                token.cancel();
            }
        }
    });

    tasks.spawn({
        let token = shutdown.clone();
        let stop = stop.cancelled_owned();
        let router = http::router(HttpState { limiter, draining });
        async move {
            let served = axum::serve(http, router).with_graceful_shutdown(stop).await;
            if let Err(e) = served {
                let _ = fail.send(AppError::Serve("HTTP", e.to_string()));
                token.cancel();
            }
        }
    });
    tasks.close();

    Ok(Running {
        grpc_addr,
        http_addr,
        shutdown,
        reloader,
        tls,
        tasks,
        failures,
        grace: settings.shutdown_grace,
        delay: settings.shutdown_delay,
    })
}

/// Reclaims idle counters and publishes how many are held (and the store's own figures),
/// until shutdown.
async fn sweep(
    store: Arc<dyn Store>,
    limiter: Arc<Limiter>,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    let mut every = tokio::time::interval(SWEEP_INTERVAL);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = every.tick() => {
                let now = clock.now();
                if let Some(held) = store.sweep(now) {
                    metrics.set_active_counters(store.name(), held);
                }
                store.observe(&metrics, now);
                limiter.sweep_fallback(now);
            }
        }
    }
}

/// Mirrors the store's health into gRPC health (NOT_SERVING while the store is unhealthy),
/// checked every sweep interval, until shutdown (which sets NOT_SERVING itself).
async fn watch_store_health(
    limiter: Arc<Limiter>,
    health: tonic_health::server::HealthReporter,
    draining: Arc<AtomicBool>,
    shutdown: CancellationToken,
) {
    let mut every = tokio::time::interval(SWEEP_INTERVAL);
    let mut healthy = true;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = every.tick() => {}
        }
        let now = limiter.store_healthy();
        if now == healthy || draining.load(Ordering::SeqCst) {
            continue;
        }
        healthy = now;
        let status = if healthy {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        tracing::warn!(healthy, "counter store health changed");
        for name in ["", HEALTH_SERVICE] {
            health.set_service_status(name, status).await;
        }
    }
}

impl Running {
    /// Waits until shutdown is requested, then for in-flight calls to finish (bounded by the
    /// shutdown delay plus the grace period). Returns the first server failure, if any.
    pub async fn wait(mut self) -> Result<(), AppError> {
        self.shutdown.cancelled().await;
        if tokio::time::timeout(self.delay + self.grace, self.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!(grace = ?self.grace, "in-flight calls did not finish within the grace period");
        }
        match self.failures.try_recv() {
            Ok(e) => Err(e),
            Err(_) => Ok(()),
        }
    }

    /// Requests shutdown and waits for it.
    pub async fn stop(self) -> Result<(), AppError> {
        self.shutdown.cancel();
        self.wait().await
    }
}

/// The gRPC connections: plain TCP, or TLS after the handshake.
enum GrpcIncoming {
    Plain(TcpIncoming),
    Tls(crate::tls::TlsIncoming),
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, AppError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| AppError::Bind { addr, source })
}

fn local_addr(listener: &TcpListener, addr: SocketAddr) -> Result<SocketAddr, AppError> {
    listener
        .local_addr()
        .map_err(|source| AppError::Bind { addr, source })
}
