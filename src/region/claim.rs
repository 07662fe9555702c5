//! One claim round of a region's replica: every unit asked for enough to need more than the
//! floor claimed in the global store (one atomic script run per 255 units), and the answers
//! recorded with how long each may be enforced here.
//!
//! A round is split in two, [`Regions::begin`] and [`Regions::finish`], so a model can hold
//! the answer for a link's round trip; [`claim_once`] runs both around a real claim.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::units::{self, Held, UnitKind};
use super::{Regions, to_ppm};
use crate::clock::{Nanos, SECOND};
use crate::store::{BucketId, ClaimError, PortionStore, RegionAnswer, RegionClaim, RegionTerms};
use crate::store::{RegionClaimed, SETTLE};

/// How long a claimed portion may be enforced here, from when its claim was sent: a few
/// rounds, so a lost answer or two changes nothing, and a cut-off region falls to its floor
/// soon after.
pub const CLAIM_HOLD: Nanos = 3 * SECOND;

/// How long the global store keeps an RLQS bucket's portion: its hold here, then as long as an
/// Envoy may spend an assignment handed out under it (a 10 s TTL) and a second.
const BUCKET_TTL: Nanos = CLAIM_HOLD + 11 * SECOND;

/// A unit asked for less than this part of its floor's rate needs no claim: the floor holds it.
const QUIET: f64 = 0.5;

/// A unit not asked for this long, holding no live claim, is forgotten.
const FORGET_AFTER: Nanos = 10 * SECOND;

/// The most units one round claims (the busiest first).
const MAX_CLAIMS: usize = 4096;

/// A bucket's portion that moved by less than this is not worth re-splitting its shares.
const MATERIAL: f64 = 0.01;

/// A unit's demand that moved by this part of itself since its last claim is worth a round
/// soon after this one (the other regions see it a round sooner).
const DEMAND_MOVED: f64 = 0.25;

/// The most rounds in a row sent soon after the one before: short rounds measure demand over
/// less time, so they must not feed themselves.
const SOON_IN_A_ROW: u32 = 3;

/// What a replica knows of the global store between rounds.
#[derive(Debug, Default)]
pub(super) struct Standing {
    /// The members at the last answer.
    pub members: u32,
    /// The region's live replicas at the last answer.
    pub replicas: u32,
    /// When the last round began.
    pub last_round: Option<Nanos>,
    /// When a round last reached the global store.
    pub last_ok: Option<Nanos>,
    /// Since when rounds fail, and why the last one did.
    pub failing: Option<(Nanos, String)>,
    /// Units the last round claimed.
    pub claimed: usize,
    /// Rounds sent soon after the one before, in a row.
    pub soon_in_a_row: u32,
}

/// One round's claims, from [`Regions::begin`] to [`Regions::finish`].
#[derive(Debug)]
pub struct Round {
    /// When the claims were sent.
    pub sent: Nanos,
    keys: Vec<Box<[u8]>>,
    kinds: Vec<UnitKind>,
    /// The claims.
    pub claims: Vec<RegionClaim>,
    /// Some unit's demand moved materially since its last claim.
    demand_moved: bool,
    floor: f64,
    floor_held: f64,
}

/// What a finished round changed.
#[derive(Debug, Default)]
pub struct Settled {
    /// Whether the global store answered.
    pub answered: bool,
    /// RLQS buckets whose portion moved enough to re-split their shares.
    pub moved: Vec<(Arc<str>, BucketId)>,
    /// The next round is worth sending soon rather than in a second: some portion came back
    /// smaller than what this replica held (the global store keeps the larger one reserved
    /// until the next round says it is no longer enforced), or some unit's demand moved.
    pub soon: bool,
}

impl Regions {
    /// Opens a round at `now`: each unit's demand since the last round, the units worth a
    /// claim, the floor to ask; forgets units long unasked for.
    pub fn begin(&self, now: Nanos) -> Round {
        let (members, elapsed) = {
            let mut standing = self.standing.lock();
            let elapsed = standing
                .last_round
                .map_or(SECOND, |last| now.saturating_sub(last).max(1));
            standing.last_round = Some(now);
            (standing.members.max(1), elapsed)
        };
        let floor_held = self.floor_at(now);
        let mut demand_moved = false;
        let mut wanted: Vec<(f64, Box<[u8]>, UnitKind, RegionClaim)> = Vec::new();
        let mut each = |key: &[u8], unit: &mut units::Unit| {
            if unit.name.kind == UnitKind::Counter {
                unit.demand = unit.offered as f64 * SECOND as f64 / elapsed as f64;
                unit.offered = 0;
            }
            let live = unit.live_portion(now);
            if live == 0.0 && now.saturating_sub(unit.seen) > FORGET_AFTER {
                return false;
            }
            // A unit asked for less than its floor holds needs no claim, unless it holds a
            // larger portion, or the store reserves more than it enforces: only a claim gives
            // those back.
            let asked = unit.demand > 0.0
                && (floor_held == 0.0 || unit.demand >= QUIET * floor_held * unit.rate);
            let reserved = if live > 0.0 { unit.reserved } else { 0.0 };
            if asked || live > floor_held || reserved > live {
                let ttl = match unit.name.kind {
                    UnitKind::Counter => CLAIM_HOLD,
                    UnitKind::Bucket => BUCKET_TTL,
                };
                let claim = RegionClaim {
                    domain: unit.name.domain.to_string(),
                    bucket: unit.name.bucket.clone(),
                    demand: unit.demand,
                    rate: unit.rate,
                    held: live,
                    ttl,
                };
                let (before, after) = (unit.claimed_demand, unit.demand);
                demand_moved |= (after - before).abs() > DEMAND_MOVED * before.max(after);
                unit.claimed_demand = after;
                wanted.push((unit.demand, key.into(), unit.name.kind, claim));
            }
            true
        };
        self.counters.retain(&mut each);
        self.buckets.retain(&mut each);
        if wanted.len() > MAX_CLAIMS {
            wanted.sort_by(|a, b| b.0.total_cmp(&a.0));
            wanted.truncate(MAX_CLAIMS);
        }
        let (mut keys, mut kinds, mut claims) = (Vec::new(), Vec::new(), Vec::new());
        for (_, key, kind, claim) in wanted {
            keys.push(key);
            kinds.push(kind);
            claims.push(claim);
        }
        Round {
            sent: now,
            keys,
            kinds,
            claims,
            demand_moved,
            floor: self.options.floor_share.clamp(0.0, 1.0) / f64::from(members),
            floor_held,
        }
    }

