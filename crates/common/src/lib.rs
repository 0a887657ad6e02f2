//! The `Runtime` seam: the only way RockStream reaches the clock, randomness,
//! task spawning, sleeping and the object store (ARCHITECTURE principle 8).
//!
//! Everything else in the workspace is forbidden (by clippy's
//! `disallowed-methods`, see `clippy.toml`) from calling `SystemTime::now`,
//! `tokio::spawn` or `tokio::time::sleep` directly, so a deterministic
//! simulator can later replace this one module.
#![allow(clippy::disallowed_methods)]

mod background;
mod local_store;
mod object_store_url;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use background::BackgroundRuntime;
pub use local_store::{disk_full_root, is_disk_full, DiskFull};
pub use object_store_url::{commit_log_root, object_store_for};

/// Source of wall-clock time.
pub trait Clock: Send + Sync {
    /// Microseconds since 1970-01-01 UTC.
    fn now_micros(&self) -> i64;
}

/// The operating system's clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_micros(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|elapsed| elapsed.as_micros() as i64)
            .unwrap_or(0)
    }
}

/// How long engine work may wait before [`Runtime::watched`] logs that it still waits.
pub const SLOW_WORK_WARNING: Duration = Duration::from_secs(10);

/// Handle through which the engine reaches time, tasks and randomness.
#[derive(Clone)]
pub struct Runtime {
    clock: Arc<dyn Clock>,
    random_state: Arc<AtomicU64>,
}

impl Runtime {
    /// The production runtime: system clock, tokio tasks, seeded from time.
    pub fn system() -> Runtime {
        let seed = SystemClock.now_micros() as u64 ^ (std::process::id() as u64).rotate_left(32);
        Runtime {
            clock: Arc::new(SystemClock),
            random_state: Arc::new(AtomicU64::new(seed)),
        }
    }

    /// A runtime with a given clock and random seed (tests, simulation).
    pub fn with_clock(clock: Arc<dyn Clock>, seed: u64) -> Runtime {
        Runtime {
            clock,
            random_state: Arc::new(AtomicU64::new(seed)),
        }
    }

    pub fn now_micros(&self) -> i64 {
        self.clock.now_micros()
    }

    /// Runs a task in the background.
    pub fn spawn<F>(&self, future: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        tokio::spawn(future)
    }

    pub async fn sleep(&self, duration: Duration) {
        tokio::time::sleep(duration).await
    }

    /// Awaits `future`, logging a warning naming it (`what()`, called only then) each
    /// [`SLOW_WORK_WARNING`] it has not finished: engine work that stops making progress then
    /// says in the log where it waits, rather than leaving a silent server.
    pub async fn watched<F: Future, D: std::fmt::Display>(
        &self,
        what: impl Fn() -> D,
        future: F,
    ) -> F::Output {
        let mut future = std::pin::pin!(future);
        let mut waited = Duration::ZERO;
        loop {
            tokio::select! {
                output = &mut future => return output,
                () = tokio::time::sleep(SLOW_WORK_WARNING) => {
                    waited += SLOW_WORK_WARNING;
                    tracing::warn!(waited_secs = waited.as_secs(), "{} has not finished", what());
                }
            }
        }
    }

    /// A pseudo-random 64-bit value (SplitMix64 over the seed).
    pub fn random_u64(&self) -> u64 {
        let mut z = self
            .random_state
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn random_u128(&self) -> u128 {
        ((self.random_u64() as u128) << 64) | self.random_u64() as u128
    }
}
