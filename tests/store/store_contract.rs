//! The store contract, written once and run against the memory store and a real Redis: every
//! algorithm, all-or-nothing calls, gates, checks, costs, exact retry hints, and outcomes that
//! agree with the pure Rust algorithms on random call sequences (the Lua mirrors them), calendar
//! windows (placed by sluice, never by Redis's clock) among them.

use crate::common;

use std::sync::Arc;

use proptest::prelude::*;
use sluice::algorithm::{Algorithm, Limit, Recording};
use sluice::clock::{MILLI, Nanos, SECOND};
use sluice::rules::{Calendar, Period};
use sluice::store::redis::{RedisClock, RedisKeyLayout};
use sluice::store::{Charge, ChargeOutcome, Gate, MemoryStore, RedisSettings, RedisStore, Store};

use common::limit;
use common::redis::RedisServer;

/// A minute boundary (a multiple of every window used here).
const T0: Nanos = 1_767_225_600 * SECOND;

/// What a scenario runs against: the store and the resolution of its clock.
struct Backend {
    store: Arc<dyn Store>,
    /// 1 ns for memory; 1 µs for Redis (its TIME resolution; hints round up to it).
    tick: Nanos,
    _server: Option<RedisServer>,
}

impl Backend {
    fn memory() -> Self {
        Self {
            store: Arc::new(MemoryStore::new()),
            tick: 1,
            _server: None,
        }
    }

    /// A fresh redis-server and a store on it with the caller's clock, its keys in `layout`.
    async fn redis(layout: RedisKeyLayout) -> Self {
        let server = RedisServer::start();
        let settings = RedisSettings {
            clock: RedisClock::Caller,
            timeout: std::time::Duration::from_secs(2),
            key_layout: layout,
            ..RedisSettings::new(server.url())
        };
        let store = RedisStore::connect(settings).await.expect("redis store");
        Self {
            store: Arc::new(store),
            tick: 1_000,
            _server: Some(server),
        }
    }

    async fn apply(&self, charges: &[Charge], now: Nanos) -> Vec<ChargeOutcome> {
        self.store.apply(charges, now).await.expect("store answers")
    }

    /// One charge's outcome.
    async fn one(&self, charge: &Charge, now: Nanos) -> ChargeOutcome {
        self.apply(std::slice::from_ref(charge), now).await[0]
    }

    /// Asserts a denied charge's hint is exact at this store's resolution (denied one tick
    /// before it, admitted at it) and returns it.
    async fn exact_retry(&self, charge: &Charge, now: Nanos) -> Nanos {
        let check = Charge {
            cost: charge.cost.max(1),
            ..charge.clone()
        };
        let probe = |at| {
            let mut c = check.clone();
            // Probing must not change the counter: judge the same cost as a check would,
            // on a counter that stores nothing (cost 0 is judged as 1, so only for cost 1).
            if c.cost == 1 {
                c.cost = 0;
            }
            async move { self.one(&c, at).await.verdict.admitted }
        };
        let denied = self.one(charge, now).await.verdict;
        assert!(!denied.admitted, "denied now: {charge:?}");
        let hint = denied.reset_after;
        assert!(
            hint > 0 && hint % self.tick == 0,
            "hint {hint} at resolution {} for {charge:?}",
            self.tick
        );
        assert!(
            !probe(now + hint - self.tick).await,
            "still denied a tick before the hint"
        );
        assert!(probe(now + hint).await, "admitted at the hint");
        hint
    }
}

/// One minute.
const MINUTE: Nanos = 60 * SECOND;

/// An enforced charge of `cost` on the counter `name` of the contract domain under `limit`.
fn charge(name: &str, limit: Limit, cost: u64, gate: Gate) -> Charge {
    common::charge("contract", ("k", name), limit, cost, gate)
}

/// An enforced charge of `cost` on counter `<name>-<algorithm>`: `requests` per `window`.
fn enforced(name: &str, algorithm: Algorithm, requests: u64, window: Nanos, cost: u64) -> Charge {
    let name = format!("{name}-{algorithm}");
    charge(
        &name,
        limit(algorithm, requests, window),
        cost,
        Gate::Enforced,
    )
}

/// The same charge with another cost (0: a check).
fn costing(charge: &Charge, cost: u64) -> Charge {
    Charge {
        cost,
        ..charge.clone()
    }
}

/// The stores the contract runs on: memory, Redis, and Redis with envoyproxy/ratelimit's key layout
/// (its `fixed_window` counters are envoyproxy/ratelimit's plain integers).
#[derive(Debug, Clone, Copy)]
enum Kind {
    Memory,
    Redis,
    RedisCompatKeys,
}

