//! Transparent huge pages off for the process, unless `MIMALLOC_ALLOW_THP` asks for them.
//!
//! Why: with huge pages a few live objects pin whole 2 MiB pages, so the resident set is
//! larger than what is allocated and moves in 2 MiB steps, which reads as growth on any memory
//! graph. Measured on the soak's load (docs/reliability.md, "The soak"): the server's anonymous
//! memory was 14–17 MiB with them and 5–6 MiB without. Two layers: the allocator is built
//! without its huge-page advice (mimalloc's `no_thp` feature), which is enough where the
//! kernel's THP mode is `madvise`; where it is `always`, [`disable_unless_asked`] turns them
//! off for the process from `main` on.

/// The environment variable with which an operator keeps huge pages on (`1`; mimalloc reads
/// the same variable, and `0` turns them off from the allocator's start).
pub(crate) const OVERRIDE: &str = "MIMALLOC_ALLOW_THP";

/// Turns transparent huge pages off for this process unless `MIMALLOC_ALLOW_THP` is set; returns
/// whether it did. Pages already faulted in stay as they are: call it first thing in `main`.
pub fn disable_unless_asked() -> bool {
    std::env::var_os(OVERRIDE).is_none() && disable()
}

#[cfg(target_os = "linux")]
fn disable() -> bool {
    rustix::thread::disable_transparent_huge_pages(true).is_ok()
}

#[cfg(not(target_os = "linux"))]
fn disable() -> bool {
    false
}
