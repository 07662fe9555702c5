//! Health, as `/healthcheck` and gRPC health (for `""` and `ratelimit`, the name
//! envoyproxy/ratelimit registers) report it: healthy while sluice can answer calls by its rules —
//! through a store outage too, where each rule's `failure_mode` answers — and unhealthy before the
//! first rule set has loaded (from files, or over xDS unless `--xds-force-start`) and from the
//! moment shutdown is requested. A sustained store outage and a rule set without domains count
//! only when [`HealthOptions`] asks for them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tonic_health::ServingStatus;
use tonic_health::pb::health_server::{Health as HealthApi, HealthServer};
use tonic_health::server::HealthReporter;

use super::HealthOptions;
use crate::limiter::Limiter;
use crate::reload::Reloader;

/// The gRPC health service name envoyproxy/ratelimit registers (besides `""`).
pub(crate) const HEALTH_SERVICE: &str = "ratelimit";

/// How often readiness is mirrored into gRPC health.
const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// What decides health.
pub(super) struct Readiness {
    /// Set the moment shutdown is requested.
    pub draining: Arc<AtomicBool>,
    /// Whether (and which) rules are loaded.
    pub reloader: Arc<Reloader>,
    /// The store's health.
    pub limiter: Arc<Limiter>,
    /// What counts besides draining and rules.
    pub options: HealthOptions,
}

impl Readiness {
    /// `Ok` while healthy, else why not (the body of a 503).
    pub(super) fn check(&self) -> Result<(), &'static str> {
        if self.draining.load(Ordering::SeqCst) {
            Err("draining")
        } else if !self.reloader.has_rules() {
            Err("no rules loaded yet")
        } else if self.options.require_domains && self.reloader.rules().load().domains.is_empty() {
            Err("no rate limit domain loaded")
        } else if self.options.store && !self.limiter.store_healthy() {
            Err("counter store unavailable")
        } else {
            Ok(())
        }
    }
}

/// The health both service names report.
#[derive(Clone)]
pub(super) struct GrpcHealth {
    reporter: HealthReporter,
}

impl GrpcHealth {
    /// A health service reporting `serving` for both names.
    pub(super) async fn new(serving: bool) -> (Self, HealthServer<impl HealthApi>) {
        let (reporter, service) = tonic_health::server::health_reporter();
        let health = Self { reporter };
        health.set(serving).await;
        (health, service)
    }

    /// Reports SERVING or NOT_SERVING for both names.
    pub(super) async fn set(&self, serving: bool) {
        let status = if serving {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        for name in ["", HEALTH_SERVICE] {
            self.reporter.set_service_status(name, status).await;
        }
    }
}

/// Mirrors readiness into gRPC health until shutdown (which sets NOT_SERVING itself).
pub(super) async fn follow(
    readiness: Arc<Readiness>,
    health: GrpcHealth,
    mut serving: bool,
    shutdown: CancellationToken,
) {
    let mut every = tokio::time::interval(CHECK_INTERVAL);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = every.tick() => {}
        }
        let now = readiness.check();
        if now.is_ok() == serving || readiness.draining.load(Ordering::SeqCst) {
            continue;
        }
        serving = now.is_ok();
        match now {
            Ok(()) => tracing::info!("health: serving"),
            Err(why) => tracing::warn!(why, "health: not serving"),
        }
        health.set(serving).await;
    }
}
