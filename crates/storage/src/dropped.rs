//! Emptying a dropped object's keys by compaction (DESIGN §5.3).
//!
//! SlateDB has no range delete, and deleting a large object key by key
//! writes a tombstone per key through the WAL, the memtable, L0 and every
//! compaction above it: I/O that slows every other writer for as long as
//! the deletion lasts. A dropped object's keys are instead registered here
//! by prefix, and the shard's compaction filter replaces every entry under
//! such a prefix that passes through a compaction by a tombstone, or drops
//! it outright when the compaction writes the oldest sorted run (nothing
//! older is left for it to hide). The keys therefore go at the pace of
//! compactions that run anyway, at no cost to writers.
//!
//! Two rules keep this invisible to readers:
//! - An entry is only replaced once no snapshot that could read the object
//!   is open: a prefix records the newest snapshot sequence number at the
//!   time it was registered, and a compaction empties it only when SlateDB's
//!   oldest open snapshot is newer (`retention_min_seq`). Readers of the
//!   catalog without the object never look under its prefixes.
//! - Below the oldest run, an entry becomes a tombstone, never nothing: a
//!   dropped entry would let an older version of its key in a lower run be
//!   read again, so a prefix that reads empty stays empty whether or not it
//!   is still registered.
//!
//! Nothing writes under a registered prefix: object ids are never reused.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use slatedb::compactor::{
    Compaction, CompactionRequest, CompactionScheduler, CompactionSchedulerSupplier,
    CompactionSpec, CompactorStateView, SizeTieredCompactionSchedulerSupplier, SourceId,
};
use slatedb::config::CompactorOptions;
use slatedb::manifest::SsTableView;
use slatedb::{
    CompactionFilterDecision, CompactionJobContext, RowEntry, ValueDeletable, VersionedManifest,
};

/// A compaction asked for by [`Dropped::compaction`] rewrites at most this
/// many bytes per byte of tables that may hold dropped keys.
const REWRITE_PER_DROPPED_BYTE_MAX: u64 = 10;

/// The prefixes being emptied on one shard, each with the newest snapshot
/// sequence number that may still read under it. No registered prefix is
/// a prefix of another (an object's prefixes are fixed-length per key
/// space), which [`Removable::covers`] relies on.
#[derive(Default)]
pub(crate) struct Dropped {
    prefixes: RwLock<Arc<BTreeMap<Vec<u8>, u64>>>,
    /// Set by [`Dropped::request`], taken by the scheduler.
    requested: AtomicBool,
}

impl Dropped {
    /// Registers `prefixes`, readable by snapshots up to `newest_reader`.
    /// Registering one again keeps the later bound.
    pub(crate) fn add(&self, prefixes: &[Vec<u8>], newest_reader: u64) {
        self.change(|map| {
            for prefix in prefixes {
                let bound = map.entry(prefix.clone()).or_insert(newest_reader);
                *bound = (*bound).max(newest_reader);
            }
        });
    }

    /// Stops emptying `prefixes` (they read empty already).
    pub(crate) fn remove(&self, prefixes: &[Vec<u8>]) {
        self.change(|map| {
            for prefix in prefixes {
                map.remove(prefix);
            }
        });
    }

    pub(crate) fn len(&self) -> usize {
        self.current().len()
    }

    /// Has the shard's scheduler propose [`Dropped::compaction`] at its
    /// next tick ([`StateScheduler`]).
    pub(crate) fn request(&self) {
        self.requested.store(true, Ordering::Relaxed);
    }

    /// What a compaction with `context` may empty: the prefixes registered
    /// now whose last readers are gone.
    pub(crate) fn removable(&self, context: &CompactionJobContext) -> Removable {
        Removable {
            prefixes: self.unread(context.retention_min_seq),
            oldest_run: context.is_dest_last_run,
        }
    }

    /// The registered prefixes no snapshot reads once the oldest open one
    /// is `oldest_open` (`None`: none is open).
    fn unread(&self, oldest_open: Option<u64>) -> Vec<Vec<u8>> {
        self.current()
            .iter()
            .filter(|(_, newest_reader)| oldest_open.is_none_or(|oldest| **newest_reader < oldest))
            .map(|(prefix, _)| prefix.clone())
            .collect()
    }

