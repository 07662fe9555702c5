//! The lease bound, held against a model of Redis: several replicas lease from one counter
//! decided by the crate's own algorithms (which `apply.lua` mirrors), with refills that
//! arrive late, across window changes. No window ever admits more than its algorithm allows;
//! hits leased and never used stay within replicas × (N − 1) per window.

use std::collections::{HashMap, VecDeque};

use proptest::prelude::*;

use super::*;
use crate::algorithm::{self, State};
use crate::clock::MILLI;
use crate::store::{CounterKey, Gate};

const WINDOW: Nanos = 1_000 * MILLI;

/// One counter's authority, as the script applies a charge with a lease.
#[derive(Default)]
struct Authority {
    state: Option<State>,
    /// Hits counted per window index (admitted and leased).
    charged: HashMap<u64, u64>,
}

impl Authority {
    fn apply(&mut self, charge: &Charge, extra: u64, now: Nanos) -> Answered {
        let limit = &charge.limit;
        let (mut verdict, mut next) =
            algorithm::decide(limit, self.state.as_ref(), now, charge.cost);
        let available = if verdict.admitted {
            verdict.remaining + charge.cost
        } else {
            algorithm::available(limit, self.state.as_ref(), now)
        };
        let mut leased = 0;
        if verdict.admitted && next.is_some() && extra > 0 && verdict.remaining > 0 {
            let g = extra.min(verdict.remaining);
            let (v2, n2) = algorithm::decide(limit, self.state.as_ref(), now, charge.cost + g);
            if v2.admitted && n2.is_some() {
                (verdict, next, leased) = (v2, n2, g);
            }
        }
        if verdict.admitted && next.is_some() {
            self.state = next;
            *self.charged.entry(now / WINDOW).or_default() += charge.cost + leased;
        }
        Answered {
            outcome: ChargeOutcome { verdict, available },
            leased,
        }
    }
}

/// A call sent to the authority and not answered yet.
struct InFlight {
    charge: Charge,
    extra: u64,
    sent_at: Nanos,
}

fn charge(algorithm: Algorithm, requests: u64, lease: u32, cost: u64) -> Charge {
    Charge {
        key: CounterKey::from_bytes(b"edge\0k\0v"),
        limit: Limit {
            algorithm,
            requests,
            window: WINDOW,
            burst: requests,
            origin: 0,
            recording: Default::default(),
        },
        cost,
        gate: Gate::Enforced,
        lease,
        descriptor: 0,
    }
}

/// What the replicas admitted: (time, hits).
type Admitted = Vec<(Nanos, u64)>;

fn deliver(
    leases: &Leases,
    authority: &mut Authority,
    call: InFlight,
    now: Nanos,
    admitted: &mut Admitted,
) {
    let charges = [call.charge];
    let answered = authority.apply(&charges[0], call.extra, now);
    let outcomes = leases.settle(&charges, &[call.extra], vec![answered], call.sent_at);
    if outcomes[0].verdict.admitted {
        admitted.push((now, charges[0].cost));
    }
}

/// Each step: replica, cost, milliseconds to advance, and what happens (0: a call answered at
/// once; 1, 2: a call whose reply waits; 3: the replica's oldest waiting reply arrives; 4: a
/// call Redis fails, answered from held hits if any).
type LeaseStep = (usize, u64, u64, u8);

fn run(
    algorithm: Algorithm,
    requests: u64,
    lease: u32,
    replicas: usize,
    steps: &[LeaseStep],
) -> (Admitted, Authority) {
    let stores: Vec<Leases> = (0..replicas).map(|_| Leases::new(16)).collect();
    let mut waiting: Vec<VecDeque<InFlight>> = (0..replicas).map(|_| VecDeque::new()).collect();
    let mut authority = Authority::default();
    let mut admitted = Admitted::new();
    let mut now = 5 * WINDOW;
    for &(replica, cost, advance, action) in steps {
        let r = replica % replicas;
        now += advance * MILLI;
        if action == 3 {
            if let Some(call) = waiting[r].pop_front() {
                deliver(&stores[r], &mut authority, call, now, &mut admitted);
            }
            continue;
        }
        let c = charge(algorithm, requests, lease, cost);
        if let Some(outcomes) = stores[r].answer(std::slice::from_ref(&c), now, true) {
            assert!(outcomes[0].verdict.admitted);
            admitted.push((now, cost));
            continue;
        }
        // Never stale in the model: a refill ends only when its reply arrives.
        let extra = stores[r].extras(std::slice::from_ref(&c), now, Nanos::MAX)[0];
        if action == 4 {
            // Redis does not answer: the refill ends, and held hits answer if they can.
            stores[r].abandon(std::slice::from_ref(&c), &[extra], now);
            if stores[r]
                .answer(std::slice::from_ref(&c), now, false)
                .is_some()
            {
                admitted.push((now, cost));
            }
            continue;
        }
        let call = InFlight {
            charge: c,
            extra,
            sent_at: now,
        };
        if action == 0 {
            deliver(&stores[r], &mut authority, call, now, &mut admitted);
        } else {
            waiting[r].push_back(call);
        }
    }
    for (r, queue) in waiting.iter_mut().enumerate() {
        while let Some(call) = queue.pop_front() {
            deliver(&stores[r], &mut authority, call, now, &mut admitted);
        }
    }
    (admitted, authority)
}

