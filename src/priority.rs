//! A lower scheduling priority for the threads whose work must yield to the calls.

/// The niceness of those threads: when the CPU is short, the runtime's workers (RLS and RLQS
/// calls) come first. At 10 such a thread still weighs a tenth of a worker, so it is never
/// starved, and it takes every idle cycle.
const NICENESS: i32 = 10;

/// Lowers the calling thread's priority (Linux: niceness is per thread). `what` names the
/// thread in the debug line logged when the system refuses.
#[cfg(target_os = "linux")]
pub(crate) fn lower_this_thread(what: &str) {
    let thread = Some(rustix::thread::gettid());
    if let Err(error) = rustix::process::setpriority_process(thread, NICENESS) {
        tracing::debug!(%error, "{what} keeps the process's priority");
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn lower_this_thread(_what: &str) {}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #[test]
    fn a_lowered_thread_has_the_niceness() {
        let niceness = std::thread::spawn(|| {
            let before = rustix::process::getpriority_process(None).unwrap();
            super::lower_this_thread("a test thread");
            let thread = Some(rustix::thread::gettid());
            let after = rustix::process::getpriority_process(thread).unwrap();
            (before, after)
        })
        .join()
        .unwrap();
        assert_eq!(niceness.1, (niceness.0 + super::NICENESS).min(19));
    }
}
