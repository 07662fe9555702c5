//! Counter stores: the atomic check-and-commit of all the counters of one call.
//!
//! A store never reads rules; it is handed [`Charge`]s (a counter key, the algorithm parameters,
//! the cost and how a denial gates the call) and answers one [`ChargeOutcome`] per charge,
//! committing the admitted charges only if the call as a whole is not blocked (see [`gate`]).

mod bucket;
mod error;
mod fingerprint;
pub mod gate;
mod key;
pub mod memory;
pub mod persist;
mod portion;
pub mod redis;
mod region_claim;
pub mod saved;
mod stats;
#[cfg(test)]
pub(crate) mod testing;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::algorithm::{Limit, Verdict};
use crate::clock::Nanos;

pub use bucket::{BucketId, bucket_identity};
pub use error::{BadReply, ClaimError, StoreError, UrlProblem};
pub use fingerprint::{Fingerprint, Fingerprinter};
pub use gate::Gate;
pub use key::{CounterKey, CounterKeyBuilder, KeyParts};
pub use memory::{MemoryOptions, MemoryStore};
pub use persist::{PersistSettings, PersistentStore};
pub use portion::{Claim, ClaimFuture, ClaimTerms, Claimed, PortionStore};
pub use redis::{RedisSettings, RedisStore};
pub use region_claim::{
    Membership, RegionAnswer, RegionClaim, RegionClaimFuture, RegionClaimed, RegionTerms, SETTLE,
    valid_region_name,
};
pub use stats::{LeaseStats, LocalCacheStats, PersistStats, StoreStats};

/// One counter to check (and charge) within a call.
#[derive(Debug, Clone)]
pub struct Charge {
    /// The counter.
    pub key: CounterKey,
    /// Algorithm and parameters.
    pub limit: Limit,
    /// Hits to consume; 0 checks without consuming.
    pub cost: u64,
    /// How a denial of this charge affects the whole call.
    pub gate: Gate,
    /// The rule's `lease`: hits a replica may take from a shared store at a time and admit
    /// locally; 0 for none (every embedded-store charge is exact whatever this says).
    pub lease: u32,
    /// The index of the charge's descriptor in its call (the charges of one descriptor share
    /// it): a descriptor whose charge crosses a limit that records every charge is recorded on
    /// each such limit of it, even when its call is refused (see [`Store::apply`]).
    pub descriptor: u32,
}

/// What became of one charge: the algorithm's verdict on its counter, and what the counter had
/// room for before the call. (Up the layers: an algorithm's [`Verdict`] on one counter, a
/// store's `ChargeOutcome` on one charge, the limiter's `Decision` on one call.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChargeOutcome {
    /// The algorithm's verdict.
    pub verdict: Verdict,
    /// Hits that would have fit before this call (for envoyproxy/ratelimit's near/over-limit
    /// statistics).
    pub available: u64,
}

impl ChargeOutcome {
    /// The outcome of a charge judged on `stored` state: `available` is derived from the verdict
    /// when admitted, and computed afresh when denied.
    pub fn judged(
        charge: &Charge,
        stored: Option<&crate::algorithm::State>,
        now: Nanos,
        verdict: Verdict,
    ) -> Self {
        let available = if verdict.admitted {
            verdict.remaining.saturating_add(charge.cost)
        } else {
            crate::algorithm::available(&charge.limit, stored, now)
        };
        Self { verdict, available }
    }
}

/// A store's background work (e.g. Redis's recovery probe), run until shutdown.
pub type BackgroundTask = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// The boxed future a [`Store`] returns (stores are used as trait objects).
pub type StoreFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<ChargeOutcome>, StoreError>> + Send + 'a>>;

/// What [`Store::reset`] cleared.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cleared {
    /// Counters that held state and were removed (a counter never charged, or idle, is not
    /// counted).
    pub counters: u64,
    /// Leased hits this replica held for them and gave up (Redis `lease:` rules).
    pub leased_hits: u64,
}

/// The boxed future a [`Store::reset`] returns.
pub type ResetFuture<'a> = Pin<Box<dyn Future<Output = Result<Cleared, StoreError>> + Send + 'a>>;

/// The boxed future of [`Store::flush`].
pub type FlushFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// A counter store.
pub trait Store: Send + Sync + 'static {
    /// Applies every charge of one call at `now`, atomically: either every admitted charge is
    /// committed (the call is not blocked) or nothing is, but for the limits that record every
    /// charge ([`crate::algorithm::Recording`]) of a descriptor whose charge crossed one of them:
    /// those keep the descriptor's hits (its tokens were spent) whatever the call's fate.
    /// Returns one outcome per charge, in order.
    fn apply<'a>(&'a self, charges: &'a [Charge], now: Nanos) -> StoreFuture<'a>;

    /// [`Store::apply`] for a call of one charge, answered on the spot by a store that never
    /// waits (the embedded one): no boxed future, no vector. `None`: use [`Store::apply`].
    fn apply_one_now(&self, _charge: &Charge, _now: Nanos) -> Option<ChargeOutcome> {
        None
    }

    /// Removes the counters of `charges` (only their keys and limits are read: a Redis key
    /// in envoyproxy/ratelimit's layout, or a calendar window's, is named from the limit and
    /// `now`), so the next call finds them fresh; with persistence, the removal reaches the
    /// disk before the future resolves. Leased hits this replica holds for them are given up.
    /// The admin listener's `DELETE /counters`: off the request path.
    fn reset<'a>(&'a self, charges: &'a [Charge], now: Nanos) -> ResetFuture<'a>;

    /// Hits this replica holds leased for the counter of `charge` at `now` (a shared store's
    /// `lease:` rules); `None` for a store that leases nothing.
    fn leased(&self, _charge: &Charge, _now: Nanos) -> Option<u64> {
        None
    }

    /// A short name for logs and metrics (`memory`, `redis`).
    fn name(&self) -> &'static str;

    /// Housekeeping, about once a second and on a blocking thread: drops what is equivalent to
    /// "never seen" at `now` (idle counters, expired local-cache entries). A shared store
    /// expires its keys itself.
    fn sweep(&self, _now: Nanos) {}

    /// How often the server should call [`Store::flush`]; `None` for a store that needs none.
    fn flush_interval(&self) -> Option<Duration> {
        None
    }

    /// Makes every committed charge durable. `last` is the final flush at shutdown, after
    /// in-flight calls ended: it also syncs to disk. Failures are logged and counted in
    /// [`Store::stats`], not returned: counting goes on without persistence.
    fn flush(&self, _now: Nanos, _last: bool) -> FlushFuture<'_> {
        Box::pin(std::future::ready(()))
    }

    /// Every figure the store keeps, as plain data (the composition root publishes them).
    fn stats(&self) -> StoreStats {
        StoreStats::default()
    }

    /// Whether the store is healthy enough to report ready (`/healthcheck`, gRPC health).
    /// A shared store reports a sustained outage, not a blip.
    fn healthy(&self) -> bool {
        true
    }

    /// Background work the store needs, to be run until `shutdown` is cancelled.
    fn background(&self, _shutdown: tokio_util::sync::CancellationToken) -> Option<BackgroundTask> {
        None
    }

    /// Where replicas sharing this store claim their portions of RLQS limits; `None` for a store
    /// only this process uses (it hands out whole limits).
    fn portion_store(&self) -> Option<std::sync::Arc<dyn PortionStore>> {
        None
    }
}
