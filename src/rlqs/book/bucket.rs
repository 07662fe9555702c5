//! One bucket in the book: its rule, the streams holding it (found by stream, with the sum of
//! what they hold kept as it changes), their demand, and the clock's work on them (the split of
//! its limit is `split.rs`).

use std::collections::HashMap;
use std::sync::Arc;

use crate::clock::{Nanos, SECOND};
use crate::rules::bucket::{BucketAction, SharedRate};

use super::demand::Demand;
use super::interval::{Cadence, Interval, held_for};
use super::level::Level;
use super::shadow::Shadow;
use super::share::{Grid, Share};
use super::sum::Sum;
use crate::rlqs::assign::{BucketId, Strategy, StreamId, Tally, Usage};
use crate::rlqs::view::{BucketView, HolderView, rate_of};

/// One stream's part of a bucket.
#[derive(Debug, Clone)]
pub(crate) struct Holder {
    pub stream: StreamId,
    pub demand: Demand,
    /// What the book last sent the stream for this bucket (`None`: nothing yet).
    pub held: Option<Strategy>,
    /// What the last re-split wants it to hold.
    pub desired: Option<Strategy>,
    pub last_report: Nanos,
    /// When the book last sent it an assignment: the Envoy may hold it until this plus its TTL.
    pub last_sent: Nanos,
    /// The TTL of that assignment, in seconds (0: nothing sent yet).
    pub ttl: u32,
    /// Since when it has held an assignment without a break (`None`: it holds none): only
    /// refusals under one say its share is short.
    pub assigned_since: Option<Nanos>,
    /// How often its stream reports it, as learned.
    pub every: Cadence,
    /// `false` once the stream closed or went silent: no more pushes, share still reserved.
    pub reporting: bool,
}

/// A bucket of one domain and the streams that report it.
#[derive(Debug)]
pub(crate) struct Bucket {
    pub domain: Arc<str>,
    pub id: BucketId,
    pub action: BucketAction,
    /// Changed only through the methods here, which keep `index` and `held` true.
    pub(super) holders: Vec<Holder>,
    /// Where each stream's holder is in `holders`.
    index: HashMap<StreamId, usize>,
    /// The sum of what every holder holds, counted on `interval`.
    pub(super) held: Sum,
    /// The fill interval of the limit (1 for a blanket rule): what `held` is counted on.
    interval: u32,
    pub shadow: Option<Shadow>,
    /// The last report of any stream.
    pub last_report: Nanos,
    /// The longest its holders may take between reports (as of the last tick): it is
    /// forgotten after two of those without a report.
    pub every: Interval,
    /// The limit as last split (counted, enforced limits only).
    pub grid: Option<Grid>,
    /// The last full split, which answers reports until the next (`None`: not split yet).
    pub(super) level: Option<Level>,
    /// Until when what this replica hands out of the limit now stays reserved for it in the
    /// store replicas share (`None`: alone, the whole limit always): no assignment is sent
    /// with a TTL that outlives it.
    pub covered: Option<Nanos>,
}

impl Bucket {
    /// A bucket with no holders yet.
    pub(crate) fn new(domain: Arc<str>, id: BucketId, action: BucketAction, now: Nanos) -> Self {
        let shadow = shadow_of(&action, now);
        let interval = interval_of(&action);
        Bucket {
            domain,
            id,
            action,
            holders: Vec::new(),
            index: HashMap::new(),
            held: Sum::default(),
            interval,
            shadow,
            last_report: now,
            every: Interval::default(),
            grid: None,
            level: None,
            covered: None,
        }
    }

    /// Replaces the action after a reload; the shadow counter restarts when the limit moves,
    /// and the split is redone from scratch.
    pub(crate) fn set_action(&mut self, action: BucketAction, now: Nanos) {
        if action != self.action {
            self.shadow = shadow_of(&action, now);
            self.action = action;
            self.interval = interval_of(&self.action);
            self.level = None;
            self.recount();
        }
    }

    /// The holder of `stream`, if it has one.
    pub(crate) fn find(&self, stream: StreamId) -> Option<&Holder> {
        self.holders.get(*self.index.get(&stream)?)
    }

    /// Where the holder of `stream` is.
    pub(super) fn position(&self, stream: StreamId) -> Option<usize> {
        self.index.get(&stream).copied()
    }

