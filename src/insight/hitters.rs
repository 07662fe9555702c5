//! The keys limited most in the last minutes: a Space-Saving sketch (Metwally et al.) per
//! one-minute window, a ring of the last few windows, sharded by key so that concurrent
//! refusals rarely share a lock. Memory is fixed: `slots` keys per shard and window. A key is
//! counted by a 128-bit hash of the whole descriptor, so distinct keys never merge however long
//! they are; only the text kept to show it is cut to [`MAX_KEY_BYTES`], and marked so.
//!
//! Space-Saving keeps every key whose count exceeds total/slots, and overestimates a count by at
//! most the `error` it reports (the count of the key it displaced).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};

use parking_lot::Mutex;

/// Seconds per window of the sketch.
pub(crate) const HITTER_WINDOW_SECONDS: u64 = 60;
/// Windows kept: the sketch covers the last 5 minutes (the current window partly).
pub(crate) const HITTER_WINDOWS: usize = 5;
/// Keys kept per window by default, over all shards.
pub(super) const DEFAULT_SLOTS: usize = 256;
/// Lock shards.
const SHARDS: usize = 8;
/// Longest key text kept to show, in bytes (a descriptor may be up to 64 KiB of text).
const MAX_KEY_BYTES: usize = 256;
/// What ends a key text that was cut.
const CUT_MARK: &str = "…";

/// One of the keys limited most.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitedKey {
    /// The domain.
    pub domain: String,
    /// The descriptor, `key=value` entries joined by `, ` (cut to about 256 bytes, then ending
    /// in `…`: see `shortened`).
    pub descriptor: String,
    /// Whether `descriptor` was cut (the key it stands for is the whole descriptor).
    pub shortened: bool,
    /// Refusals counted (an upper bound).
    pub count: u64,
    /// How much `count` may overestimate.
    pub error: u64,
}

/// The windowed, sharded sketch.
#[derive(Debug)]
pub struct TopKeys {
    shards: Box<[Mutex<Ring>]>,
    /// Two independently seeded hashers: together, a 128-bit identity for a key.
    hashers: [foldhash::quality::RandomState; 2],
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
            hashers: Default::default(),
            ticks: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Counts one refusal of `entries` in `domain`.
    pub fn offer(&self, domain: &str, entries: &[(String, String)]) {
        let id = self.identity(domain, entries);
        let shard = (id as usize) % self.shards.len();
        self.shards[shard]
            .lock()
            .current()
            .offer(id, || display_key(domain, entries));
    }

