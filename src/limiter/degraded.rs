//! Answering a call without the store: each counted descriptor's rule `failure_mode` says how.
//!
//! | the call's counted descriptors                 | answer                                    |
//! |------------------------------------------------|-------------------------------------------|
//! | a `deny` rule (enforced) among them            | OVER_LIMIT, `Retry-After: 1`              |
//! | a `local` rule that the local limiter denies   | OVER_LIMIT with the local retry hint      |
//! | otherwise, with an `allow` rule among them     | OK                                        |
//! | otherwise, with a request-side override        | gRPC UNAVAILABLE (Envoy's failure_mode_deny decides, as envoyproxy/ratelimit) |
//! | otherwise (`local` rules that admit)           | OK                                        |
//!
//! Shadow-mode and quota-mode rules gate as usual (a shadow `deny` never blocks). Every answer
//! made here carries `x-ratelimit-mode: degraded`. `allow` statuses report the limit's full
//! allowance and `deny` statuses a one-second retry, since the real counters are unknown.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::algorithm::{Algorithm, Limit, Recording, Verdict};
use crate::clock::{Nanos, SECOND};
use crate::log_text::LogText;
use crate::rules::FailureMode;
use crate::store::{Charge, ChargeOutcome, CounterKey, MemoryStore, StoreError};

/// The response header marking an answer made without the store.
pub(crate) const HEADER: (&str, &str) = ("x-ratelimit-mode", "degraded");

/// The retry hint of a `deny` answer, and the reset reported by `allow` answers.
const RETRY: Nanos = SECOND;

/// How often, at most, a degraded burst is logged.
const LOG_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// The outcomes of a call answered without the store, or `None` when no rule had a say and
/// the call must fail (UNAVAILABLE).
pub(super) fn outcomes(
    charges: &[Charge],
    modes: &[(usize, Option<FailureMode>)],
    fallback: &MemoryStore,
    expected_replicas: u64,
    now: Nanos,
) -> Option<Vec<ChargeOutcome>> {
    let fixed = |admitted: bool, remaining: u64| ChargeOutcome {
        verdict: Verdict {
            admitted,
            remaining,
            reset_after: RETRY,
        },
        available: remaining,
    };
    // The local limiter sees the whole call, so the gate rule (all-or-nothing) holds: `deny`
    // charges always deny, `allow` and undecided ones always admit and store nothing, `local`
    // ones count against limit / expected replicas.
    let local: Vec<Charge> = charges
        .iter()
        .zip(modes)
        .map(|(c, (_, mode))| match mode {
            Some(FailureMode::Local) => Charge {
                limit: scaled(&c.limit, expected_replicas),
                ..c.clone()
            },
            Some(FailureMode::Deny) => Charge {
                key: CounterKey::from_bytes(b""),
                limit: Limit {
                    algorithm: Algorithm::FixedWindow,
                    requests: 0,
                    window: RETRY,
                    burst: 0,
                    origin: 0,
                    recording: Recording::AdmittedOnly,
                },
                cost: 1,
                gate: c.gate,
                lease: 0,
                descriptor: c.descriptor,
            },
            _ => Charge {
                key: CounterKey::from_bytes(b""),
                limit: Limit {
                    algorithm: Algorithm::FixedWindow,
                    requests: 1,
                    window: RETRY,
                    burst: 1,
                    origin: 0,
                    recording: Recording::AdmittedOnly,
                },
                cost: 0,
                gate: c.gate,
                lease: 0,
                descriptor: c.descriptor,
            },
        })
        .collect();
    let verdicts = fallback.apply_now(&local, now);
    let outcomes: Vec<ChargeOutcome> = charges
        .iter()
        .zip(modes)
        .zip(verdicts)
        .map(|((c, (_, mode)), local)| match mode {
            Some(FailureMode::Local) => local,
            Some(FailureMode::Deny) => fixed(false, 0),
            _ => fixed(true, c.limit.capacity().saturating_sub(c.cost)),
        })
        .collect();
    let blocked = crate::store::gate::blocked(
        charges
            .iter()
            .zip(&outcomes)
            .map(|(c, o)| (c.gate, o.verdict.admitted)),
    );
    let undecided = modes.iter().any(|(_, m)| m.is_none());
    let fails_open = modes.iter().any(|(_, m)| *m == Some(FailureMode::Allow));
    (blocked || !undecided || fails_open).then_some(outcomes)
}

