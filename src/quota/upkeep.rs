//! The book's clockwork and reloads: the end of the warm-up, silent and expired holders,
//! forgotten buckets, and new actions after a rule reload.

use crate::clock::Nanos;
use crate::rules::bucket::QuotaAction;

use super::assign::{Assignment, BucketId};
use super::ledger::{Key, Ledger};
use super::limits::{FORGET_AFTER, HELD_FOR, SILENT_AFTER};

impl Ledger {
    /// See [`QuotaBook::tick`](super::QuotaBook::tick).
    pub(crate) fn tick(&mut self) {
        let now = self.clock.now();
        let mut keys: Vec<Key> = self.unsettled.drain().collect();
        if self.warm_until.is_some_and(|until| now >= until) {
            self.warm_until = None;
            keys.extend(
                self.buckets
                    .iter()
                    .filter(|(_, b)| b.enforced().is_some())
                    .map(|(k, _)| *k),
            );
        }
        let mut stale = Vec::new();
        let mut expired = Vec::new();
        for (&key, bucket) in self.buckets.iter_mut() {
            // A forgotten bucket's holders are told to abandon it (see `forget`).
            if now.saturating_sub(bucket.last_report) >= FORGET_AFTER {
                stale.push(key);
                continue;
            }
            let mut moved = false;
            for h in bucket.holders.iter_mut() {
                if h.reporting && now.saturating_sub(h.last_report) >= SILENT_AFTER {
                    h.reporting = false;
                    moved = true;
                }
            }
            bucket.holders.retain(|h| {
                let live = h.reporting || now < h.last_sent + HELD_FOR;
                if !live {
                    expired.push((h.stream, key));
                }
                live
            });
            moved |= expired.last().is_some_and(|&(_, k)| k == key);
            if moved {
                keys.push(key);
            }
        }
        keys.sort_unstable();
        keys.dedup();
        self.settle(&keys, None);
        for key in stale {
            self.forget(key, now);
        }
        // Streams forget buckets whose holder expired, so the cap counts what they hold.
        for (stream, key) in expired {
            if let Some(s) = self.streams.get_mut(&stream) {
                s.buckets.remove(&key);
            }
        }
    }

    /// Forgets a bucket nobody reports: open streams still holding it are told to abandon it.
    /// A bucket with a closed stream's share still live stays until that share has expired,
    /// so a new report cannot be handed a limit that an Envoy is still spending.
    fn forget(&mut self, key: Key, now: Nanos) {
        let Some(bucket) = self.buckets.get(&key) else {
            return;
        };
        let open = |s| self.streams.contains_key(s);
        if bucket
            .holders
            .iter()
            .any(|h| !open(&h.stream) && now < h.last_sent + HELD_FOR)
        {
            return;
        }
        let id = bucket.id.clone();
        let holding: Vec<_> = bucket
            .holders
            .iter()
            .filter(|h| open(&h.stream))
            .map(|h| h.stream)
            .collect();
        let mut lost = false;
        for stream in holding {
            let pushed = self.streams.get(&stream).is_some_and(|s| {
                s.push
                    .push(vec![Assignment::Abandon { bucket: id.clone() }])
            });
            if !pushed {
                lost = true;
                self.close(stream);
            } else if let Some(s) = self.streams.get_mut(&stream) {
                s.buckets.remove(&key);
            }
        }
        if lost {
            return;
        }
        if let Some(bucket) = self.buckets.remove(&key) {
            self.index.remove(&(bucket.domain, bucket.id));
        }
        self.unsettled.remove(&key);
    }

    /// See [`QuotaBook::refresh`](super::QuotaBook::refresh).
    pub(crate) fn refresh(&mut self, resolve: &dyn Fn(&str, &BucketId) -> QuotaAction) {
        let now = self.clock.now();
        let mut keys = Vec::new();
        for (&key, bucket) in self.buckets.iter_mut() {
            let action = resolve(&bucket.domain, &bucket.id);
            if action != bucket.action {
                bucket.set_action(action, now);
                keys.push(key);
            }
        }
        keys.sort_unstable();
        self.settle(&keys, None);
    }
}
