//! Incremental grouped aggregation (DESIGN §6.2, §6.3).
//!
//! Per group the operator stores one accumulator row under `AG op_id key`:
//! `COUNT(*)`, then per aggregate its partial state (a count; a count and an
//! exact sum for `SUM`/`AVG`; the current extremum for `MIN`/`MAX`; a count
//! and the exclusive or of the values for `BIT_XOR`). Sums of
//! integers and numerics are exact `i128`; float sums are `f64` over the
//! finite values, with `+Infinity`, `-Infinity` and `NaN` inputs counted
//! beside them (appended after the partials, so older state reads as having
//! none): a retraction then undoes an infinity exactly, where `∞ - ∞` would
//! leave `NaN` behind.
//!
//! `MIN`/`MAX` cannot be updated from a retraction alone, so their values are
//! also kept as a multiset `MM op_id agg key value -> count`: after a change
//! the new extremum is the first entry of the group's multiset in ascending
//! (MIN) or descending (MAX) order — one short scan, never the whole group.
//! Calls over the same argument (`MIN(x)` and `MAX(x)`) share one multiset,
//! stored under the first such call's `agg`.
//! `string_agg` and `array_agg` keep their values in the same kind of
//! multiset, keyed by their `ORDER BY` keys first; after a change the
//! group's result is joined (or collected, NULLs included) again from the
//! whole multiset (one scan of the group). Without `ORDER BY` the values
//! come in the order of their encodings, where PostgreSQL's follow its
//! input.
//! So do the ordered-set aggregates (`percentile_cont`, `percentile_disc`,
//! `mode() WITHIN GROUP (ORDER BY value)`), keyed by value: after a change
//! the group's result is read again from its values in order (one scan of
//! the group).
//! `DISTINCT` aggregates keep `AD op_id agg key value -> count` and feed the
//! accumulator only when a value's count crosses zero.
//!
//! For each touched group the operator emits `(old_output, -1)` and
//! `(new_output, +1)` when they differ. A global aggregate (no `GROUP BY`)
//! always has exactly one output row, as in PostgreSQL: its first row is
//! emitted by the view's initial step, even over empty input.
//!
//! The operator is handed its input's delta by the dataflow and steps
//! nothing else.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use rockstream_plan::{AggregateCall, AggregateFunction, Retirement, Watermarks};
use rockstream_types::encoding::{
    compare_datum, decode_prefix, decode_row, encode_datum, encode_row, encode_row_into,
};
use rockstream_types::{codes, Datum, ObjectId, Row, RsError, RsResult, SqlType, ZSet};

use crate::dataflow::aggregate_calls_valid;
use crate::keys::{
    decode_weight, op_prefix, push_order_key, AGGREGATE, AGGREGATE_DISTINCT, MIN_MAX,
    RETIRE_SCHEDULE,
};
use crate::state::{add_to_count, ScanOrder, StateStore};
use crate::window_close::{due, schedule_time, time_key};

#[derive(Debug)]
pub(crate) struct AggregateOperator {
    op_id: ObjectId,
    group_count: usize,
    calls: Vec<AggregateCall>,
    /// Per call: the call whose `MM` multiset it reads (itself, or an
    /// earlier MIN/MAX call over the same argument).
    multiset_owner: Vec<usize>,
    output_types: Vec<SqlType>,
    /// Groups whose value in a column a watermark bounds is below the
    /// bound are final: their state is deleted (RFC 0013).
    retire: Option<Retirement>,
}

/// Partial state of one aggregate within one group.
#[derive(Debug, Clone, PartialEq)]
enum Partial {
    Count(i64),
    /// Non-null inputs and their exact sum (mantissa at the input scale).
    ExactSum(i64, i128),
    /// Non-null inputs and their sum.
    FloatSum(i64, FloatSum),
    Extremum(Datum),
    /// The current result of an aggregate recomputed from its group's
    /// multiset after each change: `string_agg`, ordered-set aggregates
    /// (NULL: no values).
    Recomputed(Datum),
    /// `bit_xor`: non-null inputs and the exclusive or of them all.
    Xor(i64, i64),
}

/// A float sum that retracts exactly at the special values: the finite
/// inputs are summed, and infinities and NaNs are counted. The sum is then
/// what PostgreSQL's is over the same inputs: NaN if any input is NaN or
/// both infinities occur, else an infinity if one occurs, else the finite
/// sum.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct FloatSum {
    finite: f64,
    positive_infinities: i64,
    negative_infinities: i64,
    nans: i64,
}

impl FloatSum {
    fn add(&mut self, value: f64, weight: i64) {
        if value.is_nan() {
            self.nans += weight;
        } else if value == f64::INFINITY {
            self.positive_infinities += weight;
        } else if value == f64::NEG_INFINITY {
            self.negative_infinities += weight;
        } else {
            self.finite += value * weight as f64;
        }
    }

    /// The sum, by IEEE arithmetic over the finite part and one of each
    /// special value present: so a `finite` that is itself not finite (a
    /// finite sum that overflowed, or state stored before the counts were
    /// kept) still combines as PostgreSQL's sum would.
    fn value(&self) -> f64 {
        let mut sum = self.finite;
        if self.positive_infinities > 0 {
            sum += f64::INFINITY;
        }
        if self.negative_infinities > 0 {
            sum += f64::NEG_INFINITY;
        }
        if self.nans > 0 {
            sum = f64::NAN;
        }
        sum
    }

