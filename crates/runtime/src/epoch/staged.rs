//! Transactions larger than memory: staged rows, committed in steps
//! (RFC 0007).
//!
//! A session whose `COPY` outgrows its memory hands its rows to the engine
//! a *segment* at a time (sorted by key, each key once): the engine writes
//! them under `0x0B transaction segment row_key` on the coordinator, in an
//! epoch of their own that changes nothing readers see. At `COMMIT` the
//! engine merges the segments in key order and applies them in steps of
//! bounded size, each an ordinary epoch (validation, UNIQUE checks, view
//! maintenance, one batch per shard) that it does not publish; the last
//! step publishes them all. Other commits wait meanwhile; readers go on at
//! the last published state.
//!
//! Each step's coordinator batch records how far the commit got in a
//! marker (`0x06 'S' 'C' transaction`), with everything needed to go on
//! (the table, its UNIQUE constraints, the segments), so that:
//!
//! - a step that fails (a key stored already, or repeated across
//!   segments: 23505) is undone by applying the inverse of the steps
//!   before it — exact for tables and views alike, view maintenance being
//!   linear in the change — and the commit fails;
//! - a crash leaves a marker, and the next start completes the commit
//!   (rolls it forward; or, if it was being undone, finishes undoing it)
//!   once every view is installed, before anyone reads
//!   ([`crate::Engine::finish_staged`]).
//!
//! Staged rows are deleted in the background once their transaction
//! commits or ends without committing; rows whose transaction is not
//! running and has no marker are deleted at start.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use rockstream_ops::keys;
use rockstream_ops::{ScanOrder, StateStore, Write};
use rockstream_storage::{EpochStore, ShardDb};
use rockstream_types::encoding::{decode_row, encode_row_into};
use rockstream_types::{codes, Epoch, ObjectId, Row, RsError, RsResult};
use tokio::sync::oneshot;

use super::{watermarks, EpochLoop, Failpoint};
use crate::engine::{
    CommitRequest, EventTime, MaintainedIndex, RowChange, StagedJudgement, StagedTable, TableChange,
};

/// A step's rows: at most this many (and at most the transaction's
/// [`StagedTable::step_rows`])…
const STEP_ROWS_MAX: usize = 32_768;
/// …and about this many bytes of encoded rows.
const STEP_BYTES_MAX: usize = 16 << 20;
/// Rows read from all segments together per scan round: each segment's
/// read-ahead is this divided by their number, but at least
/// [`SEGMENT_READ_MIN`] (so past 1,024 segments, 64 rows per segment:
/// segments hold up to hundreds of thousands of rows each).
const MERGE_READ_ROWS: usize = 65_536;
const SEGMENT_READ_MIN: usize = 64;

/// Aborts after the n-th durable step of a staged commit (forward or back).
static AFTER_STAGED_STEP: Failpoint = Failpoint::new(
    "ROCKSTREAM_FAILPOINT_AFTER_STAGED_STEP",
    "after a step of a staged commit",
);

/// A staged row's value: what the change is, then the row.
const STAGED_INSERT: u8 = 1;

/// The value a staged insert of `row` is stored as.
pub(crate) fn encode_staged_insert(row: &Row) -> Vec<u8> {
    let mut value = vec![STAGED_INSERT];
    encode_row_into(row, &mut value);
    value
}

fn decode_staged_insert(value: &[u8]) -> RsResult<Row> {
    match value.split_first() {
        Some((&STAGED_INSERT, row)) => decode_row(row),
        _ => Err(RsError::internal("corrupt staged row")),
    }
}

/// Which way a staged commit is going.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    /// Applying its rows, in key order.
    Forward,
    /// Undoing the rows it applied, in key order, after a step failed.
    Back,
}

/// A staged commit under way, as its marker records it.
#[derive(Debug, Clone)]
struct Progress {
    transaction: u64,
    table: StagedTable,
    direction: Direction,
    /// The last row key of the last durable forward step.
    applied: Option<Vec<u8>>,
    /// Going back: the last row key whose step is undone.
    undone: Option<Vec<u8>>,
    /// Steps run by this process (not recorded), for the log.
    steps_run: u32,
}

