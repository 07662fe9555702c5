//! Regions on a manual clock against the global store's rules: what each region gets as demand
//! moves, what a cut-off region keeps, floors, members leaving and joining, lost answers.

use super::fleet::{Fleet, steps_of};
use super::*;
use crate::clock::MILLI;

/// Three regions with the default floor (a sixth each) and a member timeout of `timeout`.
fn three(timeout: Nanos) -> Vec<RegionOptions> {
    ["a", "b", "c"]
        .iter()
        .map(|name| RegionOptions {
            member_timeout: timeout,
            ..RegionOptions::new(*name)
        })
        .collect()
}

/// A limit of 100 a second, burst 100, three regions 75 ms from the global store.
fn fleet() -> Fleet {
    Fleet::new(100, 100, 75 * MILLI, &three(DEFAULT_MEMBER_TIMEOUT))
}

/// Every region at the whole rate: together they admit about the limit, never more than
/// burst + rate × T (what settling in adds aside), and at no instant do the portions in force
/// sum past the whole limit.
#[test]
fn three_regions_at_the_whole_rate_share_one_limit() {
    let mut fleet = fleet();
    for member in &mut fleet.members {
        member.demand = 100.0;
    }
    fleet.run(40.0);
    assert!(
        fleet.most_in_force <= u64::from(WHOLE_PPM),
        "{}",
        fleet.most_in_force
    );
    // After the floors have settled (15 s), 20 s of steady state.
    let (from, to) = (steps_of(20.0), steps_of(40.0));
    let admitted = fleet.admitted_in(from, to) as f64;
    assert!(admitted <= 100.0 + 100.0 * 20.0, "{admitted}");
    assert!(admitted >= 0.85 * 100.0 * 20.0, "{admitted}");
}

/// Demand moves from one region to another: within 5 s the one that now asks most admits at
/// least 0.8 × what the others leave it.
#[test]
fn a_portion_follows_demand() {
    let mut fleet = fleet();
    let demands = [200.0, 10.0, 10.0];
    for (member, demand) in fleet.members.iter_mut().zip(demands) {
        member.demand = demand;
    }
    fleet.run(30.0);
    let at = fleet.steps();
    fleet.members[0].demand = 10.0;
    fleet.members[1].demand = 200.0;
    fleet.run(15.0);
    let (from, to) = (at + steps_of(5.0), at + steps_of(15.0));
    let b_rate = fleet.admitted_by(1, from, to) as f64 / 10.0;
    assert!(b_rate >= 0.8 * (100.0 - 20.0), "b admitted {b_rate}/s");
    let a_rate = fleet.admitted_by(0, from, to) as f64 / 10.0;
    assert!(a_rate >= 9.0, "a still admits what it asks: {a_rate}/s");
}

/// A region cut off for 20 s keeps its last portion, then its floor, all along; the others never
/// take it, and once the link heals its share is back within 5 s.
#[test]
fn a_cut_off_region_keeps_its_floor_and_gets_its_share_back() {
    let mut fleet = fleet();
    for member in &mut fleet.members {
        member.demand = 100.0;
    }
    fleet.run(30.0);
    let cut_at = fleet.steps();
    fleet.members[2].cut = true;
    fleet.run(20.0);
    let healed_at = fleet.steps();
    fleet.members[2].cut = false;
    fleet.run(20.0);
    assert!(fleet.most_in_force <= u64::from(WHOLE_PPM));
    // C admits at least 0.8 × its floor's rate (100 / 6) through the cut.
    for second in 0..20 {
        let from = cut_at + steps_of(f64::from(second));
        let got = fleet.admitted_by(2, from, from + steps_of(1.0)) as f64;
        assert!(
            got >= 0.8 * 100.0 / 6.0 - 1.0,
            "second {second}: C admitted {got}"
        );
    }
    // Every 10 s window across the cut stays within burst + 10 × rate, and the slack its moves
    // may add.
    for start in (cut_at - steps_of(10.0))..(healed_at + steps_of(10.0)) {
        let end = start + steps_of(10.0);
        let grown: f64 = fleet.grown[start..end].iter().sum();
        let grows: u32 = fleet.grows[start..end].iter().sum();
        let bound = 100.0 + 1000.0 + 100.0 * grown + f64::from(grows);
        let admitted = fleet.admitted_in(start, end) as f64;
        assert!(admitted <= bound, "window at {start}: {admitted} > {bound}");
    }
    // Within 5 s of healing C is back to about a third.
    let from = healed_at + steps_of(5.0);
    let c_rate = fleet.admitted_by(2, from, from + steps_of(10.0)) as f64 / 10.0;
    assert!(
        c_rate >= 0.8 * 100.0 / 3.0,
        "C admits {c_rate}/s after healing"
    );
}

