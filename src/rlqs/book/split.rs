//! The split of one bucket's limit: what each reporting stream should hold (max–min fair by
//! demand, small moves kept), and the order in which the changes go out so that what streams
//! hold never sums above the limit.

use crate::clock::Nanos;
use crate::rlqs::assign::{Strategy, StreamId};

use super::allocation::{proportional, water_fill};
use super::bucket::{Bucket, Holder};
use super::demand::Demand;
use super::level::Level;
use super::share::{Grid, Share, distinct, material};
use super::sum::Sum;

/// A strategy the book has decided to send, with what to restore if it cannot be delivered.
#[derive(Debug, Clone)]
pub(crate) struct StrategyChange {
    pub stream: StreamId,
    pub old: Option<Strategy>,
    pub old_sent: Nanos,
    pub old_ttl: u32,
    pub new: Strategy,
    /// Its time to live, in seconds: two of the stream's report intervals.
    pub ttl: u32,
}

impl Bucket {
    /// Recomputes what every reporting holder should hold: the blanket rule, or a max–min fair
    /// split of what holders that stopped reporting leave of this replica's `portion` (0..=1) of
    /// the limit (their shares stay reserved until they expire), kept where the move is small and
    /// the sum allows. Each holder is offered its demand with headroom when the room covers all
    /// of those; otherwise its demand alone (what a holder is offered and does not use is lost
    /// to the others while they are refused). A holder whose demand is not known yet (a new
    /// stream) asks the fair share, the room over the holders: given the level instead, a fleet
    /// where streams come and go would hand most of the limit to streams that may ask little.
    pub(crate) fn retarget(&mut self, portion: f64) {
        if let Some(blanket) = self.blanket() {
            self.grid = None;
            self.level = None;
            for h in self.holders.iter_mut().filter(|h| h.reporting) {
                h.desired = Some(blanket);
            }
            return;
        }
        let Some(rate) = self.enforced().copied() else {
            return;
        };
        let grid = Grid::of(&rate, portion);
        self.grid = Some(grid);
        let mut reserved = Sum::default();
        for h in self.holders.iter().filter(|h| !h.reporting) {
            reserved.add(Share::of(h.held, grid.interval));
        }
        let room = reserved.room(grid);
        let demands: Vec<Demand> = self.reporting().map(|h| h.demand).collect();
        let (level, wants) = Level::reach(room, &demands, grid);
        self.level = Some(level);
        let tokens = water_fill(room.tokens, &wants);
        let bursts = proportional(room.burst, &tokens);
        let targets: Vec<Strategy> = tokens
            .iter()
            .zip(&bursts)
            .map(|(&tokens, &burst)| Share { tokens, burst }.strategy(grid.interval))
            .collect();
        self.keep_small_moves(&targets, grid, room);
    }

    /// Sets what a reporting `stream` should hold from the last full split and its demand now,
    /// in constant time. `true` when the bucket needs a full split (at the tick): the stream's
    /// share moved materially, so the others' may too.
    pub(crate) fn aim(&mut self, stream: StreamId) -> bool {
        let Some(at) = self.position(stream) else {
            return false;
        };
        let new = match (self.blanket(), self.grid, self.level) {
            (Some(blanket), _, _) => blanket,
            (None, Some(grid), Some(level)) => {
                let h = &self.holders[at];
                let target = level.target(&h.demand, grid);
                match h.held {
                    Some(held) if !material(Some(held), target, grid.interval) => held,
                    held => distinct(held, target),
                }
            }
            _ => return true,
        };
        let interval = self.grid.map_or(1, |g| g.interval);
        let h = &mut self.holders[at];
        let moved = h.desired.is_none_or(|d| material(Some(d), new, interval));
        h.desired = Some(new);
        moved
    }

    /// Whether the bucket has never been split since its limit was set: its first report is
    /// split in full.
    pub(crate) fn unsplit(&self) -> bool {
        self.enforced().is_some() && self.level.is_none()
    }

    /// Whether `stream` holds what the split wants it to.
    pub(crate) fn holder_settled(&self, stream: StreamId) -> bool {
        self.find(stream)
            .is_none_or(|h| h.desired.is_none() || h.desired == h.held)
    }

    fn reporting(&self) -> impl Iterator<Item = &Holder> {
        self.holders.iter().filter(|h| h.reporting)
    }

    /// Hysteresis: a holder keeps its strategy when its target moved little, unless the kept
    /// strategies together would not fit; then every kept one above its target goes to it.
    fn keep_small_moves(&mut self, targets: &[Strategy], grid: Grid, room: Share) {
        let interval = grid.interval;
        let mut sum = Sum::default();
        let live = self.holders.iter_mut().filter(|h| h.reporting);
        for (h, &target) in live.zip(targets) {
            h.desired = match h.held {
                Some(held) if !material(Some(held), target, interval) => Some(held),
                held => Some(distinct(held, target)),
            };
            sum.add(Share::of(h.desired, interval));
        }
        if sum.tokens <= room.tokens as u128 && sum.burst <= room.burst as u128 {
            return;
        }
        let live = self.holders.iter_mut().filter(|h| h.reporting);
        for (h, &target) in live.zip(targets) {
            let kept = Share::of(h.desired, interval);
            if !kept.within(Share::of(Some(target), interval)) {
                h.desired = Some(distinct(h.held, target));
            }
        }
    }

