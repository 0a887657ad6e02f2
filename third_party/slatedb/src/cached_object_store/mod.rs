// This module implements the deprecated `CachedObjectStore`.
#![allow(deprecated)]

pub use object_store::{CachedObjectStore, CachedObjectStoreBuilder};
#[allow(unused_imports)]
pub use storage::{LocalCacheEntry, LocalCacheHead, LocalCacheStorage, PartID};
pub use storage_fs::FsCacheStorage;

pub mod stats;

mod object_store;
pub(crate) mod policy;
mod storage;
mod storage_fs;