/// Runs one scenario on a fresh store of `kind`.
async fn run(kind: Kind, scenario: impl AsyncFn(&Backend)) {
    let backend = match kind {
        Kind::Memory => Backend::memory(),
        Kind::Redis => Backend::redis(RedisKeyLayout::Sluice).await,
        Kind::RedisCompatKeys => Backend::redis(RedisKeyLayout::Compat).await,
    };
    scenario(&backend).await;
}

/// Runs a scenario about one algorithm for each algorithm in turn, on one store.
async fn each_algorithm(b: &Backend, scenario: impl AsyncFn(&Backend, Algorithm)) {
    for algorithm in Algorithm::ALL {
        scenario(b, algorithm).await;
    }
}

/// The table: each scenario, as a test on the memory store and one on a real redis-server
/// (run with `--ignored`). A `store` scenario runs once, a `per_algorithm` one once per
/// algorithm.
macro_rules! contract {
    ($($kind:ident $scenario:ident),* $(,)?) => {$(
        mod $scenario {
            use super::{Backend, Kind, run};

            async fn scenario(b: &Backend) {
                contract!(@run $kind super::$scenario, b);
            }

            /// The scenario on the memory store.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn memory() {
                run(Kind::Memory, scenario).await;
            }

            /// The scenario on a real redis-server.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[ignore = "needs redis-server (scripts/test installs it)"]
            async fn redis() {
                run(Kind::Redis, scenario).await;
            }

            /// The scenario on a real redis-server, keys in envoyproxy/ratelimit's layout.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[ignore = "needs redis-server (scripts/test installs it)"]
            async fn redis_compat_keys() {
                run(Kind::RedisCompatKeys, scenario).await;
            }
        }
    )*};
    (@run store $f:path, $b:ident) => {
        $f($b).await
    };
    (@run per_algorithm $f:path, $b:ident) => {
        super::each_algorithm($b, $f).await
    };
}

contract!(
    per_algorithm exactly_n_then_exact_hint,
    per_algorithm blocked_call_commits_nothing,
    per_algorithm same_counter_twice,
    store gates,
    store quota_mode_groups,
    per_algorithm checks_store_nothing,
    per_algorithm costs_above_one_and_capacity,
    store capacity_returns,
    store room_reported_while_a_large_call_waits,
    per_algorithm huge_limits_stay_exact,
    store previous_day_weighs_on_sliding_window,
    per_algorithm concurrent_calls_are_exact,
    store calendar_windows,
    per_algorithm reset_clears_only_its_counters,
    store reset_of_a_calendar_window,
    store recorded_past_the_limit,
    store a_crossing_descriptor_keeps_all_its_budgets,
    store compat_token_quota,
);

/// Every algorithm admits exactly its allowance, then denies with an exact retry hint.
async fn exactly_n_then_exact_hint(b: &Backend, algorithm: Algorithm) {
    let c = enforced("n", algorithm, 3, MINUTE, 1);
    let now = T0 + 5 * SECOND;
    for left in [2, 1, 0] {
        let o = b.one(&c, now).await;
        assert!(
            o.verdict.admitted && o.verdict.remaining == left,
            "{algorithm}: {o:?}"
        );
    }
    b.exact_retry(&c, now + MILLI).await;
}

/// A denied enforced charge blocks the call: the other counters are not charged.
async fn blocked_call_commits_nothing(b: &Backend, algorithm: Algorithm) {
    let ok = enforced("ok", algorithm, 5, MINUTE, 1);
    let full = enforced("full", algorithm, 0, MINUTE, 1);
    let o = b.apply(&[ok.clone(), full], T0).await;
    assert!(o[0].verdict.admitted && !o[1].verdict.admitted);
    assert_eq!(
        b.one(&ok, T0).await.verdict.remaining,
        4,
        "{algorithm}: nothing was charged"
    );
}

/// A call naming one counter twice sees its own first charge, and commits nothing if blocked.
async fn same_counter_twice(b: &Backend, algorithm: Algorithm) {
    let c = enforced("twice", algorithm, 3, MINUTE, 2);
    let o = b.apply(&[c.clone(), c.clone()], T0).await;
    assert!(
        o[0].verdict.admitted && !o[1].verdict.admitted,
        "{algorithm}"
    );
    let one = costing(&c, 1);
    let o = b.apply(&[one.clone(), one], T0).await;
    assert_eq!(
        (o[0].verdict.remaining, o[1].verdict.remaining),
        (2, 1),
        "{algorithm}"
    );
}