impl Progress {
    fn encode(&self) -> Vec<u8> {
        let mut out = Encoder::default();
        // The marker's format: 3 ends with the table's watermark (RFC
        // 0013); 2 records whether each index is unique; 1, written before
        // plain indexes (RFC 0014), had unique ones only.
        out.u8(3);
        out.u8(match self.direction {
            Direction::Forward => 0,
            Direction::Back => 1,
        });
        out.optional_bytes(self.applied.as_deref());
        out.optional_bytes(self.undone.as_deref());
        out.u32(self.table.segments);
        out.u32(self.table.step_rows);
        let change = &self.table.change;
        out.bytes(&change.table_id.to_be_bytes());
        out.bytes(change.table_name.as_bytes());
        out.u32(change.indexes.len() as u32);
        for index in &change.indexes {
            out.u32(u32::from(index.id));
            out.bytes(index.name.as_bytes());
            out.u8(u8::from(index.unique));
            out.positions(&index.columns);
            match &index.old_columns {
                Some(columns) => {
                    out.u8(1);
                    out.positions(columns);
                }
                None => out.u8(0),
            }
            out.u32(index.column_names.len() as u32);
            for name in &index.column_names {
                out.bytes(name.as_bytes());
            }
        }
        match change.watermark {
            Some(EventTime {
                column,
                delay_micros,
                staged: Some(StagedJudgement { began_at, .. }),
            }) => {
                out.u8(1);
                out.u32(column as u32);
                out.bytes(&delay_micros.to_be_bytes());
                out.bytes(&watermarks::encode(&began_at));
            }
            _ => out.u8(0),
        }
        out.0
    }

    fn decode(transaction: u64, bytes: &[u8]) -> RsResult<Progress> {
        let mut input = Decoder(bytes);
        let format = input.u8()?;
        if !matches!(format, 1..=3) {
            return Err(corrupt_marker());
        }
        let direction = match input.u8()? {
            0 => Direction::Forward,
            1 => Direction::Back,
            _ => return Err(corrupt_marker()),
        };
        let applied = input.optional_bytes()?;
        let undone = input.optional_bytes()?;
        let segments = input.u32()?;
        let step_rows = input.u32()?;
        let table_id: [u8; 16] = input
            .bytes()?
            .as_slice()
            .try_into()
            .map_err(|_| corrupt_marker())?;
        let table_name = input.string()?;
        let mut indexes = Vec::new();
        for _ in 0..input.u32()? {
            let id = u16::try_from(input.u32()?).map_err(|_| corrupt_marker())?;
            let name = input.string()?;
            let unique = format == 1 || input.u8()? != 0;
            let columns = input.positions()?;
            let old_columns = match input.u8()? {
                0 => None,
                _ => Some(input.positions()?),
            };
            let mut column_names = Vec::new();
            for _ in 0..input.u32()? {
                column_names.push(input.string()?);
            }
            indexes.push(MaintainedIndex {
                id,
                name,
                unique,
                columns,
                old_columns,
                column_names,
            });
        }
        let watermark = match format {
            3 if input.u8()? == 1 => {
                let column = input.u32()? as usize;
                let delay: [u8; 8] = input
                    .bytes()?
                    .as_slice()
                    .try_into()
                    .map_err(|_| corrupt_marker())?;
                let began_at = watermarks::decode(&input.bytes()?)?;
                Some(EventTime {
                    column,
                    delay_micros: i64::from_be_bytes(delay),
                    staged: Some(StagedJudgement {
                        began_at,
                        undo: false,
                    }),
                })
            }
            _ => None,
        };
        Ok(Progress {
            transaction,
            table: StagedTable {
                change: TableChange {
                    table_id: ObjectId::from_be_bytes(table_id),
                    table_name,
                    rows: Vec::new(),
                    indexes,
                    watermark,
                    primary_key: Vec::new(),
                },
                segments,
                step_rows,
            },
            direction,
            applied,
            undone,
            steps_run: 0,
        })
    }
}

fn corrupt_marker() -> RsError {
    RsError::internal("corrupt staged-commit marker")
}

/// Length-prefixed fields of a marker.
#[derive(Default)]
struct Encoder(Vec<u8>);

impl Encoder {
    fn u8(&mut self, value: u8) {
        self.0.push(value);
    }

    fn u32(&mut self, value: u32) {
        self.0.extend_from_slice(&value.to_be_bytes());
    }

    fn bytes(&mut self, bytes: &[u8]) {
        self.u32(bytes.len() as u32);
        self.0.extend_from_slice(bytes);
    }

    fn optional_bytes(&mut self, bytes: Option<&[u8]>) {
        match bytes {
            Some(bytes) => {
                self.u8(1);
                self.bytes(bytes);
            }
            None => self.u8(0),
        }
    }

    fn positions(&mut self, positions: &[usize]) {
        self.u32(positions.len() as u32);
        for &position in positions {
            self.u32(position as u32);
        }
    }
}

struct Decoder<'a>(&'a [u8]);

