//! A shard's arrangement cache (DESIGN §6.12): the hot part of operator
//! state in memory, in front of SlateDB.
//!
//! The cache holds operator state only (`0x01` keys; table rows and view
//! output are read by bulk paths that would only churn it) in two forms:
//! single keys with their value or with "absent", learnt from point reads,
//! and *complete prefixes*, learnt from scans that returned every entry
//! under a prefix: every visible key under a complete prefix is in the
//! cache, so a later scan or point read under it is answered from memory.
//! Complete prefixes never nest (a prefix that covers others replaces
//! them), so the only complete prefix that can cover a key is the greatest
//! one not above it.
//!
//! **Coherence.** The cache mirrors the shard's last commit. Writes reach
//! SlateDB only through [`crate::ShardDb::commit`], which applies each
//! write to the cache as it builds the batch (write-through: a cached
//! key's value is updated, a blind count addition summed onto it; keys not
//! cached are left out). A `generation` counter is odd while a commit is
//! in flight and even when the cache matches the committed state; a
//! snapshot remembers the generation it was taken at and uses the cache
//! only while the generation is still that one, so no reader ever mixes
//! cached values of one commit with stored values of another. A commit
//! that fails clears the cache.
//!
//! **Bounds.** Entries are charged their key and value bytes plus a fixed
//! overhead; past `bytes_max` the least recently used units (a key outside
//! complete prefixes, or a complete prefix with every key under it) are
//! evicted down to three quarters of the bound, so eviction is amortized
//! over many insertions. A scan result larger than an eighth of the bound
//! is not cached. A complete prefix that write-through grows past that
//! size, or by more than it held when last read (and at least
//! [`UNREAD_GROWTH_MIN_BYTES`]), is dropped with its keys: a join side
//! first read while empty (the `orders` of a `customers` row inserted
//! first) would otherwise take in every row written under it, at a cost on
//! every commit, to answer reads that may never come.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use rockstream_ops::keys::OP_STATE;
use rockstream_ops::state::Entries;
use rockstream_ops::{ScanOrder, Write};

/// Default bound on a shard's cached operator state.
pub const ARRANGEMENT_CACHE_BYTES_DEFAULT: usize = 64 * 1024 * 1024;

/// Bytes charged per cached key or prefix besides its own bytes: the map
/// node and the bookkeeping.
const ENTRY_OVERHEAD_BYTES: usize = 64;

/// What a point read found in the cache.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The key's value (`None`: the key is absent).
    Hit(Option<Vec<u8>>),
    Miss,
}

/// Counters of a cache since it was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Point reads and prefix scans answered from memory, and not.
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    pub bytes: usize,
    pub bytes_max: usize,
}

impl CacheStats {
    /// Hits over all cached reads; 0 before any.
    pub fn hit_ratio(&self) -> f64 {
        let reads = self.hits + self.misses;
        if reads == 0 {
            0.0
        } else {
            self.hits as f64 / reads as f64
        }
    }
}

pub struct StateCache {
    inner: Mutex<Inner>,
    bytes_max: usize,
    hits: AtomicU64,
    misses: AtomicU64,
}

#[derive(Default)]
struct Inner {
    /// Even while the cache matches the last commit; odd during a commit.
    generation: u64,
    entries: BTreeMap<Vec<u8>, Cached>,
    /// Complete prefixes: when they were last used, and about how many
    /// bytes they hold.
    complete: BTreeMap<Vec<u8>, Unit>,
    bytes: usize,
    /// Advances once per read or insertion: the recency clock.
    clock: u64,
    evictions: u64,
}

struct Unit {
    used: u64,
    /// The bytes of the prefix and its entries when learnt, plus those of
    /// keys added under it since (an upper bound's estimate: what bounds
    /// its growth).
    bytes: usize,
    /// `bytes` when it was last read (or learnt).
    bytes_read: usize,
}

/// Write-through growth a complete prefix is always allowed between two
/// reads of it.
pub const UNREAD_GROWTH_MIN_BYTES: usize = 4096;

