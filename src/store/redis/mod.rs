//! The Redis store: one authority for many replicas. Each call is decided by one run of a Lua
//! script (per Redis Cluster slot group) that checks and commits all of its counters
//! atomically on Redis's clock; concurrent calls share runs when Redis is busy (`batch.rs`).
//!
//! Around the script: a local over-limit cache (`cache.rs`) answers counters known to be full
//! without a round trip; every call has a timeout; a circuit breaker (`breaker.rs`) stops
//! calls from waiting on a dead Redis, and a background probe closes it when Redis answers.

mod batch;
mod breaker;
mod cache;
mod failover;
mod keys;
mod lease;
mod link;
mod node;
mod probe;
mod scripts;
mod sentinel;
mod settings;
mod target;
mod upstream;
mod url;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::cluster_routing::Slot;
use smallvec::SmallVec;
use tokio_util::sync::CancellationToken;

use self::batch::{Batcher, Job, Runs, SlotBatchers};
use self::breaker::{Breaker, Change};
use self::cache::OverLimitCache;
use self::keys::KeyLayout;
use self::lease::Leases;
use self::link::Link;
use self::scripts::Answered;
use self::target::Target;
use super::{
    BackgroundTask, BadReply, Charge, LeaseStats, LocalCacheStats, Outcome, Store, StoreError,
    StoreFuture, StoreStats,
};
use crate::clock::Nanos;

pub use self::breaker::{FAILURES_TO_OPEN, PROBE_INTERVAL, UNHEALTHY_AFTER};
pub use self::lease::MAX_LEASED_COUNTERS;
pub use self::scripts::{DECIDE as SCRIPT, MAX_PARAM};
pub use self::settings::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_CONNECTIONS, DEFAULT_EXPIRATION_JITTER, DEFAULT_KEY_PREFIX,
    DEFAULT_LOCAL_CACHE_SIZE, DEFAULT_RUNS_IN_FLIGHT, DEFAULT_TIMEOUT, LOCAL_CACHE_ENTRY_BYTES,
    RedisClock, RedisKeyLayout, RedisSettings, local_cache_entries,
};
pub use self::url::describe as describe_url;

/// Checks a Redis URL as `--redis-url` is checked (nothing is connected). For the fuzz targets.
pub(crate) fn check_url(url: &str) -> Result<(), StoreError> {
    Target::build(&RedisSettings::new(url)).map(drop)
}

/// A charge's Redis key, and its window when the key is in upstream's layout.
type Placed = (Vec<u8>, Option<upstream::UpstreamWindow>);

/// How calls share script runs.
enum Batching {
    /// One Redis (or Sentinel's master): any calls may share a run.
    Standalone(Arc<Batcher>),
    /// Redis Cluster: a call is split by slot, and only runs of one slot are shared.
    Cluster(SlotBatchers),
}

/// The Redis store.
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    link: Arc<Link>,
    /// Batches concurrent calls into shared script runs.
    batching: Batching,
    layout: KeyLayout,
    timeout: Duration,
    clock: RedisClock,
    breaker: Breaker,
    cache: OverLimitCache,
    /// Hits leased from Redis for rules with `lease:`, admitted here.
    leases: Leases,
    epoch: Instant,
    /// Calls answered from `cache` so far.
    cache_hits: AtomicU64,
    /// Bounds the probe's ping as it bounds a connect.
    connect_timeout: Duration,
    described: String,
}

impl RedisStore {
    /// A store for `settings` (the URL and prefix are checked; nothing is connected yet).
    pub fn new(settings: RedisSettings) -> Result<Self, StoreError> {
        let target = Target::build(&settings)?;
        let layout = KeyLayout::new(
            &settings.key_prefix,
            settings.key_layout,
            settings.expiration_jitter,
        )?;
        let cluster = target.is_cluster();
        let link = Link::new(
            target,
            settings.connections,
            SCRIPT,
            settings.connect_timeout,
        );
        let sha = redis::Script::new(SCRIPT).get_hash().to_owned();
        // A few runs in flight (`--redis-runs-in-flight` per connection): light load goes
        // straight through, heavier load queues and shares runs, paying the script's fixed
        // cost and a round trip once per batch.
        let runs = Runs {
            link: link.clone(),
            sha: sha.into(),
            max_in_flight: settings.connections.max(1) * settings.runs_in_flight.max(1),
            timeout: settings.timeout,
        };
        let batching = if cluster {
            Batching::Cluster(SlotBatchers::new(runs))
        } else {
            Batching::Standalone(Batcher::new(runs))
        };
        Ok(Self {
            inner: Arc::new(Inner {
                link,
                batching,
                layout,
                timeout: settings.timeout,
                clock: settings.clock,
                breaker: Breaker::new(settings.unhealthy_after),
                cache: OverLimitCache::new(settings.local_cache_size),
                leases: Leases::default(),
                epoch: Instant::now(),
                cache_hits: AtomicU64::new(0),
                connect_timeout: settings.connect_timeout,
                described: url::describe(&settings.url),
            }),
        })
    }