impl Decoder<'_> {
    fn take(&mut self, n: usize) -> RsResult<&[u8]> {
        if self.0.len() < n {
            return Err(corrupt_marker());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self) -> RsResult<u8> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> RsResult<u32> {
        let bytes: [u8; 4] = self.take(4)?.try_into().map_err(|_| corrupt_marker())?;
        Ok(u32::from_be_bytes(bytes))
    }

    fn bytes(&mut self) -> RsResult<Vec<u8>> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }

    fn string(&mut self) -> RsResult<String> {
        String::from_utf8(self.bytes()?).map_err(|_| corrupt_marker())
    }

    fn optional_bytes(&mut self) -> RsResult<Option<Vec<u8>>> {
        match self.u8()? {
            0 => Ok(None),
            _ => self.bytes().map(Some),
        }
    }

    fn positions(&mut self) -> RsResult<Vec<usize>> {
        let n = self.u32()?;
        (0..n).map(|_| Ok(self.u32()? as usize)).collect()
    }
}

/// The error for a row whose key another row of the table has (the
/// engine's, as for a key already stored).
pub(super) fn duplicate_key(table_name: &str) -> RsError {
    RsError::primary_key_violation(table_name, &[])
}

/// One segment's rows after a key, read ahead a chunk at a time.
struct SegmentCursor {
    prefix: Vec<u8>,
    /// The last key read (a full storage key), where the next read starts.
    after: Option<Vec<u8>>,
    ahead: VecDeque<(Vec<u8>, Vec<u8>)>,
    done: bool,
}

/// A transaction's segments merged in row-key order (read from the
/// coordinator each call is given).
struct StagedRows {
    table_name: String,
    segments: Vec<SegmentCursor>,
    /// Each segment's next row key, smallest first (with the segment).
    heads: BinaryHeap<Reverse<(Vec<u8>, usize)>>,
    read_rows: usize,
    step_rows: usize,
    /// The last row key returned (a repeat is a duplicate key).
    last: Option<Vec<u8>>,
}

impl StagedRows {
    /// The rows of `transaction`'s `segments` with keys after `after`.
    async fn open(
        coordinator: &ShardDb,
        transaction: u64,
        table: &StagedTable,
        after: Option<&[u8]>,
    ) -> RsResult<StagedRows> {
        let count = table.segments as usize;
        let mut rows = StagedRows {
            table_name: table.change.table_name.clone(),
            segments: (0..table.segments)
                .map(|segment| {
                    let prefix = keys::staged_segment_prefix(transaction, segment);
                    let after = after.map(|key| [prefix.as_slice(), key].concat());
                    SegmentCursor {
                        prefix,
                        after,
                        ahead: VecDeque::new(),
                        done: false,
                    }
                })
                .collect(),
            heads: BinaryHeap::new(),
            read_rows: (MERGE_READ_ROWS / count.max(1)).max(SEGMENT_READ_MIN),
            step_rows: (table.step_rows as usize).clamp(1, STEP_ROWS_MAX),
            last: after.map(<[u8]>::to_vec),
        };
        for segment in 0..count {
            rows.push_head(coordinator, segment).await?;
        }
        Ok(rows)
    }

    /// Puts `segment`'s next row key among the heads, reading ahead if
    /// needed.
    async fn push_head(&mut self, coordinator: &ShardDb, segment: usize) -> RsResult<()> {
        let cursor = &mut self.segments[segment];
        if cursor.ahead.is_empty() && !cursor.done {
            let chunk = coordinator
                .snapshot()?
                .scan_chunk_of(&cursor.prefix, cursor.after.as_deref(), self.read_rows)
                .await?;
            cursor.done = chunk.len() < self.read_rows;
            if let Some((last, _)) = chunk.last() {
                cursor.after = Some(last.clone());
            }
            cursor.ahead.extend(chunk);
        }
        if let Some((key, _)) = cursor.ahead.front() {
            let row_key = key[cursor.prefix.len()..].to_vec();
            self.heads.push(Reverse((row_key, segment)));
        }
        Ok(())
    }

    /// The next row, in key order, with the size of its stored value;
    /// 23505 for a key staged twice.
    async fn next(&mut self, coordinator: &ShardDb) -> RsResult<Option<(Vec<u8>, Row, usize)>> {
        let Some(Reverse((row_key, segment))) = self.heads.pop() else {
            return Ok(None);
        };
        let (_, value) = self.segments[segment]
            .ahead
            .pop_front()
            .ok_or_else(|| RsError::internal("a staged segment lost its read-ahead"))?;
        self.push_head(coordinator, segment).await?;
        if self.last.as_ref() == Some(&row_key) {
            return Err(duplicate_key(&self.table_name));
        }
        self.last = Some(row_key.clone());
        let row = decode_staged_insert(&value)?;
        Ok(Some((row_key, row, value.len())))
    }

