//! The local file system as SlateDB's object store, with a full disk
//! reported instead of waited out.
//!
//! SlateDB retries every object-store error it does not know to be
//! permanent, with no bound: on a full file system a commit's WAL write
//! would be retried for ever and its writer would hang, told nothing.
//! [`LocalStore`] marks "no space left" (and "quota exceeded") as final
//! (`slatedb_common`'s `NonRetryable`, which SlateDB's retry rule honours),
//! so the write fails at once and its commit fails with a coded error
//! ([`is_disk_full`] recognizes it in any error's sources). The engine then
//! reopens its storage on the next write, which succeeds once space is back.

use std::error::Error;
use std::fmt;
use std::ops::Range;

use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::FutureExt;
use slatedb::bytes::Bytes;
use slatedb::object_store::local::LocalFileSystem;
use slatedb::object_store::path::Path;
use slatedb::object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, UploadPart,
};
use slatedb_common::retry::NonRetryable;

type StoreResult<T> = slatedb::object_store::Result<T>;

/// The file system holding a storage has no room for a write.
#[derive(Debug)]
pub struct DiskFull {
    /// The storage's directory.
    pub root: String,
    source: slatedb::object_store::Error,
}

impl fmt::Display for DiskFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the file system of '{}' is full ({})",
            self.root, self.source
        )
    }
}

impl Error for DiskFull {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&self.source)
    }
}

/// Whether `error` (or any error it wraps) says the disk is full: a
/// [`DiskFull`], or an I/O error of kind "storage full" or "quota exceeded".
pub fn is_disk_full(error: &(dyn Error + 'static)) -> bool {
    disk_full_root(error).is_some()
}

/// The storage directory of the [`DiskFull`] in `error`'s sources (empty
/// if only an I/O error says so), or `None` if the disk is not full.
pub fn disk_full_root(mut error: &(dyn Error + 'static)) -> Option<String> {
    loop {
        if let Some(full) = error.downcast_ref::<DiskFull>() {
            return Some(full.root.clone());
        }
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            if matches!(
                io.kind(),
                std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
            ) {
                return Some(String::new());
            }
            // `io::Error::source()` skips the error it wraps.
            if let Some(inner) = io.get_ref() {
                error = inner;
                continue;
            }
        }
        error = error.source()?;
    }
}

/// A [`LocalFileSystem`] whose writes fail without retries when the file
/// system is full (see the module documentation).
#[derive(Debug)]
pub struct LocalStore {
    inner: LocalFileSystem,
    root: String,
}

impl LocalStore {
    pub fn new(inner: LocalFileSystem, root: &str) -> LocalStore {
        LocalStore {
            inner,
            root: root.to_string(),
        }
    }
}

impl fmt::Display for LocalStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LocalStore({})", self.root)
    }
}

/// `error`, made final if it says the disk is full.
fn final_if_full(root: &str, error: slatedb::object_store::Error) -> slatedb::object_store::Error {
    if !is_disk_full(&error) {
        return error;
    }
    slatedb::object_store::Error::Generic {
        store: "LocalFileSystem",
        source: Box::new(NonRetryable(Box::new(DiskFull {
            root: root.to_string(),
            source: error,
        }))),
    }
}

#[async_trait]
impl ObjectStore for LocalStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> StoreResult<PutResult> {
        self.inner
            .put_opts(location, payload, opts)
            .await
            .map_err(|error| final_if_full(&self.root, error))
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> StoreResult<Box<dyn MultipartUpload>> {
        let upload = self
            .inner
            .put_multipart_opts(location, opts)
            .await
            .map_err(|error| final_if_full(&self.root, error))?;
        Ok(Box::new(LocalUpload {
            inner: upload,
            root: self.root.clone(),
        }))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> StoreResult<GetResult> {
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> StoreResult<Vec<Bytes>> {
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, StoreResult<Path>>,
    ) -> BoxStream<'static, StoreResult<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, StoreResult<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, StoreResult<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> StoreResult<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> StoreResult<()> {
        self.inner
            .copy_opts(from, to, options)
            .await
            .map_err(|error| final_if_full(&self.root, error))
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> StoreResult<()> {
        self.inner
            .rename_opts(from, to, options)
            .await
            .map_err(|error| final_if_full(&self.root, error))
    }
}

/// A multipart write to a [`LocalStore`].
#[derive(Debug)]
struct LocalUpload {
    inner: Box<dyn MultipartUpload>,
    root: String,
}

#[async_trait]
impl MultipartUpload for LocalUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let root = self.root.clone();
        self.inner
            .put_part(data)
            .map(move |result| result.map_err(|error| final_if_full(&root, error)))
            .boxed()
    }

    async fn complete(&mut self) -> StoreResult<PutResult> {
        self.inner
            .complete()
            .await
            .map_err(|error| final_if_full(&self.root, error))
    }

    async fn abort(&mut self) -> StoreResult<()> {
        self.inner.abort().await
    }
}

#[cfg(test)]
mod tests {
    //! Goal: a full disk is recognized however deeply it is wrapped, and
    //! only then is an error made final.
    use super::*;

    fn io_error(kind: std::io::ErrorKind) -> slatedb::object_store::Error {
        slatedb::object_store::Error::Generic {
            store: "LocalFileSystem",
            source: Box::new(std::io::Error::new(kind, "write failed")),
        }
    }

    #[test]
    fn a_full_disk_is_final_and_recognized_through_wrappers() {
        let error = final_if_full("/data", io_error(std::io::ErrorKind::StorageFull));
        assert!(!slatedb_common::retry::should_retry(&error));
        assert_eq!(disk_full_root(&error).as_deref(), Some("/data"));
        assert!(error
            .to_string()
            .contains("the file system of '/data' is full"));
        // As SlateDB and std wrap it on the way up.
        let wrapped = std::io::Error::other(std::sync::Arc::new(error));
        assert_eq!(disk_full_root(&wrapped).as_deref(), Some("/data"));
        let quota = io_error(std::io::ErrorKind::QuotaExceeded);
        assert!(is_disk_full(&quota));
    }

    #[test]
    fn other_errors_keep_their_retries() {
        let error = final_if_full("/data", io_error(std::io::ErrorKind::TimedOut));
        assert!(slatedb_common::retry::should_retry(&error));
        assert!(!is_disk_full(&error));
    }
}