/// Advisory denials never block; quota-mode charges block only when all of them are denied.
async fn gates(b: &Backend) {
    let l = |n| limit(Algorithm::FixedWindow, n, MINUTE);
    let a = charge("gate-a", l(5), 1, Gate::Enforced);
    b.apply(
        &[a.clone(), charge("gate-shadow", l(0), 1, Gate::Advisory)],
        T0,
    )
    .await;
    assert_eq!(
        b.one(&a, T0).await.verdict.remaining,
        3,
        "advisory denial did not block"
    );
    let q = charge("gate-q", l(5), 1, Gate::QuotaMode(0));
    b.apply(
        &[q.clone(), charge("gate-q0", l(0), 1, Gate::QuotaMode(1))],
        T0,
    )
    .await;
    assert_eq!(
        b.one(&q, T0).await.verdict.remaining,
        3,
        "one quota admitted: committed"
    );
    b.apply(
        &[a.clone(), charge("gate-q1", l(0), 1, Gate::QuotaMode(0))],
        T0,
    )
    .await;
    assert_eq!(
        b.one(&a, T0).await.verdict.remaining,
        2,
        "all quota denied: blocked"
    );
}

/// A quota-mode group (one quota-mode descriptor's limits) is over when any of its charges is
/// denied: a call whose only quota-mode group is over commits nothing, not even the group's
/// admitted charges; one group that fits lets the call through and its admitted charges commit.
async fn quota_mode_groups(b: &Backend) {
    let l = |n| limit(Algorithm::FixedWindow, n, MINUTE);
    let (g0, g1) = (Gate::QuotaMode(0), Gate::QuotaMode(1));
    let roomy = charge("group-roomy", l(5), 1, g0);
    let full = charge("group-full", l(0), 1, g0);
    let o = b.apply(&[roomy.clone(), full.clone()], T0).await;
    assert!(o[0].verdict.admitted && !o[1].verdict.admitted);
    assert_eq!(
        b.one(&costing(&roomy, 0), T0).await.verdict.remaining,
        5,
        "the only quota-mode group is over: nothing committed"
    );
    let other = charge("group-other", l(5), 1, g1);
    b.apply(&[roomy.clone(), full.clone(), other.clone()], T0)
        .await;
    assert_eq!(
        (
            b.one(&costing(&roomy, 0), T0).await.verdict.remaining,
            b.one(&costing(&other, 0), T0).await.verdict.remaining,
        ),
        (4, 4),
        "group 1 fits: the call's admitted charges committed"
    );
    let other_full = charge("group-other-full", l(0), 1, g1);
    b.apply(&[roomy.clone(), full, other.clone(), other_full], T0)
        .await;
    assert_eq!(
        b.one(&costing(&roomy, 0), T0).await.verdict.remaining,
        4,
        "both groups over: nothing committed"
    );
}

/// A check (cost 0) is judged as one hit, reports the unconsumed remaining, stores nothing.
async fn checks_store_nothing(b: &Backend, algorithm: Algorithm) {
    let hit = enforced("check", algorithm, 2, MINUTE, 1);
    let check = costing(&hit, 0);
    assert_eq!(b.one(&check, T0).await.verdict.remaining, 2);
    assert_eq!(b.one(&check, T0).await.verdict.remaining, 2, "{algorithm}");
    b.one(&hit, T0).await;
    b.one(&hit, T0).await;
    let o = b.one(&check, T0).await;
    assert!(
        !o.verdict.admitted && o.available == 0,
        "{algorithm}: {o:?}"
    );
}

/// A reset removes exactly the counters named: a full one admits its whole allowance again,
/// a counter beside it stays full, one never charged is named but not counted, and a second
/// reset finds nothing left to clear.
async fn reset_clears_only_its_counters(b: &Backend, algorithm: Algorithm) {
    let reset = enforced("reset", algorithm, 2, MINUTE, 1);
    let kept = enforced("kept", algorithm, 2, MINUTE, 1);
    let never = enforced("never", algorithm, 2, MINUTE, 1);
    for c in [&reset, &kept] {
        b.one(c, T0).await;
        b.one(c, T0).await;
        assert!(!b.one(c, T0).await.verdict.admitted, "{algorithm}: full");
    }
    let now = T0 + SECOND;
    let charges = [costing(&reset, 0), costing(&never, 0)];
    let cleared = b.store.reset(&charges, now).await.expect("reset");
    assert_eq!(cleared.counters, 1, "{algorithm}: {cleared:?}");
    assert_eq!(cleared.leased_hits, 0);
    let o = b.one(&reset, now).await;
    assert!(
        o.verdict.admitted && o.verdict.remaining == 1,
        "{algorithm}: fresh after the reset: {o:?}"
    );
    assert!(
        !b.one(&kept, now).await.verdict.admitted,
        "{algorithm}: the other counter is untouched"
    );
    let again = b
        .store
        .reset(&[costing(&kept, 0)], now)
        .await
        .expect("reset");
    assert_eq!(again.counters, 1, "{algorithm}");
    let empty = b
        .store
        .reset(&[costing(&kept, 0)], now)
        .await
        .expect("reset");
    assert_eq!(empty.counters, 0, "{algorithm}: nothing left");
}

