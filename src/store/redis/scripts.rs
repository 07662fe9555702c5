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
use crate::store::{Charge, Gate, Outcome};

/// The script source.
pub const DECIDE: &str = include_str!("decide.lua");

/// Nanoseconds per microsecond: the script counts in microseconds (Redis `TIME`'s resolution).
pub const MICRO: Nanos = 1_000;

/// The largest limit parameter sent to the script: its exact wide arithmetic takes operands
/// below 2^53, and products of two parameters stay exact. Larger bursts (and costs) behave
/// the same at this size: no real traffic fills 2^48 tokens.
pub const MAX_PARAM: u64 = 1 << 48;

/// Writes the ARGV of one script call into `cmd`: `now_us` (`None` = Redis's clock), then
/// each charge with the 1-based index of its key in KEYS. Numbers go straight into the
/// command buffer (no per-field allocation).
pub fn push_args(cmd: &mut redis::Cmd, now_us: Option<u64>, charges: &[(&Charge, usize)]) {
    match now_us {
        Some(now) => cmd.arg(now),
        None => cmd.arg(""),
    };
    cmd.arg(charges.len());
    for (charge, key_index) in charges {
        let limit = &charge.limit;
        // A cost above the capacity never fits, whatever its size: send capacity + 1.
        let cost = charge.cost.min(limit.capacity().min(MAX_PARAM) + 1);
        cmd.arg(*key_index)
            .arg(limit.algorithm as u8)
            .arg(limit.requests.min(MAX_PARAM))
            .arg(window_us(limit))
            .arg(limit.burst.min(MAX_PARAM))
            .arg(cost)
            .arg(gate_code(charge.gate));
    }
}

/// The window in microseconds (rule windows are whole milliseconds; at least 1 µs).
pub fn window_us(limit: &Limit) -> u64 {
    (limit.window / MICRO).max(1)
}

fn gate_code(gate: Gate) -> u8 {
    match gate {
        Gate::Enforced => 0,
        Gate::Quota => 1,
        Gate::Advisory => 2,
    }
}

/// Why a script reply could not be read.
#[derive(Debug, thiserror::Error)]
#[error("unexpected script reply: {0}")]
pub struct BadReply(pub String);

/// Reads the script's reply: four integers per charge.
pub fn outcomes(reply: &Value, charges: &[&Charge]) -> Result<Vec<Outcome>, BadReply> {
    let Value::Array(items) = reply else {
        return Err(BadReply(format!("expected an array, got {reply:?}")));
    };
    if items.len() != charges.len() * 4 {
        return Err(BadReply(format!(
            "expected {} integers, got {}",
            charges.len() * 4,
            items.len()
        )));
    }
    let int = |v: &Value| match v {
        Value::Int(i) => u64::try_from(*i).map_err(|_| BadReply(format!("negative {i}"))),
        other => Err(BadReply(format!("expected an integer, got {other:?}"))),
    };
    charges
        .iter()
        .zip(items.chunks_exact(4))
        .map(|(charge, f)| {
            let admitted = int(&f[0])? == 1;
            let remaining = int(&f[1])?;
            let verdict = Verdict {
                admitted,
                remaining,
                reset_after: int(&f[2])?.saturating_mul(MICRO),
            };
            // As the memory store reports it (`Outcome::judged`): remaining + cost when admitted.
            let available = if admitted {
                remaining.saturating_add(charge.cost)
            } else {
                int(&f[3])?
            };
            Ok(Outcome { verdict, available })
        })
        .collect()
}
