//! Redis key layout: `<prefix>{<family tag>}<counter key bytes>`; or, with
//! `--redis-key-layout upstream`, envoyproxy/ratelimit's keys for the counters it could have
//! made (`compat_keys.rs`).
//!
//! The counter key bytes are collision-free (length-prefixed fields, see `store/key.rs`) and
//! the prefix may not contain braces, so distinct counters never share a Redis key. The hash
//! tag is a stable 64-bit hash of the counter's family (domain and first descriptor entry),
//! so related counters land in one Redis Cluster slot and are decided by one script call.

use std::time::Duration;

use redis::cluster_routing::Slot;

use super::compat_keys::{self, CompatWindow};
use super::settings::RedisKeyLayout;
use crate::clock::Nanos;
use crate::store::{Charge, CounterKey, StoreError};

/// Builds Redis keys from counter keys.
#[derive(Debug, Clone)]
pub struct KeyLayout {
    prefix: Box<[u8]>,
    /// With envoyproxy/ratelimit's layout: the most expiry jitter of its keys.
    compat: Option<Duration>,
}

impl KeyLayout {
    /// A layout with `prefix` (`--redis-key-prefix`); braces are refused, as they would
    /// change which part of the key Redis Cluster hashes. `jitter` is the most random extra
    /// expiry of envoyproxy/ratelimit-layout keys.
    pub fn new(prefix: &str, layout: RedisKeyLayout, jitter: Duration) -> Result<Self, StoreError> {
        if prefix.contains(['{', '}']) {
            return Err(StoreError::BadKeyPrefix(prefix.to_owned()));
        }
        Ok(Self {
            prefix: prefix.as_bytes().into(),
            compat: (layout == RedisKeyLayout::Compat).then_some(jitter),
        })
    }

    /// The Redis key of `charge` at `now` (the caller's clock, which names
    /// envoyproxy/ratelimit's windows), and its window when it is in that layout.
    pub fn place(&self, charge: &Charge, now: Nanos) -> (Vec<u8>, Option<CompatWindow>) {
        if let Some(jitter) = self.compat
            && let Some((key, window)) = compat_keys::key(&self.prefix, charge, now, jitter)
        {
            return (key, Some(window));
        }
        (self.key(&charge.key), None)
    }

    /// The Redis key of `counter`.
    pub fn key(&self, counter: &CounterKey) -> Vec<u8> {
        let bytes = counter.as_bytes();
        let mut key = Vec::with_capacity(self.prefix.len() + 18 + bytes.len());
        key.extend_from_slice(&self.prefix);
        key.push(b'{');
        let tag = fnv1a(counter.family());
        key.extend(
            (0..16)
                .rev()
                .map(|i| b"0123456789abcdef"[(tag >> (i * 4)) as usize & 0xf]),
        );
        key.push(b'}');
        key.extend_from_slice(bytes);
        key
    }
}

/// The Redis Cluster slot of a key built by [`KeyLayout::key`].
pub fn slot(key: &[u8]) -> Slot {
    Slot::for_key(key)
}

/// FNV-1a, 64 bits: stable across processes, versions and platforms (keys are shared).
pub(super) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Algorithm;
    use crate::store::CounterKeyBuilder;

    fn counter(entries: &[(&str, &str)], index: u8) -> CounterKey {
        let mut b = CounterKeyBuilder::new("edge");
        for (k, v) in entries {
            b.entry(k, v);
        }
        b.finish(index, Algorithm::SlidingLog, 60)
    }

    /// Limits of one descriptor and nested descriptors share a slot; keys stay distinct.
    #[test]
    fn one_family_one_slot() {
        let layout = KeyLayout::new("sluice:", RedisKeyLayout::Sluice, Duration::ZERO).unwrap();
        let a = layout.key(&counter(&[("user", "u1")], 0));
        let b = layout.key(&counter(&[("user", "u1")], 1));
        let c = layout.key(&counter(&[("user", "u1"), ("path", "/x")], 0));
        assert!(a.starts_with(b"sluice:{") && a != b && a != c);
        assert_eq!((slot(&a), slot(&a)), (slot(&b), slot(&c)));
    }

    /// The tag is a fixed hash: the same counter gets the same key in every process.
    #[test]
    fn keys_are_stable() {
        let layout = KeyLayout::new("", RedisKeyLayout::Sluice, Duration::ZERO).unwrap();
        let key = layout.key(&counter(&[("user", "u1")], 0));
        assert_eq!(&key[..18], b"{2dc5be2ef4cac05b}");
    }

    /// A prefix with braces is refused.
    #[test]
    fn braces_in_prefix_are_refused() {
        let layout = |prefix| KeyLayout::new(prefix, RedisKeyLayout::Sluice, Duration::ZERO);
        assert!(layout("a{b}").is_err());
        assert!(layout("app:").is_ok());
    }
}
