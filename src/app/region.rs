//! The region of a server (`--region`, `--global-redis-url`): the global store built beside
//! the counter store, and the claim rounds, once a second off the request path, with their
//! figures published.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::{AppError, RegionSettings};
use crate::clock::Clock;
use crate::metrics::Metrics;
use crate::region::{RegionOptions, Regions, claim_once};
use crate::rlqs::Rlqs;
use crate::store::{PortionStore, RedisStore, Store, valid_region_name};

/// How often a region's replica claims.
const ROUND: Duration = Duration::from_secs(1);

/// How soon a round follows one that shrank a portion (the global store frees the difference
/// for the other regions only once the next round says it is no longer enforced) or saw demand
/// move.
const SOON: Duration = Duration::from_millis(200);

/// A region's parts: this replica's side, and the global store (its connections' background
/// work runs with the server's).
pub(super) struct RegionParts {
    pub regions: Arc<Regions>,
    pub global: Arc<RedisStore>,
}

/// Builds the region `settings` describe: the name checked, the global store connected (an
/// unreachable one does not stop the start: rounds fail, and global limits are enforced on
/// nothing but what was claimed until one answers).
pub(super) async fn build(
    settings: &RegionSettings,
    replica: String,
    shared_store: bool,
) -> Result<RegionParts, AppError> {
    let name = &settings.options.name;
    if !valid_region_name(name) {
        let problem = if name.is_empty() {
            "--global-redis-url needs --region NAME (this deployment's region)"
        } else {
            "--region must be 1 to 64 letters, digits, '.', '_' or '-'"
        };
        return Err(AppError::Region(problem));
    }
    let global = RedisStore::connect(settings.global.clone()).await;
    let global = Arc::new(global.map_err(AppError::GlobalStore)?);
    let options = RegionOptions {
        shared_store,
        ..settings.options.clone()
    };
    let regions = Arc::new(Regions::new(options, replica));
    Ok(RegionParts { regions, global })
}

/// The claim rounds until shutdown: every unit worth it claimed (the RLQS buckets of global
/// limits among them), the buckets whose portion moved re-split, the figures published. Failures are
/// logged when they start and when they end.
pub(super) async fn rounds(
    parts: RegionParts,
    rlqs: Rlqs,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    let RegionParts { regions, global } = parts;
    let store: Arc<dyn PortionStore> = match global.portion_store() {
        Some(store) => store,
        None => return,
    };
    tracing::info!(
        region = regions.name(),
        "sharing global limits with the other regions"
    );
    let mut every = tokio::time::interval(ROUND);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut failing, mut crowded) = (false, false);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = every.tick() => {}
        }
        // The RLQS book notes its buckets under global limits itself, each second.
        let now = clock.now();
        let started = Instant::now();
        let settled = claim_once(&regions, store.as_ref(), now, clock.as_ref()).await;
        metrics.record_region_round(settled.answered, started.elapsed());
        if !settled.moved.is_empty() {
            rlqs.reshare(settled.moved).await;
        }
        if settled.soon {
            every.reset_after(SOON);
        }
        let figures = regions.figures(clock.now());
        metrics.record_region(
            &figures.region,
            figures.members,
            figures.floor,
            figures.reachable,
        );
        for ((domain, rule, limit), portion) in &figures.by_limit {
            metrics.record_region_portion(domain, rule, *limit, *portion);
        }
        if let Some(processes) = figures.shared_by_lone_stores
            && !crowded
        {
            crowded = true;
            tracing::error!(
                processes,
                "several processes on the embedded store claim as this region, each counting alone: together they may admit {processes} times its portion; give each its own --region or use --store redis"
            );
        }
        match (&figures.failing, failing) {
            (Some((_, why)), false) => {
                failing = true;
                tracing::warn!(error = %why, "claiming in the global store failed; the last portions hold until they lapse, then each region's floor");
            }
            (None, true) => {
                failing = false;
                tracing::info!("claiming in the global store works again");
            }
            _ => {}
        }
    }
}
