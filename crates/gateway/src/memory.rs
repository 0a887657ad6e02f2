//! Memory for running statements: each statement's working memory is
//! bounded, and so is all statements' together.
//!
//! A statement's working memory is what DataFusion's operators reserve
//! (sorts, hash joins and aggregates, repartitions) and the rows a query
//! or a DML statement collects ([`crate::statement_limits::Stop::collect`]).
//! Each statement gets a [`StatementPool`] over the server's one
//! [`GreedyMemoryPool`]: a reservation must fit both the statement's bound
//! and what the server has left. A sort that does not fit spills to
//! temporary files (DataFusion's disk manager); anything else that does not
//! fit fails the statement with 53200 (`RS-2046`), as PostgreSQL's "out of
//! memory", and the statement changes nothing.
//!
//! Not counted: the memory SQL text takes while it is parsed, a COPY's
//! buffered data, a transaction's pending rows and the encoded reply.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use datafusion::error::{DataFusionError, Result as DataFusionResult};
use datafusion::execution::memory_pool::{
    GreedyMemoryPool, MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation,
};
use datafusion::execution::runtime_env::RuntimeEnv;
use rockstream_types::{codes, RsError};

/// Default bound on one statement's working memory.
pub const STATEMENT_MEMORY_DEFAULT: usize = 1 << 30;
/// Default bound on all running statements' working memory together.
pub const TOTAL_STATEMENT_MEMORY_DEFAULT: usize = 4 << 30;

/// The bounds on statements' working memory, in bytes.
#[derive(Debug, Clone, Copy)]
pub struct MemoryLimits {
    /// Each statement's.
    pub statement_bytes: usize,
    /// All running statements' together.
    pub total_bytes: usize,
}

impl Default for MemoryLimits {
    fn default() -> Self {
        MemoryLimits {
            statement_bytes: STATEMENT_MEMORY_DEFAULT,
            total_bytes: TOTAL_STATEMENT_MEMORY_DEFAULT,
        }
    }
}

/// The server's statement memory: one pool shared by every statement.
pub(crate) struct StatementMemory {
    limits: MemoryLimits,
    /// The runtime every statement's is made from: its pool is the total.
    base: Arc<RuntimeEnv>,
}

impl StatementMemory {
    pub fn new(limits: MemoryLimits) -> StatementMemory {
        let base = RuntimeEnv {
            memory_pool: Arc::new(GreedyMemoryPool::new(limits.total_bytes)),
            ..RuntimeEnv::default()
        };
        StatementMemory {
            limits,
            base: Arc::new(base),
        }
    }

    /// A runtime for one statement: its own bound, within the total.
    pub fn statement_runtime(&self) -> Arc<RuntimeEnv> {
        let pool = StatementPool {
            limit: self.limits.statement_bytes,
            used: AtomicUsize::new(0),
            total: self.base.memory_pool.clone(),
        };
        Arc::new(RuntimeEnv {
            memory_pool: Arc::new(pool),
            disk_manager: self.base.disk_manager.clone(),
            cache_manager: self.base.cache_manager.clone(),
            object_store_registry: self.base.object_store_registry.clone(),
        })
    }

    /// What every statement has reserved now, in bytes.
    pub fn reserved(&self) -> usize {
        self.base.memory_pool.reserved()
    }

    pub fn limits(&self) -> MemoryLimits {
        self.limits
    }
}

/// One statement's share of the server's pool (see the module docs).
#[derive(Debug)]
struct StatementPool {
    limit: usize,
    used: AtomicUsize,
    total: Arc<dyn MemoryPool>,
}

impl fmt::Display for StatementPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "statement memory ({} bytes)", self.limit)
    }
}

impl MemoryPool for StatementPool {
    fn name(&self) -> &str {
        "statement"
    }

    fn register(&self, consumer: &MemoryConsumer) {
        self.total.register(consumer);
    }