    /// Whether any special value is counted (only then are the counts
    /// stored).
    fn has_specials(&self) -> bool {
        (
            self.positive_infinities,
            self.negative_infinities,
            self.nans,
        ) != (0, 0, 0)
    }
}

#[derive(Debug, Clone, PartialEq)]
struct GroupState {
    count_star: i64,
    partials: Vec<Partial>,
}

impl AggregateOperator {
    pub fn new(
        op_id: ObjectId,
        group_count: usize,
        calls: Vec<AggregateCall>,
        input_types: Vec<SqlType>,
        output_types: Vec<SqlType>,
    ) -> RsResult<Self> {
        if !aggregate_calls_valid(&calls, input_types.len())
            || output_types.len() != group_count + calls.len()
        {
            return Err(RsError::internal("aggregate plan does not match its input"));
        }
        let is_extremum = |call: &AggregateCall| {
            matches!(
                call.function,
                AggregateFunction::Min | AggregateFunction::Max
            )
        };
        let multiset_owner = calls
            .iter()
            .enumerate()
            .map(|(index, call)| {
                calls
                    .iter()
                    .position(|other| {
                        is_extremum(call)
                            && is_extremum(other)
                            && other.argument == call.argument
                            && other.distinct == call.distinct
                    })
                    .unwrap_or(index)
            })
            .collect();
        Ok(AggregateOperator {
            op_id,
            group_count,
            calls,
            multiset_owner,
            output_types,
            retire: None,
        })
    }

    /// The aggregate, retiring its groups as `retire` says.
    pub fn retiring(mut self, retire: Option<Retirement>) -> RsResult<Self> {
        if retire
            .as_ref()
            .is_some_and(|retire| retire.column >= self.group_count)
        {
            return Err(RsError::internal(
                "an aggregate retires its groups by a column that is not a group column",
            ));
        }
        self.retire = retire;
        Ok(self)
    }

    /// Whether it retires groups a watermark closed.
    pub fn retires(&self) -> bool {
        self.retire.is_some()
    }

    /// Without `GROUP BY`: one output row always, even over empty input.
    pub fn is_global(&self) -> bool {
        self.group_count == 0
    }

    /// The aggregate's output delta for its input's delta. `initial` is true
    /// for the view's first step, when a global aggregate emits its row.
    pub async fn step<S: StateStore>(
        &self,
        store: &mut S,
        delta: ZSet,
        initial: bool,
        watermarks: &Watermarks,
    ) -> RsResult<ZSet> {
        let mut groups: BTreeMap<Vec<u8>, Vec<(Row, i64)>> = BTreeMap::new();
        for (row, weight) in delta.updates {
            let key = encode_row(&row[..self.group_count]);
            groups.entry(key).or_default().push((row, weight));
        }
        if self.is_global() && initial {
            groups.entry(Vec::new()).or_default();
        }
        // Each group touches only its own state: read all of it in one batch.
        let state_keys: Vec<Vec<u8>> = groups.keys().map(|key| self.state_key(key)).collect();
        let state_key_refs: Vec<&[u8]> = state_keys.iter().map(Vec::as_slice).collect();
        let stored = store.get_many(&state_key_refs).await?;
        let mut out = ZSet::new();
        for (((key, rows), state_key), stored) in groups.into_iter().zip(state_keys).zip(stored) {
            if stored.is_none() {
                self.schedule_retirement(store, &key, &rows)?;
            }
            self.step_group(store, &key, state_key, stored, rows, &mut out)
                .await?;
        }
        self.retire_final_groups(store, watermarks).await?;
        Ok(out.consolidate())
    }

    /// Writes a new group's entry in the retirement schedule: `WS op_id
    /// value(8) group_key`, by its value in the retiring column.
    fn schedule_retirement<S: StateStore>(
        &self,
        store: &mut S,
        key: &[u8],
        rows: &[(Row, i64)],
    ) -> RsResult<()> {
        let (Some(retire), Some((row, _))) = (&self.retire, rows.first()) else {
            return Ok(());
        };
        let time = schedule_time(&row[retire.column])?;
        if time == i64::MAX {
            // NULL: never final.
            return Ok(());
        }
        let mut entry = time_key(&op_prefix(RETIRE_SCHEDULE, self.op_id), time);
        entry.extend_from_slice(key);
        store.put(entry, Vec::new());
        Ok(())
    }

    /// The multisets a group keeps besides its accumulators, by kind and
    /// call: `MM` for `string_agg`/`array_agg`, ordered-set aggregates and
    /// each MIN/MAX multiset's owner, `AD` for other DISTINCT calls.
    fn multisets(&self) -> Vec<([u8; 2], usize)> {
        let mut multisets = Vec::new();
        for (index, call) in self.calls.iter().enumerate() {
            let concatenated = matches!(
                call.function,
                AggregateFunction::StringAgg | AggregateFunction::ArrayAgg
            );
            if concatenated
                || call.function.is_ordered_set()
                || (matches!(
                    call.function,
                    AggregateFunction::Min | AggregateFunction::Max
                ) && self.multiset_owner[index] == index)
            {
                multisets.push((MIN_MAX, index));
            }
            if call.distinct && !concatenated && !call.function.is_ordered_set() {
                multisets.push((AGGREGATE_DISTINCT, index));
            }
        }
        multisets
    }