    /// The rows of the next step: at most `step_rows` and about
    /// [`STEP_BYTES_MAX`], none past `until` (a row key, inclusive).
    async fn next_step(
        &mut self,
        coordinator: &ShardDb,
        until: Option<&[u8]>,
    ) -> RsResult<Vec<(Vec<u8>, Row)>> {
        let mut rows = Vec::new();
        let mut bytes = 0;
        while rows.len() < self.step_rows && bytes < STEP_BYTES_MAX {
            if let (Some(until), Some(Reverse((next, _)))) = (until, self.heads.peek()) {
                if next.as_slice() > until {
                    break;
                }
            }
            let Some((key, row, size)) = self.next(coordinator).await? else {
                break;
            };
            bytes += key.len() + size;
            rows.push((key, row));
        }
        // A key repeated in another segment fails this step, never the
        // next: a step resumed after this one's last key would skip it.
        if let (Some(Reverse((next, _))), Some(last)) = (self.heads.peek(), &self.last) {
            if next == last {
                self.next(coordinator).await?;
            }
        }
        Ok(rows)
    }
}

/// How a staged commit ended.
enum Outcome {
    /// Every row is applied and published.
    Committed(Epoch),
    /// A step failed for this reason and the steps before it are undone.
    Refused(RsError),
}

impl EpochLoop {
    /// Stages one segment of a transaction's rows, durably, in an epoch
    /// that changes nothing readers see.
    pub(super) async fn stage(
        &mut self,
        transaction: u64,
        segment: u32,
        rows: Vec<(Vec<u8>, Row)>,
    ) -> RsResult<()> {
        if self.discarded_early.remove(&transaction) {
            // Its session is gone: nobody reads these rows.
            return Ok(());
        }
        self.staging.insert(transaction);
        let mut stores = self.new_stores()?;
        let prefix = keys::staged_segment_prefix(transaction, segment);
        for (row_key, row) in rows {
            stores[0].put(
                [prefix.as_slice(), &row_key].concat(),
                encode_staged_insert(&row),
            );
        }
        self.commit_epoch(stores).await.map(|_| ())
    }

    /// Commits a transaction's staged rows ([`crate::Engine::commit_staged`]).
    /// `Err` from the outer result: storage failed (the engine reopens it,
    /// and completes the commit if a step of it is durable).
    pub(super) async fn commit_staged(
        &mut self,
        transaction: u64,
        table: StagedTable,
        reply: oneshot::Sender<RsResult<Epoch>>,
    ) -> RsResult<()> {
        if !self.staging.remove(&transaction) {
            let _ = reply.send(Err(RsError::internal(format!(
                "transaction {transaction} has no staged rows"
            ))));
            return Ok(());
        }
        if self.dropped.contains(&table.change.table_id) {
            self.reclaim_staging(transaction);
            let _ = reply.send(Err(RsError::new(
                &codes::OPTIMISTIC_CONFLICT,
                format!(
                    "table \"{}\" was dropped while COPY loaded it",
                    table.change.table_name
                ),
            )));
            return Ok(());
        }
        // Every step is judged against the watermark the commit began at.
        let mut table = table;
        if let Some(event_time) = &mut table.change.watermark {
            event_time.staged = Some(StagedJudgement {
                began_at: self
                    .watermarks
                    .get(&table.change.table_id)
                    .copied()
                    .unwrap_or_default(),
                undo: false,
            });
        }
        let progress = Progress {
            transaction,
            table,
            direction: Direction::Forward,
            applied: None,
            undone: None,
            steps_run: 0,
        };
        self.hold_publish = true;
        let ran = self.run_staged(progress).await;
        let ran = match ran {
            Ok(outcome) => {
                self.hold_publish = false;
                self.publish().map(|()| outcome)
            }
            // Nothing is published until storage is reopened and the
            // commit completed ([`super::recovery`]).
            Err(failure) => Err(failure),
        };
        match ran {
            Ok(Outcome::Committed(epoch)) => {
                let _ = reply.send(Ok(epoch));
                Ok(())
            }
            Ok(Outcome::Refused(error)) => {
                let _ = reply.send(Err(error));
                Ok(())
            }
            Err(failure) => {
                let _ = reply.send(Err(RsError::new(
                    &codes::COMMIT_OUTCOME_UNKNOWN,
                    format!(
                        "could not confirm whether a large transaction committed: {failure}; it is completed or undone once storage is reopened"
                    ),
                )));
                Err(failure)
            }
        }
    }

