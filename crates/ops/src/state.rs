//! The state interface operators are written against, and an in-memory
//! implementation for tests.
//!
//! An operator sees one epoch's view of its state: reads observe everything
//! committed before the epoch plus the epoch's own earlier writes; writes are
//! buffered and become durable together at the end of the epoch (one atomic
//! batch per shard per epoch, DESIGN §9). Keys are byte strings laid out by
//! [`crate::keys`]; scans return keys in ascending byte order.

use std::collections::BTreeMap;
use std::future::Future;

use rockstream_types::RsResult;

/// Direction of a prefix scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanOrder {
    Ascending,
    Descending,
}

/// Reads of state: point lookups and bounded prefix scans.
pub trait StateRead: Send {
    fn get(&mut self, key: &[u8]) -> impl Future<Output = RsResult<Option<Vec<u8>>>> + Send;

    /// Up to `limit` entries whose key starts with `prefix`, in `order`.
    fn scan_prefix(
        &mut self,
        prefix: &[u8],
        order: ScanOrder,
        limit: usize,
    ) -> impl Future<Output = RsResult<Vec<(Vec<u8>, Vec<u8>)>>> + Send;
}

/// Read-your-writes key-value state for one epoch.
pub trait StateStore: StateRead {
    fn put(&mut self, key: Vec<u8>, value: Vec<u8>);

    fn delete(&mut self, key: Vec<u8>);
}

impl<S: StateRead> StateRead for &mut S {
    fn get(&mut self, key: &[u8]) -> impl Future<Output = RsResult<Option<Vec<u8>>>> + Send {
        (**self).get(key)
    }

    fn scan_prefix(
        &mut self,
        prefix: &[u8],
        order: ScanOrder,
        limit: usize,
    ) -> impl Future<Output = RsResult<Vec<(Vec<u8>, Vec<u8>)>>> + Send {
        (**self).scan_prefix(prefix, order, limit)
    }
}

impl<S: StateStore> StateStore for &mut S {
    fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        (**self).put(key, value)
    }

    fn delete(&mut self, key: Vec<u8>) {
        (**self).delete(key)
    }
}

/// Adds `change` to the count stored at `key` (absent = 0), deleting the
/// key when the sum is zero; returns `(old, new)`. A negative sum means an
/// input retracted what it never inserted: a bug upstream, so it panics.
pub async fn add_to_count<S: StateStore>(
    store: &mut S,
    key: Vec<u8>,
    change: i64,
    what: &str,
) -> RsResult<(i64, i64)> {
    let old = store
        .get(&key)
        .await?
        .map(|bytes| crate::keys::decode_weight(&bytes))
        .unwrap_or(0);
    let new = old + change;
    assert!(new >= 0, "{what} count went negative");
    if new == 0 {
        store.delete(key);
    } else {
        store.put(key, crate::keys::encode_weight(new));
    }
    Ok((old, new))
}

/// A `BTreeMap` store: what a committed SlateDB shard looks like, minus
/// durability. Used by operator tests.
#[derive(Debug, Default, Clone)]
pub struct MemoryStore {
    pub entries: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl StateRead for MemoryStore {
    async fn get(&mut self, key: &[u8]) -> RsResult<Option<Vec<u8>>> {
        Ok(self.entries.get(key).cloned())
    }

    async fn scan_prefix(
        &mut self,
        prefix: &[u8],
        order: ScanOrder,
        limit: usize,
    ) -> RsResult<Vec<(Vec<u8>, Vec<u8>)>> {
        let range = self
            .entries
            .range(prefix.to_vec()..)
            .take_while(|(key, _)| key.starts_with(prefix));
        let entries: Vec<(Vec<u8>, Vec<u8>)> = match order {
            ScanOrder::Ascending => range
                .take(limit)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            ScanOrder::Descending => {
                let all: Vec<_> = range.collect();
                all.into_iter()
                    .rev()
                    .take(limit)
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            }
        };
        Ok(entries)
    }
}

impl StateStore for MemoryStore {
    fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.entries.insert(key, value);
    }

    fn delete(&mut self, key: Vec<u8>) {
        self.entries.remove(&key);
    }
}

/// Merges a sorted overlay of pending writes (`None` = deleted) with sorted
/// entries read from storage. Both inputs are in `order`; the overlay wins.
pub fn merge_overlay<'a>(
    stored: Vec<(Vec<u8>, Vec<u8>)>,
    overlay: impl Iterator<Item = (&'a Vec<u8>, &'a Option<Vec<u8>>)>,
    order: ScanOrder,
    limit: usize,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut overlay = overlay.peekable();
    let mut stored = stored.into_iter().peekable();
    let mut out = Vec::new();
    let before = |a: &[u8], b: &[u8]| match order {
        ScanOrder::Ascending => a < b,
        ScanOrder::Descending => a > b,
    };
    while out.len() < limit {
        let take_overlay = match (stored.peek(), overlay.peek()) {
            (None, None) => break,
            (Some(_), None) => false,
            (None, Some(_)) => true,
            (Some((stored_key, _)), Some((overlay_key, _))) => {
                if stored_key == *overlay_key {
                    stored.next();
                    true
                } else {
                    before(overlay_key, stored_key)
                }
            }
        };
        if take_overlay {
            let (key, value) = overlay.next().expect("peeked");
            if let Some(value) = value {
                out.push((key.clone(), value.clone()));
            }
        } else {
            out.push(stored.next().expect("peeked"));
        }
    }
    out
}
