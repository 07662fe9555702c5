//! The HTTP listeners' own runtime, on one thread at a lower priority: a page polled back to
//! back, a scrape or a burst of slow clients takes at most that thread's share of the CPU, never
//! the runtime's workers that answer gRPC calls.

use std::io;

use tokio::runtime::Handle;
use tokio_util::task::TaskTracker;

/// Starts the side runtime, whose thread runs until every task on `tasks` has ended (`tasks`
/// must be closed once everything is spawned), and returns where to spawn on it.
pub(super) fn start(tasks: TaskTracker) -> io::Result<Handle> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let handle = runtime.handle().clone();
    std::thread::Builder::new()
        .name("sluice-http".into())
        .spawn(move || {
            crate::priority::lower_this_thread("the HTTP listeners' thread");
            runtime.block_on(tasks.wait());
        })?;
    Ok(handle)
}
