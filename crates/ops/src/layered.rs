//! A write overlay on top of a readable store.
//!
//! [`OverlayStore`] buffers writes in a sorted map and answers reads from
//! the buffer first, then from its base. Two uses: an epoch's store is an
//! overlay over the shard's pinned snapshot (its writes become the epoch's
//! atomic batch), and one view's step runs in an overlay over the epoch
//! ([`LayeredStore`]) so a failing view (e.g. division by zero on some row)
//! leaves no trace: its writes are kept only if the step succeeds.

use std::collections::BTreeMap;

use rockstream_types::RsResult;

use crate::state::{merge_overlay, Entries, ScanOrder, StateRead, StateStore, Write};

/// [`OverlayStore::absorb`] merges sorted maps when the incoming one is at
/// least this fraction (1/n) of the size of the overlay's own: a merge
/// moves every entry of both, a search per key costs a logarithm.
const ABSORB_MERGE_RATIO: usize = 16;

pub struct OverlayStore<B> {
    base: B,
    writes: BTreeMap<Vec<u8>, Write>,
}

/// An overlay over a borrowed store, committed into it on success.
pub type LayeredStore<'a, S> = OverlayStore<&'a mut S>;

impl<B: StateRead> OverlayStore<B> {
    pub fn new(base: B) -> Self {
        OverlayStore {
            base,
            writes: BTreeMap::new(),
        }
    }

    /// The buffered writes, in key order.
    pub fn into_writes(self) -> BTreeMap<Vec<u8>, Write> {
        self.writes
    }
}

impl<B: StateRead> OverlayStore<B> {
    /// Adds writes taken from another overlay over the same base, as if
    /// applied one by one. When they are many and none of their keys falls
    /// between keys this overlay already holds (a view's state and output
    /// next to the epoch's table rows and other views' state), the two
    /// sorted maps are merged in one linear pass instead of one search per
    /// key.
    pub fn absorb(&mut self, mut writes: BTreeMap<Vec<u8>, Write>) {
        let (Some((first, _)), Some((last, _))) =
            (writes.first_key_value(), writes.last_key_value())
        else {
            return;
        };
        let many = writes.len().saturating_mul(ABSORB_MERGE_RATIO) >= self.writes.len();
        if many
            && self
                .writes
                .range(first.clone()..=last.clone())
                .next()
                .is_none()
        {
            self.writes.append(&mut writes);
        } else {
            apply_writes(self, writes);
        }
    }
}

impl<B: StateStore> OverlayStore<B> {
    /// Moves the buffered writes into the base store.
    pub fn commit(mut self) {
        let writes = std::mem::take(&mut self.writes);
        apply_writes(&mut self.base, writes);
    }
}

/// Applies writes taken from an overlay ([`OverlayStore::into_writes`]) to
/// `store`.
pub fn apply_writes<S: StateStore>(store: &mut S, writes: BTreeMap<Vec<u8>, Write>) {
    for (key, write) in writes {
        match write {
            Write::Put(value) => store.put(key, value),
            Write::Delete => store.delete(key),
            Write::AddCount(change) => store.add_count(key, change),
        }
    }
}

impl<B: StateRead> StateRead for OverlayStore<B> {
    async fn get(&self, key: &[u8]) -> RsResult<Option<Vec<u8>>> {
        match self.writes.get(key) {
            Some(Write::AddCount(change)) => {
                let change = *change;
                let below = self.base.get(key).await?;
                Ok(Write::AddCount(change).apply(below))
            }
            Some(write) => Ok(write.apply(None)),
            None => self.base.get(key).await,
        }
    }

    async fn get_many(&self, keys: &[&[u8]]) -> RsResult<Vec<Option<Vec<u8>>>> {
        let mut values = vec![None; keys.len()];
        let mut below: Vec<usize> = Vec::new();
        for (index, key) in keys.iter().enumerate() {
            match self.writes.get(*key) {
                None | Some(Write::AddCount(_)) => below.push(index),
                Some(write) => values[index] = write.apply(None),
            }
        }
        let below_keys: Vec<&[u8]> = below.iter().map(|index| keys[*index]).collect();
        let below_values = self.base.get_many(&below_keys).await?;
        for (index, value) in below.into_iter().zip(below_values) {
            values[index] = match self.writes.get(keys[index]) {
                Some(write) => write.apply(value),
                None => value,
            };
        }
        Ok(values)
    }

