//! The coordinator's log: how an epoch that writes on several shards stays
//! atomic across a crash (RFC 0001 §4).
//!
//! Shard 0 is the coordinator. An epoch is computed on every shard before
//! any commits; then shard 0 commits its own writes together with a *log
//! record* of every other shard's writes, and only then do the other
//! shards commit theirs, in parallel. Shard 0's commit is the epoch's
//! commit point: after a crash, a shard whose committed epoch is behind
//! shard 0's applies its part of shard 0's last log record ([`repair`]),
//! so an epoch is on every shard it wrote or, when shard 0 never committed
//! it, on none (the others commit only after shard 0).
//!
//! Only the last epoch can be in doubt: the engine starts an epoch once
//! every shard has committed the one before, so the log record of epoch e
//! is deleted by shard 0's commit of the next epoch.
//!
//! ```text
//! 0x06 'L' 'G' epoch(8) shard(2) part(4)  -> writes    a shard's writes of an epoch
//! ```
//! A record is cut into parts of at most [`LOG_PART_BYTES`]. The writes are
//! encoded as commit-log records encode them
//! ([`commit_log::encode_write`]).

use std::collections::BTreeMap;

use rockstream_ops::keys;
use rockstream_ops::{ScanOrder, Write};
use rockstream_storage::{commit_log, ShardDb};
use rockstream_types::{Epoch, RsError, RsResult};

/// Bound on one stored part of a log record.
pub(super) const LOG_PART_BYTES: usize = 4 * 1024 * 1024;

/// `0x06 'L' 'G'`: the prefix of every log record.
fn log_prefix() -> Vec<u8> {
    vec![keys::SHARD_META, b'L', b'G']
}

fn record_prefix(epoch: Epoch, shard: u16) -> Vec<u8> {
    let mut key = log_prefix();
    key.extend_from_slice(&epoch.to_be_bytes());
    key.extend_from_slice(&shard.to_be_bytes());
    key
}

/// The log record of `writes`, shard `shard`'s writes of `epoch`: its parts
/// as keys and values for shard 0's batch.
pub(super) fn record(
    epoch: Epoch,
    shard: u16,
    writes: &BTreeMap<Vec<u8>, Write>,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let prefix = record_prefix(epoch, shard);
    let mut parts = Vec::new();
    let mut part = Vec::new();
    for (key, write) in writes {
        commit_log::encode_write(key, write, &mut part);
        if part.len() >= LOG_PART_BYTES {
            parts.push(std::mem::take(&mut part));
        }
    }
    if !part.is_empty() {
        parts.push(part);
    }
    parts
        .into_iter()
        .enumerate()
        .map(|(index, part)| {
            let mut key = prefix.clone();
            key.extend_from_slice(&(index as u32).to_be_bytes());
            (key, part)
        })
        .collect()
}

fn decode_writes(bytes: &[u8], out: &mut Vec<(Vec<u8>, Write)>) -> RsResult<()> {
    let writes = commit_log::decode_writes(bytes)
        .ok_or_else(|| RsError::internal("a corrupt log record"))?;
    out.extend(writes);
    Ok(())
}

