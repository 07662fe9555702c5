//! Redis key layout: `<prefix>{<family tag>}<counter key bytes>`; or, with
//! `--redis-key-layout upstream`, envoyproxy/ratelimit's keys for the counters it could have
//! made (`compat_keys.rs`).
//!
//! The counter key bytes are collision-free (length-prefixed fields, see `store/key.rs`) and
//! the prefix may not contain braces, so distinct counters never share a Redis key. The hash
//! tag is a stable 64-bit hash of the counter's family (domain and first descriptor entry),
//! so related counters land in one Redis Cluster slot and are applied by one script call.
//!
//! A calendar limit's counter key names its window (`store/key.rs`), so its Redis key does too:
//! the script counts it as a window its key names, with the end sluice found, and never aligns
//! it on Redis's clock.

use std::time::Duration;

use redis::cluster_routing::Slot;

use super::compat_keys;
use super::script::{MICRO, NamedWindow};
use super::settings::RedisKeyLayout;
use crate::clock::{Nanos, SECOND};
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
    /// envoyproxy/ratelimit's windows), and its window when the key names it: in that layout,
    /// or a calendar limit's.
    pub fn place(&self, charge: &Charge, now: Nanos) -> (Vec<u8>, Option<NamedWindow>) {
        if let Some(jitter) = self.compat
            && let Some((key, window)) = compat_keys::key(&self.prefix, charge, now, jitter)
        {
            return (key, Some(window));
        }
        let key = self.key(&charge.key);
        let limit = &charge.limit;
        if !limit.is_calendar() {
            return (key, None);
        }
        let end = limit.origin.saturating_add(limit.window);
        let left = end.saturating_sub(now);
        let window = NamedWindow {
            reset_us: left.div_ceil(MICRO),
            // Kept a while past the window's end, so a Redis clock ahead of sluice's does not
            // drop the count before sluice moves to the next window.
            ttl_s: left.div_ceil(SECOND) + CALENDAR_EXPIRY_SLACK_S,
        };
        (key, Some(window))
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

/// Seconds a calendar window's key outlives the window's end (on Redis's clock).
const CALENDAR_EXPIRY_SLACK_S: u64 = 300;

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

    /// A calendar limit's key names its window in either layout (envoyproxy/ratelimit has no
    /// such counter) and carries the window's end from the caller's clock, with an expiry past
    /// it; the next window is another key in the same slot.
    #[test]
    fn calendar_windows_are_named_by_their_key() {
        use crate::algorithm::Limit;
        use crate::store::Gate;
        let day = |origin| Limit {
            algorithm: Algorithm::FixedWindow,
            requests: 5,
            window: 86_400 * SECOND,
            burst: 5,
            origin,
            recording: Default::default(),
        };
        let charge = |origin| {
            let mut b = CounterKeyBuilder::new("edge");
            b.entry("user", "u1");
            let limit = day(origin);
            Charge {
                key: b.finish_limit(0, &limit, None),
                limit,
                cost: 1,
                gate: Gate::Enforced,
                lease: 0,
                descriptor: 0,
            }
        };
        let start = 1_774_738_800 * SECOND;
        let now = start + 86_400 * SECOND - 1_500 * MICRO;
        for layout in [RedisKeyLayout::Sluice, RedisKeyLayout::Compat] {
            let layout = KeyLayout::new("p:", layout, Duration::ZERO).unwrap();
            let (key, window) = layout.place(&charge(start), now);
            assert_eq!(key, layout.key(&charge(start).key));
            let window = window.expect("a named window");
            assert_eq!(window.reset_us, 1_500);
            assert_eq!(window.ttl_s, 1 + CALENDAR_EXPIRY_SLACK_S);
            let next = layout.place(&charge(start + 86_400 * SECOND), now).0;
            assert!(next != key && slot(&next) == slot(&key));
        }
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
