//! Shared machinery of the integration tests: a server process per test ([`server`]), a fresh
//! database per test on the PostgreSQL oracle ([`oracle`]), multiset comparison of query results
//! with numerics compared by value ([`compare`]), and a sqllogictest driver over pgwire ([`slt`]).

pub mod compare;
pub mod oracle;
pub mod server;
pub mod slt;

/// Seed for everything random in a test: `ROCKSTREAM_TEST_SEED` when set (to replay a failure),
/// otherwise a fresh random one. Tests print it on failure.
pub fn test_seed() -> u64 {
    match std::env::var("ROCKSTREAM_TEST_SEED") {
        Ok(text) => text
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("ROCKSTREAM_TEST_SEED must be a u64, got {text:?}")),
        Err(_) => rand::random(),
    }
}

/// A numeric knob read from the environment, with a default that keeps the suite fast.
pub fn environment_count(variable: &str, default: usize) -> usize {
    match std::env::var(variable) {
        Ok(text) => text
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{variable} must be a non-negative integer, got {text:?}")),
        Err(_) => default,
    }
}