    /// Sets what holder `at` holds, as sent at `sent` with a TTL of `ttl` seconds, keeping the
    /// sum.
    pub(super) fn set_held(&mut self, at: usize, new: Option<Strategy>, sent: Nanos, ttl: u32) {
        let interval = self.interval;
        let h = &mut self.holders[at];
        self.held.sub(Share::of(h.held, interval));
        self.held.add(Share::of(new, interval));
        h.assigned_since = match (h.held, new) {
            (_, None) => None,
            (None, Some(_)) => Some(sent),
            (Some(_), Some(_)) => h.assigned_since,
        };
        h.held = new;
        h.last_sent = sent;
        h.ttl = ttl;
    }

    /// The sum and the index counted again from the holders (after holders went, or the
    /// interval changed).
    fn recount(&mut self) {
        self.held = Sum::default();
        self.index.clear();
        for (at, h) in self.holders.iter().enumerate() {
            self.held.add(Share::of(h.held, self.interval));
            self.index.insert(h.stream, at);
        }
    }

    /// The limit Envoys enforce, shared among holders (`None`: a blanket rule applies).
    pub(crate) fn enforced(&self) -> Option<&SharedRate> {
        match &self.action {
            BucketAction::Limited {
                rate,
                shadow: false,
                ..
            } => Some(rate),
            _ => None,
        }
    }

    /// The blanket rule of a bucket whose limit is not enforced by shares.
    pub(crate) fn blanket(&self) -> Option<Strategy> {
        match &self.action {
            BucketAction::Deny { shadow: false, .. } => Some(Strategy::DenyAll),
            BucketAction::Limited { shadow: false, .. } => None,
            _ => Some(Strategy::AllowAll),
        }
    }

    /// The holder for `stream`, made if new (reporting as `every` says).
    pub(crate) fn holder(&mut self, stream: StreamId, now: Nanos, every: Cadence) -> &mut Holder {
        let at = match self.position(stream) {
            Some(at) => at,
            None => {
                self.index.insert(stream, self.holders.len());
                self.holders.push(Holder {
                    stream,
                    demand: Demand::default(),
                    held: None,
                    desired: None,
                    last_report: now,
                    last_sent: now,
                    ttl: 0,
                    assigned_since: None,
                    every,
                    reporting: true,
                });
                self.holders.len() - 1
            }
        };
        &mut self.holders[at]
    }

    /// Records one report of `stream`: its demand, its interval (a new holder starts at
    /// `every`, what its stream reports at; learned up to `longest`), and what a shadow rule
    /// would have refused.
    pub(crate) fn record(
        &mut self,
        stream: StreamId,
        usage: &Usage,
        now: Nanos,
        (every, longest): (Cadence, Interval),
    ) -> Tally {
        self.last_report = now;
        let offered = usage.allowed.saturating_add(usage.denied);
        let known = self.position(stream).is_some();
        let holder = self.holder(stream, now, every);
        let since = known.then(|| now.saturating_sub(holder.last_report));
        holder.every.record(usage.elapsed, since, longest);
        // Requests refused while the Envoy had no assignment (its own fallback), or in the
        // first second of one (its bucket filling), say nothing of the share.
        let assigned = (holder.assigned_since)
            .is_some_and(|t| t.saturating_add(usage.elapsed).saturating_add(SECOND) <= now);
        let refused = if assigned { usage.denied } else { 0 };
        holder.demand.record(offered, refused, usage.elapsed);
        holder.last_report = now;
        holder.reporting = true;
        let shadow_refused = match (&mut self.shadow, &self.action) {
            (Some(shadow), BucketAction::Limited { rate, .. }) => shadow.charge(rate, offered, now),
            _ => 0,
        };
        Tally {
            rule: self.action.rule().cloned(),
            allowed: usage.allowed,
            denied: usage.denied,
            shadow_refused,
        }
    }

    /// Hands `from`'s share, reserved since its stream ended, to `to`: the same Envoy on a new
    /// stream, which still holds the assignment. `false` when `from` holds nothing here.
    pub(crate) fn adopt(&mut self, from: StreamId, to: StreamId, now: Nanos) -> bool {
        if self.index.contains_key(&to) {
            return false;
        }
        let Some(at) = self
            .position(from)
            .filter(|&at| !self.holders[at].reporting)
        else {
            return false;
        };
        let h = &mut self.holders[at];
        h.stream = to;
        h.reporting = true;
        h.last_report = now;
        self.index.remove(&from);
        self.index.insert(to, at);
        true
    }

    /// Whether `stream` holds a share here without reporting it (its stream ended).
    pub(crate) fn holds(&self, stream: StreamId) -> bool {
        self.find(stream).is_some_and(|h| !h.reporting)
    }

