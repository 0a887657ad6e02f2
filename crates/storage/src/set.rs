//! Every shard of a storage, read at one epoch: what a reader pins.
//!
//! A [`SnapshotSet`] holds one [`Snapshot`] per shard, each taken right
//! after that shard committed the same epoch (the published vector
//! frontier, RFC 0001 §4), so all tables and views read through it are
//! mutually consistent. Rows (table rows, view output) are read from the
//! shard that owns their partition key ([`keys::partition_key`]); metadata
//! from the coordinator, shard 0. A scan over many partition keys merges
//! the shards' ascending streams, so rows come in key order at any shard
//! count, holding at most one storage chunk per shard. A scan's chunks
//! start small and double, so a reader that wants a few rows (`LIMIT 10`)
//! reads and decodes a few, and a long scan soon reads whole chunks.

use std::collections::VecDeque;
use std::sync::Arc;

use rockstream_ops::keys::{self, RowStorage};
use rockstream_types::partition::{BucketMap, ShardId};
use rockstream_types::{ObjectId, RsError, RsResult};

use crate::{Snapshot, SCAN_CHUNK_ROWS_MAX};

/// Rows in a scan's first chunk; each next chunk doubles, up to
/// [`SCAN_CHUNK_ROWS_MAX`].
const FIRST_CHUNK_ROWS: usize = 64;

/// One snapshot per shard, all at one epoch.
#[derive(Clone)]
pub struct SnapshotSet {
    shards: Arc<[Snapshot]>,
    map: Arc<BucketMap>,
}

impl SnapshotSet {
    /// `shards[i]` is shard `i`'s snapshot; there is one per shard of `map`.
    pub fn new(shards: Vec<Snapshot>, map: Arc<BucketMap>) -> RsResult<SnapshotSet> {
        if shards.len() != usize::from(map.shard_count()) {
            return Err(RsError::internal(format!(
                "{} snapshots for {} shards",
                shards.len(),
                map.shard_count()
            )));
        }
        Ok(SnapshotSet {
            shards: shards.into(),
            map,
        })
    }

    pub fn shard(&self, shard: ShardId) -> &Snapshot {
        &self.shards[usize::from(shard)]
    }

    /// The shard holding `key`: the owner of its partition key, or the
    /// coordinator for metadata.
    pub fn shard_of_key(&self, key: &[u8]) -> ShardId {
        keys::partition_key(key).map_or(0, |partition| self.map.shard_of(partition))
    }

    pub async fn get(&self, key: &[u8]) -> RsResult<Option<Vec<u8>>> {
        self.shard(self.shard_of_key(key)).get(key).await
    }

    /// Table `table_id`'s stored row keyed `row_key`
    /// ([`keys::table_row_key`]).
    pub async fn table_row(&self, table_id: ObjectId, row_key: &[u8]) -> RsResult<Option<Vec<u8>>> {
        self.get(&keys::table_row_storage_key(table_id, row_key))
            .await
    }

    /// A cursor over the rows of relation `object_id`, stored as `storage`,
    /// in key order, as `(row key, value)`; with `leading`
    /// ([`keys::leading_value_prefix`]), only the rows whose leading key
    /// column holds that value, read from its shard alone when `storage`
    /// partitions by that column (`partitioned`).
    pub fn scan_rows(
        &self,
        storage: &RowStorage,
        object_id: ObjectId,
        leading: &[u8],
        partitioned: bool,
    ) -> RowCursor {
        let base = storage.prefix(object_id);
        let mut prefix = base.clone();
        prefix.extend_from_slice(leading);
        let partition = (!leading.is_empty() && partitioned).then_some(leading);
        RowCursor {
            base_len: base.len(),
            entries: self.scan(prefix, partition),
        }
    }

    /// A cursor over the entries with `prefix`, in key order. With
    /// `partition`, the encoded partition key every entry under `prefix`
    /// shares, only its shard is read.
    pub fn scan(&self, prefix: Vec<u8>, partition: Option<&[u8]>) -> SetCursor {
        let shards: Vec<ShardId> = match partition {
            Some(partition) => vec![self.map.shard_of(partition)],
            None => (0..self.map.shard_count()).collect(),
        };
        SetCursor {
            set: self.clone(),
            prefix,
            chunk_rows: FIRST_CHUNK_ROWS,
            streams: shards
                .into_iter()
                .map(|shard| ShardStream {
                    shard,
                    buffered: VecDeque::new(),
                    after: None,
                    exhausted: false,
                })
                .collect(),
        }
    }
}

/// How an index's entries name their rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexEntries {
    /// A UNIQUE constraint's (RFC 0006): the entry's value is the row key.
    Unique,
    /// A plain index's (RFC 0014): the entry's key ends with the row key,
    /// after this many encoded values.
    Plain { columns: usize },
}