impl Unit {
    /// Whether it has grown past what is worth keeping: past
    /// `prefix_bytes_max`, or since its last read by more than it held then
    /// (at least [`UNREAD_GROWTH_MIN_BYTES`]).
    fn overgrown(&self, prefix_bytes_max: usize) -> bool {
        self.bytes > prefix_bytes_max
            || self.bytes - self.bytes_read > self.bytes_read.max(UNREAD_GROWTH_MIN_BYTES)
    }
}

struct Cached {
    /// `None`: known absent.
    value: Option<Vec<u8>>,
    used: u64,
}

/// True for the keys the cache holds: operator state.
fn cacheable(key: &[u8]) -> bool {
    key.first() == Some(&OP_STATE)
}

/// The entries of `map` whose keys start with `prefix`, in key order.
fn under<'a, V>(
    map: &'a BTreeMap<Vec<u8>, V>,
    prefix: &'a [u8],
) -> impl Iterator<Item = (&'a Vec<u8>, &'a V)> {
    map.range::<[u8], _>((Bound::Included(prefix), Bound::Unbounded))
        .take_while(move |(key, _)| key.starts_with(prefix))
}

fn entry_bytes(key: &[u8], value: &Option<Vec<u8>>) -> usize {
    key.len() + value.as_ref().map_or(0, Vec::len) + ENTRY_OVERHEAD_BYTES
}

impl StateCache {
    pub fn new(bytes_max: usize) -> StateCache {
        StateCache {
            inner: Mutex::new(Inner::default()),
            bytes_max,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// The most a complete prefix may hold: larger scans are not cached,
    /// and a prefix growing past it is dropped.
    fn prefix_bytes_max(&self) -> usize {
        self.bytes_max / 8
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while the lock was held may have left the maps half
        // updated: forget them rather than serve them.
        // A new generation of the same parity: no snapshot reads the
        // cache again, and a commit in flight stays in flight.
        self.inner.lock().unwrap_or_else(|poisoned| {
            let mut inner = poisoned.into_inner();
            inner.forget();
            inner.generation += 2;
            self.inner.clear_poison();
            inner
        })
    }

    /// The generation a snapshot taken now may read at; `None` while a
    /// commit is in flight or when the cache is disabled.
    pub fn generation(&self) -> Option<u64> {
        if self.bytes_max == 0 {
            return None;
        }
        let generation = self.lock().generation;
        generation.is_multiple_of(2).then_some(generation)
    }

    pub fn stats(&self) -> CacheStats {
        let inner = self.lock();
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            evictions: inner.evictions,
            bytes: inner.bytes,
            bytes_max: self.bytes_max,
        }
    }

    fn count(&self, hit: bool) {
        let counter = if hit { &self.hits } else { &self.misses };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A point read at `generation`.
    pub fn get(&self, generation: u64, key: &[u8]) -> Lookup {
        if !cacheable(key) {
            return Lookup::Miss;
        }
        let mut inner = self.lock();
        if inner.generation != generation {
            return Lookup::Miss;
        }
        let lookup = inner.get(key);
        drop(inner);
        self.count(lookup != Lookup::Miss);
        lookup
    }

    /// Point reads of many keys at `generation`, under one lock.
    pub fn get_many(&self, generation: u64, keys: &[&[u8]]) -> Vec<Lookup> {
        if !keys.iter().any(|key| cacheable(key)) {
            return keys.iter().map(|_| Lookup::Miss).collect();
        }
        let mut inner = self.lock();
        if inner.generation != generation {
            return keys.iter().map(|_| Lookup::Miss).collect();
        }
        let (mut hits, mut misses) = (0, 0);
        let lookups: Vec<Lookup> = keys
            .iter()
            .map(|key| {
                if !cacheable(key) {
                    return Lookup::Miss;
                }
                let lookup = inner.get(key);
                match lookup {
                    Lookup::Miss => misses += 1,
                    Lookup::Hit(_) => hits += 1,
                }
                lookup
            })
            .collect();
        drop(inner);
        self.hits.fetch_add(hits, Ordering::Relaxed);
        self.misses.fetch_add(misses, Ordering::Relaxed);
        lookups
    }

    /// Prefix scans of many prefixes at `generation`, under one lock: the
    /// entries of each prefix a complete prefix covers.
    pub fn scan_many(
        &self,
        generation: u64,
        prefixes: &[&[u8]],
        limit: usize,
    ) -> Vec<Option<Entries>> {
        let mut inner = self.lock();
        if inner.generation != generation {
            return prefixes.iter().map(|_| None).collect();
        }
        let (mut hits, mut misses) = (0, 0);
        let answers: Vec<Option<Entries>> = prefixes
            .iter()
            .map(|prefix| {
                if !cacheable(prefix) {
                    return None;
                }
                let answer = inner.scan(prefix, ScanOrder::Ascending, limit);
                match answer {
                    Some(_) => hits += 1,
                    None => misses += 1,
                }
                answer
            })
            .collect();
        drop(inner);
        self.hits.fetch_add(hits, Ordering::Relaxed);
        self.misses.fetch_add(misses, Ordering::Relaxed);
        answers
    }

    /// Remembers every entry under each of `prefixes`, read from storage at
    /// `generation` (prefixes whose scan hit its limit are left out by the
    /// caller).
    pub fn insert_complete_many<'a>(
        &self,
        generation: u64,
        scans: impl IntoIterator<Item = (&'a [u8], &'a Entries)>,
    ) {
        let mut scans = scans
            .into_iter()
            .filter(|(prefix, _)| cacheable(prefix))
            .peekable();
        if scans.peek().is_none() {
            return;
        }
        let mut inner = self.lock();
        if inner.generation != generation {
            return;
        }
        for (prefix, entries) in scans {
            inner.insert_complete(prefix, entries, self.prefix_bytes_max());
        }
        inner.evict_beyond(self.bytes_max);
    }

    /// Remembers values read from storage at `generation`.
    pub fn insert_values<'a>(
        &self,
        generation: u64,
        values: impl IntoIterator<Item = (&'a [u8], &'a Option<Vec<u8>>)>,
    ) {
        let mut values = values
            .into_iter()
            .filter(|(key, _)| cacheable(key))
            .peekable();
        if values.peek().is_none() {
            return;
        }
        let mut inner = self.lock();
        if inner.generation != generation {
            return;
        }
        inner.clock += 1;
        let used = inner.clock;
        for (key, value) in values {
            if !inner.entries.contains_key(key) {
                inner.bytes += entry_bytes(key, value);
                inner.entries.insert(
                    key.to_vec(),
                    Cached {
                        value: value.clone(),
                        used,
                    },
                );
            }
        }
        inner.evict_beyond(self.bytes_max);
    }