    /// A compaction that rewrites every table holding keys under a prefix
    /// whose readers are gone, as `manifest` describes the shard, beside
    /// the compactions `taken` (running or just proposed). SlateDB takes
    /// consecutive sources in read order (L0 tables newest first, then
    /// sorted runs newest first) into the oldest run among them, and L0
    /// tables only with every older one: so the sources run from the newest
    /// holding table to the oldest holding run, or to the oldest L0 table
    /// if no run holds any. When that would share a source or a destination
    /// with a taken compaction, or any taken one compacts L0 tables, only
    /// the runs are taken (the L0 tables' keys go with the L0 compactions,
    /// which the filter sees too); if that still shares one, `None`.
    ///
    /// `None` as well when no table holds such keys, or when the tables
    /// that may hold them are less than 1/[`REWRITE_PER_DROPPED_BYTE_MAX`]
    /// of those the compaction would rewrite (a small dropped object in a
    /// large run waits for the scheduler rather than have the run rewritten
    /// for it). A dropped object's keys in a large run would otherwise wait
    /// until the scheduler merges that run again, which a run much larger
    /// than those written after it may never be.
    pub(crate) fn compaction(
        &self,
        manifest: &VersionedManifest,
        taken: &[&CompactionSpec],
    ) -> Option<CompactionSpec> {
        let prefixes = self.unread(Some(manifest.recent_snapshot_min_seq()));
        // Per table: its size, and its size if it may hold a key under a
        // prefix (else 0).
        let sizes = |views: &[SsTableView]| {
            views.iter().fold((0, 0), |(size, holding), view| {
                let info = &view.sst.info;
                let first = info.first_entry.as_deref();
                let last = info.last_entry.as_deref();
                let holds = prefixes.iter().any(|prefix| may_hold(first, last, prefix));
                let bytes = view.estimate_size();
                (size + bytes, holding + if holds { bytes } else { 0 })
            })
        };
        let l0 = manifest.l0();
        let runs = manifest.compacted();
        let tables: Vec<Table> = l0
            .iter()
            .map(|view| Table {
                source: SourceId::SstView(view.id),
                sizes: sizes(std::slice::from_ref(view)),
            })
            .chain(runs.iter().map(|run| Table {
                source: SourceId::SortedRun(run.id),
                sizes: sizes(run.sst_views()),
            }))
            .collect();
        let in_use = |source: &SourceId| {
            taken
                .iter()
                .any(|spec| spec.sources().contains(source) || spec_destination_is(spec, source))
        };
        let l0_taken = taken.iter().any(|spec| spec.has_l0_sources());
        let whole = holding_range(&tables, l0.len(), 0);
        let chosen = match whole {
            Some(range)
                if !l0_taken && !tables[range.clone()].iter().any(|t| in_use(&t.source)) =>
            {
                range
            }
            _ => {
                let runs_only = holding_range(&tables, l0.len(), l0.len())?;
                if tables[runs_only.clone()].iter().any(|t| in_use(&t.source)) {
                    return None;
                }
                runs_only
            }
        };
        let chosen = &tables[chosen];
        let (size, holding) = chosen.iter().fold((0, 0), |(size, holding), table| {
            (size + table.sizes.0, holding + table.sizes.1)
        });
        if holding.saturating_mul(REWRITE_PER_DROPPED_BYTE_MAX) < size {
            return None;
        }
        let destination = match chosen.last().map(|table| table.source) {
            Some(SourceId::SortedRun(id)) => id,
            // L0 tables alone become the newest run.
            _ => runs.iter().map(|run| run.id + 1).max().unwrap_or(0),
        };
        if taken
            .iter()
            .any(|spec| spec.destination() == Some(destination))
        {
            return None;
        }
        let sources = chosen.iter().map(|table| table.source).collect();
        Some(CompactionSpec::new(sources, destination))
    }