    /// Deletes the state of every group the retirement bound has passed at
    /// `watermarks`: no change reaches them any more. Their output rows
    /// stay. Costs each group once, when it closes.
    async fn retire_final_groups<S: StateStore>(
        &self,
        store: &mut S,
        watermarks: &Watermarks,
    ) -> RsResult<()> {
        let Some(below) = self
            .retire
            .as_ref()
            .and_then(|retire| retire.bound.at(watermarks))
        else {
            return Ok(());
        };
        let prefix = op_prefix(RETIRE_SCHEDULE, self.op_id);
        for (time, key, _) in due(store, &prefix, below).await? {
            let mut entry = time_key(&prefix, time);
            entry.extend_from_slice(&key);
            store.delete(entry);
            store.delete(self.state_key(&key));
            for (kind, index) in self.multisets() {
                let values = self.value_key(kind, index, &key);
                for (value, _) in store
                    .scan_prefix(&values, ScanOrder::Ascending, usize::MAX)
                    .await?
                {
                    store.delete(value);
                }
            }
        }
        Ok(())
    }

    async fn step_group<S: StateStore>(
        &self,
        store: &mut S,
        key: &[u8],
        state_key: Vec<u8>,
        stored: Option<Vec<u8>>,
        rows: Vec<(Row, i64)>,
        out: &mut ZSet,
    ) -> RsResult<()> {
        let stored = match stored {
            Some(bytes) => Some(self.decode_state(&bytes)?),
            None => None,
        };
        let global = self.group_count == 0;
        let group_key: Row = match rows.first() {
            Some((row, _)) => row[..self.group_count].to_vec(),
            None => decode_prefix(key, self.group_count)?.0,
        };
        let old_output = match &stored {
            Some(state) if state.count_star > 0 || global => {
                Some(self.finalize(&group_key, state)?)
            }
            _ => None,
        };
        let mut state = stored.unwrap_or_else(|| self.empty_state());
        // Per MIN/MAX call: whether its multiset changed, and how. Insertions
        // can only improve the stored extremum, and retracting worse values
        // leaves it in place; only when a retraction is as good as the
        // stored extremum or as the best insertion (the input need not be
        // consolidated: a value may come and go in one delta) is the
        // multiset's first entry read.
        let mut extremum_changed = vec![false; self.calls.len()];
        let mut best_inserted: Vec<Option<&Datum>> = vec![None; self.calls.len()];
        let mut best_retracted: Vec<Option<&Datum>> = vec![None; self.calls.len()];
        // Per multiset owner: its value changes, summed per value below
        // (a delta may repeat values), so each value is written once.
        let mut multiset_changes: Vec<Vec<(&Datum, i64)>> = vec![Vec::new(); self.calls.len()];
        // Per string_agg call: its multiset's entry changes.
        let mut concatenation_changes: Vec<Vec<(Vec<u8>, i64)>> =
            vec![Vec::new(); self.calls.len()];
        for (row, weight) in &rows {
            state.count_star += weight;
            for (index, call) in self.calls.iter().enumerate() {
                if call
                    .filter
                    .is_some_and(|filter| row[filter] != Datum::Bool(true))
                {
                    continue;
                }
                let value = match call.argument {
                    Some(column) => &row[column],
                    None => &Datum::Null,
                };
                if value.is_null()
                    && !matches!(
                        call.function,
                        AggregateFunction::CountStar | AggregateFunction::ArrayAgg
                    )
                {
                    continue;
                }
                if matches!(
                    call.function,
                    AggregateFunction::StringAgg | AggregateFunction::ArrayAgg
                ) {
                    // DISTINCT applies when the values are joined.
                    concatenation_changes[index]
                        .push((self.concatenation_key(index, key, call, row), *weight));
                    continue;
                }
                if call.function.is_ordered_set() {
                    concatenation_changes[index]
                        .push((self.multiset_key(MIN_MAX, index, key, value), *weight));
                    continue;
                }
                let weight = if call.distinct {
                    self.distinct_crossing(store, index, key, value, *weight)
                        .await?
                } else {
                    *weight
                };
                if weight == 0 {
                    continue;
                }
                if matches!(
                    call.function,
                    AggregateFunction::Min | AggregateFunction::Max
                ) {
                    if self.multiset_owner[index] == index {
                        multiset_changes[index].push((value, weight));
                    }
                    extremum_changed[index] = true;
                    let best = if weight < 0 {
                        &mut best_retracted[index]
                    } else {
                        &mut best_inserted[index]
                    };
                    if best.is_none_or(|best| better(call.function, value, best)) {
                        *best = Some(value);
                    }
                } else {
                    accumulate(&mut state.partials[index], call, value, weight)?;
                }
            }
        }
        if state.count_star < 0 {
            // The state disagrees with the input: a retraction of a row the
            // group never held.
            return Err(RsError::internal("aggregate group count went negative"));
        }
        for (index, mut changes) in multiset_changes.into_iter().enumerate() {
            changes.sort_by(|(a, _), (b, _)| compare_datum(a, b));
            let mut changes = changes.into_iter().peekable();
            while let Some((value, mut weight)) = changes.next() {
                while let Some((_, more)) =
                    changes.next_if(|(next, _)| compare_datum(next, value) == Ordering::Equal)
                {
                    weight += more;
                }
                if weight != 0 {
                    store.add_count(self.multiset_key(MIN_MAX, index, key, value), weight);
                }
            }
        }
        for (index, mut changes) in concatenation_changes.into_iter().enumerate() {
            if changes.is_empty() {
                continue;
            }
            changes.sort();
            let mut changes = changes.into_iter().peekable();
            while let Some((entry, mut weight)) = changes.next() {
                while let Some((_, more)) = changes.next_if(|(next, _)| *next == entry) {
                    weight += more;
                }
                if weight != 0 {
                    store.add_count(entry, weight);
                }
            }
            let result = match self.calls[index].function {
                AggregateFunction::StringAgg | AggregateFunction::ArrayAgg => {
                    self.concatenation(store, index, key).await?
                }
                _ => self.ordered_set_value(store, index, key).await?,
            };
            state.partials[index] = Partial::Recomputed(result);
        }
        for (index, call) in self.calls.iter().enumerate() {
            if !extremum_changed[index] {
                continue;
            }
            // The stored extremum is NULL exactly when the multiset was empty.
            let lost = |old: &Datum| {
                best_retracted[index].is_some_and(|retracted| {
                    old.is_null()
                        || !better(call.function, old, retracted)
                        || best_inserted[index]
                            .is_some_and(|inserted| !better(call.function, inserted, retracted))
                })
            };
            let extremum = match &state.partials[index] {
                Partial::Extremum(old) if !lost(old) => match best_inserted[index] {
                    Some(best) if old.is_null() || better(call.function, best, old) => best.clone(),
                    _ => old.clone(),
                },
                _ => {
                    let order = if call.function == AggregateFunction::Min {
                        ScanOrder::Ascending
                    } else {
                        ScanOrder::Descending
                    };
                    self.extremum(store, index, key, order).await?
                }
            };
            state.partials[index] = Partial::Extremum(extremum);
        }
        let new_output = if state.count_star > 0 || global {
            Some(self.finalize(&group_key, &state)?)
        } else {
            None
        };
        if state.count_star == 0 && !global {
            store.delete(state_key);
        } else {
            store.put(state_key, self.encode_state(&state));
        }
        if old_output != new_output {
            if let Some(row) = old_output {
                out.push(row, -1);
            }
            if let Some(row) = new_output {
                out.push(row, 1);
            }
        }
        Ok(())
    }