/// A calendar limit's counter is found and reset in the window `now` falls in (its key names
/// the window sluice placed).
async fn reset_of_a_calendar_window(b: &Backend) {
    let now = instant("2026-03-10T12:00:00Z");
    let day = calendar_limit(1, Period::Day, "Europe/Paris", now);
    let c = charge("reset-calendar", day, 1, Gate::Enforced);
    assert!(b.one(&c, now).await.verdict.admitted);
    assert!(!b.one(&c, now).await.verdict.admitted);
    let cleared = b.store.reset(&[costing(&c, 0)], now).await.expect("reset");
    assert_eq!(cleared.counters, 1, "{cleared:?}");
    assert!(
        b.one(&c, now).await.verdict.admitted,
        "fresh after the reset"
    );
}

/// Costs above one consume that many; a cost above the capacity never fits and counts nothing.
async fn costs_above_one_and_capacity(b: &Backend, algorithm: Algorithm) {
    let c = |cost| enforced("cost", algorithm, 10, MINUTE, cost);
    assert_eq!(b.one(&c(7), T0).await.verdict.remaining, 3, "{algorithm}");
    let o = b.one(&c(4), T0).await;
    assert!(
        !o.verdict.admitted && o.available == 3,
        "{algorithm}: {o:?}"
    );
    assert!(!b.one(&c(u64::MAX), T0).await.verdict.admitted);
    assert!(b.one(&c(3), T0).await.verdict.admitted, "{algorithm}");
}

/// Capacity comes back as each algorithm says: at the boundary, gradually, hit by hit.
async fn capacity_returns(b: &Backend) {
    let fixed = enforced("ret", Algorithm::FixedWindow, 2, MINUTE, 2);
    b.one(&fixed, T0 + 30 * SECOND).await;
    let hint = b.exact_retry(&costing(&fixed, 1), T0 + 31 * SECOND).await;
    assert_eq!(hint, 29 * SECOND);

    let sliding = enforced("ret", Algorithm::SlidingWindow, 10, MINUTE, 10);
    b.one(&sliding, T0).await;
    let check = costing(&sliding, 0);
    let remaining = async |at| b.one(&check, at).await.verdict.remaining;
    assert_eq!(remaining(T0 + MINUTE + 30 * SECOND).await, 5);
    assert_eq!(remaining(T0 + MINUTE + 54 * SECOND).await, 9);

    let log = enforced("ret", Algorithm::SlidingLog, 3, MINUTE, 1);
    for at in [T0, T0 + 10 * SECOND, T0 + 10 * SECOND] {
        assert!(b.one(&log, at).await.verdict.admitted);
    }
    assert_eq!(b.exact_retry(&log, T0 + 20 * SECOND).await, 40 * SECOND);

    let bucket = Limit {
        burst: 3,
        ..limit(Algorithm::TokenBucket, 6, MINUTE)
    };
    let tb = charge("ret-bucket", bucket, 3, Gate::Enforced);
    b.one(&tb, T0).await;
    assert_eq!(b.exact_retry(&costing(&tb, 1), T0).await, 10 * SECOND);
}

/// A call of more hits than ever fit is denied until the bucket is full, while its report of
/// what fits follows the refill: the same call a minute later finds one hit's room (the Redis
/// store's local cache once answered it "nothing fits" until full).
async fn room_reported_while_a_large_call_waits(b: &Backend) {
    let bucket = Limit {
        burst: 13,
        ..limit(Algorithm::TokenBucket, 1, MINUTE)
    };
    let drain = charge("large", bucket, 13, Gate::Enforced);
    assert!(b.one(&drain, T0).await.verdict.admitted);
    let large = costing(&drain, 15);
    let now = b.one(&large, T0).await;
    assert_eq!((now.verdict.admitted, now.available), (false, 0));
    let later = b.one(&large, T0 + MINUTE).await;
    assert_eq!((later.verdict.admitted, later.available), (false, 1));
    assert_eq!(later.verdict.reset_after, 12 * MINUTE);
}

/// One day.
const DAY: Nanos = 86_400 * SECOND;

/// Limits whose products pass 2^53 (four billion a year) stay exact.
async fn huge_limits_stay_exact(b: &Backend, algorithm: Algorithm) {
    let c = enforced("huge", algorithm, 4_000_000_000, 365 * DAY, 3_999_999_999);
    assert_eq!(b.one(&c, T0).await.verdict.remaining, 1, "{algorithm}");
    b.exact_retry(&costing(&c, 2), T0).await;
}

/// A million a day: the previous day's million still weighs on the next day's sliding window.
async fn previous_day_weighs_on_sliding_window(b: &Backend) {
    let d = charge(
        "day",
        limit(Algorithm::SlidingWindow, 1_000_000, DAY),
        1_000_000,
        Gate::Enforced,
    );
    b.one(&d, T0).await;
    b.exact_retry(&costing(&d, 100), T0 + DAY + 3 * SECOND)
        .await;
}

