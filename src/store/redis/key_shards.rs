//! A map by counter key bytes, split into locked shards: the over-limit cache's and the leases'.

use std::collections::HashMap;
use std::hash::BuildHasher;

use parking_lot::Mutex;

/// Hashed with foldhash: the keys are short and the maps bounded.
type Hasher = foldhash::fast::RandomState;

/// One shard: entries by the counter key's bytes, boxed to their length (a `CounterKey` keeps
/// short keys inline, which suits a call's stack, not a long-lived table).
pub(super) type KeyShard<V> = Mutex<HashMap<Box<[u8]>, V, Hasher>>;

/// `count` shards of at most `per_shard` entries each (the owner enforces the bound).
#[derive(Debug)]
pub(super) struct KeyShards<V> {
    shards: Box<[KeyShard<V>]>,
    /// The most entries a shard should hold; 0 holds nothing.
    pub(super) per_shard: usize,
    hasher: Hasher,
}

impl<V> KeyShards<V> {
    /// `count` shards sharing room for about `capacity` entries.
    pub(super) fn new(count: usize, capacity: usize) -> Self {
        Self {
            shards: (0..count).map(|_| Mutex::default()).collect(),
            per_shard: capacity.div_ceil(count),
            hasher: Hasher::default(),
        }
    }

    /// The shard `key` lives in.
    pub(super) fn shard(&self, key: &[u8]) -> &KeyShard<V> {
        &self.shards[self.hasher.hash_one(key) as usize % self.shards.len()]
    }

    /// Every shard, for sweeps and counts.
    pub(super) fn all(&self) -> impl Iterator<Item = &KeyShard<V>> {
        self.shards.iter()
    }

    /// The entries held, shard by shard.
    pub(super) fn len(&self) -> usize {
        self.all().map(|s| s.lock().len()).sum()
    }
}
