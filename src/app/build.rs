//! Every part of a server built and checked, the likeliest mistake first, then launched.

use std::sync::Arc;

use crate::admin::Tokens;
use crate::clock::Clock;
use crate::limiter::Limiter;
use crate::metrics::Metrics;
use crate::store::Store;
use crate::telemetry::CallTracer;
use crate::tls::ServerTls;
use crate::xds::XdsSource;

use super::listen::Listeners;
use super::parts::Parts;
use super::{AppError, Reloader, RuleSource, Running, Settings, launch, region, store};

/// Builds every part in the order that reports the likeliest mistake first: rules,
/// certificates, then the store (which may take a while to restore), then the listeners.
pub(super) async fn start_inner(
    mut settings: Settings,
    clock: Arc<dyn Clock>,
    store: Option<Arc<dyn Store>>,
) -> Result<Running, AppError> {
    // `scope: global` only where a global store shares it: elsewhere each region would admit
    // the whole limit.
    settings.load.global_scope = settings.region.is_some();
    let metrics = Arc::new(Metrics::new(
        settings.near_limit_ratio,
        settings.max_metric_series,
    ));
    if let Some(path) = &settings.prometheus_mapper {
        let taken = |name: &str| metrics.family_taken(name).map(str::to_owned);
        let mapper = crate::statsd::mapper::Mapper::load(path, &taken).map_err(AppError::Mapper)?;
        metrics.expose_compat_with(Arc::new(mapper));
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
    let region = match &settings.region {
        Some(region) => {
            let (replica, shared) = (
                crate::rlqs::replica_name(clock.now()),
                store.portion_store(),
            );
            Some(region::build(region, replica, shared.is_some()).await?)
        }
        None => None,
    };
    let mut limiter = Limiter::new(
        reloader.rules(),
        store.clone(),
        clock.clone(),
        settings.limiter.clone(),
        metrics.clone(),
    );
    if let Some(region) = &region {
        limiter = limiter.with_regions(region.regions.clone());
    }
    let limiter = Arc::new(limiter);
    let portion_store = store.portion_store();
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
        portion_store,
        admin,
        region,
    };
    launch::launch(parts, listeners, tracer).await
}
