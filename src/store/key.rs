//! Counter keys: a collision-free byte encoding of (domain, descriptor entries, limit identity).
//!
//! Every field is length-prefixed, so values containing separators (`_`, `.`, `:`) can never make
//! two descriptors share a counter, unlike envoyproxy/ratelimit's `domain_key_value_`
//! concatenation. The encoding excludes `requests_per_unit`, so a rule whose limit changes keeps
//! its count. A calendar limit's key also names its window's start, so each local day (week,
//! month, year) is a counter of its own on every store.

use smallvec::SmallVec;

use crate::algorithm::{Algorithm, Limit};
use crate::clock::Nanos;

/// Key bytes held inline, without a heap allocation: a domain and one or two short entries
/// (`edge`, `api_key` = `customer-00000001` takes 52). Longer keys spill to the heap.
const INLINE_KEY: usize = 64;

/// The identity of one counter.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CounterKey(SmallVec<[u8; INLINE_KEY]>);

impl CounterKey {
    /// The encoded bytes (stable across restarts and replicas).
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// Rebuilds a key from bytes produced by [`CounterKey::as_bytes`].
    pub fn from_bytes(bytes: &[u8]) -> Self {
        Self(SmallVec::from_slice(bytes))
    }

    /// The key's family: its domain and first descriptor entry (the whole key if it cannot be
    /// read that way). Counters of one family sit together in Redis Cluster (one hash tag), so
    /// the limits of one descriptor and the nested descriptors under one first entry are
    /// applied in one atomic script call.
    pub fn family(&self) -> &[u8] {
        let bytes = &self.0;
        // domain, then the first entry: tag byte, key, value (each string length-prefixed).
        let end = skip_str(bytes, 0)
            .filter(|&at| bytes.get(at).is_some_and(|&tag| tag != 0xff))
            .and_then(|at| skip_str(bytes, at + 1))
            .and_then(|at| skip_str(bytes, at));
        &bytes[..end.unwrap_or(bytes.len())]
    }
}

/// A counter key read back into its parts (for a key layout that spells them out, such as
/// envoyproxy/ratelimit's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyParts<'a> {
    /// The domain.
    pub domain: &'a str,
    /// Each descriptor entry: its key and value (the shared pattern for `share_threshold`).
    pub entries: Vec<(&'a str, &'a str)>,
    /// The limit's position on its node (0: the first or only one).
    pub index: u8,
    /// Whether it is one sub-counter of a rule split with `shards:`.
    pub sharded: bool,
    /// A calendar limit's window: when it starts (Unix nanoseconds).
    pub window_start: Option<Nanos>,
}

impl CounterKey {
    /// The key's parts, or `None` for bytes [`CounterKeyBuilder`] did not make.
    pub fn parts(&self) -> Option<KeyParts<'_>> {
        let bytes = &self.0;
        let text = |at: usize| -> Option<(&str, usize)> {
            let end = skip_str(bytes, at)?;
            Some((std::str::from_utf8(&bytes[at + 4..end]).ok()?, end))
        };
        let (domain, mut at) = text(0)?;
        let mut entries = Vec::new();
        while *bytes.get(at)? != 0xff {
            let (key, after_key) = text(at + 1)?;
            let (value, after_value) = text(after_key)?;
            entries.push((key, value));
            at = after_value;
        }
        // 0xff, index, algorithm, window (8 bytes), a calendar window's start (8) or nothing,
        // then a shard number (4) or nothing.
        let index = *bytes.get(at + 1)?;
        let (calendar, sharded) = match bytes.len() - at {
            11 => (false, false),
            15 => (false, true),
            19 => (true, false),
            23 => (true, true),
            _ => return None,
        };
        let window_start = calendar
            .then(|| {
                bytes[at + 11..at + 19]
                    .try_into()
                    .ok()
                    .map(Nanos::from_le_bytes)
            })
            .flatten();
        Some(KeyParts {
            domain,
            entries,
            index,
            sharded,
            window_start,
        })
    }
}