    /// Forgets the staged rows of transactions that ended without
    /// committing them ([`crate::Engine::discard_staged`]) and deletes
    /// them in the background.
    pub(super) fn take_discarded(&mut self) {
        let discarded = std::mem::take(
            &mut *self
                .discarded
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        for transaction in discarded {
            if self.staging.remove(&transaction) {
                self.reclaim_staging(transaction);
            } else {
                // Its staging may still wait in the queue. (A transaction
                // whose commit was refused lands here too, and stays: a
                // number per refused large COPY.)
                self.discarded_early.insert(transaction);
            }
        }
    }

    /// Completes every staged commit a crash or a storage failure cut short
    /// (each marker's, forward or back), publishing nothing until all are
    /// done. Staged rows of transactions that are neither running nor
    /// committing are deleted in the background.
    pub(super) async fn finish_staged(&mut self) -> RsResult<()> {
        self.hold_publish = true;
        self.take_discarded();
        let snapshot = self.shards[0].snapshot()?;
        let prefix = keys::staged_commit_marker_prefix();
        let markers = snapshot
            .scan_prefix(&prefix, ScanOrder::Ascending, usize::MAX)
            .await?;
        let mut committing = Vec::new();
        for (key, value) in markers {
            let transaction = transaction_of(&key[prefix.len()..])?;
            committing.push(transaction);
            let progress = Progress::decode(transaction, &value)?;
            tracing::info!(
                transaction,
                table = %progress.table.change.table_name,
                direction = ?progress.direction,
                "completing a large transaction's commit that was cut short"
            );
            // It logs how it ended. (Had its table been dropped, the
            // DROP would have removed the marker: [`EpochLoop::drop_objects`].)
            self.run_staged(progress).await?;
        }
        // Staged rows nobody will commit: a session that ended with the
        // process, or whose discard could not be sent.
        let mut after: Option<Vec<u8>> = None;
        let mut orphans = 0;
        let staged = vec![keys::STAGED_ROWS];
        loop {
            let chunk = snapshot.scan_chunk_of(&staged, after.as_deref(), 1).await?;
            let Some((key, _)) = chunk.into_iter().next() else {
                break;
            };
            let transaction = transaction_of(&key[1..])?;
            if !self.staging.contains(&transaction) && !committing.contains(&transaction) {
                self.reclaim_staging(transaction);
                orphans += 1;
            }
            // On to the next transaction's rows (all longer than its prefix).
            let Some(next) = transaction.checked_add(1) else {
                break;
            };
            after = Some(keys::staged_prefix(next));
        }
        if orphans > 0 {
            tracing::info!(
                transactions = orphans,
                "deleting the staged rows of transactions that did not commit"
            );
        }
        self.hold_publish = false;
        // Every view is installed: from now on views step without input
        // when their rows come due.
        self.started = true;
        self.publish()
    }

    /// The staged commits into `tables` (being dropped) stop: their markers
    /// are deleted in `stores` (the DROP's epoch) and their staged rows
    /// once it is durable; the rows they applied go with the tables.
    pub(super) async fn forget_staged_commits_into(
        &mut self,
        tables: &[ObjectId],
        stores: &mut [EpochStore],
    ) -> RsResult<Vec<u64>> {
        let prefix = keys::staged_commit_marker_prefix();
        let markers = self.shards[0]
            .snapshot()?
            .scan_prefix(&prefix, ScanOrder::Ascending, usize::MAX)
            .await?;
        let mut forgotten = Vec::new();
        for (key, value) in markers {
            let transaction = transaction_of(&key[prefix.len()..])?;
            let progress = Progress::decode(transaction, &value)?;
            if tables.contains(&progress.table.change.table_id) {
                stores[0].delete(key);
                forgotten.push(transaction);
            }
        }
        Ok(forgotten)
    }

    /// Whether a staged commit's marker is stored: storage holds part of a
    /// transaction nobody may see yet.
    pub(super) async fn staged_commit_pending(&self) -> RsResult<bool> {
        let markers = self.shards[0]
            .snapshot()?
            .scan_prefix(
                &keys::staged_commit_marker_prefix(),
                ScanOrder::Ascending,
                1,
            )
            .await?;
        Ok(!markers.is_empty())
    }

    /// Runs a staged commit from `progress` to its end: forward, or back
    /// once a step fails. Publishes nothing: the caller does, with
    /// [`EpochLoop::hold_publish`] set meanwhile.
    async fn run_staged(&mut self, mut progress: Progress) -> RsResult<Outcome> {
        debug_assert!(self.hold_publish, "a staged commit's steps are published");
        let outcome = self.run_staged_steps(&mut progress).await;
        if self.held_watermark.take().is_some() || progress.table.change.watermark.is_some() {
            // A commit resumed after its last row steps no view: the views
            // reading watermarks step once more without input.
            for installed in &mut self.views {
                if installed.view.dataflow.reads_watermarks() {
                    installed.wake_at = Some(i64::MIN);
                }
            }
        }
        let outcome = outcome?;
        self.reclaim_staging(progress.transaction);
        match &outcome {
            Outcome::Committed(epoch) => tracing::info!(
                transaction = progress.transaction,
                table = %progress.table.change.table_name,
                steps = progress.steps_run,
                epoch,
                "large transaction committed"
            ),
            Outcome::Refused(error) => tracing::info!(
                transaction = progress.transaction,
                table = %progress.table.change.table_name,
                steps = progress.steps_run,
                %error,
                "large transaction refused; the steps it applied are undone"
            ),
        }
        Ok(outcome)
    }

    async fn run_staged_steps(&mut self, progress: &mut Progress) -> RsResult<Outcome> {
        if progress.direction == Direction::Forward {
            let mut rows = StagedRows::open(
                &self.shards[0],
                progress.transaction,
                &progress.table,
                progress.applied.as_deref(),
            )
            .await?;
            let failure = loop {
                let step = match rows.next_step(&self.shards[0], None).await {
                    Ok(step) => step,
                    Err(error) if error.is_storage_failure() => return Err(error),
                    Err(error) => break error,
                };
                let Some(last) = step.last().map(|(key, _)| key.clone()) else {
                    if progress.applied.is_none() {
                        // Nothing was staged: nothing to commit.
                        return Ok(Outcome::Committed(self.epoch));
                    }
                    // Resumed after its last row: one more step removes
                    // the marker.
                    let change = inserts(&progress.table, Vec::new(), false);
                    return match self
                        .staged_step(change, progress.transaction, Write::Delete)
                        .await?
                    {
                        Ok(epoch) => Ok(Outcome::Committed(epoch)),
                        Err(error) => Err(RsError::internal(format!(
                            "completing a large transaction failed: {error}"
                        ))),
                    };
                };
                let last_step = rows.heads.is_empty();
                let marker = if last_step {
                    Write::Delete
                } else {
                    let mut next = progress.clone();
                    next.applied = Some(last.clone());
                    Write::Put(next.encode())
                };
                self.hold_watermark(&progress.table, !last_step);
                let change = inserts(&progress.table, step, false);
                progress.steps_run += 1;
                match self
                    .staged_step(change, progress.transaction, marker)
                    .await?
                {
                    Ok(epoch) if last_step => return Ok(Outcome::Committed(epoch)),
                    Ok(_) => progress.applied = Some(last),
                    Err(error) => break error,
                }
            };
            if progress.applied.is_none() {
                // Nothing is applied and no marker written.
                return Ok(Outcome::Refused(failure));
            }
            progress.direction = Direction::Back;
            self.undo_staged(progress).await?;
            return Ok(Outcome::Refused(failure));
        }
        self.undo_staged(progress).await?;
        Ok(Outcome::Refused(RsError::new(
            &codes::UNIQUE_VIOLATION,
            "a large transaction failed and was undone",
        )))
    }

    /// Applies the inverse of every step a staged commit applied, in key
    /// order from where `progress` says the undoing got, and removes its
    /// marker with the last.
    async fn undo_staged(&mut self, progress: &mut Progress) -> RsResult<()> {
        let Some(applied) = progress.applied.clone() else {
            return Ok(());
        };
        let mut rows = StagedRows::open(
            &self.shards[0],
            progress.transaction,
            &progress.table,
            progress.undone.as_deref(),
        )
        .await?;
        loop {
            let step = rows.next_step(&self.shards[0], Some(&applied)).await?;
            let last = step.last().map(|(key, _)| key.clone());
            let done = last
                .as_deref()
                .is_none_or(|last| last >= applied.as_slice());
            let marker = if done {
                Write::Delete
            } else {
                let mut next = progress.clone();
                next.undone = last.clone();
                Write::Put(next.encode())
            };
            self.hold_watermark(&progress.table, true);
            let change = inserts(&progress.table, step, true);
            progress.steps_run += 1;
            if let Err(error) = self
                .staged_step(change, progress.transaction, marker)
                .await?
            {
                // The inverse of rows this commit wrote cannot conflict: a
                // bug, or storage edited behind the engine's back.
                return Err(RsError::internal(format!(
                    "undoing a large transaction's step failed: {error}"
                )));
            }
            progress.undone = last;
            if done {
                return Ok(());
            }
        }
    }

    /// Holds view steps at the watermark a staged commit into `table` began
    /// at (`hold`), or lets them see its own steps' (its last step).
    fn hold_watermark(&mut self, table: &StagedTable, hold: bool) {
        self.held_watermark = match table.change.watermark {
            Some(EventTime {
                staged: Some(StagedJudgement { began_at, .. }),
                ..
            }) if hold => Some((table.change.table_id, began_at.watermark)),
            _ => None,
        };
    }

    /// One step of a staged commit: an ordinary epoch of `change` that
    /// also writes the commit's marker, not published. The inner `Err`:
    /// the step was refused (nothing of it written).
    async fn staged_step(
        &mut self,
        change: TableChange,
        transaction: u64,
        marker: Write,
    ) -> RsResult<Result<Epoch, RsError>> {
        let (reply, receiver) = oneshot::channel();
        let request = CommitRequest {
            changes: if change.rows.is_empty() {
                Vec::new()
            } else {
                vec![change]
            },
            coordinator_writes: vec![(keys::staged_commit_marker(transaction), marker)],
            ddl_transaction: None,
        };
        self.run_commits(vec![(request, reply)]).await?;
        let stepped = receiver
            .await
            .unwrap_or_else(|_| Err(RsError::internal("a staged step got no answer")))
            .map(|committed| committed.epoch);
        if stepped.is_ok() {
            AFTER_STAGED_STEP.pass();
        }
        self.maybe_flush_memtables().await;
        Ok(stepped)
    }

    /// Deletes a transaction's staged rows in the background.
    pub(super) fn reclaim_staging(&mut self, transaction: u64) {
        self.enqueue_reclaim(transaction);
    }
}

/// `table`'s change inserting `rows` (or, `inverse`, deleting them).
fn inserts(table: &StagedTable, rows: Vec<(Vec<u8>, Row)>, inverse: bool) -> TableChange {
    let mut indexes = table.change.indexes.clone();
    if inverse {
        // The rows undone were inserted by this commit's steps, which gave
        // them entries in every index, also one the transaction added.
        for index in &mut indexes {
            index.old_columns = Some(index.columns.clone());
        }
    }
    let watermark = table.change.watermark.map(|event_time| EventTime {
        staged: event_time.staged.map(|staged| StagedJudgement {
            undo: inverse,
            ..staged
        }),
        ..event_time
    });
    TableChange {
        table_id: table.change.table_id,
        table_name: table.change.table_name.clone(),
        indexes,
        watermark,
        primary_key: table.change.primary_key.clone(),
        rows: rows
            .into_iter()
            .map(|(key, row)| {
                let (old, new) = if inverse {
                    (Some(row), None)
                } else {
                    (None, Some(row))
                };
                RowChange { key, old, new }
            })
            .collect(),
    }
}

fn transaction_of(bytes: &[u8]) -> RsResult<u64> {
    bytes
        .get(..8)
        .and_then(|bytes| <[u8; 8]>::try_from(bytes).ok())
        .map(u64::from_be_bytes)
        .ok_or_else(|| RsError::internal("corrupt staged key"))
}

#[cfg(test)]
mod tests {
    //! Goal: the merge of staged segments returns every row once, in key
    //! order, in steps of the size asked, from any point a commit resumes
    //! at; a key staged in two segments fails the step that reaches it
    //! first, even where a step would end between its two copies (a
    //! resumed commit would skip the second). Method: segments written to
    //! an in-memory shard, read back step by step.
    use super::*;
    use rockstream_common::object_store_for;
    use rockstream_types::Datum;

