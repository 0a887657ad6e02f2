//! RockStream's vocabulary: datums, rows and their encodings, Z-sets, ids,
//! logical times and frontiers, partitioning, and the error-code registry.
//! No tokio, no SlateDB: everything here is pure.

pub mod datum;
pub mod encoding;
pub mod error;
pub mod frontier;
pub mod partition;
pub mod pg_array;
pub mod pg_text;
pub mod zset;

pub use datum::{Datum, Interval, Row, SqlType};
pub use error::{codes, ErrorCode, RsError, RsResult};
pub use frontier::{Antichain, Timestamp};
pub use zset::ZSet;

/// Identifies a catalog object (table, view, operator) for its whole life.
/// Encoded big-endian in keys, so ids allocated in order sort in order.
pub type ObjectId = u128;

/// A logical time: the number of the epoch that committed a change. Epochs
/// are dense and increase by one per committed epoch on a shard.
pub type Epoch = u64;
