//! The units this replica enforces a global limit on (counters of `scope: global` limits, RLQS
//! buckets of them), each with its demand and its last claim, in locked shards by the unit's
//! bytes: the request path touches one shard for a moment, the claim round walks them all.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::clock::Nanos;
use crate::store::{BucketId, RegionClaimed};

/// Hashed with foldhash: unit keys are short and the table bounded.
type Hasher = foldhash::fast::RandomState;

/// Shards of the table: enough that calls on different counters seldom meet.
const SHARDS: usize = 64;

/// Which part of sluice enforces a unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnitKind {
    /// A counter RLS calls are charged to.
    Counter,
    /// An RLQS bucket whose shares Envoys enforce.
    Bucket,
}

/// What names a unit: in the global store (domain and bucket id) and to operators (its rule).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitName {
    /// The domain.
    pub domain: Arc<str>,
    /// The name claimed in the global store: the RLQS bucket id, or for a counter
    /// `{"": <its key in hex>}` (an RLQS bucket id never has an empty key).
    pub bucket: BucketId,
    /// The full key of the rule whose limit it is.
    pub rule: Arc<str>,
    /// The limit's position among the rule's limits.
    pub limit: u8,
    /// Counter or bucket.
    pub kind: UnitKind,
}

/// A portion claimed and until when this replica may enforce it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Held {
    /// The fraction of the limit.
    pub portion: f64,
    /// The end of its life here: the claim's ttl from when it was sent.
    pub until: Nanos,
}

/// One unit's state.
#[derive(Debug, Clone)]
pub struct Unit {
    /// Its names.
    pub name: Arc<UnitName>,
    /// The whole limit's rate, hits per second.
    pub rate: f64,
    /// Hits asked since the last claim round (counters).
    pub offered: u64,
    /// Hits per second asked over the last round (for a bucket, what its streams report).
    pub demand: f64,
    /// The last portion claimed, while it may be enforced.
    pub held: Option<Held>,
    /// When it was last asked for.
    pub seen: Nanos,
    /// The global store's last answer for it.
    pub answer: Option<RegionClaimed>,
    /// The demand its last claim carried (0 before the first).
    pub claimed_demand: f64,
    /// What the global store keeps reserved for this replica since its last claim: the
    /// portion granted or the one it said it held, the larger (until that claim lapses).
    pub reserved: f64,
}

impl Unit {
    /// A unit first seen at `now`.
    pub fn new(name: Arc<UnitName>, rate: f64, now: Nanos) -> Self {
        Self {
            name,
            rate,
            offered: 0,
            demand: 0.0,
            held: None,
            seen: now,
            answer: None,
            claimed_demand: 0.0,
            reserved: 0.0,
        }
    }

    /// The claimed portion it may enforce at `now` (0 when none is live).
    pub fn live_portion(&self, now: Nanos) -> f64 {
        self.held
            .filter(|h| now < h.until)
            .map_or(0.0, |h| h.portion)
    }
}

/// One shard: units by their key's bytes.
type Shard = Mutex<HashMap<Box<[u8]>, Unit, Hasher>>;

/// The table.
pub struct Units {
    shards: Box<[Shard]>,
    hasher: Hasher,
    per_shard: usize,
}

impl Units {
    /// A table of about `capacity` units at most.
    pub fn new(capacity: usize) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: Hasher::default(),
            per_shard: capacity.div_ceil(SHARDS).max(1),
        }
    }

    fn shard(&self, key: &[u8]) -> &Shard {
        &self.shards[self.hasher.hash_one(key) as usize % SHARDS]
    }

    /// Runs `f` on the unit named `key`, made by `make` when it is new and the table has room;
    /// `None` when it is new and the table is full.
    pub fn with<T>(
        &self,
        key: &[u8],
        make: impl FnOnce() -> Unit,
        f: impl FnOnce(&mut Unit) -> T,
    ) -> Option<T> {
        let mut shard = self.shard(key).lock();
        if let Some(unit) = shard.get_mut(key) {
            return Some(f(unit));
        }
        if shard.len() >= self.per_shard {
            return None;
        }
        let unit = shard.entry(key.into()).or_insert_with(make);
        Some(f(unit))
    }

    /// Runs `f` on the unit named `key` to change it, if there is one.
    pub fn update<T>(&self, key: &[u8], f: impl FnOnce(&mut Unit) -> T) -> Option<T> {
        self.shard(key).lock().get_mut(key).map(f)
    }

    /// Runs `f` on the unit named `key`, if there is one.
    pub fn get<T>(&self, key: &[u8], f: impl FnOnce(&Unit) -> T) -> Option<T> {
        self.shard(key).lock().get(key).map(f)
    }

    /// Runs `f` on every unit, shard by shard; drops those for which it answers `false`.
    pub fn retain(&self, f: &mut impl FnMut(&[u8], &mut Unit) -> bool) {
        for shard in self.shards.iter() {
            shard.lock().retain(|key, unit| f(key, unit));
        }
    }
}

/// The table key of an RLQS bucket: its identity (`store::bucket_identity`). A counter's is its
/// key's bytes.
pub fn bucket_unit_key(domain: &str, bucket: &BucketId) -> Vec<u8> {
    crate::store::bucket_identity(domain, bucket)
}

/// The name a counter is claimed under: `{"": <its key in hex>}`.
pub fn counter_bucket(counter: &[u8]) -> BucketId {
    let mut hex = String::with_capacity(counter.len() * 2);
    for b in counter {
        hex.push_str(&format!("{b:02x}"));
    }
    [(String::new(), hex)].into()
}