/// The offset just past the length-prefixed string starting at `at`, if it is all there.
fn skip_str(bytes: &[u8], at: usize) -> Option<usize> {
    let len: [u8; 4] = bytes.get(at..at + 4)?.try_into().ok()?;
    let end = at + 4 + u32::from_le_bytes(len) as usize;
    (end <= bytes.len()).then_some(end)
}

/// Tag of a level whose value is the request's own value.
const RUNTIME_VALUE: u8 = 0;
/// Tag of a level whose value is a shared wildcard pattern (`share_threshold`).
const SHARED_PATTERN: u8 = 1;

/// Builds a [`CounterKey`] field by field.
///
/// The bytes are written into a plain array while they fit (a `SmallVec` append, through its
/// general insert, cost more than the rest of building the key), and spill to a `Vec` past it.
#[derive(Debug)]
pub struct CounterKeyBuilder {
    inline: [u8; INLINE_KEY],
    len: usize,
    /// Every byte once the key outgrew `inline`; empty until then.
    spilled: Vec<u8>,
}

impl CounterKeyBuilder {
    /// Starts a key in `domain`.
    pub fn new(domain: &str) -> Self {
        let mut builder = Self {
            inline: [0; INLINE_KEY],
            len: 0,
            spilled: Vec::new(),
        };
        builder.put_str(domain);
        builder
    }

    /// Adds one descriptor entry with the request's value.
    pub fn entry(&mut self, key: &str, value: &str) -> &mut Self {
        self.level(RUNTIME_VALUE, key, value)
    }

    /// Adds one descriptor entry counted under its shared wildcard pattern.
    pub fn shared_entry(&mut self, key: &str, pattern: &str) -> &mut Self {
        self.level(SHARED_PATTERN, key, pattern)
    }

    fn level(&mut self, tag: u8, key: &str, value: &str) -> &mut Self {
        self.put(&[tag]);
        self.put_str(key);
        self.put_str(value);
        self
    }

    /// Finishes the key with the limit's identity: its position on the node, algorithm and window.
    pub fn finish(&self, index: u8, algorithm: Algorithm, window: Nanos) -> CounterKey {
        self.finish_with(&identity(index, algorithm, window), &[])
    }

    /// As [`CounterKeyBuilder::finish`], for sub-counter `shard` of a rule split with
    /// `shards:`. The four extra bytes after the limit's identity make it differ from every
    /// unsharded key (which ends right after the window).
    pub fn finish_shard(
        &self,
        index: u8,
        algorithm: Algorithm,
        window: Nanos,
        shard: u32,
    ) -> CounterKey {
        self.finish_with(&identity(index, algorithm, window), &shard.to_le_bytes())
    }

    /// The key of `limit` as it is charged, the limit at position `index` on its node, as
    /// sub-counter `shard` of a rule split with `shards:` if given: [`CounterKeyBuilder::finish`]
    /// or [`CounterKeyBuilder::finish_shard`], with a calendar limit's window start (its
    /// origin) after the window, so a new local day is a new counter.
    pub fn finish_limit(&self, index: u8, limit: &Limit, shard: Option<u32>) -> CounterKey {
        let identity = identity(index, limit.algorithm, limit.window);
        let mut extra = [0; 12];
        let mut len = 0;
        if limit.is_calendar() {
            extra[..8].copy_from_slice(&limit.origin.to_le_bytes());
            len = 8;
        }
        if let Some(shard) = shard {
            extra[len..len + 4].copy_from_slice(&shard.to_le_bytes());
            len += 4;
        }
        self.finish_with(&identity, &extra[..len])
    }

    /// The entries so far, then `identity` and `extra`.
    fn finish_with(&self, identity: &[u8], extra: &[u8]) -> CounterKey {
        let prefix = self.bytes();
        let (end, len) = (
            prefix.len() + identity.len(),
            prefix.len() + identity.len() + extra.len(),
        );
        if len <= INLINE_KEY {
            let mut inline = [0; INLINE_KEY];
            inline[..prefix.len()].copy_from_slice(prefix);
            inline[prefix.len()..end].copy_from_slice(identity);
            inline[end..len].copy_from_slice(extra);
            return CounterKey(SmallVec::from_buf_and_len(inline, len));
        }
        let mut bytes = Vec::with_capacity(len);
        bytes.extend_from_slice(prefix);
        bytes.extend_from_slice(identity);
        bytes.extend_from_slice(extra);
        CounterKey(SmallVec::from_vec(bytes))
    }

