//! A runtime for background maintenance (storage compaction) that yields
//! the CPU to foreground work.
//!
//! Compaction after a bulk load can keep every core busy for seconds; on
//! the shared runtime it would stall commits and queries behind it. Here it
//! gets its own threads (one worker, plus the blocking pool its file I/O
//! uses) at a lower scheduling priority, so it runs at full speed when the
//! machine is idle and gives way when foreground work needs the cores.

/// Nice value of background threads: a nice-0 thread outweighs one of
/// these about ten to one when both want the CPU.
const BACKGROUND_NICE: i32 = 10;

/// A dedicated tokio runtime of low-priority threads; shut down without
/// waiting when dropped.
pub struct BackgroundRuntime {
    runtime: Option<tokio::runtime::Runtime>,
    handle: tokio::runtime::Handle,
}

impl BackgroundRuntime {
    /// Starts a runtime with one worker thread named `name`.
    pub fn start(name: &str) -> std::io::Result<BackgroundRuntime> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(name)
            .on_thread_start(lower_thread_priority)
            .enable_all()
            .build()?;
        Ok(BackgroundRuntime {
            handle: runtime.handle().clone(),
            runtime: Some(runtime),
        })
    }

    pub fn handle(&self) -> tokio::runtime::Handle {
        self.handle.clone()
    }
}

impl Drop for BackgroundRuntime {
    fn drop(&mut self) {
        // Dropping a runtime blocks on its tasks, which is refused inside
        // another runtime; background work is abandoned instead (storage
        // treats an unfinished compaction as never started).
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Lowers the calling thread's priority (Linux scheduling priority is per
/// thread). Failure only costs latency, so it is logged, not fatal.
fn lower_thread_priority() {
    let thread = rustix::thread::gettid();
    if let Err(error) = rustix::process::setpriority_process(Some(thread), BACKGROUND_NICE) {
        tracing::debug!(%error, "could not lower a background thread's priority");
    }
}
