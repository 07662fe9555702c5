//! The book's data and the moves every operation is made of: a split of the buckets touched,
//! delivered in two rounds (shrinks before grows, so the shares streams hold never sum above a
//! limit between two answers), a stream ended, a bucket forgotten.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::clock::{Nanos, SECOND};
use crate::rlqs::GroupPortion;
use crate::rlqs::assign::{Assignment, BucketId, Outgoing, RlqsError, Strategy, StreamId};
use crate::rlqs::limits::{LONGEST_INTERVAL, WARM_UP};

use super::bucket::Bucket;
use super::portions::{Fraction, Portions};
use super::split::StrategyChange;
use super::streams::{Departed, Streams};
use super::table::{Key, Table};

/// What a stream that stops reading its answers is told (if it ever reads again).
const NOT_READING: &str = "the RLQS stream is not reading its answers";

/// Everything the book knows.
pub(crate) struct State {
    pub streams: Streams,
    pub table: Table,
    pub portions: Portions,
    /// One of several regions: the region's portions of the limits regions share.
    pub group: Option<Arc<dyn GroupPortion>>,
    pub warm: WarmUp,
}

/// The warm-up after a start: no share of an enforced limit is handed out while Envoys that
/// held assignments from a previous process return (see [`WARM_UP`]).
pub(crate) struct WarmUp {
    /// When the book was made.
    started: Nanos,
    /// Until when shares are held back; set when an Envoy returns in the book's first seconds.
    until: Option<Nanos>,
}

impl WarmUp {
    pub(crate) fn new(now: Nanos) -> WarmUp {
        WarmUp {
            started: now,
            until: None,
        }
    }

    /// Notes a stream's first report of a bucket: one that covers time (`elapsed > 0`) comes
    /// from an Envoy that held the bucket before it reached this book — after a restart, from a
    /// previous process whose assignments may still be live. In the book's first [`WARM_UP`]
    /// that starts the warm-up; a fresh start, whose Envoys report new buckets (elapsed 0), is
    /// answered at once. An Envoy reporting less often than every 5 s shows it in its report
    /// (`elapsed`: about its interval), and the others reporting as rarely return within that
    /// long: the warm-up lasts that long and a second (at most `longest` and a second).
    pub(crate) fn returning(&mut self, elapsed: Nanos, longest: Nanos, now: Nanos) {
        let open = self.until.unwrap_or(self.started + WARM_UP);
        if elapsed == 0 || now >= open {
            return;
        }
        let back = elapsed.div_ceil(SECOND).saturating_mul(SECOND);
        let back = back.min(longest.min(LONGEST_INTERVAL)) + SECOND;
        self.until = Some(open.max(self.started + back));
    }

    pub(crate) fn active(&self) -> bool {
        self.until.is_some()
    }

    /// Ends the warm-up if it is over at `now`; `true` when it just ended.
    pub(crate) fn ends(&mut self, now: Nanos) -> bool {
        let over = self.until.is_some_and(|until| now >= until);
        if over {
            self.until = None;
        }
        over
    }
}

impl State {
    /// Whether `bucket`'s shares are held back: an enforced limit during the warm-up, or while
    /// this replica's portion of it is not known yet.
    pub(crate) fn held_back(&self, key: Key, bucket: &Bucket, now: Nanos) -> bool {
        bucket.enforced().is_some()
            && (self.warm.active() || self.portions.fraction(key, now) == Fraction::Unknown)
    }

    /// Re-splits `keys` and sends every change to streams other than `reporter`: the shrinks,
    /// then (once those are out) the grows that fit. Buckets left unsettled are retried at the
    /// next tick.
    pub(crate) fn settle(&mut self, keys: &[Key], reporter: Option<StreamId>, now: Nanos) {
        let mut live = Vec::with_capacity(keys.len());
        for &key in keys {
            crate::priority::pace();
            let Some(bucket) = self.table.get(key) else {
                continue;
            };
            if self.held_back(key, bucket, now) {
                continue;
            }
            let mut portion = match self.portions.fraction(key, now) {
                Fraction::Known(portion) => portion,
                // Only blanket rules get here, which take no portion.
                Fraction::Unknown => 1.0,
            };
            if let Some(group) = &self.group {
                portion *= group.portion(&bucket.domain, &bucket.id, now);
            }
            live.push(key);
            let covered = self.portions.covers(key, now);
            if let Some(bucket) = self.table.get_mut(key) {
                bucket.covered = covered;
                bucket.retarget(portion);
            }
        }
        let shrinks = self.plan(&live, |b| b.plan_shrinks(reporter, now));
        self.deliver(shrinks, now);
        let grows = self.plan(&live, |b| b.plan_grows(reporter, now));
        self.deliver(grows, now);
        for key in live {
            crate::priority::pace();
            match self.table.get(key) {
                Some(b) if !b.settled() => self.table.unsettled.insert(key),
                _ => self.table.unsettled.remove(&key),
            };
        }
    }