    /// The key's identity: a hash of the whole domain and descriptor, in 128 bits so that
    /// distinct keys effectively never share one.
    fn identity(&self, domain: &str, entries: &[(String, String)]) -> u128 {
        let half = |hasher: &foldhash::quality::RandomState| {
            let mut state = hasher.build_hasher();
            domain.hash(&mut state);
            entries.hash(&mut state);
            u128::from(state.finish())
        };
        (half(&self.hashers[0]) << 64) | half(&self.hashers[1])
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
            let mut sums: HashMap<u128, (&Shown, u64, u64)> = HashMap::new();
            let ring = shard.lock();
            for window in &ring.windows {
                for entry in &window.entries {
                    let sum = sums.entry(entry.id).or_insert((&entry.shown, 0, 0));
                    sum.1 += entry.count;
                    sum.2 += entry.error;
                }
            }
            all.extend(sums.into_values().map(|(shown, count, error)| LimitedKey {
                domain: shown.domain.to_string(),
                descriptor: shown.descriptor.to_string(),
                shortened: shown.shortened,
                count,
                error,
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

/// How a key is shown: its domain and descriptor text, each cut to [`MAX_KEY_BYTES`].
#[derive(Debug)]
struct Shown {
    domain: Box<str>,
    descriptor: Box<str>,
    shortened: bool,
}

/// The shown text of a key: `k=v, k2=v2`, cut at a character boundary and marked when longer
/// than [`MAX_KEY_BYTES`] (so is the domain).
fn display_key(domain: &str, entries: &[(String, String)]) -> Shown {
    let mut descriptor = String::with_capacity(64);
    for (i, (k, v)) in entries.iter().enumerate() {
        if i > 0 {
            descriptor.push_str(", ");
        }
        descriptor.push_str(k);
        descriptor.push('=');
        descriptor.push_str(v);
        if descriptor.len() > MAX_KEY_BYTES {
            break;
        }
    }
    let (domain, domain_cut) = cut(domain);
    let (descriptor, descriptor_cut) = cut(&descriptor);
    Shown {
        domain,
        descriptor,
        shortened: domain_cut || descriptor_cut,
    }
}

/// `text` cut to [`MAX_KEY_BYTES`] at a character boundary with [`CUT_MARK`] after it, and
/// whether it was cut.
fn cut(text: &str) -> (Box<str>, bool) {
    if text.len() <= MAX_KEY_BYTES {
        return (text.into(), false);
    }
    let mut end = MAX_KEY_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (format!("{}{CUT_MARK}", &text[..end]).into_boxed_str(), true)
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
struct Tracked {
    id: u128,
    shown: Shown,
    count: u64,
    error: u64,
}

/// One window's Space-Saving summary with a fixed number of slots.
#[derive(Debug)]
struct SpaceSaving {
    slots: usize,
    entries: Vec<Tracked>,
    index: HashMap<u128, usize, foldhash::fast::RandomState>,
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

    /// Counts the key `id` once; when every slot is taken it replaces the key counted least,
    /// taking over its count as the new key's possible overestimate. `shown` makes the key's
    /// text, only for a key not held yet.
    fn offer(&mut self, id: u128, shown: impl FnOnce() -> Shown) {
        if let Some(&at) = self.index.get(&id) {
            self.entries[at].count += 1;
            return;
        }
        if self.entries.len() < self.slots {
            self.index.insert(id, self.entries.len());
            self.entries.push(Tracked {
                id,
                shown: shown(),
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
            Tracked {
                id,
                shown: shown(),
                count: least + 1,
                error: least,
            },
        );
        self.index.remove(&old.id);
        self.index.insert(id, at);
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

    /// Huge descriptors are cut at a character boundary, never split inside one, and marked.
    #[test]
    fn long_keys_are_cut_and_marked() {
        let top = TopKeys::new(8);
        top.offer("edge", &entries(&"é".repeat(1_000)));
        let key = &top.top(1)[0];
        assert!(key.descriptor.len() <= MAX_KEY_BYTES + CUT_MARK.len());
        assert!(key.descriptor.starts_with("api_key=éé"));
        assert!(
            key.descriptor.ends_with(CUT_MARK) && key.shortened,
            "{key:?}"
        );
        top.offer("edge", &entries("short"));
        let short = top
            .top(2)
            .into_iter()
            .find(|k| k.descriptor == "api_key=short");
        assert!(!short.expect("the short key").shortened);
    }

    /// Distinct keys that share their first 256 bytes and more stay distinct: each is counted
    /// on its own, none merges into a key limited many times.
    #[test]
    fn long_keys_sharing_a_prefix_are_not_merged() {
        let top = TopKeys::new(64);
        let prefix = "x".repeat(600);
        for i in 0..2_000 {
            top.offer("edge", &entries(&format!("{prefix}{i}")));
        }
        let found = top.top(10);
        assert!(
            found.iter().all(|k| k.count - k.error <= 1),
            "no key is known to be limited more than once: {found:?}"
        );
        let heavy = format!("{prefix}heavy");
        for _ in 0..50 {
            top.offer("edge", &entries(&heavy));
        }
        let first = &top.top(1)[0];
        assert!(first.count - first.error >= 50, "{first:?}");
        assert!(first.shortened);
    }
}