    /// Stops pushing to `stream` here (its stream closed): its share stays reserved until it
    /// expires. `true` when it held a place here.
    pub(crate) fn stop(&mut self, stream: StreamId) -> bool {
        let Some(at) = self.position(stream) else {
            return false;
        };
        self.holders[at].reporting = false;
        true
    }

    /// The streams holding this bucket.
    pub(crate) fn streams(&self) -> impl Iterator<Item = StreamId> + '_ {
        self.holders.iter().map(|h| h.stream)
    }

    /// The clock's work on one bucket: holders silent for too long stop reporting, and those
    /// whose share has expired in their Envoy go. Returns the streams whose holders went, and
    /// whether the split must be redone.
    pub(crate) fn expire(&mut self, now: Nanos) -> (Vec<StreamId>, bool) {
        let mut moved = false;
        let mut every = Interval::default();
        for h in self.holders.iter_mut() {
            let patience = h.every.patience();
            if h.reporting && now.saturating_sub(h.last_report) >= patience.silent_after() {
                h.reporting = false;
                moved = true;
            }
            every = every.max(patience);
        }
        self.every = every;
        let mut gone = Vec::new();
        self.holders.retain(|h| {
            let live = h.reporting || now < h.last_sent + held_for(h.ttl);
            if !live {
                gone.push(h.stream);
            }
            live
        });
        if !gone.is_empty() {
            self.recount();
            moved = true;
        }
        (gone, moved)
    }

    /// The TTL to send holder `h` with `strategy` at `now`: two of its report intervals, cut so
    /// a share expires before this replica's reservation of what it is handed out of
    /// ([`Bucket::covered`]) lapses (a stream whose reports just slowed gets its longer TTL once
    /// a claim has reserved for it). At least a second; a refusal, which spends nothing, is not
    /// cut.
    pub(crate) fn ttl_for(&self, h: &Holder, strategy: Strategy, now: Nanos) -> u32 {
        let ttl = h.every.ttl_seconds();
        let Some(until) = self.covered.filter(|_| strategy != Strategy::DenyAll) else {
            return ttl;
        };
        let room = (until.saturating_sub(now) / SECOND).saturating_sub(1);
        ttl.min(u32::try_from(room).unwrap_or(u32::MAX)).max(1)
    }

    /// How long from `now` a share of this bucket may live in an Envoy: one handed out now (the
    /// TTL its reporting holders get, and a second), or one already out.
    pub(crate) fn lives_for(&self, now: Nanos) -> Nanos {
        (self.holders.iter())
            .map(|h| {
                let next = if h.reporting {
                    held_for(h.every.ttl_seconds())
                } else {
                    0
                };
                next.max((h.last_sent + held_for(h.ttl)).saturating_sub(now))
            })
            .max()
            .unwrap_or(0)
    }

    /// Whether a holder that is not reporting may still be spending its share: its assignment
    /// has not expired in its Envoy.
    pub(crate) fn reserved_by_gone(&self, open: impl Fn(StreamId) -> bool, now: Nanos) -> bool {
        (self.holders.iter()).any(|h| !open(h.stream) && now < h.last_sent + held_for(h.ttl))
    }

    /// The bucket as the operator page shows it.
    pub(crate) fn view(&self) -> BucketView {
        BucketView {
            domain: self.domain.clone(),
            bucket: self.id.clone(),
            rule: self.action.rule().cloned(),
            limit: match &self.action {
                BucketAction::Limited { rate, .. } => Some(*rate),
                _ => None,
            },
            holders: (self.holders.iter())
                .map(|h| HolderView {
                    stream: h.stream,
                    demand_per_second: h.demand.per_second(),
                    strategy: h.held,
                    rate_per_second: rate_of(h.held),
                    reporting: h.reporting,
                })
                .collect(),
        }
    }

    /// What this bucket's reporting streams ask, requests per second (a stream whose demand is
    /// not known yet counts as asking the whole limit).
    pub(crate) fn demand(&self) -> f64 {
        let whole = self.enforced().map_or(0.0, SharedRate::per_second);
        (self.holders.iter().filter(|h| h.reporting))
            .map(|h| h.demand.per_second().unwrap_or(whole))
            .sum()
    }
}

/// The fill interval shares of `action`'s limit are counted on (1 for a blanket rule).
fn interval_of(action: &BucketAction) -> u32 {
    match action {
        BucketAction::Limited { rate, .. } => Grid::of(rate, 1.0).interval,
        _ => 1,
    }
}

fn shadow_of(action: &BucketAction, now: Nanos) -> Option<Shadow> {
    match action {
        BucketAction::Limited {
            rate, shadow: true, ..
        } => Some(Shadow::new(rate, now)),
        _ => None,
    }
}