/// Many concurrent calls on one counter (batched into shared script runs on Redis) admit
/// exactly the limit, and calls blocked by another counter charge nothing.
async fn concurrent_calls_are_exact(b: &Backend, algorithm: Algorithm) {
    let hot = enforced("hot", algorithm, 50, 3_600 * SECOND, 1);
    let full = enforced("full", algorithm, 0, 3_600 * SECOND, 1);
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let store = b.store.clone();
            let call = if i % 3 == 0 {
                vec![hot.clone(), full.clone()]
            } else {
                vec![hot.clone()]
            };
            tokio::spawn(async move {
                let o = store.apply(&call, T0).await.expect("store answers");
                (call.len() == 1 && o[0].verdict.admitted).then_some(o[0].verdict.remaining)
            })
        })
        .collect();
    let mut remaining: Vec<u64> = Vec::new();
    for t in tasks {
        remaining.extend(t.await.expect("task"));
    }
    remaining.sort_unstable();
    assert_eq!(remaining, (0..50).collect::<Vec<u64>>(), "{algorithm}");
}

/// Unix nanoseconds of an RFC 3339 instant.
fn instant(text: &str) -> Nanos {
    let ts: jiff::Timestamp = text.parse().expect("an instant");
    Nanos::try_from(ts.as_nanosecond()).expect("after 1970")
}

/// `requests` per `period` in `zone`, as the limiter charges it at `now`: a fixed window from
/// the period's local start, as long as that period is.
fn calendar_limit(requests: u64, period: Period, zone: &str, now: Nanos) -> Limit {
    let calendar = Calendar::new(period, zone).expect("a known zone");
    let (start, end) = calendar.window(now).expect("a window");
    Limit {
        window: end - start,
        origin: start,
        ..limit(Algorithm::FixedWindow, requests, end - start)
    }
}

/// A calendar window counts to its own end, exactly, on every store: a 23-hour day two hours
/// before local midnight, the next day a new counter, a 25-hour day from its first instant, and
/// a calendar month that ends at another zone's midnight.
async fn calendar_windows(b: &Backend) {
    const HOUR: Nanos = 3_600 * SECOND;
    let now = instant("2026-03-29T20:00:00Z");
    let spring = calendar_limit(2, Period::Day, "Europe/Paris", now);
    assert_eq!(spring.window, 23 * HOUR);
    let c = charge("cal-paris", spring, 1, Gate::Enforced);
    for left in [1, 0] {
        let o = b.one(&c, now).await.verdict;
        assert_eq!(
            (o.admitted, o.remaining, o.reset_after),
            (true, left, 2 * HOUR)
        );
    }
    let denied = b.one(&c, now + 7 * SECOND).await.verdict;
    assert_eq!(
        (denied.admitted, denied.reset_after),
        (false, 2 * HOUR - 7 * SECOND)
    );
    // At local midnight the limiter charges the next day: a counter of its own.
    let midnight = now + 2 * HOUR;
    let next = calendar_limit(2, Period::Day, "Europe/Paris", midnight);
    assert_eq!(next.origin, midnight);
    let o = b
        .one(&charge("cal-paris", next, 1, Gate::Enforced), midnight)
        .await;
    assert_eq!((o.verdict.remaining, o.verdict.reset_after), (1, 24 * HOUR));
    let fall = instant("2026-10-24T22:00:00Z");
    let long = charge(
        "cal-fall",
        calendar_limit(1, Period::Day, "Europe/Paris", fall),
        1,
        Gate::Enforced,
    );
    assert_eq!(b.one(&long, fall).await.verdict.reset_after, 25 * HOUR);
    assert!(!b.one(&long, fall + 24 * HOUR).await.verdict.admitted);
    let noon = instant("2026-02-28T12:00:00Z");
    let month = calendar_limit(5, Period::Month, "America/New_York", noon);
    let o = b
        .one(&charge("cal-month", month, 5, Gate::Enforced), noon)
        .await;
    assert_eq!((o.verdict.remaining, o.verdict.reset_after), (0, 17 * HOUR));
}

/// A limit of `requests` per minute with `algorithm` that records every charge as `recording`.
fn recording(algorithm: Algorithm, requests: u64, recording: Recording) -> Limit {
    Limit {
        recording,
        ..limit(algorithm, requests, MINUTE)
    }
}

/// The hits a counter holds (past its limit too), read as the admin listener reads them: the
/// remaining of a check under the same limit unbounded.
async fn hits_held(b: &Backend, c: &Charge, now: Nanos) -> u64 {
    let read = Charge {
        limit: c.limit.unbounded(),
        cost: 0,
        ..c.clone()
    };
    sluice::algorithm::UNBOUNDED - b.one(&read, now).await.verdict.remaining
}

