//! The book: which share of each limit every Envoy stream holds. It has one owner and no lock
//! (the server runs it on a thread of its own, `rlqs/owner.rs`; the simulator steps it by
//! hand), and every answer it gives, to a report or pushed, goes out through the stream's one
//! [`Outbox`].
//!
//! Shares are max–min fair by reported demand (`allocation` water-fills), counted on one fill
//! interval per limit (`share`), changed only when they move materially, and delivered shrinks
//! first (`state`), so the shares streams hold never sum above a limit's rate or burst as far
//! as the book has sent them. `docs/rlqs.md` states the bound on what all Envoys together admit
//! and `model/bound_tests.rs` holds the book to it against a model of Envoy.

mod allocation;
mod bucket;
mod demand;
mod interval;
mod level;
mod portions;
mod shadow;
mod share;
mod split;
mod state;
mod streams;
mod sum;
mod table;

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::Arc;

use crate::clock::{Clock, Nanos};
use crate::rules::RuleSet;
use crate::rules::bucket::{BucketAction, bucket_action};
use crate::store::{Claim, Claimed};

use super::assign::{BucketId, Outbox, Outgoing, Reported, RlqsError, StreamId, Usage};
use super::group::GroupPortion;
use super::limits::SPLIT_AT_ONCE;
use super::view::{Page, PageQuery};

pub(crate) use portions::Portions;
pub(crate) use table::Key;

use interval::{Cadence, Interval};
use portions::{Asked, Fraction, wanted};
use state::{State, WarmUp, assign};
use streams::Stream;

/// What the book resolves a bucket against: the rules in force.
pub(crate) trait Resolve: Send + Sync {
    /// What the rules say of bucket `id` of `domain`.
    fn action(&self, domain: &str, id: &BucketId) -> BucketAction;
}

impl Resolve for RuleSet {
    fn action(&self, domain: &str, id: &BucketId) -> BucketAction {
        bucket_action(self, domain, id)
    }
}

/// The shares of every limit among the RLQS streams that report its buckets.
pub(crate) struct Book {
    clock: Arc<dyn Clock>,
    rules: Arc<dyn Resolve>,
    /// The most buckets one stream may report.
    max_buckets: usize,
    /// Up to how many holders a report re-splits its bucket at once.
    split_at_once: usize,
    /// The longest report interval it learns: a minute, alone or among replicas (each claim
    /// reserves a bucket's portion as long as its shares live); in a region, Envoy 1.40's 5 s,
    /// as the global store reserves a region's portion no longer than that TTL.
    longest: Interval,
    state: State,
    /// When the clock last ran ([`Book::tick`]).
    ticked: Nanos,
    /// Whether a bucket of unknown portion was made since the last claim: one is due at once.
    claim_due: bool,
}

impl Book {
    /// An empty book resolving buckets against `rules`, handing out `portions` of each limit.
    /// If Envoys return to it holding buckets in its first
    /// [`WARM_UP`](crate::rlqs::limits::WARM_UP) (after a restart: they may still hold
    /// assignments from the previous process), it hands out no share of an enforced limit until
    /// that is over.
    pub(crate) fn new(
        clock: Arc<dyn Clock>,
        rules: Arc<dyn Resolve>,
        portions: Portions,
        max_buckets: usize,
    ) -> Book {
        let now = clock.now();
        Book {
            clock,
            rules,
            max_buckets,
            split_at_once: SPLIT_AT_ONCE,
            longest: Interval::longest(),
            state: State {
                streams: Default::default(),
                table: Default::default(),
                portions,
                group: None,
                warm: WarmUp::new(now),
            },
            ticked: now,
            claim_due: false,
        }
    }

    /// The book of one of several regions: what it hands out of a limit regions share is cut
    /// to the region's portion, and the region learns the demand of its buckets each second.
    pub(crate) fn with_group(mut self, group: Arc<dyn GroupPortion>) -> Book {
        self.state.group = Some(group);
        self.longest = Interval::default();
        self
    }

    /// A book that re-splits a bucket at once on a report only while at most `holders` streams
    /// hold it (the default is [`SPLIT_AT_ONCE`]; 0: only a bucket's first report).
    pub(crate) fn with_split_at_once(mut self, holders: usize) -> Book {
        self.split_at_once = holders;
        self
    }

