//! Counters as persistence sees them, and how two saved states of one counter combine.
//!
//! Restore must not depend on the order records are read in (a snapshot is taken while the
//! journal keeps being written), so combining is commutative and idempotent: fixed-window,
//! sliding-window and token-bucket states only ever advance under admitted charges, so the
//! most advanced one holds every hit of the other; sliding-log records carry log entries,
//! and their union (pruned to the window of the newest entry) is the log.

use std::collections::VecDeque;

use super::CounterKey;
use super::Fingerprint;
use crate::algorithm::{LogEntry, State};
use crate::clock::Nanos;

/// How a record names its counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SavedKey {
    /// The counter's fingerprint under the data directory's fingerprint key (this version).
    Fingerprint(Fingerprint),
    /// The counter's key bytes (records written by versions before fingerprints).
    Bytes(CounterKey),
}

/// A counter read from (or written to) disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedCounter {
    /// The counter.
    pub key: SavedKey,
    /// Its state; for a sliding log, possibly only the entries since the previous record.
    pub state: State,
    /// When the counter goes idle if no call arrives.
    pub idle_at: Nanos,
}

/// A held counter lent to persistence without copying it.
#[derive(Debug, Clone, Copy)]
pub struct CounterView<'a> {
    /// The counter's fingerprint.
    pub fingerprint: Fingerprint,
    /// Its state.
    pub state: &'a State,
    /// When the counter goes idle if no call arrives.
    pub idle_at: Nanos,
    /// Sliding log only: the entries before this instant were written already.
    pub log_from: Nanos,
}

/// How far a state has advanced: admitted charges only ever move it forward.
fn progress(state: &State) -> (u128, u64) {
    match *state {
        State::Fixed {
            window_start,
            count,
        } => (u128::from(window_start), count),
        State::Sliding {
            window_start,
            current,
            ..
        } => (u128::from(window_start), current),
        State::Bucket { tat_scaled } => (tat_scaled, 0),
        State::Log { ref entries, total } => {
            (u128::from(entries.back().map_or(0, |e| e.at)), total)
        }
    }
}

/// Combines `incoming` into `held` (both of one counter): afterwards `held` reflects every
/// admitted hit of both. Returns the idle time of the result.
pub fn combine(held: &mut State, held_idle: Nanos, incoming: State, incoming_idle: Nanos) -> Nanos {
    match (&mut *held, incoming) {
        (State::Log { entries, total }, State::Log { entries: more, .. }) => {
            let window = |log: &VecDeque<LogEntry>, idle: Nanos| {
                log.back().map_or(0, |e| idle.saturating_sub(e.at))
            };
            let window = window(entries, held_idle).max(window(&more, incoming_idle));
            *entries = union(std::mem::take(entries), more);
            let newest = entries.back().map_or(0, |e| e.at);
            let live = entries
                .iter()
                .position(|e| u128::from(e.at) + u128::from(window) > u128::from(newest))
                .unwrap_or(entries.len());
            entries.drain(..live);
            *total = entries
                .iter()
                .fold(0u64, |sum, e| sum.saturating_add(e.hits));
            newest.saturating_add(window)
        }
        (_, incoming) => {
            if progress(&incoming) > progress(held) {
                *held = incoming;
                incoming_idle
            } else {
                held_idle
            }
        }
    }
}

/// Two time-ordered logs merged; an instant in both keeps the larger count (a later record
/// of the same entry has seen more hits merged into it).
fn union(a: VecDeque<LogEntry>, b: VecDeque<LogEntry>) -> VecDeque<LogEntry> {
    let mut all: Vec<LogEntry> = a.into_iter().chain(b).collect();
    all.sort_by_key(|e| e.at);
    let mut out: VecDeque<LogEntry> = VecDeque::with_capacity(all.len());
    for e in all {
        match out.back_mut() {
            Some(last) if last.at == e.at => last.hits = last.hits.max(e.hits),
            _ => out.push_back(e),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(entries: &[(Nanos, u64)]) -> State {
        State::Log {
            entries: entries
                .iter()
                .map(|&(at, hits)| LogEntry { at, hits })
                .collect(),
            total: entries.iter().map(|e| e.1).sum(),
        }
    }

    /// The most advanced fixed/sliding/bucket state wins, whichever order the two arrive in.
    #[test]
    fn most_advanced_state_wins_in_any_order() {
        let older = State::Fixed {
            window_start: 60,
            count: 2,
        };
        let newer = State::Fixed {
            window_start: 60,
            count: 5,
        };
        for (a, b) in [
            (older.clone(), newer.clone()),
            (newer.clone(), older.clone()),
        ] {
            let mut held = a;
            let idle = combine(&mut held, 120, b, 120);
            assert_eq!((held, idle), (newer.clone(), 120));
        }
        let mut held = State::Bucket { tat_scaled: 10 };
        assert_eq!(
            combine(&mut held, 1, State::Bucket { tat_scaled: 30 }, 3),
            3
        );
        assert_eq!(held, State::Bucket { tat_scaled: 30 });
    }

    /// Log records combine into the union of their entries, pruned to the newest's window; a
    /// record seen twice changes nothing.
    #[test]
    fn logs_combine_by_union() {
        // window 100: the snapshot had entries at 10 and 50 (3 hits so far at 50); the journal
        // then wrote 50 again (5 hits) and 120.
        let mut held = log(&[(10, 1), (50, 3)]);
        let idle = combine(&mut held, 150, log(&[(50, 5), (120, 1)]), 220);
        assert_eq!((held.clone(), idle), (log(&[(50, 5), (120, 1)]), 220));
        let again = combine(&mut held, idle, log(&[(50, 5), (120, 1)]), 220);
        assert_eq!((held, again), (log(&[(50, 5), (120, 1)]), 220));
    }
}