    /// As [`RedisStore::new`], then connects (waiting up to the connect timeout). An
    /// unreachable Redis is not fatal: calls are decided by each rule's `failure_mode` until
    /// it answers.
    pub async fn connect(settings: RedisSettings) -> Result<Self, StoreError> {
        let store = Self::new(settings)?;
        let inner = &store.inner;
        let connected = node::within(inner.connect_timeout, inner.link.connect_all());
        match connected.await {
            Ok(()) => tracing::info!(redis = %inner.described, "connected to redis"),
            Err(e) => tracing::warn!(
                redis = %inner.described, error = %e,
                "redis is unreachable; each rule's failure_mode decides until it answers"
            ),
        }
        Ok(store)
    }

    /// Whether the circuit breaker is open (calls skip Redis).
    pub fn circuit_open(&self) -> bool {
        self.inner.breaker.is_open()
    }
}

impl Inner {
    /// The cache's clock: the caller's time with a caller clock, else a monotonic clock (the
    /// wall clock may step; Redis's clock is not ours).
    fn cache_now(&self, now: Nanos) -> Nanos {
        match self.clock {
            RedisClock::Caller => now,
            RedisClock::Server => self.epoch.elapsed().as_nanos() as Nanos,
        }
    }

    /// A call with a leased charge: answered from held hits, or decided by Redis asking for
    /// more.
    async fn apply_leased(
        &self,
        charges: &[Charge],
        now: Nanos,
    ) -> Result<Vec<Outcome>, StoreError> {
        let sent_at = self.cache_now(now);
        // Held hits first: they are counted in Redis already (its over-limit answer may be
        // ours), and they answer while Redis is away.
        if let Some(outcomes) = self.leases.answer(charges, sent_at, true) {
            return Ok(outcomes);
        }
        let deadline = sent_at.saturating_add(self.timeout.as_nanos() as Nanos);
        let extras = self.leases.extras(charges, sent_at, deadline);
        let decided = self.apply_exact(charges, &extras, now, sent_at).await;
        if decided.is_err() {
            self.leases.abandon(charges, &extras, sent_at);
            // A refill that failed (Redis away): the hits still held answer.
            if let Some(outcomes) = self.leases.answer(charges, self.cache_now(now), false) {
                return Ok(outcomes);
            }
        }
        decided
    }

    /// A call decided by Redis (or the over-limit cache); `extras`: hits each charge asks to
    /// lease (empty for none).
    async fn apply_exact(
        &self,
        charges: &[Charge],
        extras: &[u64],
        now: Nanos,
        sent_at: Nanos,
    ) -> Result<Vec<Outcome>, StoreError> {
        // Only a call whose every counter is known to be full skips Redis: the others would
        // need Redis's answer for their statuses anyway.
        let cached: Option<Vec<Outcome>> = charges
            .iter()
            .map(|c| self.cache.lookup(c, sent_at))
            .collect();
        if let Some(outcomes) = cached {
            self.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(outcomes);
        }
        if self.breaker.is_open() {
            return Err(StoreError::CircuitOpen);
        }
        // Bounded by the timeout without a timer of its own: each script run is bounded by
        // the earliest deadline among its calls, and runs leave a queue in the order their
        // calls joined it (batch.rs).
        let decided = self.decide(charges, extras, now).await;
        match decided {
            Ok(answered) => {
                self.breaker.success();
                let outcomes: Vec<Outcome> = if extras.iter().any(|&e| e > 0) {
                    self.leases.settle(charges, extras, answered, sent_at)
                } else {
                    answered.into_iter().map(|a| a.outcome).collect()
                };
                for (charge, outcome) in charges.iter().zip(&outcomes) {
                    self.cache.remember(charge, sent_at, outcome);
                }
                Ok(outcomes)
            }
            Err(e) => {
                self.record(self.breaker.failure(), Some(&e));
                Err(e)
            }
        }
    }

    /// One log line per breaker state change (never one per call).
    fn record(&self, change: Option<Change>, error: Option<&StoreError>) {
        match change {
            Some(Change::Opened) => {
                tracing::warn!(
                    redis = %self.described,
                    error = %error.map(ToString::to_string).unwrap_or_default(),
                    "redis circuit opened after {} consecutive failures: each rule's failure_mode \
                     decides until redis answers",
                    breaker::FAILURES_TO_OPEN
                );
                // Those connections may be stalled (a partition: commands stuck in TCP
                // retransmission) or broken; the probe brings fresh ones.
                self.link.discard_all();
            }
            Some(Change::Closed) => {
                tracing::info!(redis = %self.described, "redis answers again: circuit closed")
            }
            None => {}
        }
    }