/// A region whose answers are lost now and then (the store ran its claims) never enforces more
/// than the store keeps for it: the portions in force stay within the whole limit.
#[test]
fn lost_answers_never_let_the_portions_sum_past_the_limit() {
    let mut fleet = fleet();
    let demands = [300.0, 30.0, 150.0];
    for (i, (member, demand)) in fleet.members.iter_mut().zip(demands).enumerate() {
        member.demand = demand;
        member.lose_every = 2 + i as u32;
    }
    for swap in 0..6 {
        fleet.run(7.0);
        let first = fleet.members[0].demand;
        fleet.members[0].demand = fleet.members[1 + swap % 2].demand;
        fleet.members[1 + swap % 2].demand = first;
    }
    assert!(
        fleet.most_in_force <= u64::from(WHOLE_PPM),
        "{}",
        fleet.most_in_force
    );
}

/// A region unheard of past the member timeout stops being a member: it stops enforcing its
/// floor first, then the others take what it reserved; back, it joins again.
#[test]
fn a_silent_region_stops_being_a_member() {
    let mut fleet = Fleet::new(100, 100, 75 * MILLI, &three(MIN_MEMBER_TIMEOUT));
    for member in &mut fleet.members {
        member.demand = 100.0;
    }
    fleet.run(30.0);
    fleet.members[2].cut = true;
    fleet.run(20.0);
    assert!(fleet.portion(2) > 0, "on its floor");
    fleet.run(50.0);
    assert_eq!(fleet.portion(2), 0, "past the member timeout: no floor");
    let two = fleet.portion(0) + fleet.portion(1);
    assert!(two >= 990_000, "the others hold the whole limit: {two}");
    fleet.members[2].cut = false;
    fleet.run(30.0);
    assert!(fleet.most_in_force <= u64::from(WHOLE_PPM));
    assert!(fleet.portion(2) >= 300_000, "back: {}", fleet.portion(2));
}

/// A region that joins late waits for room: the portions in force never pass the limit, and it
/// gets its share once the others' claims have made room and its floor has settled.
#[test]
fn a_late_region_joins_without_overshoot() {
    let options = three(DEFAULT_MEMBER_TIMEOUT);
    let mut fleet = Fleet::new(100, 100, 75 * MILLI, &options[..2]);
    for member in &mut fleet.members {
        member.demand = 100.0;
    }
    fleet.run(30.0);
    fleet.add(options[2].clone(), 500 * MILLI);
    fleet.members[2].demand = 100.0;
    fleet.run(30.0);
    assert!(fleet.most_in_force <= u64::from(WHOLE_PPM));
    assert!(fleet.portion(2) >= 300_000, "{}", fleet.portion(2));
    assert!(fleet.members[2].regions.floor_at(fleet.now) > 0.16);
}

/// The global limit a call is checked against: the whole limit before anything is known is
/// none at all (no floor yet), and a claim's portion of it after.
#[test]
fn calls_are_checked_against_the_portion() {
    let regions = Regions::new(RegionOptions::new("eu"), "r0");
    let limit = Limit {
        algorithm: crate::algorithm::Algorithm::SlidingWindow,
        requests: 100,
        window: SECOND,
        burst: 100,
        origin: 0,
        recording: Default::default(),
    };
    let name = || (Arc::from("edge"), Arc::from("edge.k"), 0);
    let cut = regions.limit_for(b"k", limit, 1, name, SECOND);
    assert_eq!(cut.requests, 0, "not a member yet: nothing");
    let store = GlobalStoreModel::new();
    let round = regions.begin(2 * SECOND);
    assert_eq!(round.claims.len(), 1);
    let answer = store.claim_now(&regions.terms(&round), &round.claims);
    regions.finish(round, Ok(answer), 2 * SECOND);
    let cut = regions.limit_for(b"k", limit, 1, name, 2 * SECOND);
    assert_eq!(cut.requests, 100, "alone: the whole limit");
    let cut = regions.limit_for(b"k", limit, 1, name, 2 * SECOND + CLAIM_HOLD);
    assert_eq!(cut.requests, 0, "lapsed, and the floor has not settled yet");
}

/// Two processes on the embedded store claiming as one region each count alone: the figures
/// (and `/healthcheck`) say so; on a shared store two replicas are normal.
#[test]
fn lone_stores_under_one_region_are_called_out() {
    let store = GlobalStoreModel::new();
    let lone = |replica: &str, shared_store| {
        let options = RegionOptions {
            shared_store,
            ..RegionOptions::new("eu")
        };
        Regions::new(options, replica)
    };
    let (one, two) = (lone("r0", false), lone("r1", false));
    for (regions, now) in [(&one, SECOND), (&two, SECOND), (&one, 2 * SECOND)] {
        let round = regions.begin(now);
        let answer = store.claim_now(&regions.terms(&round), &round.claims);
        regions.finish(round, Ok(answer), now);
    }
    assert_eq!(one.figures(2 * SECOND).shared_by_lone_stores, Some(2));
    assert!(one.health_line(2 * SECOND).contains("misconfigured"));
    let shared = lone("r2", true);
    let round = shared.begin(3 * SECOND);
    let answer = store.claim_now(&shared.terms(&round), &round.claims);
    shared.finish(round, Ok(answer), 3 * SECOND);
    assert_eq!(shared.figures(3 * SECOND).shared_by_lone_stores, None);
}
