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
use crate::clock::Nanos;
use crate::http::{self, HttpState};
use crate::limiter::{Limiter, LimiterOptions};
use crate::metrics::Metrics;
use crate::reload::{Reloader, WatchError};
use crate::rules::{ConfigErrors, LoadOptions};
use crate::service::RlsService;
use crate::store::memory::DEFAULT_MAX_COUNTERS;
use crate::store::persist::PersistError;
use crate::store::{MemoryOptions, MemoryStore, PersistSettings, PersistentStore, Store};
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
    /// Persistence of the embedded store; `None` counts in memory only.
    pub persist: Option<PersistSettings>,
    /// Most counters the embedded store holds; past it, calls that need a new one are refused.
    pub max_counters: usize,
}

impl Settings {
    /// The defaults of `sluice serve` for the rule paths `config`, except persistence, which
    /// an embedder turns on by setting `persist` (the command line does, under `data/`).
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
            persist: None,
            max_counters: DEFAULT_MAX_COUNTERS,
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
    /// The data directory could not be opened or locked.
    #[error(transparent)]
    Persist(#[from] PersistError),
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
    store: StoreHandle,
    failures: tokio::sync::mpsc::UnboundedReceiver<AppError>,
    grace: Duration,
    delay: Duration,
}

/// Loads rules, binds both listeners and starts serving in the background, counting in the
/// embedded memory store (restored from `settings.persist` before the listeners open).
pub async fn start(settings: Settings, clock: Arc<dyn Clock>) -> Result<Running, AppError> {
    start_inner(settings, clock, None).await
}

/// As [`start`], counting in `store`.
pub async fn start_with_store(
    settings: Settings,
    clock: Arc<dyn Clock>,
    store: Arc<dyn Store>,
) -> Result<Running, AppError> {
    start_inner(settings, clock, Some(store)).await
}

/// The embedded store `settings` ask for; restoring reads the data directory (blocking I/O,
/// so on a blocking thread).
async fn memory_store(settings: &Settings, now: Nanos) -> Result<Arc<dyn Store>, AppError> {
    let options = MemoryOptions {
        max_counters: settings.max_counters,
        ..MemoryOptions::default()
    };
    let Some(persist) = settings.persist.clone() else {
        return Ok(Arc::new(MemoryStore::with_options(options)));
    };
    let opened = tokio::task::spawn_blocking(move || PersistentStore::open(persist, options, now))
        .await
        .map_err(|e| AppError::Serve("store", e.to_string()))?;
    Ok(Arc::new(opened?))
}

async fn start_inner(
    settings: Settings,
    clock: Arc<dyn Clock>,
    store: Option<Arc<dyn Store>>,
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
    // Certificates are checked before binding, so bad files stop the start.
    let tls = settings
        .tls
        .clone()
        .map(ServerTls::load)
        .transpose()
        .map_err(AppError::Tls)?;
    // Counters are restored before the listeners open: the first call sees them.
    let store = match store {
        Some(store) => store,
        None => memory_store(&settings, clock.now()).await?,
    };
    // Publish what was restored before anyone can scrape /metrics.
    metrics.record_store_stats(store.name(), &store.stats());
    let limiter = Arc::new(Limiter::new(
        reloader.rules(),
        store.clone(),
        clock.clone(),
        settings.limiter,
        metrics.clone(),
    ));

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
        // serve_with_incoming ignores the builder's tcp_nodelay (on by default), so set it here:
        // with Nagle on, small answers wait for the peer's delayed ACK.
        None => GrpcIncoming::Plain(TcpIncoming::from(grpc).with_nodelay(Some(true))),
    };

    if settings.watch_rules {
        tasks.spawn(reloader.clone().watch(shutdown.clone())?);
    }
    if let Some(background) = store.background(shutdown.clone()) {
        tasks.spawn(background);
    }
    tasks.spawn(sweep(
        store.clone(),
        limiter.clone(),
        clock.clone(),
        metrics.clone(),
        shutdown.clone(),
    ));
    let store = StoreHandle::start(store, clock, metrics);

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
        store,
        failures,
        grace: settings.shutdown_grace,
        delay: settings.shutdown_delay,
    })
}

/// Reclaims idle counters and publishes how many are held (and the store's own figures),
/// until shutdown. The sweep walks shard by shard on a blocking thread: no runtime worker
/// stalls on a large store.
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
                let (swept, now) = (store.clone(), clock.now());
                let _ = tokio::task::spawn_blocking(move || swept.sweep(now)).await;
                metrics.record_store_stats(store.name(), &store.stats());
                limiter.sweep_fallback(now);
            }
        }
    }
}

/// The store and its flush task, which outlives the listeners: the last flush runs after the
/// in-flight calls have ended.
struct StoreHandle {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
    flusher: Option<tokio::task::JoinHandle<()>>,
}

impl StoreHandle {
    /// Starts flushing every [`Store::flush_interval`], if the store needs it.
    fn start(store: Arc<dyn Store>, clock: Arc<dyn Clock>, metrics: Arc<Metrics>) -> Self {
        let stop = CancellationToken::new();
        let flusher = store.flush_interval().map(|interval| {
            let (store, clock, metrics, stop) =
                (store.clone(), clock.clone(), metrics.clone(), stop.clone());
            tokio::spawn(async move {
                let mut every = tokio::time::interval(interval);
                every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = every.tick() => {
                            store.flush(clock.now(), false).await;
                            metrics.record_store_stats(store.name(), &store.stats());
                        }
                    }
                }
            })
        });
        Self {
            store,
            clock,
            metrics,
            stop,
            flusher,
        }
    }

    /// Stops the flush task and runs the last flush (which also syncs).
    async fn close(self) {
        self.stop.cancel();
        if let Some(flusher) = self.flusher {
            let _ = flusher.await;
        }
        self.store.flush(self.clock.now(), true).await;
        self.metrics
            .record_store_stats(self.store.name(), &self.store.stats());
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
        // In-flight calls have ended (or the grace ran out): persist what they counted.
        self.store.close().await;
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