    /// `AG op_id group_key`: a group's accumulators.
    fn state_key(&self, key: &[u8]) -> Vec<u8> {
        let mut state_key = op_prefix(AGGREGATE, self.op_id);
        state_key.extend_from_slice(key);
        state_key
    }

    fn value_key(&self, kind: [u8; 2], index: usize, key: &[u8]) -> Vec<u8> {
        let mut prefix = op_prefix(kind, self.op_id);
        prefix.extend_from_slice(&(index as u16).to_be_bytes());
        prefix.extend_from_slice(key);
        prefix
    }

    /// Updates the DISTINCT multiset; returns +1/-1 when the value's count
    /// crosses zero (the change the accumulator sees), else 0.
    async fn distinct_crossing<S: StateStore>(
        &self,
        store: &mut S,
        index: usize,
        key: &[u8],
        value: &Datum,
        weight: i64,
    ) -> RsResult<i64> {
        let value_key = self.multiset_key(AGGREGATE_DISTINCT, index, key, value);
        let (old, new) =
            add_to_count(store, value_key, weight, "DISTINCT-aggregate multiset").await?;
        Ok(match (old > 0, new > 0) {
            (false, true) => 1,
            (true, false) => -1,
            _ => 0,
        })
    }

    /// `kind op_id agg key value`: one value's entry in a group's multiset.
    fn multiset_key(&self, kind: [u8; 2], index: usize, key: &[u8], value: &Datum) -> Vec<u8> {
        let mut value_key = self.value_key(kind, index, key);
        encode_datum(value, &mut value_key);
        value_key
    }

    /// `MM op_id agg group order value delimiter len(order)`: one value's
    /// entry in a `string_agg` multiset. The `ORDER BY` keys lead, so a scan
    /// of the group's entries meets the values in order (ties by value);
    /// the length of their encoding ends the key, so the value and the
    /// delimiter can be read back without decoding the keys.
    fn concatenation_key(
        &self,
        index: usize,
        key: &[u8],
        call: &AggregateCall,
        row: &Row,
    ) -> Vec<u8> {
        let mut entry = self.value_key(MIN_MAX, index, key);
        let start = entry.len();
        push_order_key(row, &call.order_by, &mut entry);
        let order_len = (entry.len() - start) as u32;
        let value = call
            .argument
            .map_or(Datum::Null, |column| row[column].clone());
        let delimiter = call
            .delimiter
            .map_or(Datum::Null, |column| row[column].clone());
        encode_row_into(&[value, delimiter], &mut entry);
        entry.extend_from_slice(&order_len.to_be_bytes());
        entry
    }

