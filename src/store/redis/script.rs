//! The one Lua script that applies a call's charges (each counter's algorithm, then the commit),
//! and its argument encoding.
//!
//! Why a script and not MULTI/EXEC or WATCH: a decision reads every counter, runs the
//! algorithm and writes back only if the whole call is admitted. MULTI cannot branch on what
//! it reads; WATCH turns contention on a hot key into retries (more round trips exactly when
//! load is highest). A script runs atomically inside Redis, in one round trip, and reads
//! Redis's own clock (`TIME`), so replicas with skewed clocks cannot over-admit.
//!
//! KEYS and ARGV layout, the stored state of each algorithm and the exact-integer strategy are
//! documented at the top of `apply.lua`. Every key the script touches is passed in KEYS (the
//! script never builds key names), as Redis Cluster requires.

use redis::Value;

use crate::algorithm::{Limit, Recording, UNBOUNDED, Verdict};
use crate::clock::Nanos;
use crate::store::{BadReply, Charge, ChargeOutcome, Gate};

/// The script source.
pub const SOURCE: &str = include_str!("apply.lua");

/// Nanoseconds per microsecond: the script counts in microseconds (Redis `TIME`'s resolution).
pub const MICRO: Nanos = 1_000;

/// The largest limit parameter sent to the script: its exact wide arithmetic takes operands
/// below 2^53, and products of two parameters stay exact. Larger bursts (and costs) behave
/// the same at this size: no real traffic fills 2^48 tokens.
pub const MAX_PARAM: u64 = 1 << 48;

/// The seven ARGV fields of one charge, its key index (1-based, into KEYS) first.
pub type ChargeFields = [u64; 7];

/// The fields of `charge` whose key is KEYS[`key_index`].
pub fn fields(charge: &Charge, key_index: usize) -> ChargeFields {
    let limit = &charge.limit;
    // A cost above the capacity never fits, whatever its size: send capacity + 1. A charge
    // recorded past its limit counts in full, up to the bound no counter passes.
    let bound = if limit.recording.records() {
        UNBOUNDED
    } else {
        limit.capacity()
    };
    let cost = charge.cost.min(bound.min(MAX_PARAM) + 1);
    [
        key_index as u64,
        algorithm_code(limit, limit.algorithm as u64),
        limit.requests.min(MAX_PARAM),
        window_us(limit),
        limit.burst.min(MAX_PARAM),
        cost,
        gate_code(charge.gate) + descriptor_code(charge),
    ]
}

/// Where the gate field carries the charge's descriptor, for a limit that records every
/// charge: `+ DESCRIPTOR_SHIFT * descriptor` (above a lease's extra hits, which stay below 2^21
/// times [`EXTRA_SHIFT`]; a call's at most 64 descriptors keep the field below 2^53).
const DESCRIPTOR_SHIFT: u64 = 1 << 40;

/// The gate field's descriptor part: only a recording limit's charge needs it (a descriptor
/// that crossed one is kept in a refused call), so an ordinary one's field stays as it was.
fn descriptor_code(charge: &Charge) -> u64 {
    if charge.limit.recording.records() {
        DESCRIPTOR_SHIFT * u64::from(charge.descriptor.min(1 << 12))
    } else {
        0
    }
}

/// The script's algorithm code of a fixed window its key names (the four algorithms are 0 to
/// 3): a plain count in a key of that window alone, the window's end given by sluice, never
/// found from Redis's clock. envoyproxy/ratelimit's key layout counts so, and so does every
/// calendar limit (a local day is no multiple of anything since the epoch).
pub const NAMED_WINDOW: u64 = 4;

/// The script's algorithm field: the algorithm's `code` plus 8 times the limit's recording
/// (0 only admitted hits, 1 every charge, 2 every charge with envoyproxy/ratelimit's checks).
fn algorithm_code(limit: &Limit, code: u64) -> u64 {
    let recording = match limit.recording {
        Recording::AdmittedOnly => 0,
        Recording::Always => 1,
        Recording::AlwaysCompat => 2,
    };
    code + 8 * recording
}

/// What the script needs besides the key to count a window the key names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamedWindow {
    /// Microseconds from the call's time to the end of the window the key names.
    pub reset_us: u64,
    /// The expiry `EXPIRE` sets on every hit, in seconds.
    pub ttl_s: u64,
}