/// A limit that records every charge (fixed window, sliding window, token bucket): a charge
/// that crosses it is refused yet counted, a check is refused with an exact hint until the
/// budget allows; a recorded charge commits even in a call another counter refuses, while an
/// ordinary one in a call the recorded charge refuses commits nothing.
async fn recorded_past_the_limit(b: &Backend) {
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::TokenBucket,
    ] {
        let budget = recording(algorithm, 10, Recording::Always);
        let c = |cost| charge(&format!("budget-{algorithm}"), budget, cost, Gate::Enforced);
        assert!(b.one(&c(8), T0).await.verdict.admitted, "{algorithm}");
        let over = b.one(&c(5), T0).await;
        assert!(
            !over.verdict.admitted && over.available == 2,
            "{algorithm}: {over:?}"
        );
        assert_eq!(hits_held(b, &c(0), T0).await, 13, "{algorithm}");
        b.exact_retry(&c(0), T0 + SECOND).await;

        // Refused by an ordinary counter beside it: the recorded charge still counts.
        let ordinary = |n, name: &str| {
            charge(
                &format!("{name}-{algorithm}"),
                limit(algorithm, n, MINUTE),
                1,
                Gate::Enforced,
            )
        };
        let other = recording(algorithm, 10, Recording::Always);
        let fits = charge(&format!("fits-{algorithm}"), other, 4, Gate::Enforced);
        let o = b.apply(&[fits.clone(), ordinary(0, "zero")], T0).await;
        assert!(
            o[0].verdict.admitted && !o[1].verdict.admitted,
            "{algorithm}"
        );
        assert_eq!(hits_held(b, &fits, T0).await, 0, "{algorithm}");
        // Refused by the recorded charge: the ordinary counter beside it is not charged.
        let spared = ordinary(5, "spared");
        let o = b.apply(&[spared.clone(), c(3)], T0).await;
        assert!(
            o[0].verdict.admitted && !o[1].verdict.admitted,
            "{algorithm}"
        );
        assert_eq!(b.one(&costing(&spared, 0), T0).await.verdict.remaining, 5);
        assert_eq!(hits_held(b, &c(0), T0).await, 16, "{algorithm}");
    }
}

/// A descriptor with two budgets (a minute's, a day's) whose charge crosses the minute's: the
/// call is refused, yet both keep the charge (the tokens were spent); another descriptor of the
/// same call whose budget it fits keeps nothing, nor does an ordinary limit of the crossing one.
async fn a_crossing_descriptor_keeps_all_its_budgets(b: &Backend) {
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::TokenBucket,
    ] {
        let name = |n: &str| format!("{n}-{algorithm}");
        let minute = charge(
            &name("minute"),
            recording(algorithm, 10, Recording::Always),
            12,
            Gate::Enforced,
        );
        let day = Limit {
            window: 86_400 * SECOND,
            ..recording(algorithm, 1_000, Recording::Always)
        };
        let day = charge(&name("day"), day, 12, Gate::Enforced);
        let plain = charge(
            &name("plain"),
            limit(algorithm, 100, MINUTE),
            12,
            Gate::Enforced,
        );
        let mut other = charge(
            &name("other"),
            recording(algorithm, 100, Recording::Always),
            12,
            Gate::Enforced,
        );
        other.descriptor = 1;
        let o = b
            .apply(
                &[minute.clone(), day.clone(), plain.clone(), other.clone()],
                T0,
            )
            .await;
        let admitted: Vec<bool> = o.iter().map(|o| o.verdict.admitted).collect();
        assert_eq!(admitted, [false, true, true, true], "{algorithm}");
        assert_eq!(hits_held(b, &minute, T0).await, 12, "{algorithm}");
        assert_eq!(hits_held(b, &day, T0).await, 12, "{algorithm}");
        assert_eq!(hits_held(b, &plain, T0).await, 0, "{algorithm}");
        assert_eq!(hits_held(b, &other, T0).await, 0, "{algorithm}");
    }
}

/// envoyproxy/ratelimit's token-quota example on 2 a minute, counted as the drop-in personality
/// counts (fixed windows recording every hit, its judgment of a check): three checks pass at 0,
/// 1 and 2 hits, each followed by a charge of 1; the fourth is refused until the window ends.
async fn compat_token_quota(b: &Backend) {
    let l = recording(Algorithm::FixedWindow, 2, Recording::AlwaysCompat);
    let c = |cost| charge("token-quota", l, cost, Gate::QuotaMode(0));
    for request in 0..3 {
        let now = T0 + request * SECOND;
        let check = b.one(&c(0), now).await;
        assert!(check.verdict.admitted, "request {request}: {check:?}");
        b.one(&c(1), now).await;
    }
    let refused = b.one(&c(0), T0 + 3 * SECOND).await;
    assert_eq!(
        (refused.verdict.admitted, refused.verdict.reset_after),
        (false, 57 * SECOND)
    );
    assert_eq!(hits_held(b, &c(0), T0 + 3 * SECOND).await, 3);
    assert!(b.one(&c(0), T0 + MINUTE).await.verdict.admitted);
}

