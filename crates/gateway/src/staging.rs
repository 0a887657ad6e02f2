//! A `COPY` larger than memory (RFC 0007): once the rows a `COPY` of its
//! own transaction holds reach [`stage_bytes`], they go to the engine as a
//! staged segment and the session goes on from empty; `COMMIT` then
//! applies every segment in steps, published together
//! ([`rockstream_runtime::Engine::commit_staged`]). What the session holds
//! stays bounded however large the load; a failure anywhere leaves
//! nothing, as for any transaction.
//!
//! Only a `COPY` outside `BEGIN` stages: its transaction reads none of its
//! own rows and has no savepoints. Inside a transaction block the rows
//! stay in memory, bounded by `--transaction-memory`.

use rockstream_control::CatalogEntry;
use rockstream_runtime::Engine;
use rockstream_types::{ObjectId, RsError, RsResult};

use crate::backend::Gateway;
use crate::session::{GatewaySession, Transaction};

/// The most a `COPY`'s transaction holds (as [`crate::memory`] counts it)
/// before its rows are staged…
const STAGE_BYTES_MAX: usize = 256 << 20;

/// …or a quarter of the transaction's memory limit, if less: staging
/// starts well before a load would be refused.
pub(crate) fn stage_bytes(transaction_bytes: usize) -> usize {
    STAGE_BYTES_MAX.min(transaction_bytes / 4)
}

/// A transaction's staged rows: deleted by the engine if the transaction
/// ends any way but committing them.
pub struct Staged {
    engine: Engine,
    /// The engine's name for them (the transaction's number).
    transaction: u64,
    table_id: ObjectId,
    /// How many segments are staged.
    segments: u32,
    /// The most rows one of them holds.
    segment_rows_max: u32,
    committed: bool,
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.committed {
            self.engine.discard_staged(self.transaction);
        }
    }
}

/// Stages the rows the session's implicit transaction holds for `entry`
/// once they reach [`stage_bytes`]: the `COPY` loading them goes on with
/// an empty buffer.
pub(crate) async fn stage_if_large(
    gateway: &Gateway,
    session: &mut GatewaySession,
    entry: &CatalogEntry,
) -> RsResult<()> {
    let limit = stage_bytes(gateway.memory().limits().transaction_bytes);
    let Some(transaction) = session.transaction.as_mut() else {
        return Ok(());
    };
    let held = transaction
        .memory
        .as_ref()
        .map_or(0, |memory| memory.size());
    if transaction.explicit || held < limit {
        return Ok(());
    }
    stage(gateway.database().engine(), transaction, entry.id).await
}

/// Moves `transaction`'s pending rows of `table_id` (inserts only) to the
/// engine as its next segment and frees what they held.
async fn stage(engine: &Engine, transaction: &mut Transaction, table_id: ObjectId) -> RsResult<()> {
    let rows = match transaction.tables.get_mut(&table_id) {
        Some(table) => table.take_rows(),
        None => return Ok(()),
    };
    if rows.is_empty() {
        return Ok(());
    }
    let staged = transaction.staged.get_or_insert_with(|| Staged {
        engine: engine.clone(),
        transaction: transaction.id.0 as u64,
        table_id,
        segments: 0,
        segment_rows_max: 0,
        committed: false,
    });
    if staged.table_id != table_id || transaction.tables.len() != 1 {
        return Err(RsError::internal(
            "a staged transaction changes one table only",
        ));
    }
    let rows = rows
        .into_iter()
        .map(|(key, (old, new))| match (old, new) {
            (None, Some(row)) => Ok((key, row)),
            _ => Err(RsError::internal("a staged transaction only inserts")),
        })
        .collect::<RsResult<Vec<_>>>()?;
    let segment = staged.segments;
    let count = u32::try_from(rows.len()).unwrap_or(u32::MAX);
    engine.stage(staged.transaction, segment, rows).await?;
    staged.segments += 1;
    staged.segment_rows_max = staged.segment_rows_max.max(count);
    if let Some(memory) = transaction.memory.as_mut() {
        memory.free();
    }
    Ok(())
}

/// Commits a transaction that staged rows: its last rows are staged too,
/// then the engine applies them all.
pub(crate) async fn commit(
    gateway: &Gateway,
    namespace: &str,
    mut transaction: Transaction,
) -> RsResult<()> {
    let Some(table_id) = transaction.staged.as_ref().map(|staged| staged.table_id) else {
        return Err(RsError::internal("the transaction staged nothing"));
    };
    let engine = gateway.database().engine();
    stage(engine, &mut transaction, table_id).await?;
    let (name, layout) = match transaction.tables.get(&table_id) {
        Some(table) => (table.name.clone(), table.layout()),
        None => return Err(RsError::internal("a staged transaction lost its table")),
    };
    let Some(staged) = transaction.staged.as_mut() else {
        return Err(RsError::internal("the transaction staged nothing"));
    };
    gateway
        .database()
        .commit_staged(
            namespace,
            staged.transaction,
            (table_id, &name, layout),
            staged.segments,
            staged.segment_rows_max,
        )
        .await?;
    // The engine deletes the staged rows itself from here.
    staged.committed = true;
    Ok(())
}