fn per_window(admitted: &Admitted) -> HashMap<u64, u64> {
    let mut hits = HashMap::new();
    for &(t, n) in admitted {
        *hits.entry(t / WINDOW).or_default() += n;
    }
    hits
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn replicas_with_leases_never_admit_past_the_limit(
        sliding in any::<bool>(),
        requests in 1u64..40,
        lease in 2u32..16,
        replicas in 1usize..4,
        steps in prop::collection::vec((0usize..4, 1u64..4, 0u64..300, 0u8..5), 1..300),
    ) {
        let algorithm = if sliding { Algorithm::SlidingWindow } else { Algorithm::FixedWindow };
        let (admitted, authority) = run(algorithm, requests, lease, replicas, &steps);
        let windows = per_window(&admitted);
        for (&k, &hits) in &windows {
            prop_assert!(hits <= requests, "window {k}: {hits} admitted, limit {requests}");
        }
        if sliding {
            // The algorithm's own bound, on what was admitted: at every admission, the previous
            // window's hits weighted by the part of it still inside the sliding window, plus
            // this window's hits so far, stay within the limit.
            for &(t, _) in &admitted {
                let k = t / WINDOW;
                let previous = windows.get(&(k.wrapping_sub(1))).copied().unwrap_or(0);
                let current: u64 = admitted
                    .iter()
                    .filter(|&&(u, _)| u / WINDOW == k && u <= t)
                    .map(|&(_, n)| n)
                    .sum();
                let elapsed = t - k * WINDOW;
                prop_assert!(
                    u128::from(previous) * u128::from(WINDOW - elapsed)
                        + u128::from(current) * u128::from(WINDOW)
                        <= u128::from(requests) * u128::from(WINDOW),
                    "at {t}: previous {previous}, current {current}, limit {requests}"
                );
            }
        }
        for (&k, &charged) in &authority.charged {
            prop_assert!(charged >= windows.get(&k).copied().unwrap_or(0));
        }
    }

    /// Under-admission when replies come at once: hits leased and never used stay within
    /// N − 1 per replica and window.
    #[test]
    fn leased_hits_left_unused_stay_within_n_minus_1_per_replica(
        sliding in any::<bool>(),
        requests in 1u64..40,
        lease in 2u32..16,
        replicas in 1usize..4,
        steps in prop::collection::vec((0usize..4, 1u64..4, 0u64..300), 1..300),
    ) {
        let algorithm = if sliding { Algorithm::SlidingWindow } else { Algorithm::FixedWindow };
        let steps: Vec<LeaseStep> = steps.into_iter().map(|(r, c, t)| (r, c, t, 0)).collect();
        let (admitted, authority) = run(algorithm, requests, lease, replicas, &steps);
        let windows = per_window(&admitted);
        let bound = replicas as u64 * (u64::from(lease) - 1);
        for (&k, &charged) in &authority.charged {
            let used = windows.get(&k).copied().unwrap_or(0);
            prop_assert!(charged >= used);
            prop_assert!(charged - used <= bound, "window {k}: {charged} counted, {used} admitted");
        }
    }
}