    /// Up to `limit` entries under `prefix` in `order`, if a complete
    /// prefix covers it at `generation`.
    pub fn scan(
        &self,
        generation: u64,
        prefix: &[u8],
        order: ScanOrder,
        limit: usize,
    ) -> Option<Entries> {
        if !cacheable(prefix) {
            return None;
        }
        let mut inner = self.lock();
        if inner.generation != generation {
            return None;
        }
        let entries = inner.scan(prefix, order, limit);
        drop(inner);
        self.count(entries.is_some());
        entries
    }

    /// Remembers every entry under `prefix`, read from storage at
    /// `generation`.
    pub fn insert_complete(&self, generation: u64, prefix: &[u8], entries: &Entries) {
        self.insert_complete_many(generation, [(prefix, entries)]);
    }

    /// Forgets every entry (the database below was reopened); snapshots
    /// taken before stop reading the cache.
    pub fn forget_all(&self) {
        let mut inner = self.lock();
        inner.forget();
        inner.generation += 2;
    }

    /// Marks a commit in flight: snapshots taken before it stop reading
    /// the cache.
    pub fn begin_commit(&self) {
        let mut inner = self.lock();
        debug_assert!(inner.generation.is_multiple_of(2), "commits overlap");
        inner.generation = (inner.generation + 1) | 1;
    }