    /// A `string_agg` or `array_agg` call's result over its group's
    /// multiset: each value (as often as it occurs, or each distinct pair
    /// once), in order. `string_agg` joins them, each after the first
    /// preceded by its own delimiter (none when that is NULL); `array_agg`
    /// makes them an array, NULLs included. NULL when the group has no
    /// values. Reads the whole group's multiset.
    async fn concatenation<S: StateStore>(
        &self,
        store: &mut S,
        index: usize,
        key: &[u8],
    ) -> RsResult<Datum> {
        let prefix = self.value_key(MIN_MAX, index, key);
        let entries = store
            .scan_prefix(&prefix, ScanOrder::Ascending, usize::MAX)
            .await?;
        let corrupt = || RsError::internal("corrupt string_agg/array_agg multiset entry");
        let call = &self.calls[index];
        let mut joined: Option<String> = None;
        let mut elements: Vec<Datum> = Vec::new();
        for (entry, count) in entries {
            let suffix = entry.get(prefix.len()..).ok_or_else(corrupt)?;
            let split = suffix.len().checked_sub(4).ok_or_else(corrupt)?;
            let order_len = u32::from_be_bytes(suffix[split..].try_into().map_err(|_| corrupt())?);
            let mut row = decode_row(suffix.get(order_len as usize..split).ok_or_else(corrupt)?)?;
            // Under DISTINCT the ORDER BY keys are the value or the
            // delimiter (the planner checks), so an entry is one distinct
            // (value, delimiter) pair.
            let repeats = if call.distinct {
                1
            } else {
                decode_weight(&count)
            };
            if call.function == AggregateFunction::ArrayAgg {
                if row.len() != 2 {
                    return Err(corrupt());
                }
                let value = row.swap_remove(0);
                let repeats = usize::try_from(repeats).map_err(|_| corrupt())?;
                elements.extend(std::iter::repeat_n(value, repeats));
                continue;
            }
            let (Some(Datum::Text(value)), Some(delimiter)) = (row.first(), row.get(1)) else {
                return Err(corrupt());
            };
            for _ in 0..repeats {
                match &mut joined {
                    None => joined = Some(value.clone()),
                    Some(text) => {
                        if let Datum::Text(delimiter) = delimiter {
                            text.push_str(delimiter);
                        }
                        text.push_str(value);
                    }
                }
            }
        }
        if call.function == AggregateFunction::ArrayAgg {
            return Ok(if elements.is_empty() {
                Datum::Null
            } else {
                Datum::Array(elements)
            });
        }
        Ok(joined.map_or(Datum::Null, Datum::Text))
    }

    /// An ordered-set aggregate's result over its group's multiset (one
    /// scan of the group, in the call's order), as PostgreSQL computes it:
    /// `percentile_disc(f)` the value at position `max(1, ⌈f·n⌉)`,
    /// `percentile_cont(f)` the interpolation between positions
    /// `⌊f·(n-1)⌋` and `⌈f·(n-1)⌉` (from 0), `mode()` the first most
    /// frequent value. NULL over no values or for a NULL fraction.
    async fn ordered_set_value<S: StateStore>(
        &self,
        store: &mut S,
        index: usize,
        key: &[u8],
    ) -> RsResult<Datum> {
        let call = &self.calls[index];
        let prefix = self.value_key(MIN_MAX, index, key);
        let order = match call.order_by.first() {
            Some(sort) if sort.descending => ScanOrder::Descending,
            _ => ScanOrder::Ascending,
        };
        let entries = store.scan_prefix(&prefix, order, usize::MAX).await?;
        let mut values = Vec::with_capacity(entries.len());
        for (entry, count) in &entries {
            let value = decode_prefix(&entry[prefix.len()..], 1)?.0.remove(0);
            values.push((value, decode_weight(count)));
        }
        let total: i64 = values.iter().map(|(_, count)| count).sum();
        if total == 0 {
            return Ok(Datum::Null);
        }
        // The value at `position` (from 0) of the ordered values.
        let at = |position: i64| -> RsResult<&Datum> {
            let mut passed = 0;
            for (value, count) in &values {
                passed += count;
                if position < passed {
                    return Ok(value);
                }
            }
            Err(RsError::internal("an ordered-set position past its values"))
        };
        Ok(match (call.function, call.fraction) {
            (AggregateFunction::Mode, _) => {
                let mut best: Option<&(Datum, i64)> = None;
                for entry in &values {
                    if best.is_none_or(|best| entry.1 > best.1) {
                        best = Some(entry);
                    }
                }
                best.map_or(Datum::Null, |(value, _)| value.clone())
            }
            (_, None) => Datum::Null,
            (AggregateFunction::PercentileDisc, Some(fraction)) => {
                let row = ((fraction * total as f64).ceil() as i64).max(1);
                at(row - 1)?.clone()
            }
            (AggregateFunction::PercentileCont, Some(fraction)) => {
                let position = fraction * (total - 1) as f64;
                let (first, second) = (position.floor(), position.ceil());
                let low = as_float(at(first as i64)?)?;
                let high = as_float(at(second as i64)?)?;
                Datum::Float64(low + (high - low) * (position - first))
            }
            (function, _) => {
                return Err(RsError::internal(format!(
                    "{function:?} is not an ordered-set aggregate"
                )))
            }
        })
    }

