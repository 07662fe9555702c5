//! Counters whose state does not fit two words (sliding logs; a sliding window past 32-bit
//! counts): their words on the heap, exactly as many as needed, beside the stamp.
//!
//! A sliding log keeps one 16-byte pair per admission instant in a boxed slice of exactly its
//! length (a `VecDeque` would keep up to twice that), so a log costs its table slot plus
//! 16 bytes an entry.

use std::collections::VecDeque;

use super::packed::{Stamp, algorithm_of};
use crate::algorithm::{Algorithm, LogEntry, State};
use crate::clock::Nanos;

/// A spilled counter: its state's words and its stamp (24 bytes in the table).
#[derive(Debug, Default)]
pub(super) struct Spilled {
    /// A log's entries, oldest first; a wide sliding window's `(window_start, previous)` and
    /// `(current, 0)`.
    words: Box<[LogEntry]>,
    /// When the counter goes idle, its algorithm and dirty bit.
    pub(super) stamp: Stamp,
}

impl Spilled {
    /// Spills `state` (any algorithm's; the memory store spills only what does not pack).
    pub(super) fn pack(state: &State, idle_at: Nanos) -> Self {
        let pair = |at, hits| LogEntry { at, hits };
        let words: Box<[LogEntry]> = match state {
            State::Log { entries, .. } => entries.iter().copied().collect(),
            State::Sliding {
                window_start,
                previous,
                current,
            } => Box::new([pair(*window_start, *previous), pair(*current, 0)]),
            State::Fixed {
                window_start,
                count,
            } => Box::new([pair(*window_start, *count)]),
            State::Bucket { tat_scaled } => {
                Box::new([pair(*tat_scaled as u64, (*tat_scaled >> 64) as u64)])
            }
        };
        Self {
            words,
            stamp: Stamp::new(idle_at, algorithm_of(state)),
        }
    }

    /// The state, as the algorithms take it.
    pub(super) fn unpack(&self) -> State {
        let word = |i: usize| {
            self.words
                .get(i)
                .copied()
                .unwrap_or(LogEntry { at: 0, hits: 0 })
        };
        match self.stamp.algorithm() {
            Algorithm::SlidingLog => State::Log {
                entries: VecDeque::from(self.words.to_vec()),
                total: self
                    .words
                    .iter()
                    .fold(0u64, |sum, e| sum.saturating_add(e.hits)),
            },
            Algorithm::SlidingWindow => State::Sliding {
                window_start: word(0).at,
                previous: word(0).hits,
                current: word(1).at,
            },
            Algorithm::FixedWindow => State::Fixed {
                window_start: word(0).at,
                count: word(0).hits,
            },
            Algorithm::TokenBucket => State::Bucket {
                tat_scaled: u128::from(word(0).hits) << 64 | u128::from(word(0).at),
            },
        }
    }

    /// A log's newest admission instant (0 for an empty log or another algorithm).
    pub(super) fn newest(&self) -> Nanos {
        match self.stamp.algorithm() {
            Algorithm::SlidingLog => self.words.last().map_or(0, |e| e.at),
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every state spills and comes back unchanged; a log holds exactly its entries.
    #[test]
    fn spill_round_trips() {
        let states = [
            log(),
            State::Sliding {
                window_start: 60,
                previous: 1 << 40,
                current: 1 << 33,
            },
            State::Fixed {
                window_start: 1,
                count: 2,
            },
            State::Bucket {
                tat_scaled: u128::MAX - 1,
            },
        ];
        for state in states {
            let spilled = Spilled::pack(&state, 1_000);
            assert_eq!(spilled.unpack(), state);
            assert_eq!(spilled.stamp.idle_at(), 1_000);
        }
        let spilled = Spilled::pack(&log(), 0);
        assert_eq!((spilled.words.len(), spilled.newest()), (2, 9));
    }

    fn log() -> State {
        State::Log {
            entries: VecDeque::from([LogEntry { at: 5, hits: 2 }, LogEntry { at: 9, hits: 3 }]),
            total: 5,
        }
    }

    /// The table value is three words: a boxed slice and the stamp.
    #[test]
    fn spilled_is_small() {
        assert_eq!(std::mem::size_of::<Spilled>(), 24);
    }
}