    /// The fraction (0..=1) of the whole limit that what every holder holds now takes, rate or
    /// burst, whichever is more: what this replica's Envoys may be spending, which its claim
    /// must go on covering until they have been told less (or their shares expired).
    pub(crate) fn outstanding(&self) -> f64 {
        let Some(rate) = self.enforced() else {
            return 0.0;
        };
        let whole = Grid::of(rate, 1.0);
        // `held` is counted on the limit's interval, the whole grid's.
        let sum = self.held;
        let part = |used: u128, of: u64| (used as f64 / of.max(1) as f64).min(1.0);
        part(sum.tokens, whole.tokens).max(part(sum.burst, whole.burst))
    }

    /// The changes that take nothing from the limit, for streams other than `reporter`: sent
    /// first, so the room they free is there before anything grows. Every change of a blanket
    /// rule is one.
    pub(crate) fn plan_shrinks(
        &mut self,
        reporter: Option<StreamId>,
        now: Nanos,
    ) -> Vec<StrategyChange> {
        let interval = self.grid.map_or(1, |g| g.interval);
        let blanket = self.grid.is_none();
        let mut out = Vec::new();
        for at in 0..self.holders.len() {
            let h = &self.holders[at];
            let Some(new) = h.desired.filter(|&d| Some(d) != h.held) else {
                continue;
            };
            let shrinks = Share::of(Some(new), interval).within(Share::of(h.held, interval));
            if h.reporting && Some(h.stream) != reporter && (blanket || shrinks) {
                out.push(self.apply(at, new, now));
            }
        }
        out
    }

    /// The changes that grow a share, for streams other than `reporter`, each cut to the room
    /// left with every other holder (the reporter at what it holds now) counted.
    pub(crate) fn plan_grows(
        &mut self,
        reporter: Option<StreamId>,
        now: Nanos,
    ) -> Vec<StrategyChange> {
        let Some(grid) = self.grid else {
            return Vec::new();
        };
        let mut sum = self.held;
        let mut out = Vec::new();
        for at in 0..self.holders.len() {
            let h = &self.holders[at];
            if !h.reporting || Some(h.stream) == reporter {
                continue;
            }
            if h.desired == h.held {
                // Its TTL was cut to a reservation that has since grown: the same again, longer.
                if let Some(held) = h.held.filter(|&held| h.ttl < self.ttl_for(h, held, now)) {
                    out.push(self.apply(at, held, now));
                }
                continue;
            }
            if let Some(new) = fitted(h, grid, &mut sum).filter(|&new| Some(new) != h.held) {
                out.push(self.apply(at, new, now));
            }
        }
        out
    }

    /// The reporter's answer: its blanket rule, or what it should hold cut to the room the
    /// others leave (the same strategy again when that moved little), with its TTL in seconds.
    /// Constant time: the sum of what the others hold is kept as it changes.
    pub(crate) fn answer(&mut self, stream: StreamId, now: Nanos) -> Option<(Strategy, u32)> {
        let at = self.position(stream)?;
        let h = &self.holders[at];
        let new = match self.grid {
            Some(grid) => fitted(h, grid, &mut self.held.clone()).or(h.held)?,
            None => h.desired?,
        };
        let ttl = self.ttl_for(h, new, now);
        self.set_held(at, Some(new), now, ttl);
        Some((new, ttl))
    }

    /// Undoes a change that could not be delivered.
    pub(crate) fn revert(&mut self, change: &StrategyChange) {
        if let Some(at) = self.position(change.stream) {
            self.set_held(at, change.old, change.old_sent, change.old_ttl);
        }
    }

    /// Whether every reporting holder holds what the last re-split wants.
    pub(crate) fn settled(&self) -> bool {
        self.reporting()
            .all(|h| h.desired.is_none() || h.desired == h.held)
    }

    /// Sends holder `at` `new`: the change, with what to restore if it cannot be delivered.
    fn apply(&mut self, at: usize, new: Strategy, now: Nanos) -> StrategyChange {
        let h = &self.holders[at];
        let change = StrategyChange {
            stream: h.stream,
            old: h.held,
            old_sent: h.last_sent,
            old_ttl: h.ttl,
            new,
            ttl: self.ttl_for(h, new, now),
        };
        self.set_held(at, Some(new), now, change.ttl);
        change
    }
}

/// `h`'s desired strategy cut to the room the others leave; `None` when even that would be a
/// move too small to send while what it holds still fits. Updates `sum` to the result.
fn fitted(h: &Holder, grid: Grid, sum: &mut Sum) -> Option<Strategy> {
    let interval = grid.interval;
    let own = Share::of(h.held, interval);
    sum.sub(own);
    let room = sum.room(grid);
    let want = Share::of(h.desired, interval);
    let new = match h.desired {
        Some(d) if want.within(room) => d,
        _ => distinct(h.held, want.min(room).strategy(interval)),
    };
    let keep = h.held.is_some() && own.within(room) && !material(h.held, new, interval);
    let chosen = if keep { h.held } else { Some(new) };
    sum.add(Share::of(chosen, interval));
    if keep { None } else { chosen }
}
