//! One call through the Redis store: held lease hits first, then the over-limit cache, the
//! circuit breaker, and Redis by way of the route; what Redis answers settles the leases and
//! fills the cache.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::cache::OverLimitCache;
use super::conn::PoolHealth;
use super::lease::Leases;
use super::route::Route;
use super::settings::RedisClock;
use crate::clock::Nanos;
use crate::store::{
    Charge, ChargeOutcome, Cleared, LeaseStats, LocalCacheStats, StoreError, StoreFuture,
};

/// What every call goes through, from held leases down to Redis.
pub struct Calls {
    route: Route,
    health: Arc<PoolHealth>,
    clock: RedisClock,
    timeout: Duration,
    cache: OverLimitCache,
    /// Calls answered from `cache` so far.
    cache_hits: AtomicU64,
    /// Hits leased from Redis for rules with `lease:`, admitted here.
    leases: Leases,
    /// The start of the monotonic clock of the cache and the leases (`RedisClock::Server`).
    epoch: Instant,
}

impl Calls {
    /// Calls sent by `route` while `health` lets them, each within `timeout`, on `clock`,
    /// with an over-limit cache of `local_cache_size` entries.
    pub fn new(
        route: Route,
        health: Arc<PoolHealth>,
        clock: RedisClock,
        timeout: Duration,
        local_cache_size: usize,
    ) -> Self {
        Self {
            route,
            health,
            clock,
            timeout,
            cache: OverLimitCache::new(local_cache_size),
            cache_hits: AtomicU64::new(0),
            leases: Leases::default(),
            epoch: Instant::now(),
        }
    }

    /// The outcomes of `charges` at `now`.
    pub fn apply<'a>(&'a self, charges: &'a [Charge], now: Nanos) -> StoreFuture<'a> {
        // Two futures, so a call without a lease carries none of the lease's state.
        if Leases::wanted(charges) {
            Box::pin(self.apply_leased(charges, now))
        } else {
            Box::pin(self.apply_exact(charges, &[], now, self.cache_now(now)))
        }
    }

    /// Resets the counters of `charges` (an admin reset): their leases are given up and their
    /// cached denials dropped, then their Redis keys deleted. Leases and cache are cleared
    /// again once Redis answered: a call in flight meanwhile may have settled into them
    /// from the counter just deleted.
    pub async fn reset(&self, charges: &[Charge], now: Nanos) -> Result<Cleared, StoreError> {
        let mut leased_hits = self.leases.forget(charges, self.cache_now(now));
        self.cache.forget(charges);
        if self.health.is_open() {
            return Err(StoreError::CircuitOpen);
        }
        let deleted = self.route.delete(charges, now).await;
        leased_hits += self.leases.forget(charges, self.cache_now(now));
        self.cache.forget(charges);
        let counters = deleted?;
        Ok(Cleared {
            counters,
            leased_hits,
        })
    }

    /// Hits held leased for the counter of `charge` at `now`.
    pub fn leased(&self, charge: &Charge, now: Nanos) -> Option<u64> {
        self.leases.held(charge, self.cache_now(now))
    }

    /// Drops the cache entries and leases expired at `now`.
    pub fn sweep(&self, now: Nanos) {
        let now = self.cache_now(now);
        self.cache.sweep(now);
        self.leases.sweep(now);
    }

    /// The over-limit cache's figures.
    pub fn local_cache_stats(&self) -> LocalCacheStats {
        LocalCacheStats {
            entries: self.cache.len() as u64,
            hits: self.cache_hits.load(Ordering::Relaxed),
        }
    }

    /// The leases' figures.
    pub fn lease_stats(&self) -> LeaseStats {
        LeaseStats {
            counters: self.leases.len() as u64,
            answered: self.leases.answered(),
        }
    }

    /// The cache's clock: the caller's time with a caller clock, else a monotonic clock (the
    /// wall clock may step; Redis's clock is not ours).
    fn cache_now(&self, now: Nanos) -> Nanos {
        match self.clock {
            RedisClock::Caller => now,
            RedisClock::Server => self.epoch.elapsed().as_nanos() as Nanos,
        }
    }

    /// A call with a leased charge: answered from held hits, or applied by Redis asking for
    /// more.
    async fn apply_leased(
        &self,
        charges: &[Charge],
        now: Nanos,
    ) -> Result<Vec<ChargeOutcome>, StoreError> {
        let sent_at = self.cache_now(now);
        // Held hits first: they are counted in Redis already (its over-limit answer may be
        // ours), and they answer while Redis is away.
        if let Some(outcomes) = self.leases.answer(charges, sent_at, true) {
            return Ok(outcomes);
        }
        let deadline = sent_at.saturating_add(self.timeout.as_nanos() as Nanos);
        let extras = self.leases.extras(charges, sent_at, deadline);
        let applied = self.apply_exact(charges, &extras, now, sent_at).await;
        if applied.is_err() {
            self.leases.abandon(charges, &extras, sent_at);
            // A refill that failed (Redis away): the hits still held answer.
            if let Some(outcomes) = self.leases.answer(charges, self.cache_now(now), false) {
                return Ok(outcomes);
            }
        }
        applied
    }

    /// A call applied by Redis (or answered by the over-limit cache); `extras`: hits each charge
    /// asks to lease (empty for none).
    async fn apply_exact(
        &self,
        charges: &[Charge],
        extras: &[u64],
        now: Nanos,
        sent_at: Nanos,
    ) -> Result<Vec<ChargeOutcome>, StoreError> {
        // Only a call whose every counter is known to be full skips Redis: the others would
        // need Redis's answer for their statuses anyway.
        let cached: Option<Vec<ChargeOutcome>> = charges
            .iter()
            .map(|c| self.cache.lookup(c, sent_at))
            .collect();
        if let Some(outcomes) = cached {
            self.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(outcomes);
        }
        if self.health.is_open() {
            return Err(StoreError::CircuitOpen);
        }
        // Bounded by the timeout without a timer of its own: each script run is bounded by
        // the earliest deadline among its calls, and runs leave a queue in the order their
        // calls joined it (batch.rs).
        match self.route.run(charges, extras, now).await {
            Ok(answered) => {
                self.health.call_succeeded();
                let outcomes: Vec<ChargeOutcome> = if extras.iter().any(|&e| e > 0) {
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
                self.health.call_failed(&e);
                Err(e)
            }
        }
    }
}