/// Brings every shard to the coordinator's committed epoch after a crash
/// between shard commits, from the coordinator's last log record; returns
/// that record's keys, for the next epoch to delete.
pub(crate) async fn repair(shards: &[ShardDb]) -> RsResult<Vec<Vec<u8>>> {
    let Some(coordinator) = shards.first() else {
        return Err(RsError::internal("a storage without shards"));
    };
    let snapshot = coordinator.snapshot()?;
    let stored = snapshot
        .scan_prefix(&log_prefix(), ScanOrder::Ascending, usize::MAX)
        .await?;
    let epoch = coordinator.committed_epoch().await?;
    let mut kept = Vec::with_capacity(stored.len());
    for (shard_index, shard) in shards.iter().enumerate().skip(1) {
        let shard_id = shard_index as u16;
        let committed = shard.committed_epoch().await?;
        if committed >= epoch {
            continue;
        }
        let prefix = record_prefix(epoch, shard_id);
        let mut writes = Vec::new();
        for (_, value) in stored.iter().filter(|(key, _)| key.starts_with(&prefix)) {
            decode_writes(value, &mut writes)?;
        }
        if writes.is_empty() {
            // It had nothing to write in the coordinator's last epoch.
            continue;
        }
        tracing::info!(
            shard = shard_id,
            epoch,
            writes = writes.len(),
            "completing the last epoch on a shard from the coordinator's log"
        );
        shard.commit(epoch, writes).await?;
    }
    for (key, _) in stored {
        kept.push(key);
    }
    Ok(kept)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    //! Goals: a log record reads back as the writes it was made of, in
    //! parts however large; repair completes an epoch a crash left half
    //! committed. Method: round trips of every kind of write; shards put
    //! in the state a crash between shard commits leaves.
    use super::*;

    #[tokio::test]
    async fn shards_behind_the_coordinator_complete_its_last_epoch_once() {
        // Goal: after a crash between the coordinator's commit and the
        // others', repair brings the lagging shards to the coordinator's
        // epoch, and one that had committed is not written twice.
        let store = rockstream_common::object_store_for("memory://").unwrap();
        let shards = ShardDb::open_all(
            store,
            3,
            rockstream_storage::ARRANGEMENT_CACHE_BYTES_DEFAULT,
            None,
        )
        .await
        .unwrap();
        let row = |name: &[u8]| [&[keys::TABLE_ROWS][..], name].concat();
        let count = [&[keys::OUTPUT][..], b"count"].concat();
        for shard in &shards {
            shard
                .commit(1, vec![(row(b"old"), Write::Put(b"1".to_vec()))])
                .await
                .unwrap();
        }
        let lagging = BTreeMap::from([
            (row(b"new"), Write::Put(b"2".to_vec())),
            (row(b"old"), Write::Delete),
        ]);
        let committed = BTreeMap::from([(count.clone(), Write::AddCount(2))]);
        let mut coordinator = Vec::new();
        for (shard, writes) in [(1, &lagging), (2, &committed)] {
            for (key, part) in record(2, shard, writes) {
                coordinator.push((key, Write::Put(part)));
            }
        }
        shards[0].commit(2, coordinator).await.unwrap();
        shards[2].commit(2, committed.clone()).await.unwrap();
        let logged = repair(&shards).await.unwrap();
        assert_eq!(
            logged.len(),
            2,
            "both records are left for the next epoch to delete"
        );
        for shard in &shards {
            assert_eq!(shard.committed_epoch().await.unwrap(), 2);
        }
        let lagged = shards[1].snapshot().unwrap();
        assert_eq!(lagged.get(&row(b"new")).await.unwrap(), Some(b"2".to_vec()));
        assert_eq!(lagged.get(&row(b"old")).await.unwrap(), None);
        let counted = shards[2].snapshot().unwrap();
        assert_eq!(
            counted.get(&count).await.unwrap(),
            Some(keys::encode_weight(2)),
            "applied once"
        );
        // Nothing is in doubt any more: a second repair changes nothing.
        repair(&shards).await.unwrap();
        assert_eq!(shards[1].committed_epoch().await.unwrap(), 2);
    }

    #[test]
    fn a_record_reads_back_as_its_writes() {
        let mut writes = BTreeMap::new();
        writes.insert(b"a".to_vec(), Write::Put(b"row".to_vec()));
        writes.insert(b"b".to_vec(), Write::Delete);
        writes.insert(b"c".to_vec(), Write::AddCount(-3));
        writes.insert(vec![7; 300], Write::Put(vec![9; LOG_PART_BYTES]));
        writes.insert(b"z".to_vec(), Write::Put(Vec::new()));
        let parts = record(5, 1, &writes);
        assert_eq!(parts.len(), 2, "cut after the part that passed the bound");
        assert!(parts
            .iter()
            .all(|(key, _)| key.starts_with(&record_prefix(5, 1))));
        let mut decoded = Vec::new();
        for (_, part) in &parts {
            decode_writes(part, &mut decoded).unwrap();
        }
        assert_eq!(decoded, writes.into_iter().collect::<Vec<_>>());
        assert!(decode_writes(&[1, 0, 0, 0, 9, 1], &mut Vec::new()).is_err());
    }
}
