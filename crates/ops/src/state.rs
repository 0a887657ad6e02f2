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

use rockstream_types::{RsError, RsResult};

/// Direction of a prefix scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanOrder {
    Ascending,
    Descending,
}

/// Reads of state: point lookups and bounded prefix scans. Reads take
/// `&self`, so several views can step concurrently over one epoch's state.
pub trait StateRead: Send + Sync {
    fn get(&self, key: &[u8]) -> impl Future<Output = RsResult<Option<Vec<u8>>>> + Send;

    /// Point lookups of many keys, answered in the order of `keys`. Storage
    /// answers a batch of nearby keys with one range scan instead of one
    /// lookup per key.
    fn get_many(
        &self,
        keys: &[&[u8]],
    ) -> impl Future<Output = RsResult<Vec<Option<Vec<u8>>>>> + Send {
        async move {
            let mut values = Vec::with_capacity(keys.len());
            for key in keys {
                values.push(self.get(key).await?);
            }
            Ok(values)
        }
    }

    /// Up to `limit` entries whose key starts with `prefix`, in `order`.
    fn scan_prefix(
        &self,
        prefix: &[u8],
        order: ScanOrder,
        limit: usize,
    ) -> impl Future<Output = RsResult<Vec<(Vec<u8>, Vec<u8>)>>> + Send;

    /// Up to `limit` entries under each of `prefixes`, in ascending key
    /// order, answered in the order of `prefixes`. The prefixes must be
    /// ascending and none may start with another ([`prefixes_are_ordered`]):
    /// the keys of one arrangement a batch touches, sorted. Storage answers
    /// them with one forward pass over the range they span, skipping
    /// gaps, instead of one scan per prefix.
    fn scan_prefixes(
        &self,
        prefixes: &[&[u8]],
        limit: usize,
    ) -> impl Future<Output = RsResult<Vec<Entries>>> + Send {
        async move {
            debug_assert!(prefixes_are_ordered(prefixes));
            let mut answers = Vec::with_capacity(prefixes.len());
            for prefix in prefixes {
                answers.push(
                    self.scan_prefix(prefix, ScanOrder::Ascending, limit)
                        .await?,
                );
            }
            Ok(answers)
        }
    }
}

/// Stored entries, `(key, value)`, in key order.
pub type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// True when `prefixes` ascend and none starts with another, as
/// [`StateRead::scan_prefixes`] requires: then every key under one prefix
/// sorts before the next prefix.
pub fn prefixes_are_ordered(prefixes: &[&[u8]]) -> bool {
    prefixes
        .windows(2)
        .all(|pair| pair[0] < pair[1] && !pair[1].starts_with(pair[0]))
}

/// Read-your-writes key-value state for one epoch.
///
/// Besides plain puts and deletes a store takes *blind count additions*:
/// [`StateStore::add_count`] adds to the count stored at a key (an 8-byte
/// weight, absent = 0) without reading it, and a count that sums to zero
/// reads as absent. Storage turns these into merge operands summed by
/// SlateDB (DESIGN §6.2), so maintaining arrangements and view output costs
/// no reads.
pub trait StateStore: StateRead {
    fn put(&mut self, key: Vec<u8>, value: Vec<u8>);

    fn delete(&mut self, key: Vec<u8>);

    /// Adds `change` to the count at `key` without reading it.
    fn add_count(&mut self, key: Vec<u8>, change: i64);
}

/// One buffered write of an overlay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    Put(Vec<u8>),
    Delete,
    /// A blind addition to the count at the key.
    AddCount(i64),
}

impl Write {
    /// The value this write leaves at its key, given the value beneath it.
    pub fn apply(&self, below: Option<Vec<u8>>) -> Option<Vec<u8>> {
        match self {
            Write::Put(value) => Some(value.clone()),
            Write::Delete => None,
            Write::AddCount(change) => {
                count_value(below.as_deref().map_or(0, crate::keys::decode_weight) + change)
            }
        }
    }

    /// True when the write may make a stored key read as absent.
    pub fn may_hide(&self) -> bool {
        matches!(self, Write::Delete | Write::AddCount(i64::MIN..=-1))
    }
}

/// The stored form of a count: absent when zero.
fn count_value(count: i64) -> Option<Vec<u8>> {
    (count != 0).then(|| crate::keys::encode_weight(count))
}

/// Reads through any pointer to a store: `&mut S` for an operator writing
/// into a borrowed store, `&S` and `Arc<S>` for views stepping concurrently
/// over a shared one.
macro_rules! delegate_state_read {
    ($($pointer:ty),*) => {$(
        impl<S: StateRead> StateRead for $pointer {
            fn get(&self, key: &[u8]) -> impl Future<Output = RsResult<Option<Vec<u8>>>> + Send {
                (**self).get(key)
            }

            fn get_many(
                &self,
                keys: &[&[u8]],
            ) -> impl Future<Output = RsResult<Vec<Option<Vec<u8>>>>> + Send {
                (**self).get_many(keys)
            }

            fn scan_prefix(
                &self,
                prefix: &[u8],
                order: ScanOrder,
                limit: usize,
            ) -> impl Future<Output = RsResult<Vec<(Vec<u8>, Vec<u8>)>>> + Send {
                (**self).scan_prefix(prefix, order, limit)
            }

            fn scan_prefixes(
                &self,
                prefixes: &[&[u8]],
                limit: usize,
            ) -> impl Future<Output = RsResult<Vec<Entries>>> + Send {
                (**self).scan_prefixes(prefixes, limit)
            }
        }
    )*};
}

delegate_state_read!(&mut S, &S, std::sync::Arc<S>);

impl<S: StateStore> StateStore for &mut S {
    fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        (**self).put(key, value)
    }

    fn delete(&mut self, key: Vec<u8>) {
        (**self).delete(key)
    }

    fn add_count(&mut self, key: Vec<u8>, change: i64) {
        (**self).add_count(key, change)
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
    if new < 0 {
        return Err(RsError::internal(format!("{what} count went negative")));
    }
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
    async fn get(&self, key: &[u8]) -> RsResult<Option<Vec<u8>>> {
        Ok(self.entries.get(key).cloned())
    }

    async fn scan_prefix(
        &self,
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

    fn add_count(&mut self, key: Vec<u8>, change: i64) {
        let old = self.entries.remove(&key);
        if let Some(value) = Write::AddCount(change).apply(old) {
            self.entries.insert(key, value);
        }
    }
}

/// Merges a sorted overlay of pending writes with sorted entries read from
/// storage. Both inputs are in `order`; the overlay's writes apply on top of
/// the stored values.
pub fn merge_overlay<'a>(
    stored: Vec<(Vec<u8>, Vec<u8>)>,
    overlay: impl Iterator<Item = (&'a Vec<u8>, &'a Write)>,
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
        let below = match (stored.peek(), overlay.peek()) {
            (None, None) => break,
            (Some(_), None) => None,
            (None, Some(_)) => Some(None),
            (Some((stored_key, _)), Some((overlay_key, _))) => {
                if stored_key == *overlay_key {
                    Some(stored.next().map(|(_, value)| value))
                } else if before(overlay_key, stored_key) {
                    Some(None)
                } else {
                    None
                }
            }
        };
        match below {
            Some(below) => {
                let (key, write) = overlay.next().expect("peeked");
                if let Some(value) = write.apply(below) {
                    out.push((key.clone(), value));
                }
            }
            None => out.push(stored.next().expect("peeked")),
        }
    }
    out
}
