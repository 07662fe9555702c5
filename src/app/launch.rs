//! Every task of a built server spawned on one tracker, all stopping on one shutdown token.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::insight::Insight;
use crate::region::RegionalPortion;
use crate::rlqs::{GroupPortion, Rlqs, RlqsParts};
use crate::service::rlqs::RlqsService;
use crate::store::Store;
use crate::telemetry::CallTracer;

use super::listen::{self, Listeners, Serving};
use super::parts::Parts;
use super::running::{Addrs, running};
use super::shutdown::{self, Lifecycle};
use super::{AppError, Running, file_limit, grpc, health, tasks};

/// Spawns every task of a server on one tracker, all stopping on one shutdown token.
pub(super) async fn launch(
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
    // RLQS shares of a global limit draw on the region's portion.
    let group = (parts.region.as_ref()).map(|region| -> Arc<dyn GroupPortion> {
        let rules = parts.reloader.rules();
        Arc::new(RegionalPortion::new(region.regions.clone(), rules))
    });
    // The RLQS wing's streams end, and its book stops, when the listeners stop accepting.
    let (rlqs, rlqs_work) = Rlqs::start(RlqsParts {
        settings: parts.settings.rlqs.clone(),
        clock: parts.clock.clone(),
        rules: parts.reloader.subscribe(),
        shared: parts.portion_store.clone(),
        group,
        shutdown: lifecycle.close.clone(),
    })
    .map_err(AppError::Rlqs)?;
    tasks.spawn(rlqs_work);
    if let Some(region) = parts.region.take() {
        if let Some(background) = Store::background(region.global.as_ref(), shutdown.clone()) {
            tasks.spawn(background);
        }
        tasks.spawn(super::region::rounds(
            region,
            rlqs.clone(),
            parts.clock.clone(),
            parts.metrics.clone(),
            shutdown.clone(),
        ));
    }
    tasks.spawn(tasks::publish_rlqs(
        rlqs.clone(),
        parts.metrics.clone(),
        shutdown.clone(),
    ));
    let readiness = readiness(&parts, &lifecycle);
    let serving_now = readiness.check().is_ok();
    let (health, health_service) = health::GrpcHealth::new(serving_now).await;
    tasks.spawn(health::follow(
        readiness.clone(),
        health.clone(),
        serving_now,
        shutdown.clone(),
    ));
    let delay = parts.settings.shutdown_delay;
    let side_listeners = usize::from(metrics_addr.is_some()) + usize::from(admin_addr.is_some());
    let caps = file_limit::fit(
        file_limit::Caps {
            grpc: parts.settings.grpc_max_connections,
            http: parts.settings.http_max_connections,
        },
        side_listeners,
    );
    tasks.spawn(shutdown::announce_then_close(
        lifecycle.clone(),
        health,
        delay,
    ));
    let serving = Serving {
        limiter: parts.limiter.clone(),
        rlqs: RlqsService::new(rlqs.clone(), parts.metrics.clone(), tracer.clone()),
        rlqs_wing: rlqs,
        insight,
        tracer: tracer.clone(),
        tls: parts.tls.clone(),
        health: Arc::new(move || readiness.check()),
        connection_age: grpc::ConnectionAge {
            age: parts.settings.grpc_max_connection_age,
            grace: parts.settings.grpc_max_connection_age_grace,
        },
        caps,
        hosts: Arc::new(crate::http::guard::AllowedHosts::new(
            crate::files::hostname().as_deref(),
            &parts.settings.http_allowed_hosts,
        )),
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
/// watcher, the store's own background work and housekeeping (the RLQS wing runs its own).
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