    fn plan(
        &mut self,
        keys: &[Key],
        mut step: impl FnMut(&mut Bucket) -> Vec<StrategyChange>,
    ) -> Vec<(Key, StrategyChange)> {
        let mut out = Vec::new();
        for &key in keys {
            crate::priority::pace();
            if let Some(bucket) = self.table.get_mut(key) {
                out.extend(step(bucket).into_iter().map(|c| (key, c)));
            }
        }
        out
    }

    /// Sends `changes`, one message per stream. A stream that cannot take its message is
    /// ended, and its changes are undone: it still holds what it held before.
    fn deliver(&mut self, changes: Vec<(Key, StrategyChange)>, now: Nanos) {
        let mut by_stream: BTreeMap<StreamId, Vec<(Key, StrategyChange)>> = BTreeMap::new();
        for (key, change) in changes {
            crate::priority::pace();
            by_stream
                .entry(change.stream)
                .or_default()
                .push((key, change));
        }
        for (stream, changes) in by_stream {
            crate::priority::pace();
            let answers: Vec<Assignment> = (changes.iter())
                .filter_map(|(key, c)| Some(assign(&self.table.get(*key)?.id, c.new, c.ttl)))
                .collect();
            if !self.send(stream, answers) {
                for (key, change) in &changes {
                    if let Some(bucket) = self.table.get_mut(*key) {
                        bucket.revert(change);
                    }
                }
                self.end(stream, RlqsError::Exhausted(NOT_READING.into()), now);
            }
        }
    }

    /// Sends `answers` (pushed, not a report's) to `stream`; `false` when it cannot take them.
    pub(crate) fn send(&self, stream: StreamId, answers: Vec<Assignment>) -> bool {
        let out = Outgoing {
            answers,
            reported: None,
        };
        self.streams.get(stream).is_some_and(|s| s.outbox.send(out))
    }

    /// Ends `stream` with `error`, told to its client, and closes it.
    pub(crate) fn end(&mut self, stream: StreamId, error: RlqsError, now: Nanos) {
        if let Some(s) = self.streams.get(stream) {
            s.outbox.end(error);
        }
        self.close(stream, now);
    }

    /// Closes a stream: its holders stop reporting; their shares stay reserved until their
    /// assignments have expired in the Envoy, which may still be running and reconnect (then
    /// its new stream takes them over, see [`Streams::predecessor`]).
    pub(crate) fn close(&mut self, stream: StreamId, now: Nanos) {
        let Some(gone) = self.streams.remove(stream) else {
            return;
        };
        let mut reserved = Vec::new();
        for key in gone.buckets {
            crate::priority::pace();
            let Some(bucket) = self.table.get_mut(key) else {
                continue;
            };
            let enforced = bucket.enforced().is_some();
            if bucket.stop(stream) && enforced {
                reserved.push(key);
            }
        }
        self.streams.depart(Departed {
            stream,
            domain: gone.domain,
            peer: gone.peer,
            ended: now,
            buckets: reserved,
        });
    }

    /// Forgets a bucket nobody reports: open streams still holding it are told to abandon it.
    /// A bucket with a closed stream's share still live stays until that share has expired,
    /// so a new report cannot be handed a limit that an Envoy is still spending.
    pub(crate) fn forget(&mut self, key: Key, now: Nanos) {
        let Some(bucket) = self.table.get(key) else {
            return;
        };
        let streams = &self.streams;
        if bucket.reserved_by_gone(|s| streams.contains(s), now) {
            return;
        }
        let id = bucket.id.clone();
        let holding: Vec<StreamId> = (bucket.streams())
            .filter(|&s| streams.contains(s))
            .collect();
        let mut lost = false;
        for stream in holding {
            if self.send(stream, vec![Assignment::Abandon { bucket: id.clone() }]) {
                if let Some(s) = self.streams.get_mut(stream) {
                    s.buckets.remove(&key);
                }
            } else {
                lost = true;
                self.end(stream, RlqsError::Exhausted(NOT_READING.into()), now);
            }
        }
        if !lost {
            self.table.remove(key);
            self.portions.forget(key);
        }
    }
}

/// An assignment of `strategy` for `bucket` with a TTL of `ttl_seconds`.
pub(crate) fn assign(bucket: &BucketId, strategy: Strategy, ttl_seconds: u32) -> Assignment {
    Assignment::Assign {
        bucket: bucket.clone(),
        strategy,
        ttl_seconds,
    }
}