/// `limit` shared among `replicas` processes: requests and burst divided (at least 1 each,
/// unless the limit is 0), so together they stay near the limit while the store is away.
fn scaled(limit: &Limit, replicas: u64) -> Limit {
    let share = |n: u64| {
        if n == 0 {
            0
        } else {
            (n / replicas.max(1)).max(1)
        }
    };
    Limit {
        requests: share(limit.requests),
        burst: share(limit.burst),
        ..*limit
    }
}

/// Logs degraded decisions in bursts: one line when a burst starts, then at most one line
/// per `LOG_EVERY` with the count since, never one line per call.
#[derive(Debug)]
pub(super) struct BurstLog {
    epoch: Instant,
    /// Milliseconds since `epoch` of the last line (0: none yet).
    last: AtomicU64,
    count: AtomicU64,
}

impl Default for BurstLog {
    fn default() -> Self {
        Self {
            epoch: Instant::now(),
            last: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }
}

impl BurstLog {
    /// Counts one degraded decision, logging if a line is due.
    pub(super) fn record(&self, error: &StoreError) {
        let count = self.count.fetch_add(1, Ordering::Relaxed) + 1;
        let now = self.epoch.elapsed().as_millis() as u64 + 1;
        let last = self.last.load(Ordering::Relaxed);
        if last != 0 && now - last < LOG_EVERY.as_millis() as u64 {
            return;
        }
        if self
            .last
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            self.count.store(0, Ordering::Relaxed);
            tracing::warn!(
                calls = count,
                error = %LogText(&error.to_string()),
                transient = error.is_transient(),
                "counter store unavailable: calls answered by each rule's failure_mode"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Gate;

    fn charge(name: &str, requests: u64, gate: Gate) -> Charge {
        crate::store::testing::fixed_charge(name, requests, 1, gate)
    }

    fn admitted(modes: &[Option<FailureMode>], gates: &[Gate]) -> Option<Vec<bool>> {
        let charges: Vec<Charge> = gates
            .iter()
            .enumerate()
            .map(|(i, g)| charge(&i.to_string(), 10, *g))
            .collect();
        let modes: Vec<_> = modes.iter().enumerate().map(|(i, m)| (i, *m)).collect();
        outcomes(&charges, &modes, &MemoryStore::new(), 1, 0)
            .map(|o| o.iter().map(|o| o.verdict.admitted).collect())
    }

    /// The failure table: allow admits, deny denies, overrides alone fail the call.
    #[test]
    fn failure_table() {
        use FailureMode::*;
        let e = Gate::Enforced;
        assert_eq!(admitted(&[Some(Allow)], &[e]), Some(vec![true]));
        assert_eq!(
            admitted(&[Some(Deny), Some(Allow)], &[e, e]),
            Some(vec![false, true])
        );
        assert_eq!(admitted(&[None], &[e]), None);
        assert_eq!(
            admitted(&[None, Some(Allow)], &[e, e]),
            Some(vec![true, true])
        );
        assert_eq!(
            admitted(&[None, Some(Deny)], &[e, e]),
            Some(vec![true, false])
        );
        assert_eq!(admitted(&[None, Some(Local)], &[e, e]), None);
        assert_eq!(
            admitted(&[Some(Deny)], &[Gate::Advisory]),
            Some(vec![false])
        );
    }

    /// `local` counts in the fallback store with the limit divided among replicas, and a
    /// blocked call consumes nothing locally.
    #[test]
    fn local_counts_a_share() {
        let fallback = MemoryStore::new();
        let c = charge("l", 10, Gate::Enforced);
        let modes = [(0, Some(FailureMode::Local))];
        let admitted = (0..10)
            .filter(|_| {
                outcomes(std::slice::from_ref(&c), &modes, &fallback, 3, 0).unwrap()[0]
                    .verdict
                    .admitted
            })
            .count();
        assert_eq!(admitted, 3);
        let other = charge("m", 10, Gate::Enforced);
        let call = [other.clone(), charge("d", 10, Gate::Enforced)];
        let modes = [(0, Some(FailureMode::Local)), (1, Some(FailureMode::Deny))];
        outcomes(&call, &modes, &fallback, 1, 0).unwrap();
        let left = outcomes(&[other], &modes[..1], &fallback, 1, 0).unwrap()[0];
        assert_eq!(
            left.verdict.remaining, 9,
            "the denied call consumed nothing"
        );
    }
}
