//! A lower scheduling priority for the threads whose work must yield to the calls, and the
//! pace at which their long loops give the CPU up.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// The niceness of those threads: when the CPU is short, the runtime's workers (RLS and RLQS
/// calls) come first. At 10 such a thread still weighs a tenth of a worker, so it is never
/// starved, and it takes every idle cycle.
const NICENESS: i32 = 10;

/// The longest a lowered thread works before it gives the CPU up. Niceness weighs the CPU
/// between threads over time, but Linux lets a running thread finish its slice (milliseconds)
/// before a woken worker gets its core: a book tick over 100,000 buckets would hold an RLS call
/// that long.
const SLICE: Duration = Duration::from_micros(200);

/// Steps of work between two looks at the clock.
const STEPS: u32 = 64;

thread_local! {
    /// On a lowered thread: when it last gave the CPU up, and its steps since the clock was
    /// read. `None` elsewhere: [`pace`] does nothing.
    static PACE: Cell<Option<(Instant, u32)>> = const { Cell::new(None) };
}

/// Lowers the calling thread's priority (Linux: niceness is per thread) and makes [`pace`]
/// give its CPU up every [`SLICE`]. `what` names the thread in the debug line logged when the
/// system refuses.
pub(crate) fn lower_this_thread(what: &str) {
    PACE.set(Some((Instant::now(), 0)));
    #[cfg(target_os = "linux")]
    {
        let thread = Some(rustix::thread::gettid());
        if let Err(error) = rustix::process::setpriority_process(thread, NICENESS) {
            tracing::debug!(%error, "{what} keeps the process's priority");
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = what;
}

/// One step of a long loop on a lowered thread: past [`SLICE`] since the last, the thread gives
/// the CPU up (`sched_yield`), so a worker woken on its core runs within a slice. Costs a
/// thread-local read per step and a clock read every [`STEPS`]; nothing on other threads.
pub(crate) fn pace() {
    let Some((since, steps)) = PACE.get() else {
        return;
    };
    if steps + 1 < STEPS {
        return PACE.set(Some((since, steps + 1)));
    }
    if since.elapsed() < SLICE {
        return PACE.set(Some((since, 0)));
    }
    std::thread::yield_now();
    PACE.set(Some((Instant::now(), 0)));
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    /// A lowered thread paces its loops; any other does not (its steps are not even counted).
    #[test]
    fn only_a_lowered_thread_paces() {
        std::thread::spawn(|| {
            super::pace();
            assert_eq!(super::PACE.get(), None);
            super::lower_this_thread("a test thread");
            for _ in 0..super::STEPS - 1 {
                super::pace();
            }
            assert_eq!(super::PACE.get().map(|p| p.1), Some(super::STEPS - 1));
            std::thread::sleep(super::SLICE);
            let before = super::PACE.get().unwrap().0;
            super::pace();
            let after = super::PACE.get().unwrap();
            assert!(
                after.0 > before && after.1 == 0,
                "it gave the CPU up and counts afresh"
            );
        })
        .join()
        .unwrap();
    }

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
