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
//! SQL text is counted too, before it is parsed: its tokens and syntax
//! trees take hundreds of times its size ([`StatementMemory::reserve_text`]).
//!
//! A transaction's changes are counted too, from the statement that makes
//! them until the commit that makes them durable returns
//! ([`StatementMemory::transaction_reservation`], [`change_bytes`]): each
//! transaction within its own bound (`--transaction-memory`, 54000 beyond
//! it) and all of them within the same total as the statements.
//!
//! Not counted: the COPY data a connection holds unparsed (a part of about
//! 256 KiB, or one longer row up to 1 GiB) and the encoded reply.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use datafusion::error::{DataFusionError, Result as DataFusionResult};
use datafusion::execution::memory_pool::{
    GreedyMemoryPool, MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation,
};
use datafusion::execution::runtime_env::RuntimeEnv;
use rockstream_types::{codes, Datum, Row, RsError, RsResult};

/// Default bound on one statement's working memory.
pub const STATEMENT_MEMORY_DEFAULT: usize = 1 << 30;
/// Default bound on one transaction's changes.
pub const TRANSACTION_MEMORY_DEFAULT: usize = 2 << 30;
/// Default bound on all running statements' working memory and all open
/// transactions' changes together.
pub const TOTAL_STATEMENT_MEMORY_DEFAULT: usize = 4 << 30;

/// The bounds on statements' working memory, in bytes.
#[derive(Debug, Clone, Copy)]
pub struct MemoryLimits {
    /// Each statement's.
    pub statement_bytes: usize,
    /// Each transaction's changes.
    pub transaction_bytes: usize,
    /// All running statements' and open transactions' together.
    pub total_bytes: usize,
}

impl Default for MemoryLimits {
    fn default() -> Self {
        MemoryLimits {
            statement_bytes: STATEMENT_MEMORY_DEFAULT,
            transaction_bytes: TRANSACTION_MEMORY_DEFAULT,
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
        Arc::new(RuntimeEnv {
            memory_pool: self.statement_pool(),
            disk_manager: self.base.disk_manager.clone(),
            cache_manager: self.base.cache_manager.clone(),
            object_store_registry: self.base.object_store_registry.clone(),
        })
    }

    /// One statement's pool: its own bound, within the total.
    fn statement_pool(&self) -> Arc<dyn MemoryPool> {
        Arc::new(StatementPool {
            limit: self.limits.statement_bytes,
            used: AtomicUsize::new(0),
            total: self.base.memory_pool.clone(),
            user: User::Statement,
        })
    }

    /// What one transaction's changes reserve as it makes them: its own
    /// bound, within the total; freed when the reservation is dropped
    /// (the transaction ends: rolled back, or its commit returned).
    pub fn transaction_reservation(&self) -> MemoryReservation {
        let pool: Arc<dyn MemoryPool> = Arc::new(StatementPool {
            limit: self.limits.transaction_bytes,
            used: AtomicUsize::new(0),
            total: self.base.memory_pool.clone(),
            user: User::Transaction,
        });
        MemoryConsumer::new("transaction changes").register(&pool)
    }

    /// Reserves what parsing `sql` and keeping its syntax trees take (see
    /// [`parsed_bytes`]), for as long as the reservation lives: SQL text
    /// of a few megabytes parses into gigabytes, so text beyond the
    /// statement's bound is refused (53200) before it is parsed.
    pub fn reserve_text(&self, sql: &str) -> RsResult<MemoryReservation> {
        // Every statement passes here: a pool alone, not a whole runtime.
        let reservation = MemoryConsumer::new("statement text").register(&self.statement_pool());
        let needed = parsed_bytes(sql);
        match reservation.try_grow(needed) {
            Ok(()) => Ok(reservation),
            Err(error) => {
                let reason = out_of_memory(&error).map_or_else(String::new, |coded| coded.message);
                Err(RsError::new(
                    &codes::OUT_OF_MEMORY,
                    format!(
                        "{reason}: parsing {} of SQL text takes about {}; load large data with COPY",
                        size_text(sql.len()),
                        size_text(needed)
                    ),
                ))
            }
        }
    }

    /// What every statement has reserved now, in bytes.
    pub fn reserved(&self) -> usize {
        self.base.memory_pool.reserved()
    }

    pub fn limits(&self) -> MemoryLimits {
        self.limits
    }
}

/// One statement's or transaction's share of the server's pool (see the
/// module docs).
#[derive(Debug)]
struct StatementPool {
    limit: usize,
    used: AtomicUsize,
    total: Arc<dyn MemoryPool>,
    user: User,
}

/// Whose a [`StatementPool`] is: what its errors name.
#[derive(Debug, Clone, Copy)]
enum User {
    Statement,
    Transaction,
}

impl fmt::Display for StatementPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} memory ({} bytes)", self.name(), self.limit)
    }
}

