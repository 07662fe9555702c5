//! Regions sharing one global limit on a manual clock: each region a [`Regions`] checking calls
//! of one counter against its own token bucket, claiming every second from a
//! [`GlobalStoreModel`] across a link of a given delay each way that can be cut, or lose
//! answers. What the bound's property test and the scenarios run.

use std::sync::Arc;

use super::{GlobalStoreModel, RegionOptions, Regions, Round, WHOLE_PPM, to_ppm};
use crate::algorithm::{Algorithm, Limit, State, decide};
use crate::clock::{MILLI, Nanos, SECOND};
use crate::store::{RegionAnswer, RegionTerms};

/// The counter every region charges (its key's bytes).
const COUNTER: &[u8] = b"edge\0tenant\0acme";

/// One step of the simulation.
pub const STEP: Nanos = 10 * MILLI;

/// A region of the fleet.
pub struct Member {
    /// Its side.
    pub regions: Regions,
    state: Option<State>,
    /// Calls a second it is asked for.
    pub demand: f64,
    owed: f64,
    /// Its link to the global store is cut (claims fail after the link's timeout).
    pub cut: bool,
    /// Whether it runs yet.
    pub joined: bool,
    /// When its next round starts.
    next_round: Nanos,
    /// A round in flight: the claims, when the store runs them, when the answer is in.
    in_flight: Option<(Round, Nanos, Nanos, Option<RegionAnswer>)>,
    /// Answers lost on the way back, 0..1, drawn from `lose`.
    pub lose_every: u32,
    rounds: u32,
}

/// The fleet.
pub struct Fleet {
    /// Now.
    pub now: Nanos,
    /// The limit every region shares.
    pub limit: Limit,
    /// The regions, in order of creation.
    pub members: Vec<Member>,
    /// The global store.
    pub store: Arc<GlobalStoreModel>,
    /// The link's delay each way.
    pub one_way: Nanos,
    /// Per step: hits admitted by all regions together.
    pub admitted: Vec<u64>,
    /// Per step: the sum over regions of the growth of their portion (positive moves only).
    pub grown: Vec<f64>,
    /// Per step: the number of regions whose portion grew.
    pub grows: Vec<u32>,
    /// Per step and region: hits admitted.
    pub by_region: Vec<Vec<u64>>,
    /// The largest sum of portions in force seen (ppm).
    pub most_in_force: u64,
    last_portion: Vec<u32>,
}

impl Fleet {
    /// A fleet sharing a token bucket of `rate` a second and `burst`, regions `names`
    /// (joined at once), with `floor_share` and `member_timeout`.
    pub fn new(rate: u64, burst: u64, one_way: Nanos, options: &[RegionOptions]) -> Self {
        let limit = Limit {
            algorithm: Algorithm::TokenBucket,
            requests: rate,
            window: SECOND,
            burst,
            origin: 0,
            recording: Default::default(),
        };
        let start = 1_800_000_000 * SECOND;
        let mut fleet = Self {
            now: start,
            limit,
            members: Vec::new(),
            store: Arc::new(GlobalStoreModel::new()),
            one_way,
            admitted: Vec::new(),
            grown: Vec::new(),
            grows: Vec::new(),
            by_region: Vec::new(),
            most_in_force: 0,
            last_portion: Vec::new(),
        };
        for (i, o) in options.iter().enumerate() {
            fleet.add(o.clone(), (i as Nanos * 317 * MILLI) % SECOND);
        }
        fleet
    }

    /// Adds a region (not joined yet) whose rounds start `phase` into each second.
    pub fn add(&mut self, options: RegionOptions, phase: Nanos) {
        let replica = format!("r{}", self.members.len());
        self.members.push(Member {
            regions: Regions::new(options, replica),
            state: None,
            demand: 0.0,
            owed: 0.0,
            cut: false,
            joined: true,
            next_round: self.now + phase,
            in_flight: None,
            lose_every: 0,
            rounds: 0,
        });
        self.last_portion.push(0);
    }

    /// The portion region `i` enforces now (ppm, as its limit is cut).
    pub fn portion(&self, i: usize) -> u32 {
        let member = &self.members[i];
        if !member.joined {
            return 0;
        }
        to_ppm(member.regions.counter_portion(COUNTER, self.now))
    }

