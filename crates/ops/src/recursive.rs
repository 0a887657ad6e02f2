//! `WITH RECURSIVE`, maintained incrementally (RFC 0017).
//!
//! The operator's inputs are the base term's delta and the deltas of the
//! recursive term's external parts (what it reads besides the recursion);
//! its `step` is the rest of the recursive term, an inner [`Dataflow`]
//! whose sources are the recursion (index 0) and the external parts
//! (index `i`). The inner dataflow is an ordinary incremental circuit: fed
//! the changes of the recursion's rows and of the external parts, it emits
//! the change of `step(rows, external)`, keeping its joins' arrangements of
//! both. The loop runs on one shard (the planner gathers the inputs).
//!
//! `UNION ALL` (a row per derivation): the rows solve `R = base + step(R)`,
//! and `step` is linear in `R` (read once), so the change of `R` is the sum
//! of `δ₀ = Δbase + [step(R, E') − step(R, E)]` and `δₖ₊₁ = step(δₖ, E')`,
//! fed back until a `δ` is empty. A derivation that never ends (a cycle)
//! never empties: the loop stops at [`RECURSION_ITERATIONS_MAX`] rounds, or
//! at [`RECURSION_ROWS_MAX`] rows fed back (a recursion that multiplies its
//! rows each round reaches that first), with RS-2073.
//!
//! `UNION` (each row once): `R` is the least fixed point, and a row's
//! derivations (`base`'s count of it plus `step(R)`'s) are counted,
//! `RD op_id row -> count`, beside the rows themselves, `RV op_id row`.
//! Counting alone would keep a cycle of rows that only derive one another
//! once their outside support is gone, so deletions go by delete and
//! rederive (DRed): first every row that lost a derivation is removed,
//! and the rows derived from removed rows, transitively (over-deletion);
//! then every removed or newly derived row that still has a derivation is
//! added back, and what it derives, transitively (semi-naive insertion).
//! The step's operators grow with their inputs (the planner allows maps,
//! filters, unnest and inner joins), so the deletions of the inputs and
//! the rows alone cause the lost derivations: they are fed first, apart
//! from the insertions, and no lost derivation is hidden by a gained one.
//! A change costs what it derives or underives, plus the rows over-deleted
//! and rederived.

use std::cmp::Ordering;
use std::collections::HashMap;

use rockstream_types::encoding::{compare_rows, encode_row};
use rockstream_types::{codes, ObjectId, Row, RsError, RsResult, ZSet};

use crate::dataflow::{Dataflow, Step};
use crate::exchange::Unsharded;
use crate::keys::{decode_weight, op_prefix, RECURSION_DERIVATIONS, RECURSION_ROWS};
use crate::state::{add_to_count, StateStore};

/// Bound on the rows one change feeds through the loop (each phase of a
/// `UNION`'s counted apart): the memory of one step stays bounded when a
/// recursion multiplies its rows.
pub(crate) const RECURSION_ROWS_MAX: usize = 1_000_000;

/// Bound on the rounds of one phase of a step's loop: each round feeds the rows the
/// previous one found back through the recursive term.
pub(crate) const RECURSION_ITERATIONS_MAX: usize = 100_000;

#[derive(Debug)]
pub(crate) struct RecursiveOperator {
    op_id: ObjectId,
    distinct: bool,
    step: Dataflow,
}

/// One phase's changes of the derivation counts: the rows whose count
/// changed, with its count before and after.
type CountChanges = Vec<(Row, i64, i64)>;

/// What one phase of a step's loop has used of its bounds.
#[derive(Default)]
struct Budget {
    rounds: usize,
    rows: usize,
}

impl Budget {
    /// Counts a round feeding `rows` rows back; fails past either bound.
    fn next_round(&mut self, rows: usize) -> RsResult<()> {
        self.rounds += 1;
        self.rows = self.rows.saturating_add(rows);
        if self.rounds > RECURSION_ITERATIONS_MAX || self.rows > RECURSION_ROWS_MAX {
            return Err(RsError::new(
                &codes::RECURSION_LIMIT_EXCEEDED,
                format!(
                    "a recursive query did not reach its fixed point within \
                     {RECURSION_ITERATIONS_MAX} rounds and {RECURSION_ROWS_MAX} rows of one change"
                ),
            ));
        }
        Ok(())
    }
}

impl RecursiveOperator {
    pub(crate) fn new(op_id: ObjectId, distinct: bool, step: Dataflow) -> RecursiveOperator {
        RecursiveOperator {
            op_id,
            distinct,
            step,
        }
    }

