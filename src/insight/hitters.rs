//! The keys limited most in the last minutes: a Space-Saving sketch (Metwally et al.) per
//! one-minute window, a ring of the last few windows, sharded by key so that concurrent
//! refusals rarely share a lock. Memory is fixed: `slots` keys per shard and window, each key
//! cut to [`MAX_KEY_BYTES`].
//!
//! Space-Saving keeps every key whose count exceeds total/slots, and overestimates a count by at
//! most the `error` it reports (the count of the key it displaced).

use std::collections::HashMap;
use std::hash::BuildHasher;

use parking_lot::Mutex;

/// Seconds per window of the sketch.
pub(crate) const HITTER_WINDOW_SECONDS: u64 = 60;
/// Windows kept: the sketch covers the last 5 minutes (the current window partly).
pub(crate) const HITTER_WINDOWS: usize = 5;
/// Keys kept per window by default, over all shards.
pub(super) const DEFAULT_SLOTS: usize = 256;
/// Lock shards.
const SHARDS: usize = 8;
/// Longest key kept, in bytes (a descriptor may be up to 64 KiB of text).
const MAX_KEY_BYTES: usize = 256;

/// One of the keys limited most.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitedKey {
    /// The domain.
    pub domain: String,
    /// The descriptor, `key=value` entries joined by `, ` (cut to 256 bytes).
    pub descriptor: String,
    /// Refusals counted (an upper bound).
    pub count: u64,
    /// How much `count` may overestimate.
    pub error: u64,
}

/// The windowed, sharded sketch.
#[derive(Debug)]
pub struct TopKeys {
    shards: Box<[Mutex<Ring>]>,
    hasher: foldhash::fast::RandomState,
    ticks: std::sync::atomic::AtomicU64,
}

impl TopKeys {
    /// A sketch keeping about `slots` keys per window.
    pub fn new(slots: usize) -> Self {
        let per_shard = slots.div_ceil(SHARDS).max(1);
        Self {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(Ring::new(per_shard)))
                .collect(),
            hasher: foldhash::fast::RandomState::default(),
            ticks: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Counts one refusal of `entries` in `domain`.
    pub fn offer(&self, domain: &str, entries: &[(String, String)]) {
        let key = display_key(domain, entries);
        let shard = (self.hasher.hash_one(&key) as usize) % self.shards.len();
        self.shards[shard].lock().current().offer(key);
    }

    /// One second passed; every minute the oldest window is dropped.
    pub fn tick(&self) {
        let ticks = self
            .ticks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        if ticks.is_multiple_of(HITTER_WINDOW_SECONDS) {
            for shard in self.shards.iter() {
                shard.lock().rotate();
            }
        }
    }

    /// The `n` keys with the highest counts over all windows, highest first.
    pub fn top(&self, n: usize) -> Vec<LimitedKey> {
        let mut all: Vec<LimitedKey> = Vec::new();
        for shard in self.shards.iter() {
            // A key lives in one shard, so the shards' sums never overlap.
            let mut sums: HashMap<&str, (u64, u64)> = HashMap::new();
            let ring = shard.lock();
            for window in &ring.windows {
                for entry in &window.entries {
                    let sum = sums.entry(&entry.key).or_default();
                    sum.0 += entry.count;
                    sum.1 += entry.error;
                }
            }
            all.extend(sums.into_iter().map(|(key, (count, error))| {
                let (domain, descriptor) = key.split_once('\0').unwrap_or((key, ""));
                LimitedKey {
                    domain: domain.to_owned(),
                    descriptor: descriptor.to_owned(),
                    count,
                    error,
                }
            }));
        }
        all.sort_by(|a, b| {
            b.count
                .cmp(&a.count)
                .then_with(|| a.descriptor.cmp(&b.descriptor))
        });
        all.truncate(n);
        all
    }
}

/// `domain\0k=v, k2=v2`, cut to [`MAX_KEY_BYTES`] at a character boundary.
fn display_key(domain: &str, entries: &[(String, String)]) -> Box<str> {
    let mut key = String::with_capacity(64);
    key.push_str(domain);
    key.push('\0');
    for (i, (k, v)) in entries.iter().enumerate() {
        if i > 0 {
            key.push_str(", ");
        }
        key.push_str(k);
        key.push('=');
        key.push_str(v);
        if key.len() > MAX_KEY_BYTES {
            break;
        }
    }
    if key.len() > MAX_KEY_BYTES {
        let mut end = MAX_KEY_BYTES;
        while !key.is_char_boundary(end) {
            end -= 1;
        }
        key.truncate(end);
    }
    key.into_boxed_str()
}

/// The windows of one shard, the current one last.
#[derive(Debug)]
struct Ring {
    windows: Vec<SpaceSaving>,
    current: usize,
}

impl Ring {
    fn new(slots: usize) -> Self {
        Self {
            windows: (0..HITTER_WINDOWS)
                .map(|_| SpaceSaving::new(slots))
                .collect(),
            current: 0,
        }
    }