/// Held hits answer the next calls without the authority, and report what is left overall;
/// below half the lease a call refills while the rest answer the calls meanwhile.
#[test]
fn held_hits_answer_until_used_up() {
    let leases = Leases::new(16);
    let mut authority = Authority::default();
    let c = charge(Algorithm::FixedWindow, 100, 10, 1);
    let one = std::slice::from_ref(&c);
    let now = 7 * WINDOW + 100 * MILLI;
    let extra = leases.extras(one, now, now + WINDOW)[0];
    assert_eq!(extra, 9);
    let answered = authority.apply(&c, extra, now);
    assert_eq!(answered.leased, 9);
    let first = leases.settle(one, &[extra], vec![answered], now);
    // 90 left in Redis, 9 held here.
    assert_eq!(first[0].verdict.remaining, 99);
    // Answered here while at least half the lease (5) stays held.
    for left in (5..9).rev() {
        let o = leases.answer(one, now + MILLI, true).expect("held");
        assert_eq!(o[0].verdict.remaining, 90 + left);
        assert_eq!(o[0].verdict.reset_after, 900 * MILLI - MILLI);
    }
    // Below half: this call refills, asking for the rest of the lease...
    assert!(leases.answer(one, now + MILLI, true).is_none());
    assert_eq!(leases.extras(one, now + MILLI, now + WINDOW)[0], 4);
    // ...while the held hits answer the calls meanwhile, down to the last.
    for left in (0..5).rev() {
        let o = leases.answer(one, now + MILLI, true).expect("held");
        assert_eq!(o[0].verdict.remaining, 90 + left);
    }
    assert!(leases.answer(one, now + MILLI, true).is_none());
    assert_eq!(leases.answered(), 9);
    // One refill at a time: another call asks for nothing more until it ends.
    assert_eq!(leases.extras(one, now + MILLI, now + WINDOW)[0], 0);
    // Only the call that started a refill ends it.
    leases.abandon(one, &[4], now);
    assert_eq!(leases.extras(one, now + MILLI, now + WINDOW)[0], 0);
    leases.abandon(one, &[4], now + MILLI);
    assert_eq!(leases.extras(one, now + MILLI, now + WINDOW)[0], 9);
}

/// Held hits lapse with their window, and a reload that changes the limit drops them.
#[test]
fn held_hits_lapse_with_the_window_and_the_limit() {
    let leases = Leases::new(16);
    let mut authority = Authority::default();
    let c = charge(Algorithm::SlidingWindow, 100, 10, 1);
    let now = 7 * WINDOW + 100 * MILLI;
    let extra = leases.extras(std::slice::from_ref(&c), now, now + WINDOW)[0];
    let answered = authority.apply(&c, extra, now);
    leases.settle(std::slice::from_ref(&c), &[extra], vec![answered], now);
    assert!(
        leases
            .answer(std::slice::from_ref(&c), 8 * WINDOW - 2 * MILLI, true)
            .is_some()
    );
    // The last 0.1 % of the window is left to clock drift.
    assert!(
        leases
            .answer(std::slice::from_ref(&c), 8 * WINDOW - MILLI / 2, true)
            .is_none()
    );
    assert!(
        leases
            .answer(std::slice::from_ref(&c), 8 * WINDOW, true)
            .is_none()
    );
    let changed = charge(Algorithm::SlidingWindow, 50, 10, 1);
    assert!(
        leases
            .answer(std::slice::from_ref(&changed), now + MILLI, true)
            .is_none()
    );
    leases.sweep(9 * WINDOW);
    assert_eq!(leases.len(), 0);
}

/// A call of two leased counters is answered only whole: when the second holds too little,
/// the first's hits go back.
#[test]
fn a_call_is_answered_from_leases_whole_or_not_at_all() {
    let leases = Leases::new(16);
    let mut authority = Authority::default();
    let a = charge(Algorithm::FixedWindow, 100, 5, 1);
    let mut b = charge(Algorithm::FixedWindow, 100, 5, 1);
    b.key = CounterKey::from_bytes(b"edge\0k\0w");
    let now = 7 * WINDOW;
    let extra = leases.extras(std::slice::from_ref(&a), now, now + WINDOW)[0];
    let answered = authority.apply(&a, extra, now);
    leases.settle(std::slice::from_ref(&a), &[extra], vec![answered], now);
    let both = [a.clone(), b];
    assert!(leases.answer(&both, now, true).is_none());
    // a's four held hits are all still there: one call alone is answered (3 stay), the next
    // would leave less than half the lease (2 of 5) and refills.
    let o = leases
        .answer(std::slice::from_ref(&a), now, true)
        .expect("held");
    assert_eq!(o[0].verdict.remaining, 95 + 3);
    assert!(leases.answer(std::slice::from_ref(&a), now, true).is_none());
}
