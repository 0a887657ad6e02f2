//! Resolves `--storage` (a path or URL) to an object store and a root path.

use std::path::PathBuf;
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
    let Some(path) = local_path(location)? else {
        return Ok(Arc::new(InMemory::new()));
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

/// Where the commit logs of a storage at `location` live (RFC 0019): its
/// `commit_log` directory if it is local, `None` for a store whose own WAL
/// makes commits durable.
pub fn commit_log_root(location: &str) -> RsResult<Option<PathBuf>> {
    Ok(local_path(location)?.map(|path| PathBuf::from(path).join("commit_log")))
}

/// The directory of a local `location`; `None` for `memory://`.
fn local_path(location: &str) -> RsResult<Option<String>> {
    if location.starts_with("memory://") {
        return Ok(None);
    }
    match location.strip_prefix("file://") {
        Some(path) => Ok(Some(path.to_string())),
        None if location.contains("://") => Err(RsError::new(
            &codes::STORAGE_IO,
            format!("storage URL '{location}' uses a scheme this build cannot open; use a local path or file:// URL"),
        )),
        None => Ok(Some(location.to_string())),
    }
}
