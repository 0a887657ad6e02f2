//! SlateDB's native object-store-backed WAL implementation.

pub(crate) mod admin;
pub(crate) mod gc;
pub(crate) mod iterator;
pub(crate) mod reader;
pub(crate) mod resource_limiter;
pub(crate) mod sst_builder;
pub(crate) mod sst_iterator;
pub(crate) mod store;
pub(crate) mod writer;
pub(crate) mod writer_init;
