//! gRPC health for `""` and `ratelimit` (the name envoyproxy/ratelimit registers): SERVING once
//! started and rules are in force, NOT_SERVING before the first rules arrive (xDS), while the
//! counter store reports a sustained outage, and from the moment shutdown is requested.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tonic_health::ServingStatus;
use tonic_health::pb::health_server::{Health as HealthApi, HealthServer};
use tonic_health::server::HealthReporter;

use crate::limiter::Limiter;

/// The gRPC health service name envoyproxy/ratelimit registers (besides `""`).
pub const HEALTH_SERVICE: &str = "ratelimit";

/// How often the store's health is mirrored into gRPC health.
const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// The health both service names report.
#[derive(Clone)]
pub(super) struct Health {
    reporter: HealthReporter,
}

impl Health {
    /// A health service reporting `serving` for both names.
    pub(super) async fn start(serving: bool) -> (Self, HealthServer<impl HealthApi>) {
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

/// Whether calls can be answered by rules: rules are in force and the store is healthy.
pub(super) fn ready(limiter: &Limiter) -> bool {
    limiter.has_rules() && limiter.store_healthy()
}

/// Mirrors [`ready`] into gRPC health until shutdown (which sets NOT_SERVING itself).
pub(super) async fn follow_store(
    limiter: Arc<Limiter>,
    health: Health,
    draining: Arc<AtomicBool>,
    shutdown: CancellationToken,
) {
    let mut every = tokio::time::interval(CHECK_INTERVAL);
    let mut healthy = ready(&limiter);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = every.tick() => {}
        }
        let now = ready(&limiter);
        if now == healthy || draining.load(Ordering::SeqCst) {
            continue;
        }
        healthy = now;
        tracing::warn!(
            healthy,
            rules = limiter.has_rules(),
            store = limiter.store_healthy(),
            "health changed"
        );
        health.set(healthy).await;
    }
}
