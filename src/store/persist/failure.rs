//! When the data directory cannot be written (a full disk, an I/O error): what is owed to it,
//! when to try again, and a log that says so without flooding.
//!
//! A failed journal write loses the records of that flush from the files, not from memory.
//! From then on the files miss changes that only a snapshot of every counter can restore, so
//! the journal stops (its records alone would be incomplete) and a snapshot is tried every
//! [`RETRY_EVERY`] until one is written: then persistence has caught up by itself, with
//! nothing lost that memory still holds.

use std::time::Duration;

use parking_lot::Mutex;

use crate::clock::Nanos;

/// How often a snapshot is retried while the data directory cannot be written.
pub const RETRY_EVERY: Duration = Duration::from_secs(1);
/// At most one warning per this long while writes keep failing.
pub const LOG_EVERY: Duration = Duration::from_secs(30);

/// The persistence failure state; all of it under one lock (touched once per flush).
#[derive(Debug, Default)]
pub struct Failure {
    state: Mutex<FailureState>,
}

#[derive(Debug, Default)]
struct FailureState {
    /// The files miss changes: only a snapshot brings them up to date.
    behind: bool,
    /// When the last snapshot was tried while behind.
    last_try: Option<Nanos>,
    /// When the last warning was logged, and failures since.
    last_log: Option<Nanos>,
    unlogged: u64,
    /// Failures since the files were last up to date.
    failures: u64,
}

impl Failure {
    /// Whether the files miss changes (journal writes are pointless until a snapshot).
    pub fn behind(&self) -> bool {
        self.state.lock().behind
    }

    /// Records a failed write or snapshot at `now` that leaves the files missing changes;
    /// logs it unless a warning went out less than [`LOG_EVERY`] ago.
    pub fn failed(&self, now: Nanos, what: &str, error: &std::io::Error) {
        self.report(now, what, error, true);
    }

    /// Records a failed snapshot whose changes the journal still holds (nothing is missing);
    /// logged as [`Failure::failed`] is.
    pub fn snapshot_failed(&self, now: Nanos, error: &std::io::Error) {
        self.report(now, "snapshot", error, false);
    }

    fn report(&self, now: Nanos, what: &str, error: &std::io::Error, behind: bool) {
        let mut state = self.state.lock();
        state.behind |= behind;
        state.failures += 1;
        state.unlogged += 1;
        let due = state
            .last_log
            .is_none_or(|at| now.saturating_sub(at) >= LOG_EVERY.as_nanos() as Nanos);
        if due && state.behind {
            tracing::warn!(
                error = %error,
                failures = state.unlogged,
                "{what} failed; counting goes on in memory, and a snapshot of every counter is \
                 retried every {RETRY_EVERY:?} until the data directory can be written again"
            );
        } else if due {
            tracing::warn!(error = %error, failures = state.unlogged, "{what} failed; the journal keeps every change");
        }
        if due {
            state.last_log = Some(now);
            state.unlogged = 0;
        }
    }

    /// Whether a catch-up snapshot should be tried at `now` (behind, and the last try was at
    /// least [`RETRY_EVERY`] ago); if so, the try is recorded.
    pub fn retry_due(&self, now: Nanos) -> bool {
        let mut state = self.state.lock();
        let due = state.behind
            && state
                .last_try
                .is_none_or(|at| now.saturating_sub(at) >= RETRY_EVERY.as_nanos() as Nanos);
        if due {
            state.last_try = Some(now);
        }
        due
    }

    /// A new journal is open and a snapshot is about to be taken: changes from now on go to
    /// the journal again.
    pub fn journal_resumed(&self) {
        self.state.lock().behind = false;
    }

    /// A snapshot was written: the files hold every counter. Logs the recovery once.
    pub fn caught_up(&self) {
        let mut state = self.state.lock();
        if state.failures > 0 && !state.behind {
            tracing::info!(
                failures = state.failures,
                "the data directory is writable again: a snapshot holds every counter"
            );
            *state = FailureState::default();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SECOND;

    /// A failure puts the files behind; retries are spaced; a new journal resumes and a
    /// snapshot clears everything.
    #[test]
    fn failure_retry_and_recovery() {
        let failure = Failure::default();
        assert!(!failure.behind() && !failure.retry_due(0));
        let error = std::io::Error::from(std::io::ErrorKind::StorageFull);
        failure.failed(10 * SECOND, "journal write", &error);
        assert!(failure.behind());
        assert!(failure.retry_due(10 * SECOND));
        assert!(!failure.retry_due(10 * SECOND + SECOND / 2));
        assert!(failure.retry_due(11 * SECOND));
        failure.journal_resumed();
        assert!(!failure.behind());
        failure.caught_up();
        assert_eq!(failure.state.lock().failures, 0);
    }

    /// A snapshot that finishes while a newer failure put the files behind again does not
    /// clear that failure.
    #[test]
    fn a_newer_failure_survives_an_older_snapshot() {
        let failure = Failure::default();
        let error = std::io::Error::from(std::io::ErrorKind::StorageFull);
        failure.failed(SECOND, "journal write", &error);
        failure.journal_resumed();
        failure.failed(2 * SECOND, "journal write", &error);
        failure.caught_up();
        assert!(failure.behind());
    }
}