    async fn extremum<S: StateStore>(
        &self,
        store: &mut S,
        index: usize,
        key: &[u8],
        order: ScanOrder,
    ) -> RsResult<Datum> {
        let prefix = self.value_key(MIN_MAX, self.multiset_owner[index], key);
        let first = store.scan_prefix(&prefix, order, 1).await?;
        match first.first() {
            Some((stored_key, _)) => Ok(decode_prefix(&stored_key[prefix.len()..], 1)?.0.remove(0)),
            None => Ok(Datum::Null),
        }
    }

    fn empty_state(&self) -> GroupState {
        let partials = self
            .calls
            .iter()
            .map(|call| match call.function {
                AggregateFunction::CountStar | AggregateFunction::Count => Partial::Count(0),
                AggregateFunction::Sum | AggregateFunction::Avg if is_float(call.input_type) => {
                    Partial::FloatSum(0, FloatSum::default())
                }
                AggregateFunction::Sum | AggregateFunction::Avg => Partial::ExactSum(0, 0),
                AggregateFunction::Min | AggregateFunction::Max => Partial::Extremum(Datum::Null),
                AggregateFunction::StringAgg
                | AggregateFunction::ArrayAgg
                | AggregateFunction::PercentileCont
                | AggregateFunction::PercentileDisc
                | AggregateFunction::Mode => Partial::Recomputed(Datum::Null),
                AggregateFunction::BitXor => Partial::Xor(0, 0),
            })
            .collect();
        GroupState {
            count_star: 0,
            partials,
        }
    }

    fn encode_state(&self, state: &GroupState) -> Vec<u8> {
        let mut row = vec![Datum::Int64(state.count_star)];
        for partial in &state.partials {
            match partial {
                Partial::Count(count) => row.push(Datum::Int64(*count)),
                Partial::ExactSum(count, sum) => {
                    row.extend([Datum::Int64(*count), Datum::Numeric(*sum)])
                }
                Partial::FloatSum(count, sum) => {
                    row.extend([Datum::Int64(*count), Datum::Float64(sum.finite)])
                }
                Partial::Extremum(value) | Partial::Recomputed(value) => row.push(value.clone()),
                Partial::Xor(count, bits) => {
                    row.extend([Datum::Int64(*count), Datum::Int64(*bits)])
                }
            }
        }
        // The special-value counts of the float sums follow, in call order,
        // written only if some sum counts one (the common case stays as
        // short as before they were kept).
        let float_sums = || {
            state.partials.iter().filter_map(|partial| match partial {
                Partial::FloatSum(_, sum) => Some(sum),
                _ => None,
            })
        };
        if float_sums().any(FloatSum::has_specials) {
            for sum in float_sums() {
                row.extend(
                    [sum.positive_infinities, sum.negative_infinities, sum.nans].map(Datum::Int64),
                );
            }
        }
        let mut bytes = Vec::new();
        encode_row_into(&row, &mut bytes);
        bytes
    }

    fn decode_state(&self, bytes: &[u8]) -> RsResult<GroupState> {
        let row = decode_row(bytes)?;
        let corrupt = || RsError::internal("corrupt aggregate state");
        let mut values = row.into_iter();
        let count_star = as_i64(&values.next().ok_or_else(corrupt)?).ok_or_else(corrupt)?;
        let mut state = self.empty_state();
        state.count_star = count_star;
        for partial in state.partials.iter_mut() {
            *partial = match partial {
                Partial::Count(_) => {
                    Partial::Count(as_i64(&values.next().ok_or_else(corrupt)?).ok_or_else(corrupt)?)
                }
                Partial::ExactSum(..) => {
                    let count = as_i64(&values.next().ok_or_else(corrupt)?).ok_or_else(corrupt)?;
                    match values.next() {
                        Some(Datum::Numeric(sum)) => Partial::ExactSum(count, sum),
                        _ => return Err(corrupt()),
                    }
                }
                Partial::FloatSum(..) => {
                    let count = as_i64(&values.next().ok_or_else(corrupt)?).ok_or_else(corrupt)?;
                    match values.next() {
                        Some(Datum::Float64(finite)) => Partial::FloatSum(
                            count,
                            FloatSum {
                                finite,
                                ..FloatSum::default()
                            },
                        ),
                        _ => return Err(corrupt()),
                    }
                }
                Partial::Extremum(_) => Partial::Extremum(values.next().ok_or_else(corrupt)?),
                Partial::Recomputed(_) => Partial::Recomputed(values.next().ok_or_else(corrupt)?),
                Partial::Xor(..) => {
                    let count = as_i64(&values.next().ok_or_else(corrupt)?).ok_or_else(corrupt)?;
                    let bits = as_i64(&values.next().ok_or_else(corrupt)?).ok_or_else(corrupt)?;
                    Partial::Xor(count, bits)
                }
            };
        }
        // The float sums' special-value counts, if any were stored.
        if values.len() != 0 {
            let mut next_count = || as_i64(&values.next().ok_or_else(corrupt)?).ok_or_else(corrupt);
            for partial in state.partials.iter_mut() {
                if let Partial::FloatSum(_, sum) = partial {
                    sum.positive_infinities = next_count()?;
                    sum.negative_infinities = next_count()?;
                    sum.nans = next_count()?;
                }
            }
            if values.next().is_some() {
                return Err(corrupt());
            }
        }
        Ok(state)
    }