    async fn scan_prefix(
        &self,
        prefix: &[u8],
        order: ScanOrder,
        limit: usize,
    ) -> RsResult<Vec<(Vec<u8>, Vec<u8>)>> {
        let pending = self.pending(prefix);
        // Deletes and retractions may hide stored keys: read that many more.
        let hiding = hiding(&pending);
        let stored = self
            .base
            .scan_prefix(prefix, order, limit.saturating_add(hiding))
            .await?;
        Ok(match order {
            ScanOrder::Ascending => merge_overlay(stored, pending.into_iter(), order, limit),
            ScanOrder::Descending => merge_overlay(stored, pending.into_iter().rev(), order, limit),
        })
    }

    async fn scan_prefixes(&self, prefixes: &[&[u8]], limit: usize) -> RsResult<Vec<Entries>> {
        let pending: Vec<Vec<(&Vec<u8>, &Write)>> =
            prefixes.iter().map(|prefix| self.pending(prefix)).collect();
        // Each prefix reads as many more stored entries as its own writes
        // may hide: prefixes are read in groups of equal excess (mostly
        // one group, of none), each group still ascending.
        let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (index, writes) in pending.iter().enumerate() {
            groups.entry(hiding(writes)).or_default().push(index);
        }
        let mut stored: Vec<Entries> = vec![Vec::new(); prefixes.len()];
        for (hiding, indexes) in groups {
            let group: Vec<&[u8]> = indexes.iter().map(|index| prefixes[*index]).collect();
            let answers = self
                .base
                .scan_prefixes(&group, limit.saturating_add(hiding))
                .await?;
            for (index, answer) in indexes.into_iter().zip(answers) {
                stored[index] = answer;
            }
        }
        Ok(stored
            .into_iter()
            .zip(pending)
            .map(|(stored, pending)| {
                merge_overlay(stored, pending.into_iter(), ScanOrder::Ascending, limit)
            })
            .collect())
    }
}

impl<B> OverlayStore<B> {
    /// The buffered writes under `prefix`, in key order.
    fn pending(&self, prefix: &[u8]) -> Vec<(&Vec<u8>, &Write)> {
        self.writes
            .range(prefix.to_vec()..)
            .take_while(|(key, _)| key.starts_with(prefix))
            .collect()
    }
}

/// How many stored keys `writes` may hide from a scan.
fn hiding(writes: &[(&Vec<u8>, &Write)]) -> usize {
    writes.iter().filter(|(_, write)| write.may_hide()).count()
}

