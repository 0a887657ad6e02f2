//! The control database (catalog entries, the id counter, the bucket map),
//! reopened after storage fails.
//!
//! SlateDB closes a database for good at the first write it cannot make
//! durable (a full disk, say). As the engine does with its shards
//! (`rockstream_runtime`'s recovery), the control database is then
//! reopened over what is durable, here before the next DDL statement
//! uses it: a statement fails while storage is unusable, with the reason
//! (53100 for a full disk), and succeeds again once it is usable.

use std::sync::Arc;

use rockstream_storage::storage_error;
use rockstream_types::{RsError, RsResult};
use slatedb::object_store::ObjectStore;
use slatedb::{Db, WriteBatch};
use tokio::sync::Mutex;

/// Path of the control database inside the storage location.
pub(crate) const CONTROL_PATH: &str = "control";

pub(crate) struct ControlDb {
    store: Arc<dyn ObjectStore>,
    /// `None` after a failed write: reopened before its next use.
    db: Mutex<Option<Db>>,
}

impl ControlDb {
    pub async fn open(store: Arc<dyn ObjectStore>) -> RsResult<ControlDb> {
        let db = open(&store).await?;
        Ok(ControlDb {
            store,
            db: Mutex::new(Some(db)),
        })
    }

    /// The open database, reopened first if a write failed.
    pub async fn db(&self) -> RsResult<Db> {
        let mut db = self.db.lock().await;
        if let Some(open) = db.as_ref() {
            return Ok(open.clone());
        }
        let reopened = open(&self.store).await?;
        tracing::info!("the control database is reopened");
        *db = Some(reopened.clone());
        Ok(reopened)
    }

    /// Writes `batch` and waits until it is durable. If storage failed,
    /// the database is closed, to be reopened before its next use.
    pub async fn write(&self, batch: WriteBatch) -> RsResult<()> {
        let db = self.db().await?;
        // The WAL is written now, not at SlateDB's next flush tick (100 ms
        // by default), which every DDL statement waited for, twice for a
        // DROP.
        let written = match db.write(batch).await {
            Ok(handle) => match db.flush().await {
                Ok(()) => handle.await_durable().await,
                Err(error) => Err(error),
            },
            Err(error) => Err(error),
        };
        let Err(error) = written else {
            return Ok(());
        };
        Err(self.failed(storage_error(CONTROL_PATH, error)).await)
    }

    /// `error` from the database: if storage failed, it is closed, to be
    /// reopened before its next use.
    async fn failed(&self, error: RsError) -> RsError {
        if error.is_storage_failure() {
            tracing::error!(%error, "the control database failed; it is reopened before its next use");
            let mut current = self.db.lock().await;
            if let Some(failed) = current.take() {
                let _ = failed.close().await;
            }
        }
        error
    }

    pub async fn put(&self, key: &[u8], value: &[u8]) -> RsResult<()> {
        let mut batch = WriteBatch::new();
        batch.put(key, value);
        self.write(batch).await
    }

    pub async fn delete(&self, key: &[u8]) -> RsResult<()> {
        let mut batch = WriteBatch::new();
        batch.delete(key);
        self.write(batch).await
    }

    pub async fn get(&self, key: &[u8]) -> RsResult<Option<Vec<u8>>> {
        let db = self.db().await?;
        match db.get(key).await {
            Ok(value) => Ok(value.map(|bytes| bytes.to_vec())),
            Err(error) => Err(self.failed(storage_error(CONTROL_PATH, error)).await),
        }
    }

    pub async fn close(&self) {
        if let Some(db) = self.db.lock().await.take() {
            let _ = db.close().await;
        }
    }
}

async fn open(store: &Arc<dyn ObjectStore>) -> RsResult<Db> {
    Db::builder(CONTROL_PATH, store.clone())
        .build()
        .await
        .map_err(|error| storage_error(CONTROL_PATH, error))
}