    fn finalize(&self, group_key: &[Datum], state: &GroupState) -> RsResult<Row> {
        let mut row = group_key.to_vec();
        for (index, call) in self.calls.iter().enumerate() {
            let output_type = self.output_types[self.group_count + index];
            let value = match (&call.function, &state.partials[index]) {
                (AggregateFunction::CountStar, _) => Datum::Int64(state.count_star),
                (_, Partial::Count(count)) => Datum::Int64(*count),
                (_, Partial::ExactSum(0, _)) | (_, Partial::FloatSum(0, _)) => Datum::Null,
                (AggregateFunction::Sum, Partial::ExactSum(_, sum)) => {
                    exact_to_output(*sum, input_scale(call.input_type), output_type)?
                }
                (AggregateFunction::Avg, Partial::ExactSum(count, sum)) => {
                    exact_average(*sum, *count, input_scale(call.input_type), output_type)?
                }
                (AggregateFunction::Sum, Partial::FloatSum(_, sum)) => {
                    float_to_output(sum.value(), output_type)
                }
                (AggregateFunction::Avg, Partial::FloatSum(count, sum)) => {
                    float_to_output(sum.value() / *count as f64, output_type)
                }
                (_, Partial::Extremum(value) | Partial::Recomputed(value)) => value.clone(),
                (_, Partial::Xor(0, _)) => Datum::Null,
                (_, Partial::Xor(_, bits)) => match output_type {
                    SqlType::Int16 => Datum::Int16(*bits as i16),
                    SqlType::Int32 => Datum::Int32(*bits as i32),
                    _ => Datum::Int64(*bits),
                },
                _ => {
                    return Err(RsError::internal(
                        "aggregate partial does not match its function",
                    ))
                }
            };
            row.push(value);
        }
        Ok(row)
    }
}

/// A `percentile_cont` input as a float8 (the planner makes it one).
fn as_float(value: &Datum) -> RsResult<f64> {
    match value {
        Datum::Float64(value) => Ok(*value),
        Datum::Float32(value) => Ok(f64::from(*value)),
        other => Err(RsError::internal(format!("percentile_cont over {other:?}"))),
    }
}

fn is_float(sql_type: Option<SqlType>) -> bool {
    matches!(sql_type, Some(SqlType::Float32 | SqlType::Float64))
}

fn input_scale(sql_type: Option<SqlType>) -> i8 {
    match sql_type {
        Some(SqlType::Numeric { scale, .. }) => scale,
        _ => 0,
    }
}

/// An integer of any width, sign-extended.
fn as_i64_widened(datum: &Datum) -> Option<i64> {
    match datum {
        Datum::Int16(value) => Some(i64::from(*value)),
        Datum::Int32(value) => Some(i64::from(*value)),
        Datum::Int64(value) => Some(*value),
        _ => None,
    }
}

fn as_i64(datum: &Datum) -> Option<i64> {
    match datum {
        Datum::Int64(value) => Some(*value),
        _ => None,
    }
}

fn accumulate(
    partial: &mut Partial,
    call: &AggregateCall,
    value: &Datum,
    weight: i64,
) -> RsResult<()> {
    match partial {
        Partial::Count(count) => *count += weight,
        Partial::ExactSum(count, sum) => {
            let exact = match value {
                Datum::Int16(v) => *v as i128,
                Datum::Int32(v) => *v as i128,
                Datum::Int64(v) => *v as i128,
                Datum::Numeric(v) => *v,
                other => {
                    return Err(RsError::internal(format!(
                        "{:?} over {other:?}",
                        call.function
                    )))
                }
            };
            *count += weight;
            *sum = exact
                .checked_mul(weight as i128)
                .and_then(|product| sum.checked_add(product))
                .ok_or_else(|| RsError::new(&codes::NUMERIC_OUT_OF_RANGE, "sum out of range"))?;
        }
        Partial::FloatSum(count, sum) => {
            let float = match value {
                Datum::Float32(v) => *v as f64,
                Datum::Float64(v) => *v,
                other => {
                    return Err(RsError::internal(format!(
                        "{:?} over {other:?}",
                        call.function
                    )))
                }
            };
            *count += weight;
            sum.add(float, weight);
        }
        Partial::Xor(count, bits) => {
            let value = as_i64_widened(value)
                .ok_or_else(|| RsError::internal(format!("{:?} over {value:?}", call.function)))?;
            *count += weight;
            // x ^ x = 0: a value applied an even number of times cancels.
            if weight % 2 != 0 {
                *bits ^= value;
            }
        }
        Partial::Extremum(_) | Partial::Recomputed(_) => {}
    }
    Ok(())
}

