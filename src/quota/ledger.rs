//! The book's state behind its lock: streams, buckets and the operations that change them. Each
//! operation re-splits the buckets it touched and delivers the changes in two rounds, shrinks
//! before grows, so the shares streams hold never sum above a limit between two pushes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use crate::clock::{Clock, Nanos};
use crate::rules::bucket::QuotaAction;

use super::assign::{Assignment, BucketId, Push, Strategy, StreamId};
use super::bucket::{Bucket, StrategyChange};
use super::limits::{ASSIGNMENT_TTL_SECONDS, WARM_UP};
use super::portion::Portion;

/// A bucket's number in the book (streams list buckets by number, not by their maps).
pub(crate) type Key = u64;

/// One open stream.
pub(crate) struct Stream {
    pub domain: Arc<str>,
    pub push: Arc<dyn Push>,
    pub buckets: HashSet<Key>,
}

/// Everything the book knows.
pub(crate) struct Ledger {
    pub clock: Arc<dyn Clock>,
    pub portion: Arc<dyn Portion>,
    /// When the book was made.
    pub started: Nanos,
    /// Until this time no share of an enforced limit is handed out (see [`WARM_UP`]): set when
    /// an Envoy returns from a previous process in the book's first seconds.
    pub warm_until: Option<Nanos>,
    pub next_stream: u64,
    pub next_key: Key,
    pub streams: HashMap<StreamId, Stream>,
    pub index: HashMap<(Arc<str>, BucketId), Key>,
    pub buckets: HashMap<Key, Bucket>,
    /// Buckets whose holders do not all hold what the last re-split wants (retried each tick).
    pub unsettled: HashSet<Key>,
}

impl Ledger {
    /// An empty book; it warms up only if Envoys return to it holding buckets (see
    /// [`Ledger::returning`]).
    pub(crate) fn new(clock: Arc<dyn Clock>, portion: Arc<dyn Portion>) -> Self {
        let now = clock.now();
        Ledger {
            clock,
            portion,
            started: now,
            warm_until: None,
            next_stream: 1,
            next_key: 1,
            streams: HashMap::new(),
            index: HashMap::new(),
            buckets: HashMap::new(),
            unsettled: HashSet::new(),
        }
    }

    /// Notes a stream's first report of a bucket: one that covers time (`elapsed > 0`) comes
    /// from an Envoy that held the bucket before it reached this book — after a restart, from a
    /// previous process whose assignments may still be live. In the book's first [`WARM_UP`]
    /// that starts the warm-up; a fresh start, whose Envoys report new buckets (elapsed 0), is
    /// answered at once.
    pub(crate) fn returning(&mut self, elapsed: Nanos, now: Nanos) {
        let early = now < self.started + WARM_UP;
        if elapsed > 0 && early && self.warm_until.is_none() {
            self.warm_until = Some(self.started + WARM_UP);
        }
    }

    /// Whether `bucket`'s shares are held back by the warm-up.
    pub(crate) fn held_back(&self, bucket: &Bucket) -> bool {
        self.warm_until.is_some() && bucket.enforced().is_some()
    }

    /// The key of a bucket, made (its action resolved) if new.
    pub(crate) fn key(
        &mut self,
        domain: &Arc<str>,
        id: &BucketId,
        resolve: &dyn Fn(&BucketId) -> QuotaAction,
        now: Nanos,
    ) -> Key {
        if let Some(&key) = self.index.get(&(domain.clone(), id.clone())) {
            return key;
        }
        let key = self.next_key;
        self.next_key += 1;
        let bucket = Bucket::new(domain.clone(), id.clone(), resolve(id), now);
        self.index.insert((domain.clone(), id.clone()), key);
        self.buckets.insert(key, bucket);
        key
    }

    /// Re-splits `keys` and sends every change to streams other than `reporter`: the shrinks,
    /// then (once those are out) the grows that fit. Buckets left unsettled are retried at the
    /// next tick.
    pub(crate) fn settle(&mut self, keys: &[Key], reporter: Option<StreamId>) {
        let now = self.clock.now();
        let portion = self.portion.clone();
        let mut live = Vec::with_capacity(keys.len());
        for &key in keys {
            let Some(bucket) = self.buckets.get(&key) else {
                continue;
            };
            if self.held_back(bucket) {
                continue;
            }
            live.push(key);
            if let Some(bucket) = self.buckets.get_mut(&key) {
                bucket.retarget(portion.as_ref());
            }
        }
        let shrinks = self.plan(&live, |b| b.plan_shrinks(reporter, now));
        self.deliver(shrinks);
        let grows = self.plan(&live, |b| b.plan_grows(reporter, now));
        self.deliver(grows);
        for key in live {
            match self.buckets.get(&key) {
                Some(b) if !b.settled() => self.unsettled.insert(key),
                _ => self.unsettled.remove(&key),
            };
        }
    }

    fn plan(
        &mut self,
        keys: &[Key],
        mut step: impl FnMut(&mut Bucket) -> Vec<StrategyChange>,
    ) -> Vec<(Key, StrategyChange)> {
        let mut out = Vec::new();
        for key in keys {
            if let Some(bucket) = self.buckets.get_mut(key) {
                out.extend(step(bucket).into_iter().map(|c| (*key, c)));
            }
        }
        out
    }

    /// Pushes `changes`, one push per stream. A stream that cannot take its push is closed, and
    /// its changes are undone: it still holds what it held before.
    pub(crate) fn deliver(&mut self, changes: Vec<(Key, StrategyChange)>) {
        let mut by_stream: BTreeMap<StreamId, Vec<(Key, StrategyChange)>> = BTreeMap::new();
        for (key, change) in changes {
            by_stream
                .entry(change.stream)
                .or_default()
                .push((key, change));
        }
        for (stream, changes) in by_stream {
            let answers: Vec<Assignment> = changes
                .iter()
                .filter_map(|(key, c)| Some(assign(&self.buckets.get(key)?.id, c.new)))
                .collect();
            let delivered = match self.streams.get(&stream) {
                Some(s) => s.push.push(answers),
                None => false,
            };
            if !delivered {
                for (key, change) in &changes {
                    if let Some(bucket) = self.buckets.get_mut(key) {
                        bucket.revert(change);
                    }
                }
                self.close(stream);
            }
        }
    }

    /// Ends a stream: its holders stop reporting; their shares stay reserved until their
    /// assignments have expired in the Envoy, which may still be running and reconnect.
    pub(crate) fn close(&mut self, stream: StreamId) {
        let Some(gone) = self.streams.remove(&stream) else {
            return;
        };
        for key in gone.buckets {
            if let Some(bucket) = self.buckets.get_mut(&key) {
                for h in bucket.holders.iter_mut().filter(|h| h.stream == stream) {
                    h.reporting = false;
                }
            }
        }
    }
}

/// An assignment of `strategy` for `bucket` with the book's TTL.
pub(crate) fn assign(bucket: &BucketId, strategy: Strategy) -> Assignment {
    Assignment::Assign {
        bucket: bucket.clone(),
        strategy,
        ttl_seconds: ASSIGNMENT_TTL_SECONDS,
    }
}