    /// Applies the writes of the commit in flight to the cached keys,
    /// under one lock.
    pub fn apply_all(&self, writes: &[(Vec<u8>, Write)]) {
        if self.bytes_max == 0 {
            return;
        }
        let mut inner = self.lock();
        debug_assert!(
            !inner.generation.is_multiple_of(2),
            "a write outside a commit"
        );
        if inner.entries.is_empty() && inner.complete.is_empty() {
            return;
        }
        for (key, write) in writes {
            if cacheable(key) {
                inner.apply(key, write, self.prefix_bytes_max());
            }
        }
        inner.evict_beyond(self.bytes_max);
    }

    /// Ends the commit in flight: `durable` when it reached storage, else
    /// the cache is emptied (what storage holds is not known).
    pub fn finish_commit(&self, durable: bool) {
        let mut inner = self.lock();
        if !durable {
            inner.forget();
        }
        inner.generation |= 1;
        inner.generation += 1;
        let bytes_max = self.bytes_max;
        inner.evict_beyond(bytes_max);
    }
}

impl Inner {
    /// Records `entries` as everything under `prefix`, unless they take
    /// more than `bytes_max` or a complete prefix covers it already.
    fn insert_complete(&mut self, prefix: &[u8], entries: &Entries, bytes_max: usize) {
        let bytes: usize = entries
            .iter()
            .map(|(key, value)| key.len() + value.len() + ENTRY_OVERHEAD_BYTES)
            .sum();
        if bytes > bytes_max || self.covering(prefix).is_some() {
            return;
        }
        self.clock += 1;
        let used = self.clock;
        // Complete prefixes under this one merge into it.
        let nested: Vec<Vec<u8>> = under(&self.complete, prefix)
            .map(|(nested, _)| nested.clone())
            .collect();
        for nested in nested {
            self.complete.remove(&nested);
            self.bytes -= nested.len() + ENTRY_OVERHEAD_BYTES;
        }
        for (key, value) in entries {
            debug_assert!(key.starts_with(prefix), "a scanned key outside its prefix");
            let value = Some(value.clone());
            match self.entries.get_mut(key.as_slice()) {
                Some(cached) => {
                    debug_assert!(cached.value == value, "the cache disagrees with storage");
                    // Storage is the truth, should they ever differ.
                    let old_bytes = entry_bytes(key, &cached.value);
                    cached.value = value;
                    cached.used = used;
                    let new_bytes = entry_bytes(key, &cached.value);
                    self.bytes = self.bytes + new_bytes - old_bytes;
                }
                None => {
                    self.bytes += entry_bytes(key, &value);
                    self.entries.insert(key.clone(), Cached { value, used });
                }
            }
        }
        self.bytes += prefix.len() + ENTRY_OVERHEAD_BYTES;
        let bytes = bytes + prefix.len() + ENTRY_OVERHEAD_BYTES;
        self.complete.insert(
            prefix.to_vec(),
            Unit {
                used,
                bytes,
                bytes_read: bytes,
            },
        );
    }