    fn current(&self) -> Arc<BTreeMap<Vec<u8>, u64>> {
        // A poisoned lock still holds a whole map: each change replaces it.
        match self.prefixes.read() {
            Ok(prefixes) => prefixes.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn change(&self, change: impl FnOnce(&mut BTreeMap<Vec<u8>, u64>)) {
        let mut guard = match self.prefixes.write() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        let mut map = BTreeMap::clone(&guard);
        change(&mut map);
        *guard = Arc::new(map);
    }
}

/// The shard's compaction scheduler: SlateDB's size-tiered one, which also
/// proposes the compaction of dropped objects' keys that
/// [`Dropped::request`] asked for, beside its own and the running ones
/// (sharing no table with them). Proposed here, the compaction cannot race
/// the scheduler's own: SlateDB 0.18 checks a compaction
/// submitted from outside against running ones by destination only when it
/// is submitted (two with one destination then run side by side, and its
/// executor panics), and not at all by source.
pub(crate) struct StateSchedulerSupplier {
    pub(crate) dropped: Arc<Dropped>,
}

impl CompactionSchedulerSupplier for StateSchedulerSupplier {
    fn compaction_scheduler(
        &self,
        options: &CompactorOptions,
    ) -> Box<dyn CompactionScheduler + Send + Sync> {
        Box::new(StateScheduler {
            size_tiered: SizeTieredCompactionSchedulerSupplier.compaction_scheduler(options),
            dropped: self.dropped.clone(),
        })
    }
}

struct StateScheduler {
    size_tiered: Box<dyn CompactionScheduler + Send + Sync>,
    dropped: Arc<Dropped>,
}

impl CompactionScheduler for StateScheduler {
    fn propose(&self, state: &CompactorStateView) -> Vec<CompactionSpec> {
        let mut proposed = self.size_tiered.propose(state);
        if !self.dropped.requested.swap(false, Ordering::Relaxed) {
            return proposed;
        }
        let running: Vec<&CompactionSpec> = state
            .compactions()
            .map(|compactions| {
                compactions
                    .recent_compactions()
                    .filter(|compaction| compaction.active())
                    .map(Compaction::spec)
                    .collect()
            })
            .unwrap_or_default();
        let taken: Vec<&CompactionSpec> = running.into_iter().chain(&proposed).collect();
        if let Some(spec) = self.dropped.compaction(state.manifest(), &taken) {
            tracing::debug!(?spec, "compacting dropped objects' keys");
            // Last: it runs only if there is room beside the others (if
            // not, the request is lost until the engine asks again).
            proposed.push(spec);
        }
        proposed
    }

    fn validate(
        &self,
        state: &CompactorStateView,
        spec: &CompactionSpec,
    ) -> Result<(), slatedb::Error> {
        self.size_tiered.validate(state, spec)
    }

    fn generate(
        &self,
        state: &CompactorStateView,
        request: &CompactionRequest,
    ) -> Result<Vec<CompactionSpec>, slatedb::Error> {
        self.size_tiered.generate(state, request)
    }
}

/// A table of a shard's LSM tree as [`Dropped::compaction`] weighs it: its
/// size, and its size again if it may hold a dropped key (else 0).
struct Table {
    source: SourceId,
    sizes: (u64, u64),
}

/// The positions in `tables` (read order, the first `l0` of them L0
/// tables) a compaction of every table from `from` on that may hold a
/// dropped key must take: from the newest such to the oldest, extended to
/// the oldest L0 table if it starts among them.
fn holding_range(
    tables: &[Table],
    l0: usize,
    from: usize,
) -> Option<std::ops::RangeInclusive<usize>> {
    let holds = |table: &Table| table.sizes.1 > 0;
    let newest = from + tables[from..].iter().position(holds)?;
    let oldest = from + tables[from..].iter().rposition(holds)?;
    let oldest = if newest < l0 {
        oldest.max(l0 - 1)
    } else {
        oldest
    };
    Some(newest..=oldest)
}

/// Whether `spec` writes the sorted run `source`.
fn spec_destination_is(spec: &CompactionSpec, source: &SourceId) -> bool {
    matches!(source, SourceId::SortedRun(id) if spec.destination() == Some(*id))
}

/// Whether a table whose keys run from `first` to `last` (unbounded where
/// unknown) may hold a key under `prefix`: every such key sorts at or after
/// `prefix` and before the first key after `prefix` not starting with it.
fn may_hold(first: Option<&[u8]>, last: Option<&[u8]>, prefix: &[u8]) -> bool {
    let starts_by_then = first.is_none_or(|first| first <= prefix || first.starts_with(prefix));
    let ends_after = last.is_none_or(|last| last >= prefix);
    starts_by_then && ends_after
}

/// The prefixes one compaction empties, in order.
pub(crate) struct Removable {
    prefixes: Vec<Vec<u8>>,
    /// Whether the compaction writes the oldest sorted run.
    oldest_run: bool,
}

impl Removable {
    /// What becomes of `entry`: `None` if it is not under a removable
    /// prefix.
    pub(crate) fn decision(&self, entry: &RowEntry) -> Option<CompactionFilterDecision> {
        if !self.covers(&entry.key) {
            return None;
        }
        Some(match entry.value {
            _ if self.oldest_run => CompactionFilterDecision::Drop,
            ValueDeletable::Tombstone => CompactionFilterDecision::Keep,
            _ => CompactionFilterDecision::Modify(ValueDeletable::Tombstone),
        })
    }

    /// Whether `key` lies under one of the prefixes. The only candidate is
    /// the greatest prefix not after `key`: a prefix of `key` sorts before
    /// it, and any prefix between the two would have to extend it.
    fn covers(&self, key: &[u8]) -> bool {
        let after = self
            .prefixes
            .partition_point(|prefix| prefix.as_slice() <= key);
        after > 0 && key.starts_with(&self.prefixes[after - 1])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slatedb::bytes::Bytes;

    fn context(retention_min_seq: Option<u64>, is_dest_last_run: bool) -> CompactionJobContext {
        CompactionJobContext {
            destination: 1,
            is_dest_last_run,
            compaction_clock_tick: 0,
            retention_min_seq,
        }
    }

    fn entry(key: &[u8], value: ValueDeletable) -> RowEntry {
        RowEntry {
            key: Bytes::copy_from_slice(key),
            value,
            seq: 1,
            create_ts: None,
            expire_ts: None,
        }
    }

    #[test]
    fn a_table_may_hold_a_prefix_only_if_its_range_reaches_it() {
        let p = b"\x07AB".as_slice();
        for (first, last, expected) in [
            (Some(&b"\x07AA"[..]), Some(&b"\x07AC"[..]), true),
            (Some(b"\x07AB1"), Some(b"\x07AB2"), true),
            (Some(b"\x07AB"), Some(b"\x07AB"), true),
            (Some(b"\x07AA"), Some(b"\x07AB"), true),
            (Some(b"\x07AA"), Some(b"\x07AAz"), false),
            (Some(b"\x07AC"), Some(b"\x07AD"), false),
            (None, Some(b"\x07AB\xff"), true),
            (Some(b"\x07AB\xff"), None, true),
            (None, None, true),
            (None, Some(b"\x07AA"), false),
        ] {
            assert_eq!(may_hold(first, last, p), expected, "{first:?}..{last:?}");
        }
    }

    #[test]
    fn only_keys_under_prefixes_no_snapshot_reads_are_emptied() {
        // Goal: an entry is replaced only under a registered prefix whose
        // readers are gone; below the oldest run it becomes a tombstone, in
        // the oldest run it goes.
        let dropped = Dropped::default();
        dropped.add(&[b"\x07AA".to_vec(), b"\x07AC".to_vec()], 10);
        dropped.add(&[b"\x01JLx".to_vec()], 20);
        let value = || ValueDeletable::Value(Bytes::from_static(b"v"));
        let merge = || ValueDeletable::Merge(Bytes::from_static(b"m"));
        let tombstone = CompactionFilterDecision::Modify(ValueDeletable::Tombstone);

        let upper = dropped.removable(&context(Some(15), false));
        for key in [&b"\x07AA"[..], b"\x07AA\x00", b"\x07AAzz", b"\x07AC\xff"] {
            assert_eq!(
                upper.decision(&entry(key, value())),
                Some(tombstone.clone())
            );
            assert_eq!(
                upper.decision(&entry(key, merge())),
                Some(tombstone.clone())
            );
            assert_eq!(
                upper.decision(&entry(key, ValueDeletable::Tombstone)),
                Some(CompactionFilterDecision::Keep)
            );
        }
        // Near misses on either side, and a prefix a snapshot still reads.
        for key in [&b"\x07A"[..], b"\x07AB", b"\x07AD", b"\x06AA", b"\x01JLx1"] {
            assert_eq!(upper.decision(&entry(key, value())), None, "{key:?}");
        }
        let oldest = dropped.removable(&context(None, true));
        for key in [&b"\x07AA1"[..], b"\x01JLx"] {
            assert_eq!(
                oldest.decision(&entry(key, ValueDeletable::Tombstone)),
                Some(CompactionFilterDecision::Drop)
            );
        }
        // Re-registering keeps the later bound; removing stops it.
        dropped.add(&[b"\x07AA".to_vec()], 5);
        let again = dropped.removable(&context(Some(11), false));
        assert!(again.decision(&entry(b"\x07AA1", value())).is_some());
        dropped.add(&[b"\x07AA".to_vec()], 30);
        dropped.remove(&[b"\x07AC".to_vec()]);
        let later = dropped.removable(&context(Some(25), false));
        for key in [&b"\x07AA1"[..], b"\x07AC1"] {
            assert_eq!(later.decision(&entry(key, value())), None, "{key:?}");
        }
        assert!(later.decision(&entry(b"\x01JLx9", value())).is_some());
        assert_eq!(dropped.len(), 2);
    }
}