impl<B: StateRead> StateStore for OverlayStore<B> {
    fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.writes.insert(key, Write::Put(value));
    }

    fn delete(&mut self, key: Vec<u8>) {
        self.writes.insert(key, Write::Delete);
    }

    fn add_count(&mut self, key: Vec<u8>, change: i64) {
        use std::collections::btree_map::Entry;
        match self.writes.entry(key) {
            Entry::Vacant(entry) => {
                entry.insert(Write::AddCount(change));
            }
            Entry::Occupied(mut entry) => match entry.get() {
                Write::AddCount(earlier) if earlier + change == 0 => {
                    entry.remove();
                }
                Write::AddCount(earlier) => {
                    let combined = earlier + change;
                    entry.insert(Write::AddCount(combined));
                }
                // The key's value is known here: keep it known.
                known => {
                    let value = Write::AddCount(change).apply(known.apply(None));
                    entry.insert(value.map_or(Write::Delete, Write::Put));
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    //! Goal: an overlay (and an overlay of an overlay, committed into it)
    //! reads exactly like applying its writes to the base directly,
    //! including blind count additions.
    use proptest::prelude::*;

    use super::*;
    use crate::keys::{decode_weight, encode_weight};
    use crate::state::{add_to_count, MemoryStore};

    #[derive(Debug, Clone)]
    enum Op {
        Put(u8, i64),
        Delete(u8),
        AddCount(u8, i64),
        /// A read-modify-write, as `add_to_count` does for DISTINCT counts.
        Decrement(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..12, 1i64..4).prop_map(|(k, v)| Op::Put(k, v)),
            (0u8..12).prop_map(Op::Delete),
            (0u8..12, 1i64..4).prop_map(|(k, v)| Op::AddCount(k, v)),
            (0u8..12).prop_map(Op::Decrement),
        ]
    }

    fn key(k: u8) -> Vec<u8> {
        vec![b'p', k]
    }

    async fn apply<S: StateStore>(store: &mut S, op: &Op) {
        match op {
            Op::Put(k, v) => store.put(key(*k), encode_weight(*v)),
            Op::Delete(k) => store.delete(key(*k)),
            Op::AddCount(k, v) => store.add_count(key(*k), *v),
            Op::Decrement(k) => {
                let present = store.get(&key(*k)).await.expect("get").is_some();
                if present {
                    add_to_count(store, key(*k), -1, "test")
                        .await
                        .expect("decrement");
                }
            }
        }
    }

    async fn contents<S: StateStore>(
        store: &mut S,
        order: ScanOrder,
        limit: usize,
    ) -> Vec<(u8, i64)> {
        let mut out = Vec::new();
        for (k, v) in store.scan_prefix(b"p", order, limit).await.expect("scan") {
            out.push((k[1], decode_weight(&v)));
        }
        for k in 0..12u8 {
            let point = store
                .get(&key(k))
                .await
                .expect("get")
                .map(|v| decode_weight(&v));
            let scanned = store
                .scan_prefix(b"p", ScanOrder::Ascending, usize::MAX)
                .await
                .expect("scan")
                .into_iter()
                .find(|(stored, _)| stored[1] == k)
                .map(|(_, v)| decode_weight(&v));
            assert_eq!(point, scanned, "get and scan disagree on key {k}");
        }
        // Batched scans of every other key answer as scans one by one.
        let prefixes: Vec<Vec<u8>> = (0..12u8).step_by(2).map(key).collect();
        let refs: Vec<&[u8]> = prefixes.iter().map(Vec::as_slice).collect();
        let batched = store.scan_prefixes(&refs, limit).await.expect("scans");
        for (prefix, batched) in refs.iter().zip(batched) {
            let one = store
                .scan_prefix(prefix, ScanOrder::Ascending, limit)
                .await
                .expect("scan");
            assert_eq!(
                batched, one,
                "batched and single scans disagree on {prefix:?}"
            );
        }
        out
    }

    proptest! {
        #[test]
        fn overlays_read_like_their_base(
            base_ops in proptest::collection::vec(op(), 0..20),
            outer_ops in proptest::collection::vec(op(), 0..20),
            inner_ops in proptest::collection::vec(op(), 0..20),
            limit in 1usize..14,
            descending: bool,
        ) {
            let order = if descending { ScanOrder::Descending } else { ScanOrder::Ascending };
            futures::executor::block_on(async {
                let mut model = MemoryStore::default();
                for op in &base_ops {
                    apply(&mut model, op).await;
                }
                let mut outer = OverlayStore::new(model.clone());
                for op in &outer_ops {
                    apply(&mut model, op).await;
                    apply(&mut outer, op).await;
                }
                assert_eq!(contents(&mut outer, order, limit).await, contents(&mut model, order, limit).await);
                let mut inner = LayeredStore::new(&mut outer);
                for op in &inner_ops {
                    apply(&mut model, op).await;
                    apply(&mut inner, op).await;
                }
                assert_eq!(contents(&mut inner, order, limit).await, contents(&mut model, order, limit).await);
                inner.commit();
                assert_eq!(contents(&mut outer, order, limit).await, contents(&mut model, order, limit).await);
            });
        }

        /// A layer's writes absorbed into the overlay below it read like
        /// the layer's operations applied there, whether the layer's keys
        /// lie apart from the overlay's (merged) or among them.
        #[test]
        fn absorbed_writes_read_like_applied_ones(
            outer_ops in proptest::collection::vec(op(), 0..20),
            layer_ops in proptest::collection::vec(op(), 0..20),
            layer_keys_from in 0u8..9,
        ) {
            let shift = |op: &Op| match op {
                Op::Put(k, v) => Op::Put(layer_keys_from + k % 4, *v),
                Op::Delete(k) => Op::Delete(layer_keys_from + k % 4),
                Op::AddCount(k, v) => Op::AddCount(layer_keys_from + k % 4, *v),
                Op::Decrement(k) => Op::Decrement(layer_keys_from + k % 4),
            };
            let order = ScanOrder::Ascending;
            futures::executor::block_on(async {
                let mut model = MemoryStore::default();
                let mut outer = OverlayStore::new(MemoryStore::default());
                for op in &outer_ops {
                    apply(&mut model, op).await;
                    apply(&mut outer, op).await;
                }
                let mut layer = OverlayStore::new(&outer);
                for op in layer_ops.iter().map(shift) {
                    apply(&mut model, &op).await;
                    apply(&mut layer, &op).await;
                }
                let writes = layer.into_writes();
                outer.absorb(writes);
                assert_eq!(contents(&mut outer, order, 14).await, contents(&mut model, order, 14).await);
            });
        }
    }
}