    /// Opens stream `id`, bound to `domain`, from `peer`; its answers go to `outbox`.
    pub(crate) fn open(
        &mut self,
        id: StreamId,
        domain: Arc<str>,
        peer: Option<IpAddr>,
        outbox: Box<dyn Outbox>,
    ) {
        let stream = Stream {
            domain,
            peer,
            outbox,
            buckets: HashSet::new(),
            reported: false,
            every: Cadence::default(),
        };
        self.state.streams.insert(id, stream);
    }

    /// One usage report of a stream: new buckets resolved, demand recorded, and this stream's
    /// answers, one per reported bucket (a new or changed strategy, or the same again to restart
    /// its time to live) except buckets held back. A bucket few streams hold
    /// ([`SPLIT_AT_ONCE`]) is re-split at once: the shrinks this causes for other streams go
    /// out first, then the others' grows, then this stream's answers. Past that, an answer
    /// comes from the bucket's last split and the stream's demand now, cut to what the others
    /// hold, so its cost does not grow with the streams sharing the bucket; where the stream's
    /// share moved, the bucket is re-split at the next tick (within a second), which pushes the
    /// others their changes, shrinks first. A report past the stream's bucket cap ends the
    /// stream, recording nothing.
    pub(crate) fn report(&mut self, id: StreamId, usages: &[Usage]) {
        let now = self.clock.now();
        let Some(stream) = self.state.streams.get(id) else {
            return;
        };
        let domain = stream.domain.clone();
        let every = (stream.every, self.longest);
        if let Err(error) = self.check_cap(id, usages) {
            return self.state.end(id, error, now);
        }
        if !stream.reported {
            self.take_over(id, &domain, usages, now);
        }
        let mut keys = Vec::with_capacity(usages.len());
        let mut tallies = Vec::with_capacity(usages.len());
        for usage in usages {
            crate::priority::pace();
            let key = self.bucket(&domain, &usage.bucket, now);
            let state = &mut self.state;
            let first = (state.streams.get_mut(id)).is_some_and(|s| {
                s.reported = true;
                s.buckets.insert(key)
            });
            if first {
                state
                    .warm
                    .returning(usage.elapsed, self.longest.nanos(), now);
            }
            if let Some(bucket) = state.table.get_mut(key) {
                tallies.push(bucket.record(id, usage, now, every));
                keys.push(key);
                let learned = bucket.find(id).map(|h| h.every);
                if let Some((s, every)) = state.streams.get_mut(id).zip(learned) {
                    s.every = every;
                }
            }
        }
        let mut touched = keys.clone();
        touched.sort_unstable();
        touched.dedup();
        self.aim(id, &touched, now);
        let mut answers = Vec::with_capacity(keys.len());
        for key in keys {
            crate::priority::pace();
            let state = &mut self.state;
            let held_back = (state.table.get(key)).is_none_or(|b| state.held_back(key, b, now));
            let covered = state.portions.covers(key, now);
            let Some(bucket) = state.table.get_mut(key).filter(|_| !held_back) else {
                continue;
            };
            bucket.covered = covered;
            if let Some((strategy, ttl)) = bucket.answer(id, now) {
                answers.push(assign(&bucket.id, strategy, ttl));
            }
            if !bucket.holder_settled(id) {
                state.table.unsettled.insert(key);
            }
        }
        let out = Outgoing {
            answers,
            reported: Some(Reported { domain, tallies }),
        };
        let sent = (self.state.streams.get(id)).is_some_and(|s| s.outbox.send(out));
        if !sent {
            let error = RlqsError::Exhausted("the RLQS stream is not reading its answers".into());
            self.state.end(id, error, now);
        }
    }

    /// Sets what stream `id` should hold in each of `keys` it reported: a bucket never split,
    /// or held by few streams, is re-split at once (the others' changes pushed); any other from
    /// its last split, redone at the next tick where the stream's share moved.
    fn aim(&mut self, id: StreamId, keys: &[Key], now: Nanos) {
        let state = &mut self.state;
        let mut now_split = Vec::new();
        for &key in keys {
            crate::priority::pace();
            let held_back = (state.table.get(key)).is_none_or(|b| state.held_back(key, b, now));
            let Some(bucket) = state.table.get_mut(key).filter(|_| !held_back) else {
                continue;
            };
            if bucket.unsplit() || bucket.holders.len() <= self.split_at_once {
                now_split.push(key);
            } else if bucket.aim(id) {
                state.table.unsettled.insert(key);
            }
        }
        state.settle(&now_split, Some(id), now);
    }