    fn unregister(&self, consumer: &MemoryConsumer) {
        self.total.unregister(consumer);
    }

    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        self.used.fetch_add(additional, Ordering::Relaxed);
        self.total.grow(reservation, additional);
    }

    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        self.used.fetch_sub(shrink, Ordering::Relaxed);
        self.total.shrink(reservation, shrink);
    }

    fn try_grow(&self, reservation: &MemoryReservation, additional: usize) -> DataFusionResult<()> {
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                let grown = used.checked_add(additional)?;
                (grown <= self.limit).then_some(grown)
            })
            .map_err(|_| {
                DataFusionError::ResourcesExhausted(format!(
                    "the statement needs more than its memory limit of {} (--statement-memory)",
                    size_text(self.limit)
                ))
            })?;
        if let Err(error) = self.total.try_grow(reservation, additional) {
            self.used.fetch_sub(additional, Ordering::Relaxed);
            tracing::debug!(%error, "the statements' total memory is taken");
            return Err(DataFusionError::ResourcesExhausted(format!(
                "the running statements together need more than their memory limit of {} (--total-statement-memory)",
                size_text(limit_bytes(self.total.as_ref()))
            )));
        }
        Ok(())
    }

    fn reserved(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    fn memory_limit(&self) -> MemoryLimit {
        MemoryLimit::Finite(self.limit)
    }
}

/// A pool's bound in bytes (0 if it has none).
fn limit_bytes(pool: &dyn MemoryPool) -> usize {
    match pool.memory_limit() {
        MemoryLimit::Finite(bytes) => bytes,
        MemoryLimit::Infinite | MemoryLimit::Unknown => 0,
    }
}

/// `bytes` as PostgreSQL prints a memory setting (`1GB`, `64MB`, `512kB`).
pub(crate) fn size_text(bytes: usize) -> String {
    const UNITS: [(usize, &str); 3] = [(1 << 30, "GB"), (1 << 20, "MB"), (1 << 10, "kB")];
    for (unit, name) in UNITS {
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{}{name}", bytes / unit);
        }
    }
    format!("{bytes} bytes")
}

/// A statement that ran out of memory, as a coded error; `None` for any
/// other error.
pub(crate) fn out_of_memory(error: &DataFusionError) -> Option<RsError> {
    match error.find_root() {
        DataFusionError::ResourcesExhausted(message) => Some(RsError::new(
            &codes::OUT_OF_MEMORY,
            format!("out of memory: {message}"),
        )),
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests may unwrap: a panic is the failure report.
mod tests {
    //! Goal: a statement's reservations fit its own bound and the server's
    //! total; what one statement frees, another can take.
    use super::*;

    fn limits(statement_bytes: usize, total_bytes: usize) -> MemoryLimits {
        MemoryLimits {
            statement_bytes,
            total_bytes,
        }
    }

    #[test]
    fn a_statement_is_bounded_by_its_limit_and_by_the_total() {
        let memory = StatementMemory::new(limits(1000, 1500));
        let first = memory.statement_runtime();
        let second = memory.statement_runtime();
        let a = MemoryConsumer::new("a").register(&first.memory_pool);
        let b = MemoryConsumer::new("b").register(&second.memory_pool);
        a.try_grow(800).unwrap();
        let error = a.try_grow(300).unwrap_err();
        assert!(error.to_string().contains("--statement-memory"), "{error}");
        assert_eq!(a.size(), 800);
        let error = b.try_grow(800).unwrap_err();
        assert!(
            error.to_string().contains("--total-statement-memory"),
            "{error}"
        );
        assert_eq!(memory.reserved(), 800);
        assert_eq!(second.memory_pool.reserved(), 0);
        b.try_grow(700).unwrap();
        assert_eq!(memory.reserved(), 1500);
        drop(a);
        b.try_grow(300).unwrap();
        assert_eq!(memory.reserved(), 1000);
        let coded =
            out_of_memory(&DataFusionError::Context("sorting".into(), Box::new(error))).unwrap();
        assert_eq!(coded.code.sqlstate, "53200");
    }

    #[test]
    fn sizes_print_as_postgresql_prints_them() {
        assert_eq!(size_text(1 << 30), "1GB");
        assert_eq!(size_text(64 << 20), "64MB");
        assert_eq!(size_text(512 << 10), "512kB");
        assert_eq!(size_text(1000), "1000 bytes");
    }
}