    /// Runs the script once per slot group (once in all for a standalone Redis).
    async fn decide(
        &self,
        charges: &[Charge],
        extras: &[u64],
        now: Nanos,
    ) -> Result<Vec<Answered>, StoreError> {
        let now_us = match self.clock {
            RedisClock::Caller => Some(now / scripts::MICRO),
            RedisClock::Server => None,
        };
        let placed = charges
            .iter()
            .enumerate()
            .map(|(i, c)| (i, self.layout.place(c, now)));
        let batchers = match &self.batching {
            // A standalone Redis takes the call whole: its outcomes are in call order.
            Batching::Standalone(batcher) => {
                return batcher.submit(job(placed, charges, extras, now_us)).await;
            }
            Batching::Cluster(batchers) => batchers,
        };
        // A cluster splits the call by slot.
        let mut groups: Vec<(Slot, Vec<(usize, Placed)>)> = Vec::new();
        for (i, placed) in placed {
            let slot = keys::slot(&placed.0);
            match groups.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, members)) => members.push((i, placed)),
                None => groups.push((slot, vec![(i, placed)])),
            }
        }
        if groups.len() == 1 {
            // One slot group: its outcomes are in call order.
            let (slot, members) = groups.pop().expect("one group");
            let job = job(members.into_iter(), charges, extras, now_us);
            return batchers.of(slot).submit(job).await;
        }
        // Boxed: the rare split call's state would otherwise enlarge every call's future
        // (which is moved into its box whole).
        Box::pin(run_groups(batchers, groups, charges, extras, now_us)).await
    }
}

/// A cluster call's slot groups, run concurrently; outcomes in call order.
async fn run_groups(
    batchers: &SlotBatchers,
    groups: Vec<(Slot, Vec<(usize, Placed)>)>,
    charges: &[Charge],
    extras: &[u64],
    now_us: Option<u64>,
) -> Result<Vec<Answered>, StoreError> {
    let mut members_of = Vec::with_capacity(groups.len());
    let mut jobs = Vec::with_capacity(groups.len());
    for (slot, members) in groups {
        members_of.push(members.iter().map(|(i, _)| *i).collect::<Vec<usize>>());
        jobs.push((
            batchers.of(slot),
            job(members.into_iter(), charges, extras, now_us),
        ));
    }
    let runs = jobs
        .into_iter()
        .map(|(batcher, job)| async move { batcher.submit(job).await });
    let results = futures_util::future::join_all(runs).await;
    let mut outcomes: Vec<Option<Answered>> = vec![None; charges.len()];
    for (members, result) in members_of.iter().zip(results) {
        for (&i, outcome) in members.iter().zip(result?) {
            outcomes[i] = Some(outcome);
        }
    }
    outcomes
        .into_iter()
        .map(|o| o.ok_or(StoreError::BadReply(BadReply::Missing)))
        .collect()
}

/// One script run's share for the charges `members` (each a charge's index into `charges`,
/// with its placed key; all in one slot on a cluster). A key named twice is sent once.
fn job(
    members: impl Iterator<Item = (usize, Placed)>,
    charges: &[Charge],
    extras: &[u64],
    now_us: Option<u64>,
) -> Job {
    let mut job = Job {
        keys: SmallVec::new(),
        charges: SmallVec::new(),
        costs: SmallVec::new(),
        now_us,
    };
    for (i, (key, upstream)) in members {
        let at = match job.keys.iter().position(|k| *k == key) {
            Some(at) => at,
            None => {
                job.keys.push(key);
                job.keys.len() - 1
            }
        };
        let fields = match upstream {
            Some(window) => upstream::fields(&charges[i], at + 1, &window),
            None => scripts::fields(&charges[i], at + 1),
        };
        let extra = extras.get(i).copied().unwrap_or(0);
        job.charges.push(scripts::with_extra(fields, extra));
        job.costs.push(charges[i].cost);
    }
    job
}

impl Store for RedisStore {
    fn apply<'a>(&'a self, charges: &'a [Charge], now: Nanos) -> StoreFuture<'a> {
        let inner = &self.inner;
        // Two futures, so a call without a lease carries none of the lease's state.
        if Leases::wanted(charges) {
            Box::pin(inner.apply_leased(charges, now))
        } else {
            Box::pin(inner.apply_exact(charges, &[], now, inner.cache_now(now)))
        }
    }

    fn name(&self) -> &'static str {
        "redis"
    }

    fn healthy(&self) -> bool {
        !self.inner.breaker.unhealthy()
    }

    fn background(&self, shutdown: CancellationToken) -> Option<BackgroundTask> {
        let probe = self.inner.clone().probe(shutdown.clone());
        let follow = failover::follow(self.inner.link.clone(), shutdown);
        Some(Box::pin(async move {
            futures_util::future::join(probe, follow).await;
        }))
    }

    fn sweep(&self, now: Nanos) {
        let now = self.inner.cache_now(now);
        self.inner.cache.sweep(now);
        self.inner.leases.sweep(now);
    }

    fn stats(&self) -> StoreStats {
        let inner = &self.inner;
        StoreStats {
            local_cache: Some(LocalCacheStats {
                entries: inner.cache.len() as u64,
                hits: inner.cache_hits.load(Ordering::Relaxed),
            }),
            circuit_open: Some(inner.breaker.is_open()),
            leases: Some(LeaseStats {
                counters: inner.leases.len() as u64,
                answered: inner.leases.answered(),
            }),
            ..StoreStats::default()
        }
    }
}