    /// The number of bucket `id` of `domain`, made (its action resolved) if new.
    fn bucket(&mut self, domain: &Arc<str>, id: &BucketId, now: Nanos) -> Key {
        let rules = &self.rules;
        let (key, new) = (self.state.table).make(domain, id, || rules.action(domain, id), now);
        let unknown = self.state.portions.fraction(key, now) == Fraction::Unknown;
        let enforced = self
            .state
            .table
            .get(key)
            .is_some_and(|b| b.enforced().is_some());
        self.claim_due |= new && enforced && unknown;
        key
    }

    /// A new stream's first report: when it continues a stream that ended lately (the same
    /// Envoy reconnecting: same domain and address, and a report covering time for every
    /// bucket the old stream still holds a share of), it takes over those shares at once
    /// instead of waiting for them to expire.
    fn take_over(&mut self, id: StreamId, domain: &Arc<str>, usages: &[Usage], now: Nanos) {
        let state = &mut self.state;
        let covered: HashSet<Key> = (usages.iter())
            .filter(|u| u.elapsed > 0)
            .filter_map(|u| state.table.find(domain, &u.bucket))
            .collect();
        let Some(peer) = state.streams.get(id).map(|s| s.peer) else {
            return;
        };
        if covered.is_empty() {
            return;
        }
        let table = &state.table;
        let holds = |s, k| table.get(k).is_some_and(|b| b.holds(s));
        let Some(old) = state.streams.predecessor(domain, peer, &covered, holds) else {
            return;
        };
        let mut adopted = 0;
        for key in old.buckets {
            crate::priority::pace();
            let moved = (state.table.get_mut(key)).is_some_and(|b| b.adopt(old.stream, id, now));
            if moved && let Some(s) = state.streams.get_mut(id) {
                s.buckets.insert(key);
                adopted += 1;
            }
        }
        tracing::debug!(
            domain = ?domain,
            stream = id.0,
            from = old.stream.0,
            adopted,
            "an RLQS stream took over the shares of the stream its Envoy had before"
        );
    }

    /// Refuses a report that would leave the stream with more than `max_buckets` buckets,
    /// before anything is recorded.
    fn check_cap(&self, id: StreamId, usages: &[Usage]) -> Result<(), RlqsError> {
        let Some(s) = self.state.streams.get(id) else {
            return Ok(());
        };
        if usages.len() <= self.max_buckets.saturating_sub(s.buckets.len()) {
            return Ok(());
        }
        let mut new: HashSet<&BucketId> = HashSet::new();
        for usage in usages {
            crate::priority::pace();
            let known = (self.state.table.find(&s.domain, &usage.bucket))
                .is_some_and(|key| s.buckets.contains(&key));
            if !known {
                new.insert(&usage.bucket);
            }
            if s.buckets.len() + new.len() > self.max_buckets {
                return Err(RlqsError::Exhausted(format!(
                    "a stream may report at most {} buckets",
                    self.max_buckets
                )));
            }
        }
        Ok(())
    }

    /// Ends a stream. Its Envoy may still hold its assignments (and reconnect with them), so
    /// its shares go back to the others when those have expired (within the TTL plus a second
    /// of its last answer), or at once to the Envoy's next stream.
    pub(crate) fn close(&mut self, id: StreamId) {
        let now = self.clock.now();
        self.state.close(id, now);
    }

    /// The clock's work, every second: streams whose client went are closed, the warm-up
    /// ends, buckets whose shares moved since are split in full (pushing the changes), holders
    /// that stopped reporting are no longer pushed to and their shares return to
    /// the others once expired, portions that went stale while claims fail move, unsettled
    /// splits are retried, and buckets no stream has reported for two of their holders'
    /// longest report interval are forgotten.
    pub(crate) fn tick(&mut self) {
        let now = self.clock.now();
        let state = &mut self.state;
        for id in state.streams.gone() {
            state.close(id, now);
        }
        let mut keys: Vec<Key> = state.table.unsettled.drain().collect();
        if state.warm.ends(now) {
            keys.extend(
                (state.table.iter())
                    .filter(|(_, b)| b.enforced().is_some())
                    .map(|(k, _)| k),
            );
        }
        keys.extend(state.portions.lapsed(self.ticked, now));
        let (mut stale, mut expired) = (Vec::new(), Vec::new());
        for (key, bucket) in state.table.iter_mut() {
            crate::priority::pace();
            if now.saturating_sub(bucket.last_report) >= bucket.every.forget_after() {
                stale.push(key);
                continue;
            }
            let (gone, moved) = bucket.expire(now);
            expired.extend(gone.into_iter().map(|stream| (stream, key)));
            if moved {
                keys.push(key);
            }
        }
        keys.sort_unstable();
        keys.dedup();
        state.settle(&keys, None, now);
        for key in stale {
            crate::priority::pace();
            state.forget(key, now);
        }
        // Streams forget buckets whose holder expired, so the cap counts what they hold.
        for (stream, key) in expired {
            crate::priority::pace();
            if let Some(s) = state.streams.get_mut(stream) {
                s.buckets.remove(&key);
            }
        }
        state.streams.prune(now);
        if let Some(group) = &state.group {
            let enforced = state.table.iter().filter(|(_, b)| b.enforced().is_some());
            let views: Vec<_> = enforced.map(|(_, b)| b.view()).collect();
            group.note(&views, now);
        }
        self.ticked = now;
    }