/// One random operation: which counter, cost, how far the clock moves (µs), the gate.
#[derive(Debug, Clone)]
struct Op {
    counter: usize,
    cost: u64,
    advance_us: u64,
    gate: u8,
}

/// Random call sequences of `len` operations with costs from `costs` and clock steps (µs)
/// from `advances_us`.
fn ops_of(
    costs: impl Strategy<Value = u64>,
    advances_us: impl Strategy<Value = u64>,
    len: std::ops::Range<usize>,
) -> impl Strategy<Value = Vec<Op>> {
    let op =
        (0usize..3, costs, advances_us, 0u8..4).prop_map(|(counter, cost, advance_us, gate)| Op {
            counter,
            cost,
            advance_us,
            gate,
        });
    proptest::collection::vec(op, len)
}

/// Three random limits: any algorithm, `requests` per window (ms) from `windows_ms`; a token
/// bucket's burst is `burst(requests, n)` with `n` from `bursts`, the others' is `requests`;
/// recording as `recordings` picks (never for a sliding log, which cannot record).
fn limits_of(
    requests: impl Strategy<Value = u64>,
    windows_ms: impl Strategy<Value = u64>,
    bursts: impl Strategy<Value = u64>,
    burst: fn(u64, u64) -> u64,
    recordings: impl Strategy<Value = Recording>,
) -> impl Strategy<Value = Vec<Limit>> {
    let one = (0usize..4, requests, windows_ms, bursts, recordings).prop_map(
        move |(a, requests, window_ms, n, recording)| Limit {
            algorithm: Algorithm::ALL[a],
            requests,
            window: window_ms * MILLI,
            burst: if a == 3 { burst(requests, n) } else { requests },
            origin: 0,
            recording: if a == 2 {
                Recording::AdmittedOnly
            } else {
                recording
            },
        },
    );
    proptest::collection::vec(one, 3)
}

/// Any recording.
fn recordings() -> impl Strategy<Value = Recording> {
    prop::sample::select(vec![
        Recording::AdmittedOnly,
        Recording::Always,
        Recording::AlwaysCompat,
    ])
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    ops_of(
        prop_oneof![Just(0u64), 1u64..4, 1u64..40],
        prop_oneof![Just(0u64), 1u64..2_000_000, 1u64..200_000_000],
        1..40,
    )
}

fn limits() -> impl Strategy<Value = Vec<Limit>> {
    let windows_ms = prop_oneof![1u64..5_000, Just(60_000), Just(86_400_000)];
    limits_of(
        0u64..12,
        windows_ms,
        1u64..15,
        |_, burst| burst,
        recordings(),
    )
}

/// Limits whose products pass 2^53 (the script's exact wide arithmetic), with costs and
/// clock steps to match.
fn big_limits() -> impl Strategy<Value = Vec<Limit>> {
    let day = 86_400_000u64;
    let windows_ms = prop_oneof![Just(day), Just(30 * day), Just(365 * day)];
    // Bursts refill within 50 windows (at most 50 years): Redis stores bucket arrival times
    // only up to 2^52 µs after the epoch (README), so centuries-long refills are refused there.
    // Windows record too; a bucket does not, as costs this large would run its debt past the
    // years Redis stores an arrival time for (README), where the script refuses the charge.
    let limits = limits_of(
        1_000_000u64..4_294_967_295,
        windows_ms,
        1u64..50,
        |requests, refills| requests * refills,
        recordings(),
    );
    limits.prop_map(|limits| {
        limits
            .into_iter()
            .map(|l| match l.algorithm {
                Algorithm::TokenBucket => Limit {
                    recording: Recording::AdmittedOnly,
                    ..l
                },
                _ => l,
            })
            .collect()
    })
}

fn big_ops() -> impl Strategy<Value = Vec<Op>> {
    ops_of(
        prop_oneof![Just(0u64), 1u64..4, 1u64..5_000_000_000],
        prop_oneof![Just(0u64), 1u64..2_000_000, 1u64..40_000_000_000_000],
        1..30,
    )
}