    /// Runs `seconds` of simulated time.
    pub fn run(&mut self, seconds: f64) {
        let steps = (seconds * SECOND as f64 / STEP as f64).round() as u64;
        for _ in 0..steps {
            self.step();
        }
    }

    fn step(&mut self) {
        self.now += STEP;
        let now = self.now;
        let mut admitted_now = Vec::with_capacity(self.members.len());
        for i in 0..self.members.len() {
            self.rounds_of(i, now);
            admitted_now.push(self.calls_of(i, now));
        }
        let (mut grown, mut grows, mut in_force) = (0.0, 0, 0u64);
        for i in 0..self.members.len() {
            let portion = self.portion(i);
            if portion > self.last_portion[i] {
                grown += f64::from(portion - self.last_portion[i]) / f64::from(WHOLE_PPM);
                grows += 1;
            }
            self.last_portion[i] = portion;
            in_force += u64::from(portion);
        }
        self.most_in_force = self.most_in_force.max(in_force);
        self.admitted.push(admitted_now.iter().sum());
        self.by_region.push(admitted_now);
        self.grown.push(grown);
        self.grows.push(grows);
    }

    /// Region `i`'s calls of this step, each of one hit, against its portion of the limit.
    fn calls_of(&mut self, i: usize, now: Nanos) -> u64 {
        let limit = self.limit;
        let member = &mut self.members[i];
        if !member.joined {
            return 0;
        }
        member.owed += member.demand * STEP as f64 / SECOND as f64;
        let mut admitted = 0;
        while member.owed >= 1.0 {
            member.owed -= 1.0;
            let name = || (Arc::from("edge"), Arc::from("edge.tenant"), 0);
            let cut = member.regions.limit_for(COUNTER, limit, 1, name, now);
            let (verdict, next) = decide(&cut, member.state.as_ref(), now, 1);
            if verdict.admitted {
                admitted += 1;
                member.state = next.or(member.state.take());
            }
        }
        admitted
    }

    /// Region `i`'s claim round: started each second, run by the store one delay later, its
    /// answer in one more delay (an error after the timeout when cut, or when lost).
    fn rounds_of(&mut self, i: usize, now: Nanos) {
        let (one_way, store) = (self.one_way, self.store.clone());
        let member = &mut self.members[i];
        if !member.joined {
            return;
        }
        if let Some((round, run_at, answer_at, answer)) = &mut member.in_flight {
            if answer.is_none() && now >= *run_at && !member.cut {
                let terms = RegionTerms {
                    now: *run_at,
                    ..member.regions.terms(round)
                };
                *answer = Some(store.claim_now(&terms, &round.claims));
            }
            if now >= *answer_at {
                let Some((round, _, _, answer)) = member.in_flight.take() else {
                    return;
                };
                member.rounds += 1;
                let lost = member.lose_every > 0 && member.rounds.is_multiple_of(member.lose_every);
                let answer = match answer {
                    Some(answer) if !lost && !member.cut => Ok(answer),
                    _ => Err("cut off".into()),
                };
                if member.regions.finish(round, answer, now).soon {
                    member.next_round = now + 200 * MILLI;
                }
            }
            return;
        }
        if now >= member.next_round {
            member.next_round = now + SECOND;
            let round = member.regions.begin(now);
            let run_at = now + one_way;
            let answer_at = if member.cut {
                now + SECOND / 2
            } else {
                now + 2 * one_way
            };
            member.in_flight = Some((round, run_at, answer_at, None));
        }
    }

    /// Hits admitted by all regions in the steps `[from, to)`.
    pub fn admitted_in(&self, from: usize, to: usize) -> u64 {
        self.admitted[from..to].iter().sum()
    }

    /// Hits admitted by region `i` in the steps `[from, to)`.
    pub fn admitted_by(&self, i: usize, from: usize, to: usize) -> u64 {
        self.by_region[from..to].iter().map(|r| r[i]).sum()
    }

    /// The steps simulated so far.
    pub fn steps(&self) -> usize {
        self.admitted.len()
    }
}

/// The steps of `seconds`.
pub fn steps_of(seconds: f64) -> usize {
    (seconds * SECOND as f64 / STEP as f64).round() as usize
}