impl SnapshotSet {
    /// The values of `keys`, each read from its shard: one `get_many` per
    /// shard.
    pub async fn get_many(&self, keys: &[Vec<u8>]) -> RsResult<Vec<Option<Vec<u8>>>> {
        let mut by_shard: Vec<Vec<usize>> = vec![Vec::new(); self.shards.len()];
        for (position, key) in keys.iter().enumerate() {
            by_shard[usize::from(self.shard_of_key(key))].push(position);
        }
        let mut values = vec![None; keys.len()];
        for (shard, positions) in by_shard.into_iter().enumerate() {
            if positions.is_empty() {
                continue;
            }
            let asked: Vec<&[u8]> = positions.iter().map(|at| keys[*at].as_slice()).collect();
            let found = self.shards[shard].get_many(&asked).await?;
            for (position, value) in positions.into_iter().zip(found) {
                values[position] = value;
            }
        }
        Ok(values)
    }

    /// A cursor over the rows of table `table_id` that the index entries
    /// under `prefix` name, in the entries' order, as `(row key, stored
    /// row)`; the entries are read from the shard of `partition`, the
    /// leading value every entry under `prefix` is placed by.
    pub fn index_rows(
        &self,
        table_id: ObjectId,
        prefix: Vec<u8>,
        partition: &[u8],
        entries: IndexEntries,
    ) -> IndexRowCursor {
        IndexRowCursor {
            table_id,
            kind: entries,
            entries: self.scan(prefix, Some(partition)),
        }
    }
}

/// The rows an index's entries name ([`SnapshotSet::index_rows`]).
pub struct IndexRowCursor {
    table_id: ObjectId,
    kind: IndexEntries,
    entries: SetCursor,
}

impl IndexRowCursor {
    /// The rows of the next chunk of entries, as `(row key, stored row)`;
    /// empty at the end. An entry whose row is not stored at the same
    /// snapshot is an error: entries and rows commit in one epoch.
    pub async fn next_chunk(&mut self) -> RsResult<Vec<(Vec<u8>, Vec<u8>)>> {
        let chunk = self.entries.next_chunk().await?;
        let mut row_keys = Vec::with_capacity(chunk.len());
        for (key, value) in chunk {
            let row_key = match self.kind {
                IndexEntries::Unique => value,
                IndexEntries::Plain { columns } => keys::index_entry_row_key(&key, columns)
                    .ok_or_else(|| RsError::internal("an index entry's key is corrupt"))?
                    .to_vec(),
            };
            row_keys.push(row_key);
        }
        let storage_keys: Vec<Vec<u8>> = row_keys
            .iter()
            .map(|row_key| keys::table_row_storage_key(self.table_id, row_key))
            .collect();
        let rows = self.entries.set.get_many(&storage_keys).await?;
        row_keys
            .into_iter()
            .zip(rows)
            .map(|(row_key, row)| {
                let row = row.ok_or_else(|| {
                    RsError::internal("an index entry names a row that is not stored")
                })?;
                Ok((row_key, row))
            })
            .collect()
    }
}

/// A [`SetCursor`] over one relation's rows, handing out row keys.
pub struct RowCursor {
    base_len: usize,
    entries: SetCursor,
}

impl RowCursor {
    /// The next rows in key order, at most [`SCAN_CHUNK_ROWS_MAX`], each as
    /// its key within the relation and its stored value; empty at the end.
    pub async fn next_chunk(&mut self) -> RsResult<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut chunk = self.entries.next_chunk().await?;
        for (key, _) in &mut chunk {
            key.drain(..self.base_len);
        }
        Ok(chunk)
    }
}

/// Where one shard's part of a [`SetCursor`] is.
struct ShardStream {
    shard: ShardId,
    /// Read and not yet returned, ascending.
    buffered: VecDeque<(Vec<u8>, Vec<u8>)>,
    /// The last key read from storage.
    after: Option<Vec<u8>>,
    exhausted: bool,
}

/// An ascending scan over the shards of a [`SnapshotSet`].
pub struct SetCursor {
    set: SnapshotSet,
    prefix: Vec<u8>,
    /// The size of the next chunk.
    chunk_rows: usize,
    streams: Vec<ShardStream>,
}

