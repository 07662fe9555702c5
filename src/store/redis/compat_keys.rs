//! envoyproxy/ratelimit's Redis key layout, for `--redis-key-layout upstream`: envoyproxy/ratelimit
//! replicas and sluice replicas on one Redis count `fixed_window` rules in the same keys, so a
//! rolling migration neither double-counts nor resets them.
//!
//! envoyproxy/ratelimit's key is `prefix + domain + "_" + (key + "_" + value + "_")… + window
//! start`, the window start in Unix seconds by the replica's own clock (a shared pattern in place
//! of the value for `share_threshold`), and its value a plain integer: `INCRBY` by the hits, then
//! `EXPIRE` for the window plus a random jitter, on every hit. Only counters envoyproxy/ratelimit
//! could have made use it: a `fixed_window` limit of whole seconds, the first (or only) limit of
//! its descriptor, not split into `shards:`. Such keys give up collision freedom as
//! envoyproxy/ratelimit's do: `_` inside keys and values can make two descriptors share a counter.

use std::time::Duration;

use crate::algorithm::Algorithm;
use crate::clock::{Nanos, SECOND};
use crate::store::Charge;

use super::script::{MICRO, NamedWindow};

/// The envoyproxy/ratelimit key of `charge` at `now` (Unix nanoseconds, the replica's clock), with
/// the window's end and expiry (the window plus the jitter drawn for this call), or `None` when
/// envoyproxy/ratelimit could not have made this counter (a calendar limit among them).
pub fn key(
    prefix: &[u8],
    charge: &Charge,
    now: Nanos,
    jitter: Duration,
) -> Option<(Vec<u8>, NamedWindow)> {
    let limit = &charge.limit;
    if limit.algorithm != Algorithm::FixedWindow
        || limit.is_calendar()
        || limit.window == 0
        || !limit.window.is_multiple_of(SECOND)
    {
        return None;
    }
    let parts = charge.key.parts()?;
    if parts.index != 0 || parts.sharded {
        return None;
    }
    let window_s = limit.window / SECOND;
    let start_s = now / SECOND / window_s * window_s;
    let mut key = Vec::with_capacity(prefix.len() + 64);
    key.extend_from_slice(prefix);
    key.extend_from_slice(parts.domain.as_bytes());
    key.push(b'_');
    for (k, v) in &parts.entries {
        key.extend_from_slice(k.as_bytes());
        key.push(b'_');
        key.extend_from_slice(v.as_bytes());
        key.push(b'_');
    }
    key.extend_from_slice(start_s.to_string().as_bytes());
    let end = (start_s + window_s).saturating_mul(SECOND);
    let jitter_s = jitter.as_secs();
    let window = NamedWindow {
        reset_us: (end - now).div_ceil(MICRO),
        ttl_s: window_s
            + if jitter_s > 0 {
                fastrand::u64(..jitter_s)
            } else {
                0
            },
    };
    Some((key, window))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Limit;
    use crate::store::{CounterKeyBuilder, Gate};

    fn charge(entries: &[(&str, &str)], algorithm: Algorithm, window: Nanos) -> Charge {
        let mut b = CounterKeyBuilder::new("domain");
        for (k, v) in entries {
            b.entry(k, v);
        }
        Charge {
            key: b.finish(0, algorithm, window),
            limit: Limit {
                algorithm,
                requests: 10,
                window,
                burst: 10,
                origin: 0,
                recording: Default::default(),
            },
            cost: 1,
            gate: Gate::Enforced,
            lease: 0,
            descriptor: 0,
        }
    }

    fn text(key: Option<(Vec<u8>, NamedWindow)>) -> String {
        String::from_utf8(key.expect("an upstream key").0).unwrap()
    }

    /// Layout details the integration test (tests/redis/compat_keys.rs) does not cover:
    /// the window's end to the microsecond, the expiry's bounds, and what is left out.
    #[test]
    fn window_end_expiry_and_exclusions() {
        let minute = charge(&[("key", "value")], Algorithm::FixedWindow, 60 * SECOND);
        let now = 1234 * SECOND + 500;
        let (key, w) = key(b"", &minute, now, Duration::from_secs(300)).unwrap();
        assert_eq!(key, b"domain_key_value_1200");
        assert_eq!(w.reset_us, (1260 * SECOND - now).div_ceil(MICRO));
        assert!((60..360).contains(&w.ttl_s), "{}", w.ttl_s);
        let exact = super::key(b"", &minute, now, Duration::ZERO).unwrap().1;
        assert_eq!(exact.ttl_s, 60);
        let sliding = charge(&[("k", "v")], Algorithm::SlidingWindow, 60 * SECOND);
        assert_eq!(super::key(b"", &sliding, now, Duration::ZERO), None);
        let sub_second = charge(&[("k", "v")], Algorithm::FixedWindow, SECOND / 2);
        assert_eq!(super::key(b"", &sub_second, now, Duration::ZERO), None);
        let mut second_limit = minute.clone();
        let mut b = CounterKeyBuilder::new("domain");
        b.entry("key", "value");
        second_limit.key = b.finish(1, Algorithm::FixedWindow, 60 * SECOND);
        assert_eq!(super::key(b"", &second_limit, now, Duration::ZERO), None);
        let mut sharded = minute.clone();
        sharded.key = b.finish_shard(0, Algorithm::FixedWindow, 60 * SECOND, 1);
        assert_eq!(super::key(b"", &sharded, now, Duration::ZERO), None);
        let prefixed = super::key(b"rl:", &minute, now, Duration::ZERO);
        assert_eq!(text(prefixed), "rl:domain_key_value_1200");
    }
}