    /// Re-splits `buckets` (domain, id), pushing the changes at once: the group's portion of
    /// them moved.
    pub(crate) fn reshare(&mut self, buckets: &[(Arc<str>, BucketId)]) {
        let now = self.clock.now();
        let table = &self.state.table;
        let mut keys: Vec<Key> = (buckets.iter())
            .filter_map(|(domain, id)| table.find(domain, id))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        self.state.settle(&keys, None, now);
    }

    /// After a rule reload: every bucket resolved against `rules`, the assignments that
    /// change pushed at once (a bucket that no longer matches a rule gets `ALLOW_ALL`).
    pub(crate) fn reload(&mut self, rules: Arc<dyn Resolve>) {
        let now = self.clock.now();
        self.rules = rules;
        let mut keys = Vec::new();
        for (key, bucket) in self.state.table.iter_mut() {
            let action = self.rules.action(&bucket.domain, &bucket.id);
            if action != bucket.action {
                bucket.set_action(action, now);
                keys.push(key);
            }
        }
        self.state.settle(&keys, None, now);
    }

    /// This replica's claims: every bucket of an enforced limit not at rest (see
    /// [`Portions::at_rest`]) with its streams' summed demand, what it wants and what it holds;
    /// with the buckets' numbers, in the same order. Where it wants less than it holds, its
    /// streams are split on what it wants first (the shrinks pushed now), and the claim asks no
    /// less than they still hold: a portion is given back only once no Envoy of this replica
    /// may be spending it.
    pub(crate) fn claims(&mut self) -> (Vec<Key>, Vec<Claim>) {
        let now = self.clock.now();
        self.claim_due = false;
        let state = &mut self.state;
        let mut keys = Vec::new();
        let mut claims = Vec::new();
        let mut moved = Vec::new();
        for (key, bucket) in state.table.iter() {
            crate::priority::pace();
            let Some(rate) = bucket.enforced() else {
                continue;
            };
            let demand = bucket.demand();
            let (others_demand, others) = state.portions.others(key);
            let wants = wanted(rate.per_second(), demand, others_demand, others);
            if state.portions.want(key, wants, now) {
                moved.push(key);
            }
            let out = bucket.outstanding();
            let asked = Asked {
                demand,
                wanted: wants.max(out),
                reserve_longer: Asked::reserve_longer(bucket.lives_for(now)),
            };
            if state.portions.at_rest(key, rate.per_second(), asked, now) {
                continue;
            }
            state.portions.asking(key, asked);
            keys.push(key);
            claims.push(Claim {
                domain: bucket.domain.to_string(),
                bucket: bucket.id.clone(),
                demand,
                wanted: asked.wanted,
                held: state.portions.held(key, now).max(out),
                reserve_longer: asked.reserve_longer,
            });
        }
        state.settle(&moved, None, now);
        (keys, claims)
    }

    /// Records what a claim sent at `at` for `keys` got, and re-splits the buckets whose
    /// portion moved, pushing the changes at once.
    pub(crate) fn claimed(&mut self, at: Nanos, keys: &[Key], answers: &[Claimed]) {
        let now = self.clock.now();
        let moved = self.state.portions.claimed(at, keys, answers);
        self.state.settle(&moved, None, now);
    }

    /// Whether a claim is due at once (a bucket of unknown portion was made since the last).
    pub(crate) fn claim_due(&self) -> bool {
        self.claim_due
    }

    /// A page of the buckets the book holds.
    pub(crate) fn page(&self, query: PageQuery) -> Page {
        self.state.table.page(query, self.state.streams.len())
    }

    /// Streams open and buckets held.
    pub(crate) fn load(&self) -> (usize, usize) {
        (self.state.streams.len(), self.state.table.len())
    }
}

#[cfg(test)]
mod tests;
