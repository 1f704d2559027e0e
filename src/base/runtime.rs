//! Work that must not hold up the async runtime's other tasks.

use tokio::runtime::{Handle, RuntimeFlavor};

/// Runs `work` (CPU-bound or blocking, up to a few hundred milliseconds) so that the
/// other tasks of the runtime go on meanwhile: on a multi-threaded runtime (`serve`,
/// the CLI) they move to another worker while this one works; a current-thread runtime
/// (tests) has no other worker to hand them to, and waits.
///
/// A task that computes for half a second on a worker of `serve`'s two-worker runtime
/// stops the tasks queued behind it on that worker: the guard's calls among them
/// (docs/PERFORMANCE.md, "A checkpoint that stalled the guard").
pub(crate) fn cpu_bound<T>(work: impl FnOnce() -> T) -> T {
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        _ => work(),
    }
}