    fn current(&mut self) -> &mut SpaceSaving {
        &mut self.windows[self.current]
    }

    /// Starts a new window in place of the oldest.
    fn rotate(&mut self) {
        self.current = (self.current + 1) % self.windows.len();
        self.windows[self.current].clear();
    }
}

#[derive(Debug)]
struct Entry {
    key: Box<str>,
    count: u64,
    error: u64,
}

/// One window's Space-Saving summary with a fixed number of slots.
#[derive(Debug)]
struct SpaceSaving {
    slots: usize,
    entries: Vec<Entry>,
    index: HashMap<Box<str>, usize, foldhash::fast::RandomState>,
}

impl SpaceSaving {
    fn new(slots: usize) -> Self {
        Self {
            slots,
            entries: Vec::new(),
            index: HashMap::default(),
        }
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.index.clear();
    }

    /// Counts `key` once; when every slot is taken it replaces the key counted least, taking
    /// over its count as the new key's possible overestimate.
    fn offer(&mut self, key: Box<str>) {
        if let Some(&at) = self.index.get(&key) {
            self.entries[at].count += 1;
            return;
        }
        if self.entries.len() < self.slots {
            self.index.insert(key.clone(), self.entries.len());
            self.entries.push(Entry {
                key,
                count: 1,
                error: 0,
            });
            return;
        }
        let Some((at, least)) = self
            .entries
            .iter()
            .enumerate()
            .min_by_key(|(_, e)| e.count)
            .map(|(at, e)| (at, e.count))
        else {
            return;
        };
        let old = std::mem::replace(
            &mut self.entries[at],
            Entry {
                key: key.clone(),
                count: least + 1,
                error: least,
            },
        );
        self.index.remove(&old.key);
        self.index.insert(key, at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(value: &str) -> Vec<(String, String)> {
        vec![("api_key".to_owned(), value.to_owned())]
    }

    /// A heavy key among many light ones is reported first with an exact-enough count, and
    /// memory stays within the slots whatever the number of distinct keys.
    #[test]
    fn heavy_key_survives_a_flood_of_light_ones() {
        let top = TopKeys::new(16);
        for i in 0..5_000 {
            top.offer("edge", &entries(&format!("light-{i}")));
            if i % 5 == 0 {
                top.offer("edge", &entries("heavy"));
            }
        }
        let found = top.top(3);
        assert_eq!(found[0].descriptor, "api_key=heavy");
        assert_eq!(found[0].domain, "edge");
        assert!(found[0].count >= 1_000, "{found:?}");
        assert!(found[0].count - found[0].error <= 1_000, "{found:?}");
        let held: usize = top
            .shards
            .iter()
            .map(|s| {
                s.lock()
                    .windows
                    .iter()
                    .map(|w| w.entries.len())
                    .sum::<usize>()
            })
            .sum();
        assert!(
            held <= 16usize.div_ceil(SHARDS) * SHARDS * HITTER_WINDOWS,
            "{held}"
        );
    }

    /// Counts leave the sketch once every window they were in has rotated out.
    #[test]
    fn old_windows_age_out() {
        let top = TopKeys::new(8);
        top.offer("edge", &entries("a"));
        for _ in 0..HITTER_WINDOW_SECONDS * (HITTER_WINDOWS as u64 - 1) {
            top.tick();
        }
        assert_eq!(top.top(1)[0].count, 1, "still within the last windows");
        for _ in 0..HITTER_WINDOW_SECONDS {
            top.tick();
        }
        assert!(top.top(1).is_empty());
    }

    /// Huge descriptors are cut at a character boundary, never split inside one.
    #[test]
    fn long_keys_are_cut() {
        let top = TopKeys::new(8);
        top.offer("edge", &entries(&"é".repeat(1_000)));
        let key = &top.top(1)[0];
        assert!(key.descriptor.len() + key.domain.len() < MAX_KEY_BYTES);
        assert!(key.descriptor.starts_with("api_key=éé"));
    }
}