    /// The complete prefix that covers `key`, if any.
    fn covering(&self, key: &[u8]) -> Option<&Vec<u8>> {
        self.complete
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(key)))
            .next_back()
            .map(|(prefix, _)| prefix)
            .filter(|prefix| key.starts_with(prefix))
    }

    fn touch_covering(&mut self, key: &[u8]) -> bool {
        let clock = self.clock;
        let Some(prefix) = self.covering(key).cloned() else {
            return false;
        };
        if let Some(unit) = self.complete.get_mut(&prefix) {
            unit.used = clock;
            unit.bytes_read = unit.bytes;
        }
        true
    }

    fn get(&mut self, key: &[u8]) -> Lookup {
        self.clock += 1;
        let clock = self.clock;
        if let Some(cached) = self.entries.get_mut(key) {
            cached.used = clock;
            let value = cached.value.clone();
            self.touch_covering(key);
            return Lookup::Hit(value);
        }
        if self.touch_covering(key) {
            return Lookup::Hit(None);
        }
        Lookup::Miss
    }

    fn scan(&mut self, prefix: &[u8], order: ScanOrder, limit: usize) -> Option<Entries> {
        self.clock += 1;
        if !self.touch_covering(prefix) {
            return None;
        }
        let range = under(&self.entries, prefix)
            .filter_map(|(key, cached)| Some((key.clone(), cached.value.clone()?)));
        Some(match order {
            ScanOrder::Ascending => range.take(limit).collect(),
            ScanOrder::Descending => {
                let mut all: Entries = range.collect();
                all.reverse();
                all.truncate(limit);
                all
            }
        })
    }

    /// Applies a committed write to `key`; a complete prefix that it makes
    /// [`Unit::overgrown`] is dropped.
    fn apply(&mut self, key: &[u8], write: &Write, prefix_bytes_max: usize) {
        if let Some(cached) = self.entries.get_mut(key) {
            let old_bytes = entry_bytes(key, &cached.value);
            cached.value = write.apply(cached.value.take());
            let new_bytes = entry_bytes(key, &cached.value);
            self.bytes = self.bytes + new_bytes - old_bytes;
            return;
        }
        let Some(prefix) = self.covering(key).cloned() else {
            return;
        };
        // Under a complete prefix an uncached key is absent.
        let value = write.apply(None);
        if value.is_none() {
            return;
        }
        let bytes = entry_bytes(key, &value);
        let unit = self
            .complete
            .get_mut(&prefix)
            .expect("a covering prefix is complete");
        unit.bytes += bytes;
        if unit.overgrown(prefix_bytes_max) {
            self.drop_prefix(&prefix);
            return;
        }
        self.bytes += bytes;
        let used = self.clock;
        self.entries.insert(key.to_vec(), Cached { value, used });
    }

    /// Forgets a complete prefix and every key under it.
    fn drop_prefix(&mut self, prefix: &[u8]) {
        if self.complete.remove(prefix).is_none() {
            return;
        }
        self.bytes -= prefix.len() + ENTRY_OVERHEAD_BYTES;
        let keys: Vec<Vec<u8>> = under(&self.entries, prefix)
            .map(|(key, _)| key.clone())
            .collect();
        self.evictions += 1 + keys.len() as u64;
        for key in keys {
            if let Some(cached) = self.entries.remove(&key) {
                self.bytes -= entry_bytes(&key, &cached.value);
            }
        }
    }

    fn forget(&mut self) {
        self.entries.clear();
        self.complete.clear();
        self.bytes = 0;
    }

    /// Evicts the least recently used units down to three quarters of
    /// `bytes_max`, once past it.
    fn evict_beyond(&mut self, bytes_max: usize) {
        if self.bytes <= bytes_max {
            return;
        }
        let excess = self.bytes - bytes_max / 4 * 3;
        // Each unit's last use and size: a complete prefix with the keys
        // under it, or a key outside complete prefixes.
        let mut units: Vec<(u64, usize)> = self
            .complete
            .iter()
            .map(|(prefix, unit)| (unit.used, prefix.len() + ENTRY_OVERHEAD_BYTES))
            .collect();
        let mut covered_bytes: BTreeMap<&[u8], usize> = BTreeMap::new();
        for (key, cached) in &self.entries {
            let bytes = entry_bytes(key, &cached.value);
            match self.covering(key) {
                Some(prefix) => *covered_bytes.entry(prefix.as_slice()).or_default() += bytes,
                None => units.push((cached.used, bytes)),
            }
        }
        for ((used, bytes), (prefix, prefix_used)) in units.iter_mut().zip(&self.complete) {
            debug_assert_eq!(*used, prefix_used.used);
            *bytes += covered_bytes.get(prefix.as_slice()).copied().unwrap_or(0);
        }
        // The last use up to which units go: the oldest ones that free
        // the excess.
        units.sort_unstable();
        let mut freed = 0;
        let mut cutoff = 0;
        for (used, bytes) in units {
            if freed >= excess {
                break;
            }
            freed += bytes;
            cutoff = used;
        }
        let evicted: Vec<Vec<u8>> = self
            .complete
            .iter()
            .filter(|(_, unit)| unit.used <= cutoff)
            .map(|(prefix, _)| prefix.clone())
            .collect();
        self.evictions += evicted.len() as u64;
        for prefix in &evicted {
            self.complete.remove(prefix);
            self.bytes -= prefix.len() + ENTRY_OVERHEAD_BYTES;
        }
        // Keys under an evicted prefix go with it; keys outside every
        // complete prefix go by their own last use.
        let mut removed_bytes = 0;
        let mut removed_keys = 0;
        let complete = &self.complete;
        let under_evicted = |key: &[u8]| {
            let at = evicted.partition_point(|prefix| prefix.as_slice() <= key);
            at > 0 && key.starts_with(&evicted[at - 1])
        };
        self.entries.retain(|key, cached| {
            let covered = complete
                .range::<[u8], _>((Bound::Unbounded, Bound::Included(key.as_slice())))
                .next_back()
                .is_some_and(|(prefix, _)| key.starts_with(prefix));
            let keep = covered || !(under_evicted(key) || cached.used <= cutoff);
            if !keep {
                removed_bytes += entry_bytes(key, &cached.value);
                removed_keys += 1;
            }
            keep
        });
        self.bytes -= removed_bytes;
        self.evictions += removed_keys;
    }
}

