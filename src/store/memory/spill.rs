//! Counters whose state does not fit two words (sliding logs; a sliding window past 32-bit
//! counts): their words on the heap, exactly as many as needed, beside the stamp.
//!
//! The words are 32-bit, so a sliding log costs its table slot plus 12 bytes an admission
//! instant (its 64-bit instant and a 32-bit hit count: a count never exceeds a 32-bit limit),
//! in a boxed slice of exactly its length: a `VecDeque` of 16-byte pairs would keep 16 bytes
//! an entry and up to twice the entries.

use std::collections::VecDeque;

use super::packed::{Stamp, algorithm_of};
use crate::algorithm::{Algorithm, LogEntry, State};
use crate::clock::Nanos;

/// 32-bit words a log entry takes: its instant's low and high halves, then its hits.
const ENTRY_WORDS: usize = 3;

/// A spilled counter: its state's words and its stamp (24 bytes in the table).
#[derive(Debug, Default)]
pub(super) struct Spilled {
    /// A log's entries, oldest first, three words each (a count clamped to `u32::MAX`, see
    /// [`push_entry`]); a wide sliding window's `window_start`, `previous` and `current`, a
    /// fixed window's `window_start` and `count`, a bucket's `tat_scaled`: two words a `u64`.
    words: Box<[u32]>,
    /// When the counter goes idle, its algorithm and dirty bit.
    pub(super) stamp: Stamp,
}

impl Spilled {
    /// Spills `state` (any algorithm's; the memory store spills only what does not pack).
    pub(super) fn pack(state: &State, idle_at: Nanos) -> Self {
        let words = match state {
            State::Log { entries, .. } => {
                let mut words = Vec::with_capacity(entries.len() * ENTRY_WORDS);
                for e in entries {
                    push_entry(&mut words, e);
                }
                words
            }
            State::Sliding {
                window_start,
                previous,
                current,
            } => halves(&[*window_start, *previous, *current]),
            State::Fixed {
                window_start,
                count,
            } => halves(&[*window_start, *count]),
            State::Bucket { tat_scaled } => {
                halves(&[*tat_scaled as u64, (*tat_scaled >> 64) as u64])
            }
        };
        Self {
            words: words.into_boxed_slice(),
            stamp: Stamp::new(idle_at, algorithm_of(state)),
        }
    }

    /// The state, as the algorithms take it.
    pub(super) fn unpack(&self) -> State {
        let word = |i: usize| u64_at(&self.words, i);
        match self.stamp.algorithm() {
            Algorithm::SlidingLog => {
                let entries: VecDeque<LogEntry> =
                    self.words.chunks_exact(ENTRY_WORDS).map(entry_of).collect();
                let total = entries
                    .iter()
                    .fold(0u64, |sum, e| sum.saturating_add(e.hits));
                State::Log { entries, total }
            }
            Algorithm::SlidingWindow => State::Sliding {
                window_start: word(0),
                previous: word(2),
                current: word(4),
            },
            Algorithm::FixedWindow => State::Fixed {
                window_start: word(0),
                count: word(2),
            },
            Algorithm::TokenBucket => State::Bucket {
                tat_scaled: u128::from(word(2)) << 64 | u128::from(word(0)),
            },
        }
    }

    /// A log's newest admission instant (0 for an empty log or another algorithm).
    pub(super) fn newest(&self) -> Nanos {
        match self.stamp.algorithm() {
            Algorithm::SlidingLog => self
                .words
                .len()
                .checked_sub(ENTRY_WORDS)
                .map_or(0, |last| u64_at(&self.words, last)),
            _ => 0,
        }
    }
}

/// `values` as words, two each, in one allocation of exactly their length.
fn halves(values: &[u64]) -> Vec<u32> {
    let mut words = Vec::with_capacity(values.len() * 2);
    for &v in values {
        push_u64(&mut words, v);
    }
    words
}

/// Appends `v` as two words, low half first.
fn push_u64(words: &mut Vec<u32>, v: u64) {
    words.push(v as u32);
    words.push((v >> 32) as u32);
}

/// The 64-bit value whose low half is at `i` (0 past the end).
fn u64_at(words: &[u32], i: usize) -> u64 {
    let half = |i: usize| u64::from(words.get(i).copied().unwrap_or(0));
    half(i) | half(i + 1) << 32
}

/// Appends a log entry. Its count is at most the limit's requests, which are 32-bit (a rule's
/// `requests_per_unit`, a client's override), so only a corrupt or hostile restored state holds
/// more: it is clamped to `u32::MAX`, still at least any limit, so the log stays full until that
/// instant leaves the window and every verdict and retry hint is the same. Splitting such a count
/// over entries instead would let one restored entry claim gigabytes.
fn push_entry(words: &mut Vec<u32>, e: &LogEntry) {
    push_u64(words, e.at);
    words.push(u32::try_from(e.hits).unwrap_or(u32::MAX));
}

/// The log entry held in three words.
fn entry_of(words: &[u32]) -> LogEntry {
    LogEntry {
        at: u64_at(words, 0),
        hits: u64::from(words[2]),
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
        assert_eq!((spilled.words.len(), spilled.newest()), (6, 9));
    }

    /// A count past 32 bits (only a hostile restored state holds one) is clamped, not split:
    /// one entry, whatever its count; a log entry costs 12 bytes.
    #[test]
    fn a_wide_count_is_clamped_to_one_entry() {
        let state = State::Log {
            entries: VecDeque::from([
                LogEntry { at: 3, hits: 1 },
                LogEntry {
                    at: u64::MAX - 1,
                    hits: u64::MAX,
                },
            ]),
            total: u64::MAX,
        };
        let spilled = Spilled::pack(&state, 0);
        assert_eq!(spilled.words.len(), 2 * ENTRY_WORDS);
        let State::Log { entries, total } = spilled.unpack() else {
            panic!("not a log");
        };
        assert_eq!(entries[1].hits, u64::from(u32::MAX));
        assert_eq!(total, u64::from(u32::MAX) + 1);
        assert_eq!(spilled.newest(), u64::MAX - 1);
        let ten = State::Log {
            entries: (1..=10).map(|at| LogEntry { at, hits: 1 }).collect(),
            total: 10,
        };
        assert_eq!(std::mem::size_of_val(&*Spilled::pack(&ten, 0).words), 120);
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
