//! The global store's rules in one process: what `portion.lua` does in region mode, step for
//! step on the same integers, behind the same [`PortionStore`] trait. The property test of
//! the bound runs regions against it on a manual clock; `tests/redis/region_claims.rs` holds
//! the script to it on a real Redis.

use std::collections::{BTreeMap, HashMap};

use parking_lot::Mutex;

use crate::clock::Nanos;
use crate::store::{
    BucketId, Claim, ClaimFuture, ClaimTerms, Membership, PortionStore, RegionAnswer, RegionClaim,
    RegionClaimFuture, RegionClaimed, RegionTerms, SETTLE,
};

/// A whole limit in parts per million.
const WHOLE: i64 = 1_000_000;

/// A microsecond.
const MICRO: Nanos = 1_000;

/// One replica's record among the members.
#[derive(Debug, Clone, Copy)]
struct MemberRecord {
    floor: i64,
    reserve: i64,
    pending: i64,
    since: i64,
    heard: i64,
}

/// One replica's record on a unit.
#[derive(Debug, Clone, Copy)]
struct UnitRecord {
    reserve: i64,
    expiry: i64,
    demand: f64,
}

#[derive(Debug, Default)]
struct State {
    members: BTreeMap<String, MemberRecord>,
    units: HashMap<(String, BucketId), BTreeMap<String, UnitRecord>>,
}

/// The global store in one process, on the caller's clock (microseconds, as the script's).
#[derive(Debug, Default)]
pub struct GlobalStoreModel {
    state: Mutex<State>,
}

impl GlobalStoreModel {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Forgets everything, as a global Redis restarted without persistence would.
    pub fn lose_everything(&self) {
        *self.state.lock() = State::default();
    }

    /// The claim `portion.lua` makes in region mode, at `terms.now`.
    pub fn claim_now(&self, terms: &RegionTerms<'_>, claims: &[RegionClaim]) -> RegionAnswer {
        let mut state = self.state.lock();
        let now = (terms.now / MICRO) as i64;
        let me = format!("{}|{}", terms.region, terms.replica);
        let member_ttl = ((terms.member_ttl / MICRO) as i64).max(1);
        let settle = (SETTLE / MICRO) as i64;
        let (want, floor_held) = (want_ppm(terms.floor), held_ppm(terms.floor_held));
        state.members.retain(|_, r| r.heard + member_ttl > now);
        let mut reserve_of: BTreeMap<&str, i64> = BTreeMap::new();
        let (mut usable_here, mut here) = (0, 1);
        for (who, record) in &state.members {
            let group = group_of(who);
            if *who != me {
                let r = reserve_of.entry(group).or_insert(0);
                *r = (*r).max(record.reserve);
                if group == terms.region {
                    usable_here = usable_here.max(record.floor);
                    here += 1;
                }
            }
        }
        let floors: i64 = (reserve_of.iter())
            .filter(|(g, _)| **g != terms.region)
            .map(|(_, r)| *r)
            .sum();
        let members = 1 + reserve_of.keys().filter(|g| **g != terms.region).count() as i64;
        let reserve_of: BTreeMap<String, i64> = (reserve_of.into_iter())
            .map(|(g, r)| (g.to_string(), r))
            .collect();
        let target = want.min(WHOLE - floors).max(0);
        let (mut floor, mut pending, mut since) = match state.members.get(&me) {
            Some(r) => (r.floor, r.pending, r.since),
            None => (target.min(floor_held), target.min(floor_held), now),
        };
        if target <= floor || target <= usable_here {
            (floor, pending) = (target, target);
        } else {
            if target > pending {
                (pending, since) = (target, now);
            } else if target < pending {
                pending = target;
            }
            if now >= since + settle {
                floor = pending;
            }
        }
        let record = MemberRecord {
            floor,
            reserve: floor.max(floor_held).max(pending),
            pending,
            since,
            heard: now,
        };
        state.members.insert(me.clone(), record);
        let floors = Floors {
            others: &reserve_of,
            mine: floor.max(usable_here),
        };
        let claimed = (claims.iter())
            .map(|claim| claim_unit(&mut state, &me, terms.region, &floors, now, claim))
            .collect();
        RegionAnswer {
            membership: Membership {
                floor: floor as f64 / WHOLE as f64,
                members: members as u32,
                replicas: here,
            },
            claimed,
        }
    }
}

/// What the members' floors reserve: each other region's (by name), and the claimant's.
struct Floors<'a> {
    others: &'a BTreeMap<String, i64>,
    mine: i64,
}

