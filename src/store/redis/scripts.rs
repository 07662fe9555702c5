//! The one Lua script that decides and commits a call's counters, and its argument encoding.
//!
//! Why a script and not MULTI/EXEC or WATCH: a decision reads every counter, runs the
//! algorithm and writes back only if the whole call is admitted. MULTI cannot branch on what
//! it reads; WATCH turns contention on a hot key into retries (more round trips exactly when
//! load is highest). A script runs atomically inside Redis, in one round trip, and reads
//! Redis's own clock (`TIME`), so replicas with skewed clocks cannot over-admit.
//!
//! KEYS and ARGV layout, the stored state of each algorithm and the exact-integer strategy are
//! documented at the top of `decide.lua`. Every key the script touches is passed in KEYS (the
//! script never builds key names), as Redis Cluster requires.

use redis::Value;

use crate::algorithm::{Limit, Verdict};
use crate::clock::Nanos;
use crate::store::{BadReply, Charge, Gate, Outcome};

/// The script source.
pub const DECIDE: &str = include_str!("decide.lua");

/// Nanoseconds per microsecond: the script counts in microseconds (Redis `TIME`'s resolution).
pub const MICRO: Nanos = 1_000;

/// The largest limit parameter sent to the script: its exact wide arithmetic takes operands
/// below 2^53, and products of two parameters stay exact. Larger bursts (and costs) behave
/// the same at this size: no real traffic fills 2^48 tokens.
pub const MAX_PARAM: u64 = 1 << 48;

/// The seven ARGV fields of one charge, its key index (1-based, into KEYS) first.
pub type Fields = [u64; 7];

/// The fields of `charge` whose key is KEYS[`key_index`].
pub fn fields(charge: &Charge, key_index: usize) -> Fields {
    let limit = &charge.limit;
    // A cost above the capacity never fits, whatever its size: send capacity + 1.
    let cost = charge.cost.min(limit.capacity().min(MAX_PARAM) + 1);
    [
        key_index as u64,
        limit.algorithm as u64,
        limit.requests.min(MAX_PARAM),
        window_us(limit),
        limit.burst.min(MAX_PARAM),
        cost,
        gate_code(charge.gate),
    ]
}

/// The script's algorithm code of a `fixed_window` counter in upstream's key layout (the
/// four algorithms are 0 to 3).
pub const UPSTREAM_FIXED_WINDOW: u64 = 4;

/// Appends one call to a script run's ARGV: its time (`None` = Redis's clock), its number of
/// charges, then their fields. Numbers go straight into the command buffer.
pub fn push_call(cmd: &mut redis::Cmd, now_us: Option<u64>, charges: &[Fields]) {
    match now_us {
        Some(now) => cmd.arg(now),
        None => cmd.arg(""),
    };
    cmd.arg(charges.len());
    for f in charges {
        for v in f {
            cmd.arg(*v);
        }
    }
}

/// The window in microseconds (rule windows are whole milliseconds; at least 1 µs).
pub fn window_us(limit: &Limit) -> u64 {
    (limit.window / MICRO).max(1)
}

fn gate_code(gate: Gate) -> u64 {
    match gate {
        Gate::Enforced => 0,
        Gate::Quota => 1,
        Gate::Advisory => 2,
    }
}

/// Reads one call's part of a script reply: four integers per charge of `costs`.
pub fn outcomes(items: &[Value], costs: &[u64]) -> Result<Vec<Outcome>, BadReply> {
    if items.len() != costs.len() * 4 {
        return Err(BadReply::Length {
            expected: costs.len() * 4,
            got: items.len(),
        });
    }
    let int = |v: &Value| match v {
        Value::Int(i) => u64::try_from(*i).map_err(|_| BadReply::Negative(*i)),
        other => Err(BadReply::NotInteger(other.clone())),
    };
    costs
        .iter()
        .zip(items.chunks_exact(4))
        .map(|(cost, f)| {
            let admitted = int(&f[0])? == 1;
            let remaining = int(&f[1])?;
            let verdict = Verdict {
                admitted,
                remaining,
                reset_after: int(&f[2])?.saturating_mul(MICRO),
            };
            // As the memory store reports it (`Outcome::judged`): remaining + cost when admitted.
            let available = if admitted {
                remaining.saturating_add(*cost)
            } else {
                int(&f[3])?
            };
            Ok(Outcome { verdict, available })
        })
        .collect()
}