/// Runs random call sequences on the memory store and on Redis and compares every outcome:
/// same verdicts, remaining and availability; hints equal up to rounding to Redis's microsecond.
fn agree(
    limits: impl Strategy<Value = Vec<Limit>>,
    ops: impl Strategy<Value = Vec<Op>>,
    cases: u32,
    layout: RedisKeyLayout,
) {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let redis = runtime.block_on(Backend::redis(layout));
    let counter = std::sync::atomic::AtomicU64::new(0);
    let config = ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(limits in limits, ops in ops)| {
        let case = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let memory = MemoryStore::new();
        let mut now = T0 + 123_456 * 1_000;
        for op in &ops {
            now += op.advance_us * 1_000;
            // Enforced calls name two counters; quota-mode calls three, in one or two quota-mode
            // groups.
            let gates = match op.gate {
                0 | 1 => [Gate::Enforced; 3],
                2 => [Gate::QuotaMode(0), Gate::QuotaMode((op.advance_us % 2) as u32), Gate::QuotaMode(1)],
                _ => [Gate::Advisory; 3],
            };
            // The first two charges of a call are one descriptor's, the third another's.
            let call: Vec<Charge> = [op.counter, (op.counter + 1) % 3, (op.counter + 2) % 3]
                .iter()
                .zip(gates)
                .take(match op.gate { 0 => 2, 2 => 3, _ => 1 })
                .enumerate()
                .map(|(j, (&i, gate))| Charge {
                    descriptor: (j / 2) as u32,
                    ..charge(&format!("p{case}-{i}"), limits[i], op.cost, gate)
                })
                .collect();
            let expected = memory.apply_now(&call, now);
            let got = runtime.block_on(redis.apply(&call, now));
            for (e, g) in expected.iter().zip(&got) {
                let rounded = e.verdict.reset_after.div_ceil(1_000) * 1_000;
                prop_assert_eq!(
                    (e.verdict.admitted, e.verdict.remaining, rounded, e.available),
                    (g.verdict.admitted, g.verdict.remaining, g.verdict.reset_after, g.available),
                    "limits {:?} op {:?} ops {:?}", limits, op, ops
                );
            }
        }
    });
}

/// The Lua script and the Rust algorithms agree on random call sequences with small limits.
#[test]
#[ignore = "needs redis-server (scripts/test installs it)"]
fn lua_agrees_with_rust() {
    agree(limits(), ops(), 64, RedisKeyLayout::Sluice);
}

/// The same with keys in envoyproxy/ratelimit's layout: its `fixed_window` counters (whole-second
/// windows in `limits`) decide as the Rust algorithm does.
#[test]
#[ignore = "needs redis-server (scripts/test installs it)"]
fn lua_agrees_with_rust_in_upstream_key_layout() {
    agree(limits(), ops(), 64, RedisKeyLayout::Compat);
}

/// Calendar limits on Redis agree with the memory store over random calls spread across days,
/// a Paris and a New York clock change among them: every call charges each limit over its
/// window at the call's time, as the limiter does.
#[test]
#[ignore = "needs redis-server (scripts/test installs it)"]
fn lua_agrees_with_rust_on_calendar_windows() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let redis = runtime.block_on(Backend::redis(RedisKeyLayout::Sluice));
    let calendars = [
        (Period::Day, "Europe/Paris"),
        (Period::Week, "America/New_York"),
        (Period::Month, "UTC"),
    ];
    let counter = std::sync::atomic::AtomicU64::new(0);
    let config = ProptestConfig {
        cases: 24,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let steps_us = prop_oneof![Just(0u64), 1u64..2_000_000, 1u64..21_600_000_000];
    let ops = ops_of(prop_oneof![Just(0u64), 1u64..4], steps_us, 1..60);
    proptest!(config, |(requests in proptest::collection::vec(0u64..6, 3), ops in ops)| {
        let case = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let memory = MemoryStore::new();
        let mut now = instant("2026-03-07T18:00:00Z");
        for op in &ops {
            now += op.advance_us * 1_000;
            let call: Vec<Charge> = [op.counter, (op.counter + 1) % 3]
                .iter()
                .take(if op.gate == 0 { 2 } else { 1 })
                .map(|&i| {
                    let (period, zone) = calendars[i];
                    let limit = calendar_limit(requests[i], period, zone, now);
                    charge(&format!("cal{case}-{i}"), limit, op.cost, Gate::Enforced)
                })
                .collect();
            let expected = memory.apply_now(&call, now);
            let got = runtime.block_on(redis.apply(&call, now));
            for (e, g) in expected.iter().zip(&got) {
                let rounded = e.verdict.reset_after.div_ceil(1_000) * 1_000;
                prop_assert_eq!(
                    (e.verdict.admitted, e.verdict.remaining, rounded, e.available),
                    (g.verdict.admitted, g.verdict.remaining, g.verdict.reset_after, g.available),
                    "requests {:?} op {:?}", requests, op
                );
            }
        }
    });
}

/// The same with limits, costs and clock steps whose products pass 2^53.
#[test]
#[ignore = "needs redis-server (scripts/test installs it)"]
fn lua_agrees_with_rust_on_huge_limits() {
    agree(big_limits(), big_ops(), 48, RedisKeyLayout::Sluice);
}