impl MemoryPool for StatementPool {
    fn name(&self) -> &str {
        match self.user {
            User::Statement => "statement",
            User::Transaction => "transaction",
        }
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
                DataFusionError::ResourcesExhausted(match self.user {
                    User::Statement => format!(
                        "the statement needs more than its memory limit of {} (--statement-memory)",
                        size_text(self.limit)
                    ),
                    User::Transaction => format!(
                        "the transaction's changes need more than its memory limit of {} (--transaction-memory)",
                        size_text(self.limit)
                    ),
                })
            })?;
        if let Err(error) = self.total.try_grow(reservation, additional) {
            self.used.fetch_sub(additional, Ordering::Relaxed);
            tracing::debug!(%error, "the statements' total memory is taken");
            return Err(DataFusionError::ResourcesExhausted(format!(
                "the running statements and open transactions together need more than their memory limit of {} (--total-statement-memory)",
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

/// Memory one changed row holds until its commit is durable, for each byte
/// the row takes where the transaction keeps it: the transaction's copy,
/// then the commit's (the rows become table deltas beside their storage
/// encoding, SlateDB's batch, memtable and log). Measured: COPY of 2M
/// six-column rows (155 MB of text) held 870 MB before COMMIT and peaked at
/// 2.7 GB during it, about 3.1 times.
const COMMIT_FACTOR: usize = 3;

/// The bytes a transaction reserves for a change of one row from `old` to
/// `new` (either absent), kept under a key of `key_bytes`: the rows' datums
/// and text, the key, and the map entry holding them, times
/// [`COMMIT_FACTOR`].
pub(crate) fn change_bytes(key_bytes: usize, old: Option<&Row>, new: Option<&Row>) -> usize {
    /// A map entry's share of its node, the key's and the rows' headers.
    const ENTRY_BYTES: usize = 128;
    let row_bytes = |row: &Row| {
        row.len() * std::mem::size_of::<Datum>() + row.iter().map(Datum::heap_bytes).sum::<usize>()
    };
    let held = ENTRY_BYTES + key_bytes + old.map_or(0, row_bytes) + new.map_or(0, row_bytes);
    held * COMMIT_FACTOR
}

/// Memory a parsed token takes, with its share of the syntax tree. Measured:
/// `SELECT 1,1,…` of 8 MB (8M tokens) peaked at 5.1 GB (640 B a token); an
/// `INSERT … VALUES` of 500k rows (3M tokens) at 1.3 GB (420 B, with the
/// rows it wrote).
const PARSED_TOKEN_BYTES: usize = 512;

/// About what parsing `sql` takes: its text and its tokens, counted
/// without allocating (a quoted string or identifier is one token, as is
/// every run of letters and digits and every other character).
pub(crate) fn parsed_bytes(sql: &str) -> usize {
    let bytes = sql.as_bytes();
    let mut tokens = 0usize;
    let mut at = 0;
    while at < bytes.len() {
        let byte = bytes[at];
        if byte.is_ascii_whitespace() {
            at += 1;
            continue;
        }
        tokens += 1;
        let rest = &bytes[at..];
        if rest.starts_with(b"--") {
            at += rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
        } else if rest.starts_with(b"/*") {
            at += rest
                .windows(2)
                .position(|pair| pair == b"*/")
                .map_or(rest.len(), |end| end + 2);
        } else if let Some(tag) = dollar_quote_tag(rest) {
            // `$tag$ … $tag$`: one string, however it reads inside.
            let body = &rest[tag.len()..];
            at += tag.len()
                + body
                    .windows(tag.len())
                    .position(|window| window == tag)
                    .map_or(body.len(), |end| end + tag.len());
        } else if byte == b'\'' || byte == b'"' {
            at += 1;
            while at < bytes.len() && bytes[at] != byte {
                at += 1;
            }
            at += 1;
        } else if byte.is_ascii_alphanumeric() || byte == b'_' || byte >= 0x80 {
            while at < bytes.len()
                && (bytes[at].is_ascii_alphanumeric()
                    || bytes[at] == b'_'
                    || bytes[at] == b'.'
                    || bytes[at] >= 0x80)
            {
                at += 1;
            }
        } else {
            at += 1;
        }
    }
    sql.len()
        .saturating_add(tokens.saturating_mul(PARSED_TOKEN_BYTES))
}

/// The opening `$tag$` (or `$$`) of a dollar-quoted string at the start of
/// `text`, if there is one.
fn dollar_quote_tag(text: &[u8]) -> Option<&[u8]> {
    if text.first() != Some(&b'$') {
        return None;
    }
    let end = text[1..]
        .iter()
        .position(|&b| !(b.is_ascii_alphanumeric() || b == b'_'))?;
    let tag = &text[..end + 2];
    // `$1` is a parameter, not a tag.
    let is_tag = tag.last() == Some(&b'$') && !tag[1..].first().is_some_and(u8::is_ascii_digit);
    is_tag.then_some(tag)
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
    exhausted(error)
        .map(|message| RsError::new(&codes::OUT_OF_MEMORY, format!("out of memory: {message}")))
}

/// What a pool said when a reservation did not fit; `None` for any other
/// error.
pub(crate) fn exhausted(error: &DataFusionError) -> Option<&str> {
    match error.find_root() {
        DataFusionError::ResourcesExhausted(message) => Some(message),
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
            transaction_bytes: statement_bytes,
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
    fn text_is_counted_by_its_tokens() {
        let per_token = PARSED_TOKEN_BYTES;
        assert_eq!(parsed_bytes(""), 0);
        let select = "SELECT 1, 2";
        assert_eq!(parsed_bytes(select), select.len() + 4 * per_token);
        let quoted = "SELECT 'a b ''c', \"x y\".z_1";
        // A doubled quote inside a string counts as two strings.
        assert_eq!(parsed_bytes(quoted), quoted.len() + 7 * per_token);
        let commented = "SELECT $j${\"a\": [1, 2]}$j$, $$x, y$$ -- a, b\n/* c, d */";
        assert_eq!(parsed_bytes(commented), commented.len() + 6 * per_token);
        assert_eq!(parsed_bytes("SELECT $1"), "SELECT $1".len() + 3 * per_token);
        let memory = StatementMemory::new(limits(100 * per_token, 200 * per_token));
        let held = memory.reserve_text(&"1,".repeat(40)).unwrap();
        assert!(memory.reserved() >= 80 * per_token);
        let error = memory.reserve_text(&"1,".repeat(60)).unwrap_err();
        assert_eq!(error.code.sqlstate, "53200");
        assert!(error.message.contains("COPY"), "{}", error.message);
        drop(held);
        assert_eq!(memory.reserved(), 0);
    }

    #[test]
    fn sizes_print_as_postgresql_prints_them() {
        assert_eq!(size_text(1 << 30), "1GB");
        assert_eq!(size_text(64 << 20), "64MB");
        assert_eq!(size_text(512 << 10), "512kB");
        assert_eq!(size_text(1000), "1000 bytes");
    }
}