#[cfg(test)]
mod tests {
    //! Goal: a complete prefix kept by write-through stays within the size
    //! of a cacheable scan, and grows between reads by no more than it held
    //! when read (or `UNREAD_GROWTH_MIN_BYTES`); past either, the prefix and
    //! its keys are dropped and reads go to storage again.
    use rockstream_ops::keys::{op_prefix, JOIN_LEFT, MIN_MAX};

    use super::*;

    /// A prefix of operator state of `kind`, learnt complete while empty
    /// (as a join side is when the other side's row comes first).
    fn learnt_empty(cache: &StateCache, kind: [u8; 2]) -> Vec<u8> {
        let prefix = op_prefix(kind, 7);
        let generation = cache.generation().expect("enabled");
        cache.insert_complete(generation, &prefix, &Vec::new());
        prefix
    }

    fn key_under(prefix: &[u8], n: u32) -> Vec<u8> {
        let mut key = prefix.to_vec();
        key.extend_from_slice(&n.to_be_bytes());
        key
    }

    fn commit(cache: &StateCache, writes: &[(Vec<u8>, Write)]) {
        cache.begin_commit();
        cache.apply_all(writes);
        cache.finish_commit(true);
    }

    #[test]
    fn a_complete_prefix_grown_by_writes_past_its_bound_is_dropped() {
        let cache = StateCache::new(64 * 1024);
        let prefix = learnt_empty(&cache, MIN_MAX);
        let mut added = 0;
        loop {
            let writes: Vec<(Vec<u8>, Write)> = (added..added + 10)
                .map(|n| (key_under(&prefix, n), Write::AddCount(1)))
                .collect();
            commit(&cache, &writes);
            added += 10;
            // Read after each commit: only the bound can drop it.
            let generation = cache.generation().expect("enabled");
            match cache.scan(generation, &prefix, ScanOrder::Ascending, usize::MAX) {
                Some(entries) => {
                    assert_eq!(entries.len(), added as usize, "every key written is cached");
                    assert!(cache.stats().bytes <= cache.prefix_bytes_max());
                }
                None => break,
            }
            assert!(added < 10_000, "the prefix was never dropped");
        }
        let stats = cache.stats();
        assert_eq!(stats.bytes, 0, "its keys went with it");
        assert!(stats.evictions > 0);
        let generation = cache.generation().expect("enabled");
        assert_eq!(cache.get(generation, &key_under(&prefix, 0)), Lookup::Miss);
    }

    #[test]
    fn a_complete_prefix_written_but_not_read_is_dropped() {
        let cache = StateCache::new(64 * 1024 * 1024);
        let prefix = learnt_empty(&cache, JOIN_LEFT);
        let mut added = 0;
        while cache.stats().evictions == 0 {
            commit(&cache, &[(key_under(&prefix, added), Write::AddCount(1))]);
            added += 1;
            assert!(
                cache.stats().bytes <= 2 * UNREAD_GROWTH_MIN_BYTES,
                "{added} keys"
            );
        }
        assert_eq!(cache.stats().bytes, 0, "its keys went with it");
        let generation = cache.generation().expect("enabled");
        assert_eq!(
            cache.scan(generation, &prefix, ScanOrder::Ascending, 10),
            None
        );
    }
}