    const TRANSACTION: u64 = 7;

    fn row_key(n: u32) -> Vec<u8> {
        n.to_be_bytes().to_vec()
    }

    async fn staged(segments: &[Vec<u32>]) -> ShardDb {
        let store = object_store_for("memory://").expect("memory store");
        let shard = ShardDb::open(store, "shard").await.expect("opens");
        let mut writes = Vec::new();
        for (segment, keys) in segments.iter().enumerate() {
            let prefix = keys::staged_segment_prefix(TRANSACTION, segment as u32);
            for &n in keys {
                let row = vec![Datum::Int64(i64::from(n))];
                writes.push((
                    [prefix.as_slice(), &row_key(n)].concat(),
                    Write::Put(encode_staged_insert(&row)),
                ));
            }
        }
        shard.commit(1, writes).await.expect("commits");
        shard
    }

    fn table(segments: usize, step_rows: u32) -> StagedTable {
        StagedTable {
            change: TableChange {
                table_id: ObjectId::from_be_bytes([1; 16]),
                table_name: "t".into(),
                rows: Vec::new(),
                indexes: Vec::new(),
                watermark: None,
                primary_key: Vec::new(),
            },
            segments: segments as u32,
            step_rows,
        }
    }

    /// Every step from `after` on, each as its keys; the error that ends
    /// them, if any.
    async fn steps(
        shard: &ShardDb,
        table: &StagedTable,
        after: Option<u32>,
    ) -> (Vec<Vec<u32>>, Option<RsError>) {
        let after = after.map(row_key);
        let mut rows = StagedRows::open(shard, TRANSACTION, table, after.as_deref())
            .await
            .expect("opens");
        let mut steps = Vec::new();
        loop {
            match rows.next_step(shard, None).await {
                Ok(step) if step.is_empty() => return (steps, None),
                Ok(step) => steps.push(
                    step.iter()
                        .map(|(key, row)| {
                            assert_eq!(
                                row[0],
                                Datum::Int64(i64::from(u32::from_be_bytes(
                                    key.as_slice().try_into().expect("4 bytes")
                                )))
                            );
                            u32::from_be_bytes(key.as_slice().try_into().expect("4 bytes"))
                        })
                        .collect(),
                ),
                Err(error) => return (steps, Some(error)),
            }
        }
    }