/// One unit's step of a region claim.
fn claim_unit(
    state: &mut State,
    me: &str,
    region: &str,
    floors: &Floors<'_>,
    now: i64,
    claim: &RegionClaim,
) -> RegionClaimed {
    let reserve_of = floors.others;
    let settle = (SETTLE / MICRO) as i64;
    let ttl = ((claim.ttl / MICRO) as i64).max(1).min(settle);
    let expiry = now + ttl;
    let demand = if claim.demand.is_finite() {
        claim.demand.max(0.0)
    } else {
        0.0
    };
    let rate = if claim.rate.is_finite() {
        claim.rate.max(0.0)
    } else {
        0.0
    };
    let unit = (state.units)
        .entry((claim.domain.clone(), claim.bucket.clone()))
        .or_default();
    unit.retain(|who, r| who == me || r.expiry > now);
    let mut hold: BTreeMap<&str, i64> = BTreeMap::new();
    let mut asked: BTreeMap<&str, f64> = BTreeMap::new();
    for (who, record) in unit.iter().filter(|(who, _)| *who != me) {
        let group = group_of(who);
        let h = hold.entry(group).or_insert(0);
        *h = (*h).max(record.reserve);
        *asked.entry(group).or_insert(0.0) += record.demand;
    }
    let region_demand = demand + asked.get(region).copied().unwrap_or(0.0);
    let at_least = |floor: i64| rate * floor as f64 / WHOLE as f64;
    let (mut taken, mut idle) = (0, 0);
    for (group, reserve) in reserve_of.iter().filter(|(g, _)| g.as_str() != region) {
        let held = hold.get(group.as_str()).copied();
        taken += (*reserve).max(held.unwrap_or(0));
        if held.is_none() {
            idle += reserve;
        }
    }
    let mine = region_demand.max(at_least(floors.mine));
    let (mut others, mut others_demand, mut demands) = (0u32, 0.0, vec![mine]);
    for (group, h) in hold.iter().filter(|(g, _)| **g != region) {
        let floor = reserve_of.get(*group).copied();
        if floor.is_none() {
            taken += h;
        }
        others += 1;
        others_demand += asked[group];
        demands.push(asked[group].max(at_least(floor.unwrap_or(0))));
    }
    let fair = fair_share(&mut demands, rate, (WHOLE - idle).max(0));
    let portion = fair.min(WHOLE - taken).max(0);
    let record = UnitRecord {
        reserve: portion.max(held_ppm(claim.held)),
        expiry,
        demand,
    };
    unit.insert(me.to_string(), record);
    RegionClaimed {
        portion: portion as f64 / WHOLE as f64,
        region_demand,
        others_demand,
        others,
    }
}

/// The script's `fair_share`: the region's max–min fair part (ppm) of what `free` ppm of a
/// limit of `rate` leaves, `demands[0]` its own demand.
fn fair_share(demands: &mut [f64], rate: f64, free: i64) -> i64 {
    let n = demands.len() as f64;
    let mine = demands[0];
    if rate <= 0.0 {
        return (free as f64 / n).floor() as i64;
    }
    let room = rate * free as f64 / WHOLE as f64;
    let total: f64 = demands.iter().sum();
    let share = if total <= room {
        (mine + (room - total) / n) / rate
    } else {
        demands.sort_by(f64::total_cmp);
        let (mut left, mut level) = (room, 0.0);
        for (k, d) in demands.iter().enumerate() {
            level = left / (n - k as f64);
            if *d > level {
                break;
            }
            left -= d;
        }
        mine.min(level) / rate
    };
    ((share * WHOLE as f64).floor() as i64).clamp(0, WHOLE)
}

/// A member field's region: the part before the first `|`.
fn group_of(field: &str) -> &str {
    field.split_once('|').map_or(field, |(group, _)| group)
}

/// A fraction asked, in ppm rounded down (as the Redis side sends it).
fn want_ppm(fraction: f64) -> i64 {
    if fraction.is_nan() {
        return 0;
    }
    (fraction.clamp(0.0, 1.0) * WHOLE as f64).floor() as i64
}

/// A fraction held, in ppm rounded up (as the Redis side sends it).
fn held_ppm(fraction: f64) -> i64 {
    if fraction.is_nan() {
        return 0;
    }
    (fraction.clamp(0.0, 1.0) * WHOLE as f64).ceil() as i64
}

impl PortionStore for GlobalStoreModel {
    fn claim<'a>(&'a self, _: ClaimTerms<'a>, _: &'a [Claim]) -> ClaimFuture<'a> {
        Box::pin(async { Err("the global store model holds regions' portions only".into()) })
    }

    fn claim_in_region<'a>(
        &'a self,
        terms: RegionTerms<'a>,
        claims: &'a [RegionClaim],
    ) -> RegionClaimFuture<'a> {
        let answer = self.claim_now(&terms, claims);
        Box::pin(async move { Ok(answer) })
    }
}
