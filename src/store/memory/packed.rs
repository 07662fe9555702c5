//! A counter packed into 24 bytes: two words of algorithm state and a stamp saying when the
//! counter goes idle, which algorithm it counts with, and whether the journal has seen it.

use crate::algorithm::{Algorithm, State};
use crate::clock::Nanos;

/// Bit set while the counter has changed since the journal last wrote it.
const DIRTY: u64 = 1 << 63;
/// Where the algorithm's two bits start.
const ALGORITHM_SHIFT: u32 = 61;
/// The bits that hold the idle time, in microseconds.
const IDLE_MASK: u64 = (1 << ALGORITHM_SHIFT) - 1;
/// Nanoseconds per stored idle-time unit.
const MICRO: u64 = 1_000;

/// When a counter goes idle (in whole microseconds, rounded up so a counter is never reclaimed
/// early), its algorithm, and its dirty bit, in one word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Stamp(u64);

impl Stamp {
    /// A clean stamp. `u64::MAX` ns is 1.8e16 µs, well inside the 61 bits.
    pub(super) fn new(idle_at: Nanos, algorithm: Algorithm) -> Self {
        let micros = idle_at.div_ceil(MICRO) & IDLE_MASK;
        Self(micros | (algorithm as u64) << ALGORITHM_SHIFT)
    }

    /// The instant the counter is equivalent to one never seen.
    pub(super) fn idle_at(self) -> Nanos {
        (self.0 & IDLE_MASK).saturating_mul(MICRO)
    }

    /// Whether the counter is idle at `now`.
    pub(super) fn is_idle(self, now: Nanos) -> bool {
        self.idle_at() <= now
    }

    /// The counter's algorithm.
    pub(super) fn algorithm(self) -> Algorithm {
        match (self.0 >> ALGORITHM_SHIFT) & 0b11 {
            0 => Algorithm::FixedWindow,
            1 => Algorithm::SlidingWindow,
            2 => Algorithm::SlidingLog,
            _ => Algorithm::TokenBucket,
        }
    }

    /// Whether the counter changed since the journal last wrote it.
    pub(super) fn is_dirty(self) -> bool {
        self.0 & DIRTY != 0
    }

    /// Marks (or clears) the counter as changed since the journal last wrote it.
    pub(super) fn set_dirty(&mut self, dirty: bool) {
        if dirty {
            self.0 |= DIRTY;
        } else {
            self.0 &= !DIRTY;
        }
    }
}

/// The algorithm a state belongs to.
pub(super) fn algorithm_of(state: &State) -> Algorithm {
    match state {
        State::Fixed { .. } => Algorithm::FixedWindow,
        State::Sliding { .. } => Algorithm::SlidingWindow,
        State::Log { .. } => Algorithm::SlidingLog,
        State::Bucket { .. } => Algorithm::TokenBucket,
    }
}

/// A fixed-window, sliding-window or token-bucket state in two words, plus its stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Packed {
    words: [u64; 2],
    /// When the counter goes idle, its algorithm and dirty bit.
    pub(super) stamp: Stamp,
}

impl Packed {
    /// Packs `state`, or `None` when it does not fit two words: a sliding log, or a sliding
    /// window whose counts exceed 32 bits (no limit a rule file can write gets there).
    pub(super) fn pack(state: &State, idle_at: Nanos) -> Option<Self> {
        let words = match *state {
            State::Fixed {
                window_start,
                count,
            } => [window_start, count],
            State::Sliding {
                window_start,
                previous,
                current,
            } => {
                let (previous, current) =
                    (u32::try_from(previous).ok()?, u32::try_from(current).ok()?);
                [window_start, u64::from(previous) << 32 | u64::from(current)]
            }
            State::Bucket { tat_scaled } => [tat_scaled as u64, (tat_scaled >> 64) as u64],
            State::Log { .. } => return None,
        };
        let stamp = Stamp::new(idle_at, algorithm_of(state));
        Some(Self { words, stamp })
    }

    /// The state, as the algorithms take it.
    pub(super) fn unpack(&self) -> State {
        let [a, b] = self.words;
        match self.stamp.algorithm() {
            Algorithm::FixedWindow => State::Fixed {
                window_start: a,
                count: b,
            },
            Algorithm::SlidingWindow => State::Sliding {
                window_start: a,
                previous: b >> 32,
                current: b & u64::from(u32::MAX),
            },
            // Never packed (see `pack`); kept total so a bad bit pattern cannot panic.
            Algorithm::SlidingLog => State::Log {
                entries: Default::default(),
                total: 0,
            },
            Algorithm::TokenBucket => State::Bucket {
                tat_scaled: u128::from(b) << 64 | u128::from(a),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every packable state comes back unchanged, with its idle time rounded up to a microsecond.
    #[test]
    fn pack_round_trips() {
        let states = [
            State::Fixed {
                window_start: 60,
                count: u64::MAX,
            },
            State::Sliding {
                window_start: 7,
                previous: u64::from(u32::MAX),
                current: 3,
            },
            State::Bucket {
                tat_scaled: u128::MAX - 5,
            },
        ];
        for state in states {
            let packed = Packed::pack(&state, 1_500).expect("packs");
            assert_eq!(packed.unpack(), state);
            assert_eq!(packed.stamp.idle_at(), 2_000);
            assert!(!packed.stamp.is_idle(1_999) && packed.stamp.is_idle(2_000));
        }
        let wide = State::Sliding {
            window_start: 0,
            previous: 1 << 32,
            current: 0,
        };
        assert!(Packed::pack(&wide, 0).is_none());
    }

    /// The dirty bit and the algorithm bits never disturb the idle time, even at the extremes.
    #[test]
    fn stamp_bits_are_independent() {
        for algorithm in Algorithm::ALL {
            let mut stamp = Stamp::new(u64::MAX, algorithm);
            stamp.set_dirty(true);
            assert!(stamp.is_dirty() && stamp.algorithm() == algorithm);
            assert_eq!(stamp.idle_at(), u64::MAX);
            stamp.set_dirty(false);
            assert!(!stamp.is_dirty() && stamp.algorithm() == algorithm);
        }
    }

    /// A packed counter and its fingerprint fit the memory budget: 40 bytes a table slot.
    #[test]
    fn packed_is_small() {
        assert_eq!(std::mem::size_of::<Packed>(), 24);
        assert_eq!(
            std::mem::size_of::<(crate::store::Fingerprint, Packed)>(),
            40
        );
    }
}