    #[tokio::test]
    async fn segments_merge_in_key_order_in_steps_from_any_resume_point() {
        let segments = vec![vec![1, 4, 7], vec![2, 5, 8], vec![3, 6, 9]];
        let shard = staged(&segments).await;
        let table = table(3, 2);
        let (all, error) = steps(&shard, &table, None).await;
        assert!(error.is_none());
        assert_eq!(
            all,
            [vec![1, 2], vec![3, 4], vec![5, 6], vec![7, 8], vec![9]]
        );
        let (rest, _) = steps(&shard, &table, Some(4)).await;
        assert_eq!(rest, [vec![5, 6], vec![7, 8], vec![9]]);
        let (none, _) = steps(&shard, &table, Some(9)).await;
        assert!(none.is_empty());
    }

    #[tokio::test]
    async fn many_segments_merge_whole_at_every_step_size() {
        // 2,000 keys dealt pseudo-randomly over 40 segments.
        let mut segments = vec![Vec::new(); 40];
        let mut state = 12345u64;
        for n in 0..2_000u32 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            segments[(state >> 33) as usize % 40].push(n * 3);
        }
        let shard = staged(&segments).await;
        for step_rows in [1, 7, 64, 5_000] {
            let (all, error) = steps(&shard, &table(40, step_rows), None).await;
            assert!(error.is_none(), "{error:?}");
            assert!(all.iter().all(|step| step.len() <= step_rows as usize));
            let keys: Vec<u32> = all.into_iter().flatten().collect();
            assert_eq!(keys, (0..2_000).map(|n| n * 3).collect::<Vec<_>>());
        }
    }

