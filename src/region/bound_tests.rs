//! The bound of docs/regions.md, proven on random fleets: for one global token bucket of rate R
//! and burst B, all regions together admit in any interval of length T at most
//! `B + R·T + Σ (q − p)·B + n`, the sum over the portion moves in the interval that grew a
//! region's part from p to q, and n their number (each move's burst rounds to whole hits); and
//! at no instant do the portions the regions enforce sum past the whole limit.

use proptest::prelude::*;

use super::fleet::{Fleet, STEP, steps_of};
use super::{MIN_MEMBER_TIMEOUT, RegionOptions, WHOLE_PPM};
use crate::clock::{MILLI, SECOND};

/// Something that happens to the fleet.
#[derive(Debug, Clone)]
enum Event {
    /// Region `who` now asks `times` × the rate.
    Demand { who: usize, times: f64 },
    /// Region `who`'s link to the global store is cut.
    Cut { who: usize },
    /// Region `who`'s link heals.
    Heal { who: usize },
    /// Region `who`'s answers are lost one round in `every` (0: none).
    Lose { who: usize, every: u32 },
    /// A region not running yet starts.
    Join,
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        4 => (0..5usize, prop_oneof![Just(0.0), 0.05..0.3f64, 0.3..3.0f64])
            .prop_map(|(who, times)| Event::Demand { who, times }),
        2 => (0..5usize).prop_map(|who| Event::Cut { who }),
        2 => (0..5usize).prop_map(|who| Event::Heal { who }),
        1 => (0..5usize, 0..4u32).prop_map(|(who, every)| Event::Lose { who, every }),
        1 => Just(Event::Join),
    ]
}

/// A case: the limit, the regions at the start (the rest join on `Join`), the link's delay,
/// the floor, and timed events.
#[derive(Debug, Clone)]
struct Case {
    rate: u64,
    burst: u64,
    regions: usize,
    one_way_ms: u64,
    floor_share: f64,
    events: Vec<(u32, Event)>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        20..400u64,
        10..300u64,
        2..5usize,
        0..200u64,
        prop_oneof![Just(0.5), 0.1..1.0f64],
        prop::collection::vec((0..150u32, event()), 0..16),
    )
        .prop_map(
            |(rate, burst, regions, one_way_ms, floor_share, mut events)| {
                events.sort_by_key(|(at, _)| *at);
                Case {
                    rate,
                    burst,
                    regions,
                    one_way_ms,
                    floor_share,
                    events,
                }
            },
        )
}

/// Runs `case` for 180 s and checks the bound on every window of 1, 5, 10 and 30 s.
fn check(case: &Case) -> Result<(), TestCaseError> {
    let options: Vec<RegionOptions> = (0..5)
        .map(|i| RegionOptions {
            floor_share: case.floor_share,
            member_timeout: MIN_MEMBER_TIMEOUT,
            ..RegionOptions::new(format!("r{i}"))
        })
        .collect();
    let mut fleet = Fleet::new(
        case.rate,
        case.burst,
        case.one_way_ms * MILLI,
        &options[..case.regions],
    );
    let rate = case.rate as f64;
    for member in &mut fleet.members {
        member.demand = rate;
    }
    let mut waiting: Vec<RegionOptions> = options[case.regions..].to_vec();
    let mut at = 0u32;
    for (when, event) in case.events.iter().cloned() {
        fleet.run(f64::from(when - at));
        at = when;
        let n = fleet.members.len();
        match event {
            Event::Demand { who, times } => fleet.members[who % n].demand = times * rate,
            Event::Cut { who } => fleet.members[who % n].cut = true,
            Event::Heal { who } => fleet.members[who % n].cut = false,
            Event::Lose { who, every } => fleet.members[who % n].lose_every = every,
            Event::Join => {
                if let Some(next) = waiting.pop() {
                    fleet.add(next, u64::from(when) * 131 * MILLI % SECOND);
                    let last = fleet.members.len() - 1;
                    fleet.members[last].demand = rate;
                }
            }
        }
    }
    fleet.run(f64::from(180 - at));
    prop_assert!(
        fleet.most_in_force <= u64::from(WHOLE_PPM),
        "portions in force summed to {} ppm",
        fleet.most_in_force
    );
    let burst = case.burst as f64;
    let prefix = |values: &mut dyn Iterator<Item = f64>| -> Vec<f64> {
        let mut sums = vec![0.0];
        for v in values {
            sums.push(sums.last().copied().unwrap_or(0.0) + v);
        }
        sums
    };
    let admitted = prefix(&mut fleet.admitted.iter().map(|&a| a as f64));
    let grown = prefix(&mut fleet.grown.iter().copied());
    let grows = prefix(&mut fleet.grows.iter().map(|&g| f64::from(g)));
    for seconds in [1.0, 5.0, 10.0, 30.0] {
        let len = steps_of(seconds);
        let t = (len as u64 * STEP) as f64 / SECOND as f64;
        for start in 0..=fleet.steps() - len {
            let end = start + len;
            let moved = grown[end] - grown[start];
            let bound = burst + rate * t + burst * moved + (grows[end] - grows[start]);
            let got = admitted[end] - admitted[start];
            prop_assert!(
                got <= bound + 1e-6,
                "{seconds} s from step {start}: {got} admitted > bound {bound} (grown {moved})"
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Random demand shifts, joins, partitions, heals and lost answers never take the regions
    /// past the bound.
    #[test]
    fn regions_together_stay_within_the_bound(case in case()) {
        check(&case)?;
    }
}