impl SetCursor {
    /// The next entries in key order, at most [`SCAN_CHUNK_ROWS_MAX`];
    /// empty at the end.
    pub async fn next_chunk(&mut self) -> RsResult<Vec<(Vec<u8>, Vec<u8>)>> {
        let rows = self.chunk_rows;
        self.chunk_rows = (rows * 2).min(SCAN_CHUNK_ROWS_MAX);
        if let [stream] = self.streams.as_mut_slice() {
            // One shard: its chunks as they come.
            if !stream.buffered.is_empty() || stream.exhausted {
                return Ok(stream.buffered.drain(..).collect());
            }
            return fill(&self.set, &self.prefix, stream, rows)
                .await
                .map(|()| stream.buffered.drain(..).collect());
        }
        let mut out = Vec::new();
        while out.len() < rows {
            // Every stream must show its next key before the smallest is
            // known.
            for stream in &mut self.streams {
                if stream.buffered.is_empty() && !stream.exhausted {
                    fill(&self.set, &self.prefix, stream, rows).await?;
                }
            }
            let next = self
                .streams
                .iter_mut()
                .filter(|stream| !stream.buffered.is_empty())
                .min_by(|a, b| a.buffered[0].0.cmp(&b.buffered[0].0));
            let Some(stream) = next else {
                break;
            };
            out.extend(stream.buffered.pop_front());
        }
        Ok(out)
    }
}

/// Reads `stream`'s next storage chunk, of at most `rows` entries, into its
/// buffer.
async fn fill(
    set: &SnapshotSet,
    prefix: &[u8],
    stream: &mut ShardStream,
    rows: usize,
) -> RsResult<()> {
    let chunk = set
        .shard(stream.shard)
        .scan_chunk_of(prefix, stream.after.as_deref(), rows)
        .await?;
    match chunk.last() {
        Some((last, _)) => stream.after = Some(last.clone()),
        None => stream.exhausted = true,
    }
    stream.buffered.extend(chunk);
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    //! Goal: a set of shard snapshots reads like one store: rows from the
    //! shard their partition key names, scans in key order over all shards,
    //! a partition's scan from its shard alone. Method: rows spread over
    //! three shards by the bucket map, read back every way.
    use rockstream_ops::Write;

    use super::*;
    use crate::ShardDb;

    /// A table row key: `0x07 table_id(16) row_key`.
    fn row_key(row: &[u8]) -> Vec<u8> {
        let mut key = keys::table_prefix(7);
        key.extend_from_slice(row);
        key
    }

    #[tokio::test]
    async fn rows_read_from_their_shards_in_key_order() {
        let store = crate::object_store_for("memory://").unwrap();
        let shards = ShardDb::open_all(store, 3, crate::ARRANGEMENT_CACHE_BYTES_DEFAULT, None)
            .await
            .unwrap();
        let map = Arc::new(BucketMap::rendezvous(3).unwrap());
        // More rows than the growing chunks before the first whole one,
        // so the merge refills.
        let rows: Vec<Vec<u8>> = (0..2 * SCAN_CHUNK_ROWS_MAX as u32 + 500)
            .map(|n| n.to_be_bytes().to_vec())
            .collect();
        let mut writes: Vec<Vec<(Vec<u8>, Write)>> = vec![Vec::new(); 3];
        for row in &rows {
            let shard = usize::from(map.shard_of(row));
            writes[shard].push((row_key(row), Write::Put(row.clone())));
        }
        assert!(writes.iter().all(|shard| !shard.is_empty()));
        for (shard, writes) in shards.iter().zip(writes) {
            shard.commit(1, writes).await.unwrap();
        }
        let snapshots = shards.iter().map(|s| s.snapshot().unwrap()).collect();
        let set = SnapshotSet::new(snapshots, map.clone()).unwrap();

        let mut cursor = set.scan(keys::table_prefix(7), None);
        let mut scanned = Vec::new();
        let mut sizes = Vec::new();
        loop {
            let chunk = cursor.next_chunk().await.unwrap();
            if chunk.is_empty() {
                break;
            }
            sizes.push(chunk.len());
            scanned.extend(chunk.into_iter().map(|(_, value)| value));
        }
        assert_eq!(scanned, rows, "every row once, in key order");
        // Small first, so that a LIMIT reads little; whole chunks soon.
        assert_eq!(sizes[0], FIRST_CHUNK_ROWS);
        assert!(sizes.iter().all(|&size| size <= SCAN_CHUNK_ROWS_MAX));
        assert!(sizes.contains(&SCAN_CHUNK_ROWS_MAX));
        assert!(sizes.len() < 12, "{sizes:?}");

        let row = &rows[4321];
        assert_eq!(set.get(&row_key(row)).await.unwrap(), Some(row.clone()));
        let mut one = set.scan(row_key(row), Some(row));
        assert_eq!(one.next_chunk().await.unwrap().len(), 1);
        assert!(one.next_chunk().await.unwrap().is_empty());
        // Metadata is the coordinator's.
        assert_eq!(set.shard_of_key(&keys::epoch_key()), 0);
        assert_eq!(set.shard_of_key(&row_key(row)), map.shard_of(row));
        assert!(SnapshotSet::new(Vec::new(), map).is_err());
    }
}