    /// The change of the recursion's rows, for its base term's change
    /// (`inputs[0]`) and its external parts' (`inputs[1..]`).
    pub(crate) async fn step<S: StateStore>(
        &self,
        store: &mut S,
        inputs: Vec<ZSet>,
        step: &Step,
    ) -> RsResult<ZSet> {
        let mut inputs = inputs.into_iter();
        let base = inputs
            .next()
            .ok_or_else(|| RsError::internal("a recursive query without its base term"))?;
        let external: Vec<ZSet> = inputs.collect();
        let step = &Step {
            initial: false,
            ..step.clone()
        };
        if self.distinct {
            self.step_distinct(store, base, external, step).await
        } else {
            self.step_all(store, base, external, step).await
        }
    }

    /// `UNION ALL`: the deltas fed back until one is empty.
    async fn step_all<S: StateStore>(
        &self,
        store: &mut S,
        base: ZSet,
        external: Vec<ZSet>,
        step: &Step,
    ) -> RsResult<ZSet> {
        let mut delta = self
            .outside_change(store, base, external, step)
            .await?
            .consolidate();
        let mut total = ZSet::new();
        let mut budget = Budget::default();
        while !delta.is_empty() {
            // Rows as PostgreSQL would produce them: a row of weight `w`
            // is `w` rows, and weights multiply from round to round.
            let rows = delta.updates.iter().fold(0usize, |rows, (_, weight)| {
                rows.saturating_add(usize::try_from(weight.unsigned_abs()).unwrap_or(usize::MAX))
            });
            budget.next_round(rows)?;
            total.extend(delta.clone());
            delta = self.feed(store, delta, Vec::new(), step).await?;
        }
        Ok(total.consolidate())
    }

    /// `UNION`: delete and rederive (see the module docs).
    async fn step_distinct<S: StateStore>(
        &self,
        store: &mut S,
        base: ZSet,
        external: Vec<ZSet>,
        step: &Step,
    ) -> RsResult<ZSet> {
        let (base_lost, base_gained) = split_by_sign(base);
        let (external_lost, external_gained): (Vec<ZSet>, Vec<ZSet>) =
            external.into_iter().map(split_by_sign).unzip();
        let mut out = ZSet::new();

        // Over-deletion: every row that lost a derivation, then every row
        // derived from one removed, transitively.
        let lost = self
            .derivation_changes(store, base_lost, external_lost, step)
            .await?;
        let mut removed: Vec<Row> = Vec::new();
        let mut doomed = self.present(store, decreased(lost)).await?;
        let mut budget = Budget::default();
        while !doomed.is_empty() {
            budget.next_round(doomed.len())?;
            let mut retracted = ZSet::new();
            for row in doomed {
                store.delete(self.key(RECURSION_ROWS, &row));
                out.push(row.clone(), -1);
                retracted.push(row.clone(), -1);
                removed.push(row);
            }
            let lost = self.feed(store, retracted, Vec::new(), step).await?;
            let lost = self.count(store, lost).await?;
            doomed = self.present(store, decreased(lost)).await?;
        }

        // Rederivation and insertion: every removed row, and every row that
        // gained a derivation, that has one and is not a row yet; then what
        // those derive, transitively.
        let gained = self
            .derivation_changes(store, base_gained, external_gained, step)
            .await?;
        let mut candidates = removed;
        candidates.extend(increased(gained));
        let mut born = self.absent_and_derived(store, candidates).await?;
        let mut budget = Budget::default();
        while !born.is_empty() {
            budget.next_round(born.len())?;
            let mut added = ZSet::new();
            for row in born {
                store.put(self.key(RECURSION_ROWS, &row), Vec::new());
                out.push(row.clone(), 1);
                added.push(row, 1);
            }
            let gained = self.feed(store, added, Vec::new(), step).await?;
            let gained = self.count(store, gained).await?;
            born = self.absent_and_derived(store, increased(gained)).await?;
        }
        Ok(out.consolidate())
    }

    /// The change of `base + step(rows, external)` for a change of the base
    /// term and of the external parts, the recursion's rows unchanged.
    async fn outside_change<S: StateStore>(
        &self,
        store: &mut S,
        base: ZSet,
        external: Vec<ZSet>,
        step: &Step,
    ) -> RsResult<ZSet> {
        let mut changes = base;
        if external.iter().any(|delta| !delta.is_empty()) {
            changes.extend(self.feed(store, ZSet::new(), external, step).await?);
        }
        Ok(changes)
    }

