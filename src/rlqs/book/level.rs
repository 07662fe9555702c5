//! The water level of a bucket's last full split, from which one stream's share is set in
//! constant time when it reports.

use crate::rlqs::assign::Strategy;
use crate::rlqs::limits::HEADROOM;

use super::allocation::{Water, water_level};
use super::demand::Demand;
use super::share::{Grid, Share};

/// The last full split of a bucket: what its reporting holders were split (the room holders
/// that stopped reporting leave) and the water level reached. A report is answered from it in
/// constant time, whatever the holders; the next full split (at the tick, once a second, when
/// anything moved) brings every other holder up to date.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Level {
    room: Share,
    water: Water,
    /// The room over the reporting holders: what a holder whose demand is not known yet asks.
    fair: f64,
    /// Whether wants include headroom: only when the room covers every holder's demand with
    /// its headroom.
    headroom: bool,
}

impl Level {
    /// The level of a full split of `room` among reporting holders with `demands` on `grid`,
    /// and what each of them asks (tokens per fill): with headroom only when the room covers
    /// every holder's demand with its headroom.
    pub(super) fn reach(room: Share, demands: &[Demand], grid: Grid) -> (Level, Vec<Option<f64>>) {
        let mut level = Level {
            room,
            water: water_level(0, &[]),
            fair: room.tokens as f64 / demands.len().max(1) as f64,
            headroom: demands.iter().all(|d| d.per_second().is_some()),
        };
        let want = |level: &Level| -> Vec<Option<f64>> {
            (demands.iter())
                .map(|d| Some(level.want(d, grid)))
                .collect()
        };
        let mut wants = want(&level);
        let asked: f64 = wants.iter().flatten().sum();
        if asked > room.tokens as f64 {
            level.headroom = false;
            wants = want(&level);
        }
        level.water = water_level(room.tokens, &wants);
        (level, wants)
    }

    /// What a holder with `demand` asks of `grid`, in tokens per fill: its demand, with
    /// headroom when the room has it; a holder whose demand is not known yet, the fair share.
    /// Without headroom for all, a holder asking less than the fair share that was refused
    /// lately keeps its headroom up to the fair share (a small asker's requests may arrive
    /// unevenly: held to its mean such a one is refused a tenth of them), the others ask their
    /// demand in whole tokens rounded up: Envoy fills whole tokens, and a share a fraction of a
    /// token short of its demand would refuse it every fill. Headroom nobody uses is lost to
    /// the streams refused, so it goes only where refusals show it is needed.
    fn want(&self, demand: &Demand, grid: Grid) -> f64 {
        let Some(per_second) = demand.per_second() else {
            return self.fair;
        };
        let d = per_second * grid.interval as f64;
        let with_headroom = (d * HEADROOM).max(d + 1.0);
        if self.headroom {
            with_headroom
        } else {
            let whole = (d - 1e-9).ceil().max(0.0);
            match demand.refused_lately() {
                true => whole.max(with_headroom.min(self.fair)),
                false => whole,
            }
        }
    }

    /// The share of a holder with `demand` under this split, rounded down (the full split
    /// rounds by largest remainders, so this is at most one token below it).
    pub(super) fn target(&self, demand: &Demand, grid: Grid) -> Strategy {
        let room = self.room;
        let want = Some(self.want(demand, grid));
        let tokens = (self.water.fill(want).floor() as u64).min(room.tokens);
        let burst = match room.tokens {
            0 => 0,
            all => {
                let part = (tokens as u128 * room.burst as u128 / all as u128) as u64;
                part.max((tokens > 0) as u64).min(room.burst)
            }
        };
        Share { tokens, burst }.strategy(grid.interval)
    }
}
