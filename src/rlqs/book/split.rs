//! The split of one bucket's limit: what each reporting stream should hold (max–min fair by
//! demand, small moves kept), and the order in which the changes go out so that what streams
//! hold never sums above the limit.

use crate::clock::Nanos;
use crate::rlqs::assign::{Strategy, StreamId};
use crate::rlqs::limits::HEADROOM;

use super::allocation::{proportional, water_fill};
use super::bucket::{Bucket, Holder};
use super::share::{Grid, Share, distinct, material};

/// A strategy the book has decided to send, with what to restore if it cannot be delivered.
#[derive(Debug, Clone)]
pub(crate) struct StrategyChange {
    pub stream: StreamId,
    pub old: Option<Strategy>,
    pub old_sent: Nanos,
    pub new: Strategy,
}

/// Both parts of a sum of shares, wide enough that `ALLOW_ALL` holders never wrap it.
#[derive(Debug, Clone, Copy, Default)]
struct Sum {
    tokens: u128,
    burst: u128,
}

impl Sum {
    fn add(&mut self, s: Share) {
        self.tokens += s.tokens as u128;
        self.burst += s.burst as u128;
    }

    fn sub(&mut self, s: Share) {
        self.tokens -= s.tokens as u128;
        self.burst -= s.burst as u128;
    }

    /// What is left of `grid` once this sum is taken (zero when over).
    fn room(self, grid: Grid) -> Share {
        let left = |total: u64, used: u128| (total as u128).saturating_sub(used) as u64;
        Share {
            tokens: left(grid.tokens, self.tokens),
            burst: left(grid.burst, self.burst),
        }
    }
}

impl Bucket {
    /// Recomputes what every reporting holder should hold: the blanket rule, or a max–min fair
    /// split of what holders that stopped reporting leave of this replica's `portion` (0..=1) of
    /// the limit (their shares stay reserved until they expire), kept where the move is small and
    /// the sum allows.
    pub(crate) fn retarget(&mut self, portion: f64) {
        if let Some(blanket) = self.blanket() {
            self.grid = None;
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
        let seconds = grid.interval as f64;
        let wants: Vec<Option<f64>> = self
            .reporting()
            .map(|h| {
                let d = h.demand.per_second()?;
                Some((d * seconds * HEADROOM).max(d * seconds + 1.0))
            })
            .collect();
        let tokens = water_fill(room.tokens, &wants);
        let bursts = proportional(room.burst, &tokens);
        let targets: Vec<Strategy> = tokens
            .iter()
            .zip(&bursts)
            .map(|(&tokens, &burst)| Share { tokens, burst }.strategy(grid.interval))
            .collect();
        self.keep_small_moves(&targets, grid, room);
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
        let sum = self.held_sum(whole.interval);
        let part = |used: u128, of: u64| (used as f64 / of.max(1) as f64).min(1.0);
        part(sum.tokens, whole.tokens).max(part(sum.burst, whole.burst))
    }

    /// The sum of what every holder holds now.
    fn held_sum(&self, interval: u32) -> Sum {
        let mut sum = Sum::default();
        for h in &self.holders {
            sum.add(Share::of(h.held, interval));
        }
        sum
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
        for h in self.holders.iter_mut() {
            let Some(new) = h.desired.filter(|&d| Some(d) != h.held) else {
                continue;
            };
            let shrinks = Share::of(Some(new), interval).within(Share::of(h.held, interval));
            if h.reporting && Some(h.stream) != reporter && (blanket || shrinks) {
                out.push(apply(h, new, now));
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
        let mut sum = self.held_sum(grid.interval);
        let mut out = Vec::new();
        for h in self.holders.iter_mut() {
            if !h.reporting || Some(h.stream) == reporter || h.desired == h.held {
                continue;
            }
            if let Some(new) = fitted(h, grid, &mut sum).filter(|&new| Some(new) != h.held) {
                out.push(apply(h, new, now));
            }
        }
        out
    }

    /// The reporter's answer: its blanket rule, or what it should hold cut to the room the
    /// others leave (the same strategy again when that moved little).
    pub(crate) fn answer(&mut self, stream: StreamId, now: Nanos) -> Option<Strategy> {
        let grid = self.grid;
        let mut sum = grid.map(|g| self.held_sum(g.interval));
        let h = self.holders.iter_mut().find(|h| h.stream == stream)?;
        let new = match (grid, sum.as_mut()) {
            (Some(grid), Some(sum)) => fitted(h, grid, sum).or(h.held)?,
            _ => h.desired?,
        };
        h.held = Some(new);
        h.last_sent = now;
        Some(new)
    }

    /// Undoes a change that could not be delivered.
    pub(crate) fn revert(&mut self, change: &StrategyChange) {
        if let Some(h) = self.holders.iter_mut().find(|h| h.stream == change.stream) {
            h.held = change.old;
            h.last_sent = change.old_sent;
        }
    }

    /// Whether every reporting holder holds what the last re-split wants.
    pub(crate) fn settled(&self) -> bool {
        self.reporting()
            .all(|h| h.desired.is_none() || h.desired == h.held)
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

fn apply(h: &mut Holder, new: Strategy, now: Nanos) -> StrategyChange {
    let change = StrategyChange {
        stream: h.stream,
        old: h.held,
        old_sent: h.last_sent,
        new,
    };
    h.held = Some(new);
    h.last_sent = now;
    change
}