    #[tokio::test]
    async fn a_key_in_two_segments_fails_the_step_that_reaches_it() {
        // Mid-step.
        let shard = staged(&[vec![1, 5], vec![5, 9]]).await;
        let (applied, error) = steps(&shard, &table(2, 10), None).await;
        assert!(applied.is_empty());
        assert_eq!(error.expect("duplicate").code, &codes::UNIQUE_VIOLATION);
        // Where a step of three rows would end between the two copies of 3.
        let shard = staged(&[vec![1, 2, 3], vec![3, 4]]).await;
        let (applied, error) = steps(&shard, &table(2, 3), None).await;
        assert!(applied.is_empty(), "{applied:?}");
        assert_eq!(error.expect("duplicate").code, &codes::UNIQUE_VIOLATION);
    }

    #[test]
    fn a_marker_reads_back_as_written() {
        let mut table = table(12, 3_000);
        table.change.indexes.push(MaintainedIndex {
            id: 2,
            name: "t_serial_key".into(),
            unique: true,
            columns: vec![1],
            old_columns: Some(vec![1]),
            column_names: vec!["serial".into()],
        });
        table.change.indexes.push(MaintainedIndex {
            id: 3,
            name: "t_note_idx".into(),
            unique: false,
            columns: vec![2],
            old_columns: None,
            column_names: vec!["note".into()],
        });
        let progress = Progress {
            transaction: 9,
            table,
            direction: Direction::Back,
            applied: Some(vec![0, 1, 2]),
            undone: None,
            steps_run: 4,
        };
        let read = Progress::decode(9, &progress.encode()).expect("decodes");
        assert_eq!(read.direction, Direction::Back);
        assert_eq!(read.applied, progress.applied);
        assert_eq!(read.undone, None);
        assert_eq!(read.table.segments, 12);
        assert_eq!(read.table.step_rows, 3_000);
        assert_eq!(read.table.change.table_id, progress.table.change.table_id);
        assert_eq!(read.table.change.indexes, progress.table.change.indexes);
        assert!(Progress::decode(9, &progress.encode()[..10]).is_err());
    }
}
