//! Helpers shared by the stores' unit tests.

use super::{Charge, CounterKeyBuilder, Gate};
use crate::algorithm::{Algorithm, Limit};
use crate::clock::SECOND;

/// A charge of `cost` on the fixed-window counter `k=name` of domain `d`, `requests` per minute.
pub(crate) fn fixed_charge(name: &str, requests: u64, cost: u64, gate: Gate) -> Charge {
    let limit = Limit {
        algorithm: Algorithm::FixedWindow,
        requests,
        window: 60 * SECOND,
        burst: requests,
        origin: 0,
        recording: Default::default(),
    };
    let mut key = CounterKeyBuilder::new("d");
    key.entry("k", name);
    Charge {
        key: key.finish(0, limit.algorithm, limit.window),
        limit,
        cost,
        gate,
        lease: 0,
        descriptor: 0,
    }
}