    /// The terms `round` is claimed on.
    pub fn terms<'a>(&'a self, round: &Round) -> RegionTerms<'a> {
        RegionTerms {
            region: &self.options.name,
            replica: &self.replica,
            now: round.sent,
            floor: round.floor,
            floor_held: round.floor_held,
            member_ttl: self.options.member_timeout,
        }
    }

    /// Closes `round` with the global store's `answer` (received at `now`): each unit's portion
    /// may be enforced for [`CLAIM_HOLD`] from when it was sent, the floor until the member
    /// timeout (less [`SETTLE`]) from then. A failed round changes nothing: the last portions
    /// hold until they lapse, the floor until the membership may have.
    pub fn finish(
        &self,
        round: Round,
        answer: Result<RegionAnswer, ClaimError>,
        now: Nanos,
    ) -> Settled {
        let answer = match answer {
            Ok(answer) if answer.claimed.len() == round.claims.len() => answer,
            Ok(_) => {
                self.failed(
                    now,
                    "the global store answered the wrong number of units".into(),
                );
                return Settled::default();
            }
            Err(error) => {
                self.failed(now, error.to_string());
                return Settled::default();
            }
        };
        let until = round.sent + self.options.member_timeout.saturating_sub(SETTLE);
        self.floor_ppm
            .store(to_ppm(answer.membership.floor), Ordering::Release);
        self.floor_until.store(until, Ordering::Release);
        {
            let mut standing = self.standing.lock();
            standing.members = answer.membership.members;
            standing.replicas = answer.membership.replicas;
            standing.last_ok = Some(now);
            standing.failing = None;
            standing.claimed = round.claims.len();
        }
        let mut moved = Vec::new();
        let held_until = round.sent + CLAIM_HOLD;
        let shrunk = (round.claims.iter().zip(&answer.claimed))
            .any(|(claim, claimed)| claimed.portion < claim.held);
        let soon = {
            let mut standing = self.standing.lock();
            let soon = (shrunk || round.demand_moved) && standing.soon_in_a_row < SOON_IN_A_ROW;
            standing.soon_in_a_row = if soon { standing.soon_in_a_row + 1 } else { 0 };
            soon
        };
        let answers = round.keys.iter().zip(&round.kinds).zip(&round.claims);
        for (((key, kind), claim), claimed) in answers.zip(answer.claimed) {
            // A unit forgotten meanwhile stays forgotten.
            let Some((name, before)) = self.table(*kind).update(key, |unit| {
                let before = self.portion(unit.live_portion(now), now);
                record(unit, claimed, held_until);
                unit.reserved = claimed.portion.max(claim.held);
                (unit.name.clone(), before)
            }) else {
                continue;
            };
            let after = self.portion(claimed.portion, now);
            if *kind == UnitKind::Bucket && (before - after).abs() >= MATERIAL {
                moved.push((name.domain.clone(), name.bucket.clone()));
            }
        }
        Settled {
            answered: true,
            moved,
            soon,
        }
    }

    /// The table of units of `kind`.
    pub(super) fn table(&self, kind: UnitKind) -> &units::Units {
        match kind {
            UnitKind::Counter => &self.counters,
            UnitKind::Bucket => &self.buckets,
        }
    }

    fn failed(&self, now: Nanos, why: String) {
        let mut standing = self.standing.lock();
        let since = standing.failing.as_ref().map_or(now, |(since, _)| *since);
        standing.failing = Some((since, why));
    }
}

/// The answer for a unit, enforceable until `until`.
fn record(unit: &mut units::Unit, claimed: RegionClaimed, until: Nanos) {
    unit.held = Some(Held {
        portion: claimed.portion.clamp(0.0, 1.0),
        until,
    });
    unit.answer = Some(claimed);
}

/// One round against `store` at `now`, the answer taken when it arrives (`now` read again by
/// `clock`).
pub async fn claim_once(
    regions: &Regions,
    store: &dyn PortionStore,
    now: Nanos,
    clock: &dyn crate::clock::Clock,
) -> Settled {
    let round = regions.begin(now);
    let answer = store
        .claim_in_region(regions.terms(&round), &round.claims)
        .await;
    regions.finish(round, answer, clock.now())
}
