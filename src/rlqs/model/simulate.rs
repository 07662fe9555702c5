//! `sluice simulate --rlqs`: the real book sharing one limit among many modelled Envoys (skewed
//! demand, churn) on a manual clock; combined admission against the bound, Jain's fairness
//! index and the report calls a second the book answered (wall clock).

use crate::clock::{Nanos, SECOND};
use crate::rlqs::assign::Strategy;
use crate::rlqs::limits::{SPLIT_AT_ONCE, WARM_UP};
use crate::rules::bucket::SharedRate;

use super::fleet::{Fleet, FleetConfig, Member};

/// What to simulate.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Envoy streams.
    pub streams: usize,
    /// Simulated seconds.
    pub seconds: u64,
    /// The shared limit, requests per second (also the burst unless `burst` is set).
    pub rate: u64,
    /// The limit's burst.
    pub burst: u64,
    /// Combined demand as a multiple of the limit.
    pub load: f64,
    /// Zipf exponent of the demand across streams (0: all equal).
    pub skew: f64,
    /// Fraction of the streams replaced per minute (one leaves, a new one joins).
    pub churn: f64,
}

/// The figures of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct SimulationOutcome {
    /// Worst 10 s window: admitted / (burst + rate × T).
    pub worst_plain: f64,
    /// Worst 10 s window: admitted / (burst + rate × T + slack).
    pub worst_bound: f64,
    /// Admitted / (rate × T) after the warm-up.
    pub utilisation: f64,
    /// Jain's index over streams whose demand exceeded their share.
    pub jain: f64,
    /// Streams counted in `jain`.
    pub constrained: usize,
    /// Breaches of the invariant (0 expected).
    pub breaches: usize,
    /// Report calls the book answered.
    pub reports: u64,
    /// Report calls per second of wall-clock time spent in the book.
    pub reports_per_second: f64,
}

const STEP: Nanos = SECOND / 10;
const START: Nanos = 1_000 * SECOND;

/// Runs a scenario: the real book sharing one limit among many modelled Envoys.
pub fn simulate(s: &Scenario) -> SimulationOutcome {
    let mut fleet = Fleet::new(FleetConfig {
        rate: SharedRate {
            requests: s.rate,
            window: SECOND,
            burst: s.burst,
        },
        fallback: Strategy::DenyAll,
        step: STEP,
        start: START,
        check_pushes: false,
        split_at_once: SPLIT_AT_ONCE,
    });
    let demands = zipf(s.streams, s.skew, s.load * s.rate as f64);
    let mut rank: Vec<usize> = Vec::with_capacity(s.streams);
    for (i, &d) in demands.iter().enumerate() {
        fleet.join(d);
        rank.push(i);
    }
    let mut random = fastrand::Rng::with_seed(28);
    let settled = (WARM_UP / SECOND + 5).min(s.seconds);
    let mut before: Vec<Member> = Vec::new();
    let mut churned = 0.0;
    for second in 1..=s.seconds {
        fleet.run_until(START + second * SECOND);
        if second == settled {
            before = fleet.members().to_vec();
        }
        churned += s.churn * s.streams as f64 / 60.0;
        while churned >= 1.0 {
            churned -= 1.0;
            let live: Vec<usize> = (0..rank.len())
                .filter(|&i| fleet.members()[i].alive())
                .collect();
            if live.is_empty() {
                break;
            }
            let gone = live[random.usize(..live.len())];
            fleet.leave(gone);
            fleet.join(demands[rank[gone]]);
            rank.push(rank[gone]);
        }
    }
    outcome(&fleet, s, &before, settled)
}

fn outcome(fleet: &Fleet, s: &Scenario, before: &[Member], from: u64) -> SimulationOutcome {
    let steps = (10 * SECOND / STEP) as usize;
    let plain = s.burst as f64 + s.rate as f64 * (steps - 1) as f64 * STEP as f64 / SECOND as f64;
    let windows = fleet.windows(steps);
    let worst = |f: &dyn Fn(&(u64, f64)) -> f64| windows.iter().map(f).fold(0.0, f64::max);
    let per_step = (SECOND / STEP) as usize;
    let measured: u64 = fleet.records()[from as usize * per_step..]
        .iter()
        .map(|r| r.admitted)
        .sum();
    let span = s.seconds.saturating_sub(from).max(1) as f64;
    // Streams that ran through the whole measured span and were refused a tenth of their ask.
    let rates: Vec<f64> = before
        .iter()
        .zip(fleet.members())
        .filter(|(_, now)| now.alive())
        .filter_map(|(then, now)| {
            let offered = (now.offered - then.offered) as f64;
            let admitted = (now.admitted - then.admitted) as f64;
            (offered > 0.0 && admitted < 0.9 * offered).then_some(admitted / span)
        })
        .collect();
    let (reports, wall) = fleet.report_load();
    SimulationOutcome {
        worst_plain: worst(&|&(a, _)| a as f64 / plain),
        worst_bound: worst(&|&(a, b)| a as f64 / b),
        utilisation: measured as f64 / (s.rate as f64 * span),
        jain: jain(&rates),
        constrained: rates.len(),
        breaches: fleet.violations().len(),
        reports,
        reports_per_second: reports as f64 / wall.as_secs_f64().max(1e-9),
    }
}

/// Demand per stream: `total` split in proportion to `1 / rank^skew`.
fn zipf(streams: usize, skew: f64, total: f64) -> Vec<f64> {
    let weights: Vec<f64> = (1..=streams).map(|r| 1.0 / (r as f64).powf(skew)).collect();
    let sum: f64 = weights.iter().sum();
    weights.iter().map(|w| total * w / sum).collect()
}

/// Jain's fairness index: 1 when all are equal, 1/n when one has everything.
fn jain(xs: &[f64]) -> f64 {
    let (sum, squares): (f64, f64) = (xs.iter().sum(), xs.iter().map(|x| x * x).sum());
    if xs.is_empty() || squares == 0.0 {
        return 1.0;
    }
    sum * sum / (xs.len() as f64 * squares)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small run keeps the bound and the invariant and shares fairly.
    #[test]
    fn a_small_run_stays_within_the_bound() {
        let s = Scenario {
            streams: 20,
            seconds: 40,
            rate: 1_000,
            burst: 1_000,
            load: 3.0,
            skew: 1.0,
            churn: 0.3,
        };
        let o = simulate(&s);
        assert_eq!(o.breaches, 0);
        assert!(o.worst_bound <= 1.0, "{o:?}");
        assert!(o.utilisation > 0.85 && o.utilisation <= 1.01, "{o:?}");
        assert!(o.constrained > 0 && o.jain > 0.8, "{o:?}");
        assert!(o.reports > 20 * 7, "{o:?}");
    }

    #[test]
    fn jain_and_zipf() {
        assert_eq!(jain(&[2.0, 2.0]), 1.0);
        assert_eq!(jain(&[1.0, 0.0]), 0.5);
        let d = zipf(3, 1.0, 11.0);
        assert!((d[0] - 6.0).abs() < 1e-9 && (d[2] - 2.0).abs() < 1e-9);
    }
}
