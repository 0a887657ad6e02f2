//! Resolves `--storage` (a path or URL) to an object store and a root path.

use std::sync::Arc;

use slatedb::object_store::local::LocalFileSystem;
use slatedb::object_store::memory::InMemory;
use slatedb::object_store::ObjectStore;

use rockstream_types::{codes, RsError, RsResult};

use crate::local_store::LocalStore;

/// `./dir`, `/abs/dir` or `file:///abs/dir` → local files (created if
/// missing); `memory://` → an in-process store (tests). Other schemes are
/// refused with a coded error until their features are built.
pub fn object_store_for(location: &str) -> RsResult<Arc<dyn ObjectStore>> {
    if location.starts_with("memory://") {
        return Ok(Arc::new(InMemory::new()));
    }
    let path = match location.strip_prefix("file://") {
        Some(path) => path.to_string(),
        None if location.contains("://") => {
            return Err(RsError::new(
                &codes::STORAGE_IO,
                format!("storage URL '{location}' uses a scheme this build cannot open; use a local path or file:// URL"),
            ))
        }
        None => location.to_string(),
    };
    std::fs::create_dir_all(&path).map_err(|error| {
        RsError::new(
            &codes::STORAGE_IO,
            format!("cannot create storage directory '{path}': {error}"),
        )
    })?;
    // Acknowledged means on disk: every file SlateDB writes (WAL, tables,
    // manifests) is fsynced, with its directory, before the write returns,
    // so an acknowledged commit survives a power loss, not only `kill -9`.
    let store = LocalFileSystem::new_with_prefix(&path)
        .map_err(|error| {
            RsError::new(
                &codes::STORAGE_IO,
                format!("cannot open storage directory '{path}': {error}"),
            )
        })?
        .with_fsync(true);
    Ok(Arc::new(LocalStore::new(store, &path)))
}