fn pow10(exponent: u32) -> i128 {
    10i128.pow(exponent)
}

/// Rescales an exact value to the output type.
fn exact_to_output(value: i128, scale: i8, output: SqlType) -> RsResult<Datum> {
    let out_of_range = || {
        RsError::new(
            &codes::NUMERIC_OUT_OF_RANGE,
            "aggregate result out of range",
        )
    };
    Ok(match output {
        SqlType::Int64 => Datum::Int64(
            i64::try_from(value / pow10(scale.max(0) as u32)).map_err(|_| out_of_range())?,
        ),
        SqlType::Int32 => Datum::Int32(i32::try_from(value).map_err(|_| out_of_range())?),
        SqlType::Numeric {
            scale: output_scale,
            ..
        } => Datum::Numeric(rescale(value, scale, output_scale).ok_or_else(out_of_range)?),
        SqlType::Float64 => Datum::Float64(value as f64 / pow10(scale.max(0) as u32) as f64),
        SqlType::Float32 => {
            Datum::Float32((value as f64 / pow10(scale.max(0) as u32) as f64) as f32)
        }
        other => {
            return Err(RsError::internal(format!(
                "exact aggregate into {}",
                other.pg_name()
            )))
        }
    })
}

/// `value / count` at the output type, rounding half away from zero.
fn exact_average(sum: i128, count: i64, scale: i8, output: SqlType) -> RsResult<Datum> {
    match output {
        SqlType::Numeric {
            scale: output_scale,
            ..
        } => {
            let out_of_range =
                || RsError::new(&codes::NUMERIC_OUT_OF_RANGE, "average out of range");
            let numerator = rescale(sum, scale, output_scale).ok_or_else(out_of_range)?;
            Ok(Datum::Numeric(divide_rounding(numerator, count as i128)))
        }
        SqlType::Float64 => Ok(Datum::Float64(
            sum as f64 / pow10(scale.max(0) as u32) as f64 / count as f64,
        )),
        other => Err(RsError::internal(format!(
            "average into {}",
            other.pg_name()
        ))),
    }
}

fn float_to_output(value: f64, output: SqlType) -> Datum {
    match output {
        SqlType::Float32 => Datum::Float32(value as f32),
        _ => Datum::Float64(value),
    }
}

/// Changes the scale of a mantissa (rounding half away from zero when the
/// scale shrinks). `None` on overflow.
pub fn rescale(value: i128, from: i8, to: i8) -> Option<i128> {
    if to >= from {
        value.checked_mul(pow10((to - from) as u32))
    } else {
        Some(divide_rounding(value, pow10((from - to) as u32)))
    }
}

fn divide_rounding(numerator: i128, denominator: i128) -> i128 {
    let quotient = numerator / denominator;
    let remainder = numerator % denominator;
    if remainder.abs() * 2 >= denominator.abs() {
        quotient + numerator.signum() * denominator.signum()
    } else {
        quotient
    }
}

/// Whether `candidate` beats `current` as the extremum of a MIN or MAX, in
/// the multiset's (encoding) order.
fn better(function: AggregateFunction, candidate: &Datum, current: &Datum) -> bool {
    let order = compare_datum(candidate, current);
    if function == AggregateFunction::Min {
        order == Ordering::Less
    } else {
        order == Ordering::Greater
    }
}

#[cfg(test)]
mod tests {
    //! Goal: numeric helpers round like PostgreSQL (half away from zero);
    //! a float sum takes back infinities and NaNs exactly.
    use super::*;

    #[test]
    fn a_float_sum_takes_back_its_special_values() {
        let mut sum = FloatSum::default();
        sum.add(f64::INFINITY, 2);
        sum.add(1.5, 1);
        assert_eq!(sum.value(), f64::INFINITY);
        sum.add(f64::NEG_INFINITY, 1);
        assert!(sum.value().is_nan());
        sum.add(f64::INFINITY, -2);
        assert_eq!(sum.value(), f64::NEG_INFINITY);
        sum.add(f64::NAN, 3);
        assert!(sum.value().is_nan());
        sum.add(f64::NAN, -3);
        sum.add(f64::NEG_INFINITY, -1);
        assert_eq!(sum.value(), 1.5);
        assert!(!sum.has_specials());
        // A finite part that is not finite (an overflow, or state stored
        // before the counts) still combines with the counted values.
        let mut stored = FloatSum {
            finite: f64::INFINITY,
            ..FloatSum::default()
        };
        assert_eq!(stored.value(), f64::INFINITY);
        stored.add(f64::NEG_INFINITY, 1);
        assert!(stored.value().is_nan());
    }

    #[test]
    fn rounding_is_half_away_from_zero() {
        assert_eq!(divide_rounding(5, 2), 3);
        assert_eq!(divide_rounding(-5, 2), -3);
        assert_eq!(divide_rounding(4, 3), 1);
        assert_eq!(rescale(12345, 2, 1), Some(1235));
        assert_eq!(rescale(-12345, 2, 1), Some(-1235));
        assert_eq!(rescale(12, 0, 2), Some(1200));
    }
}
