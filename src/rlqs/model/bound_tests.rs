//! The stated bound, proven against the Envoy model: over random limits, demand schedules,
//! bursts, Envoys joining and leaving, and server restarts, no window of 1, 5, 15 or 30 s ever
//! admits more than `burst + rate × T + slack` (slack: tokens that assignments added at once),
//! and the token buckets Envoys hold never sum above the limit. Half the cases answer every
//! report but a bucket's first from the last split (the path of large fleets), half re-split
//! at once (the path of few streams).

use proptest::prelude::*;

use crate::clock::{Nanos, SECOND};
use crate::rlqs::limits::SPLIT_AT_ONCE;
use crate::rules::bucket::SharedRate;

use super::fleet::{Fleet, FleetConfig};
use crate::rlqs::assign::Strategy as Envoy;

const STEP: Nanos = SECOND / 10;
const SECONDS: u64 = 120;

#[derive(Debug, Clone)]
enum Event {
    /// An Envoy joins with this demand, reporting every so many seconds.
    Join(f64, u64),
    Leave(usize),
    Demand(usize, f64),
    Burst(usize, u64),
    Restart,
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        3 => (0.0f64..2.0, prop_oneof![Just(1u64), Just(5), Just(30)])
            .prop_map(|(d, every)| Event::Join(d, every)),
        2 => (0usize..16).prop_map(Event::Leave),
        3 => (0usize..16, 0.0f64..3.0).prop_map(|(i, d)| Event::Demand(i, d)),
        2 => (0usize..16, 1u64..400).prop_map(|(i, n)| Event::Burst(i, n)),
        1 => Just(Event::Restart),
    ]
}

fn rate() -> impl Strategy<Value = SharedRate> {
    (
        1u64..400,
        prop_oneof![Just(1u64), Just(10), Just(60)],
        1u64..200,
    )
        .prop_map(|(requests, window, burst)| SharedRate {
            requests,
            window: window * SECOND,
            burst,
        })
}

/// Runs one schedule; demands and bursts are in units of the limit's rate per second.
fn run(rate: SharedRate, initial: &[f64], events: &[(u64, Event)], split_at_once: usize) -> Fleet {
    let start = 1_000 * SECOND;
    let mut fleet = Fleet::new(FleetConfig {
        rate,
        fallback: Envoy::DenyAll,
        step: STEP,
        start,
        check_pushes: true,
        split_at_once,
    });
    let per_second = rate.per_second();
    for &d in initial {
        fleet.join(d * per_second);
    }
    let mut events = events.to_vec();
    events.sort_by_key(|(at, _)| *at);
    for (at, event) in events {
        fleet.run_until(start + at * STEP);
        let members = fleet.members().len().max(1);
        match event {
            Event::Join(d, every) => {
                fleet.join_every(d * per_second, every * SECOND);
            }
            Event::Leave(i) => fleet.leave(i % members),
            Event::Demand(i, d) => fleet.set_demand(i % members, d * per_second),
            Event::Burst(i, n) => fleet.burst(i % members, n),
            Event::Restart => fleet.restart(),
        }
    }
    fleet.run_until(start + SECONDS * SECOND);
    fleet
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn no_window_admits_more_than_the_bound(
        rate in rate(),
        initial in proptest::collection::vec(0.0f64..2.0, 1..5),
        events in proptest::collection::vec((0u64..SECONDS * 10, event()), 0..14),
        at_once in any::<bool>(),
    ) {
        let split_at_once = if at_once { SPLIT_AT_ONCE } else { 0 };
        let fleet = run(rate, &initial, &events, split_at_once);
        prop_assert!(fleet.violations().is_empty(), "{:?}", fleet.violations());
        for seconds in [1usize, 5, 15, 30] {
            let steps = seconds * (SECOND / STEP) as usize;
            for (i, (admitted, bound)) in fleet.windows(steps).into_iter().enumerate() {
                prop_assert!(
                    admitted as f64 <= bound + 1e-6,
                    "{seconds} s window at step {i}: {admitted} > {bound}"
                );
            }
        }
    }
}