    fn bytes(&self) -> &[u8] {
        if self.spilled.is_empty() {
            &self.inline[..self.len]
        } else {
            &self.spilled
        }
    }

    #[inline]
    fn put_str(&mut self, s: &str) {
        self.put(&(s.len() as u32).to_le_bytes());
        self.put(s.as_bytes());
    }

    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        let end = self.len + bytes.len();
        if self.spilled.is_empty() && end <= INLINE_KEY {
            self.inline[self.len..end].copy_from_slice(bytes);
            self.len = end;
            return;
        }
        if self.spilled.is_empty() {
            self.spilled.extend_from_slice(&self.inline[..self.len]);
        }
        self.spilled.extend_from_slice(bytes);
    }
}

/// The limit's identity after the entries: 0xff (no entry tag is 0xff), its position on the
/// node, its algorithm and its window.
fn identity(index: u8, algorithm: Algorithm, window: Nanos) -> [u8; 11] {
    let mut bytes = [0; 11];
    bytes[0] = 0xff;
    bytes[1] = index;
    bytes[2] = algorithm as u8;
    bytes[3..].copy_from_slice(&window.to_le_bytes());
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(entries: &[(&str, &str)]) -> CounterKey {
        let mut b = CounterKeyBuilder::new("d");
        for (k, v) in entries {
            b.entry(k, v);
        }
        b.finish(0, Algorithm::FixedWindow, 60)
    }

    /// The encoding spelled out byte by byte, for keys that fit inline and keys that spill
    /// (at the entries or only at the limit's identity or shard): the bytes saved by a release
    /// are the bytes the next one rebuilds.
    #[test]
    fn the_bytes_are_the_documented_encoding_at_every_length() {
        fn text(out: &mut Vec<u8>, s: &str) {
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        for len in [0, 1, 20, 30, 31, 35, 40, 60, 200, 5_000] {
            let value = "v".repeat(len);
            let mut b = CounterKeyBuilder::new("dom");
            b.entry("k", &value).shared_entry("s", "p*");
            let mut expected = Vec::new();
            text(&mut expected, "dom");
            expected.push(RUNTIME_VALUE);
            text(&mut expected, "k");
            text(&mut expected, &value);
            expected.push(SHARED_PATTERN);
            text(&mut expected, "s");
            text(&mut expected, "p*");
            expected.extend_from_slice(&[0xff, 3, Algorithm::SlidingWindow as u8]);
            expected.extend_from_slice(&60u64.to_le_bytes());
            let key = b.finish(3, Algorithm::SlidingWindow, 60);
            assert_eq!(key.as_bytes(), expected.as_slice(), "{len}");
            expected.extend_from_slice(&7u32.to_le_bytes());
            let shard = b.finish_shard(3, Algorithm::SlidingWindow, 60, 7);
            assert_eq!(shard.as_bytes(), expected.as_slice(), "{len}");
        }
    }

    /// Separators inside keys and values cannot make two descriptors share a counter.
    #[test]
    fn separators_do_not_collide() {
        assert_ne!(key(&[("a_b", "c")]), key(&[("a", "b_c")]));
        assert_ne!(
            key(&[("a", "b"), ("c", "d")]),
            key(&[("a", "b\u{0}c"), ("d", "")])
        );
        assert_eq!(key(&[("a", "b")]), key(&[("a", "b")]));
    }

    /// A shared pattern never equals a runtime value spelled the same way.
    #[test]
    fn shared_pattern_differs_from_literal_value() {
        let mut shared = CounterKeyBuilder::new("d");
        shared.shared_entry("files", "files/*");
        assert_ne!(
            shared.finish(0, Algorithm::FixedWindow, 60),
            key(&[("files", "files/*")])
        );
    }

    /// The family is the domain and first entry: shared by nested descriptors and limits.
    #[test]
    fn family_is_domain_and_first_entry() {
        let one = key(&[("user", "u1")]);
        let nested = key(&[("user", "u1"), ("path", "/a")]);
        assert_eq!(one.family(), nested.family());
        assert_ne!(one.family(), key(&[("user", "u2")]).family());
        assert_ne!(key(&[("user", "u1_")]).family(), one.family());
        let bare = CounterKeyBuilder::new("d").finish(0, Algorithm::FixedWindow, 60);
        assert!(bare.as_bytes().starts_with(bare.family()));
    }

    /// A key reads back into its domain, entries (shared patterns as written), position and
    /// whether it is sharded; foreign bytes do not.
    #[test]
    fn parts_read_back() {
        let mut b = CounterKeyBuilder::new("edge");
        b.entry("user", "a_b").shared_entry("path", "/api/*");
        let key = b.finish(2, Algorithm::FixedWindow, 60);
        let parts = key.parts().unwrap();
        assert_eq!(
            parts,
            KeyParts {
                domain: "edge",
                entries: vec![("user", "a_b"), ("path", "/api/*")],
                index: 2,
                sharded: false,
                window_start: None,
            }
        );
        let shard = b.finish_shard(0, Algorithm::FixedWindow, 60, 3);
        let shard = shard.parts().unwrap();
        assert!(shard.sharded && shard.index == 0);
        let bare = CounterKeyBuilder::new("d").finish(0, Algorithm::SlidingLog, 1);
        assert_eq!(bare.parts().unwrap().entries, vec![]);
        assert_eq!(CounterKey::from_bytes(b"\x01\x00").parts(), None);
    }

    /// Window, algorithm and limit position are part of the identity.
    #[test]
    fn limit_identity_is_part_of_the_key() {
        let b = CounterKeyBuilder::new("d");
        let base = b.finish(0, Algorithm::FixedWindow, 60);
        assert_ne!(base, b.finish(1, Algorithm::FixedWindow, 60));
        assert_ne!(base, b.finish(0, Algorithm::SlidingLog, 60));
        assert_ne!(base, b.finish(0, Algorithm::FixedWindow, 61));
    }

    /// A calendar limit's key names its window: the next local day is another counter, and
    /// the start reads back (sharded or not); `finish_limit` of an ordinary limit is `finish`.
    #[test]
    fn calendar_keys_name_their_window() {
        let b = CounterKeyBuilder::new("d");
        let day = |origin, window| Limit {
            algorithm: Algorithm::FixedWindow,
            requests: 5,
            window,
            burst: 5,
            origin,
            recording: Default::default(),
        };
        let (today, tomorrow) = (day(1_000, 23), day(1_023, 24));
        let key = b.finish_limit(0, &today, None);
        assert_ne!(key, b.finish_limit(0, &tomorrow, None));
        assert_eq!(key, b.finish_limit(0, &today, None));
        assert_eq!(key.parts().unwrap().window_start, Some(1_000));
        let shard = b.finish_limit(0, &today, Some(2));
        let shard = shard.parts().unwrap();
        assert_eq!((shard.window_start, shard.sharded), (Some(1_000), true));
        let epoch = day(0, 60);
        assert_eq!(
            b.finish_limit(1, &epoch, None),
            b.finish(1, Algorithm::FixedWindow, 60)
        );
        assert_eq!(
            b.finish_limit(1, &epoch, Some(3)),
            b.finish_shard(1, Algorithm::FixedWindow, 60, 3)
        );
        assert_eq!(
            b.finish(1, Algorithm::FixedWindow, 60)
                .parts()
                .unwrap()
                .window_start,
            None
        );
    }

    /// Sub-counters of a sharded rule differ from each other and from the unsharded counter.
    #[test]
    fn sub_counters_are_distinct() {
        let b = CounterKeyBuilder::new("d");
        let base = b.finish(0, Algorithm::FixedWindow, 60);
        let s0 = b.finish_shard(0, Algorithm::FixedWindow, 60, 0);
        assert_ne!(base, s0);
        assert_ne!(s0, b.finish_shard(0, Algorithm::FixedWindow, 60, 1));
        assert_eq!(s0, b.finish_shard(0, Algorithm::FixedWindow, 60, 0));
    }
}