/// The fields of `charge` counted in a window its key KEYS[`key_index`] names: the window and
/// burst fields carry the key's expiry (seconds) and the time left in the window
/// (microseconds) instead.
pub fn named_fields(charge: &Charge, key_index: usize, window: &NamedWindow) -> ChargeFields {
    let mut f = fields(charge, key_index);
    f[1] = algorithm_code(&charge.limit, NAMED_WINDOW);
    f[3] = window.ttl_s;
    f[4] = window.reset_us;
    f
}

/// One call's ARGV entry, written over `out`: one binary argument of little-endian 64-bit
/// integers (the script reads it with `struct.unpack`): its time in microseconds (-1 =
/// Redis's clock), its number of charges, then their fields.
pub fn pack_call(
    out: &mut Vec<u8>,
    now_us: Option<u64>,
    charges: impl ExactSizeIterator<Item = ChargeFields>,
) {
    out.clear();
    let now = now_us.map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
    out.extend_from_slice(&now.to_le_bytes());
    out.extend_from_slice(&(charges.len() as u64).to_le_bytes());
    for fields in charges {
        for v in fields {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
}

/// The window in microseconds (rule windows are whole milliseconds; at least 1 µs).
pub fn window_us(limit: &Limit) -> u64 {
    (limit.window / MICRO).max(1)
}

/// Where the gate field carries a lease's extra hits: `gate + EXTRA_SHIFT * extra` (gate codes
/// stay below it: quota-mode groups are bytes).
const EXTRA_SHIFT: u64 = 1 << 16;

/// `fields` asking the script to lease `extra` hits beyond the cost (leased up to what still
/// fits when the charge is admitted and its call committed).
pub fn with_extra(mut fields: ChargeFields, extra: u64) -> ChargeFields {
    fields[6] += EXTRA_SHIFT * extra;
    fields
}

/// The script's gate field: 0 enforced, 1 advisory, 2 + g a charge of quota-mode group g.
fn gate_code(gate: Gate) -> u64 {
    match gate {
        Gate::Enforced => 0,
        Gate::Advisory => 1,
        Gate::QuotaMode(group) => 2 + u64::from(group),
    }
}

/// Bytes of one charge's answer in the script's reply: four little-endian 64-bit integers.
pub const REPLY_BYTES: usize = 32;

/// The script's reply: one binary string (one parse of one bulk string, where an array of
/// integers cost the client a parse per number).
pub fn reply_bytes(reply: &Value) -> Result<&[u8], BadReply> {
    match reply {
        Value::BulkString(bytes) => Ok(bytes),
        other => Err(BadReply::NotBytes(other.clone())),
    }
}

/// One charge's answer from the script: its outcome, and the extra hits it leased.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answered {
    /// The outcome (`remaining` is what Redis has left after the cost and the lease).
    pub outcome: ChargeOutcome,
    /// Extra hits this replica leased (0 without a lease).
    pub leased: u64,
}

/// Reads one call's part of a script reply: [`REPLY_BYTES`] per charge of `costs`.
pub fn outcomes(bytes: &[u8], costs: &[u64]) -> Result<Vec<Answered>, BadReply> {
    if bytes.len() != costs.len() * REPLY_BYTES {
        return Err(BadReply::Length {
            expected: costs.len() * 4,
            got: bytes.len() / 8,
        });
    }
    let int = |b: &[u8]| {
        let i = i64::from_le_bytes(b.try_into().expect("8-byte chunks"));
        u64::try_from(i).map_err(|_| BadReply::Negative(i))
    };
    costs
        .iter()
        .zip(bytes.chunks_exact(REPLY_BYTES))
        .map(|(cost, f)| {
            // 1 + 2 * leased when admitted, 0 when denied.
            let admitted_field = int(&f[..8])?;
            let admitted = admitted_field % 2 == 1;
            let leased = admitted_field / 2;
            let remaining = int(&f[8..16])?;
            let verdict = Verdict {
                admitted,
                remaining,
                reset_after: int(&f[16..24])?.saturating_mul(MICRO),
            };
            // As the memory store reports it (`ChargeOutcome::judged`): remaining + cost when
            // admitted (the leased hits too: they fitted before the call).
            let available = if admitted {
                remaining.saturating_add(leased).saturating_add(*cost)
            } else {
                int(&f[24..32])?
            };
            Ok(Answered {
                outcome: ChargeOutcome { verdict, available },
                leased,
            })
        })
        .collect()
}