    /// The derivation counts' changes for a change of the base term and of
    /// the external parts, the recursion's rows unchanged.
    async fn derivation_changes<S: StateStore>(
        &self,
        store: &mut S,
        base: ZSet,
        external: Vec<ZSet>,
        step: &Step,
    ) -> RsResult<CountChanges> {
        let changes = self.outside_change(store, base, external, step).await?;
        self.count(store, changes).await
    }

    /// Adds `changes` to the derivation counts.
    async fn count<S: StateStore>(&self, store: &mut S, changes: ZSet) -> RsResult<CountChanges> {
        let mut counted = Vec::new();
        for (row, weight) in changes.consolidate().updates {
            let key = self.key(RECURSION_DERIVATIONS, &row);
            let (old, new) = add_to_count(store, key, weight, "recursive derivation count").await?;
            counted.push((row, old, new));
        }
        Ok(counted)
    }

    /// Those of `rows` that are rows of the recursion now.
    async fn present<S: StateStore>(&self, store: &S, rows: Vec<Row>) -> RsResult<Vec<Row>> {
        let found = self.lookup(store, RECURSION_ROWS, &rows).await?;
        Ok(rows
            .into_iter()
            .zip(found)
            .filter_map(|(row, found)| found.map(|_| row))
            .collect())
    }

    /// Those of `rows` (each once) that are not rows of the recursion but
    /// have a derivation.
    async fn absent_and_derived<S: StateStore>(
        &self,
        store: &S,
        mut rows: Vec<Row>,
    ) -> RsResult<Vec<Row>> {
        rows.sort_by(|a, b| compare_rows(a, b));
        // As the keys compare (every NaN equal), not as `PartialEq` does.
        rows.dedup_by(|a, b| compare_rows(a, b) == Ordering::Equal);
        let present = self.lookup(store, RECURSION_ROWS, &rows).await?;
        let counts = self.lookup(store, RECURSION_DERIVATIONS, &rows).await?;
        Ok(rows
            .into_iter()
            .zip(present.into_iter().zip(counts))
            .filter(|(_, (present, count))| {
                present.is_none()
                    && count
                        .as_deref()
                        .is_some_and(|count| decode_weight(count) > 0)
            })
            .map(|(row, _)| row)
            .collect())
    }

    /// The values stored for `rows` under `kind`, in the order of `rows`.
    async fn lookup<S: StateStore>(
        &self,
        store: &S,
        kind: [u8; 2],
        rows: &[Row],
    ) -> RsResult<Vec<Option<Vec<u8>>>> {
        let keys: Vec<Vec<u8>> = rows.iter().map(|row| self.key(kind, row)).collect();
        let references: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        store.get_many(&references).await
    }

    /// Feeds a change of the recursion's rows and of the external parts
    /// through the recursive term; returns the change of its output.
    async fn feed<S: StateStore>(
        &self,
        store: &mut S,
        recursion: ZSet,
        external: Vec<ZSet>,
        step: &Step,
    ) -> RsResult<ZSet> {
        let mut sources: HashMap<ObjectId, ZSet> = HashMap::with_capacity(1 + external.len());
        sources.insert(0, recursion);
        for (index, delta) in external.into_iter().enumerate() {
            sources.insert(index as ObjectId + 1, delta);
        }
        // The inner dataflow runs on this shard alone: the planner put the
        // loop's inputs here.
        Box::pin(self.step.step_on(store, &sources, step, &mut Unsharded)).await
    }

    fn key(&self, kind: [u8; 2], row: &Row) -> Vec<u8> {
        let mut key = op_prefix(kind, self.op_id);
        key.extend_from_slice(&encode_row(row));
        key
    }
}

/// A change's retractions and insertions, apart.
fn split_by_sign(delta: ZSet) -> (ZSet, ZSet) {
    let (lost, gained) = delta
        .consolidate()
        .updates
        .into_iter()
        .partition(|(_, weight)| *weight < 0);
    (ZSet::from_updates(lost), ZSet::from_updates(gained))
}

fn decreased(changes: CountChanges) -> Vec<Row> {
    changes
        .into_iter()
        .filter(|(_, old, new)| new < old)
        .map(|(row, _, _)| row)
        .collect()
}

fn increased(changes: CountChanges) -> Vec<Row> {
    changes
        .into_iter()
        .filter(|(_, old, new)| new > old)
        .map(|(row, _, _)| row)
        .collect()
}
