//! Incremental equi-join, with outer, semi, anti and NOT IN flavours.
//!
//! Both inputs are arranged by join key: `key row -> weight` under the
//! operator's `JL`/`JR` prefixes. For a delta `(ΔL, ΔR)` the inner part is
//! `ΔL ⋈ R_old + L_new ⋈ ΔR`, which equals `Δ(L ⋈ R)`.
//!
//! The flavours that keep unmatched rows (LEFT/RIGHT/FULL padding, semi and
//! anti joins) are maintained per affected key: a left row is unmatched when
//! no right row with its key satisfies the residual predicate. Without a
//! residual that is "the right side of the key is empty", so only a change in
//! that emptiness touches the stored rows of the key (DESIGN §6.4.1). With a
//! residual the affected keys' rows are re-paired, which costs the state of
//! those keys, never the whole input.
//!
//! Rows whose key has a NULL never match (unless `nulls_equal`, used for set
//! operations) and hold no state: their padded output is decided on arrival.
//!
//! The operator is handed both inputs' deltas by the dataflow and steps
//! nothing else.

use std::collections::BTreeMap;

use rockstream_plan::{JoinKind, PlanNode};
use rockstream_types::encoding::{decode_prefix, decode_row, encode_row, encode_row_into};
use rockstream_types::{Datum, ObjectId, Row, RsResult, SqlType, ZSet};

use crate::dataflow::unsupported_join;
use crate::expr::{any_null, CompiledExprs};
use crate::keys::{decode_weight, op_prefix, JOIN_LEFT, JOIN_RIGHT, SET_OPERATION};
use crate::state::{ScanOrder, StateStore};

/// Largest number of rows one key of an arrangement may return in one scan.
pub const KEY_ROWS_MAX: usize = 10_000_000;

#[derive(Debug)]
pub(crate) struct JoinOperator {
    op_id: ObjectId,
    kind: JoinKind,
    left_keys: Vec<usize>,
    right_keys: Vec<usize>,
    nulls_equal: bool,
    residual: Option<CompiledExprs>,
    null_aware: bool,
    left_width: usize,
    right_width: usize,
}

type Rows = Vec<(Row, i64)>;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Left,
    Right,
}

impl JoinOperator {
    /// The operator of a `PlanNode::Join`; its inputs are compiled apart.
    pub fn compile(plan: &PlanNode) -> RsResult<JoinOperator> {
        let PlanNode::Join {
            op_id,
            left,
            right,
            kind,
            left_keys,
            right_keys,
            nulls_equal,
            residual,
            joined_schema,
            null_aware,
            left_width,
            right_width,
            ..
        } = plan
        else {
            return Err(rockstream_types::RsError::internal(
                "JoinOperator::compile on a non-join",
            ));
        };
        let mut joined_types: Vec<SqlType> = left.schema().types()[..*left_width].to_vec();
        joined_types.extend(right.schema().types()[..*right_width].iter().copied());
        let residual = match residual {
            Some(expr) => Some(CompiledExprs::compile(
                std::slice::from_ref(expr),
                joined_schema,
                joined_types,
            )?),
            None => None,
        };
        if *null_aware
            && (residual.is_some() || left_keys.len() != 1 || *kind != JoinKind::LeftAnti)
        {
            return Err(unsupported_join(*kind));
        }
        Ok(JoinOperator {
            op_id: *op_id,
            kind: *kind,
            left_keys: left_keys.clone(),
            right_keys: right_keys.clone(),
            nulls_equal: *nulls_equal,
            residual,
            null_aware: *null_aware,
            left_width: *left_width,
            right_width: *right_width,
        })
    }

    /// The join's output delta for its inputs' deltas.
    pub async fn step<S: StateStore>(
        &self,
        store: &mut S,
        left_delta: ZSet,
        right_delta: ZSet,
    ) -> RsResult<ZSet> {
        if left_delta.is_empty() && right_delta.is_empty() {
            return Ok(ZSet::new());
        }
        if self.null_aware {
            return self.step_not_in(store, left_delta, right_delta).await;
        }
        let mut out = ZSet::new();
        let (left_groups, left_nulls) = self.group(left_delta, &self.left_keys);
        let (right_groups, right_nulls) = self.group(right_delta, &self.right_keys);
        for (row, weight) in left_nulls {
            match self.kind {
                JoinKind::Left | JoinKind::Full => out.push(self.pad_left(&row), weight),
                JoinKind::LeftAnti => out.push(self.trim_left(row), weight),
                _ => {}
            }
        }
        for (row, weight) in right_nulls {
            if matches!(self.kind, JoinKind::Right | JoinKind::Full) {
                out.push(self.pad_right(&row), weight);
            }
        }
        let mut keys: Vec<&[u8]> = left_groups
            .keys()
            .chain(right_groups.keys())
            .map(Vec::as_slice)
            .collect();
        keys.sort_unstable();
        keys.dedup();
        let empty = Vec::new();
        let deltas: Vec<(&Rows, &Rows)> = keys
            .iter()
            .map(|key| {
                (
                    left_groups.get(*key).unwrap_or(&empty),
                    right_groups.get(*key).unwrap_or(&empty),
                )
            })
            .collect();
        if self.residual.is_some() {
            self.step_keys_with_residual(store, &keys, &deltas, &mut out)
                .await?;
        } else {
            self.step_keys(store, &keys, &deltas, &mut out).await?;
        }
        Ok(out.consolidate())
    }

    /// Splits a delta by encoded join key; rows with a NULL key come apart.
    fn group(&self, delta: ZSet, keys: &[usize]) -> (BTreeMap<Vec<u8>, Rows>, Rows) {
        let mut groups: BTreeMap<Vec<u8>, Rows> = BTreeMap::new();
        let mut nulls = Vec::new();
        for (row, weight) in delta.updates {
            if !self.nulls_equal && any_null(&row, keys) {
                nulls.push((row, weight));
                continue;
            }
            let key: Row = keys.iter().map(|column| row[*column].clone()).collect();
            groups
                .entry(encode_row(&key))
                .or_default()
                .push((row, weight));
        }
        (groups, nulls)
    }

    fn prefix(&self, side: Side, key: &[u8]) -> Vec<u8> {
        let kind = if side == Side::Left {
            JOIN_LEFT
        } else {
            JOIN_RIGHT
        };
        let mut prefix = op_prefix(kind, self.op_id);
        prefix.extend_from_slice(key);
        prefix
    }

    async fn scan<S: StateStore>(
        &self,
        store: &mut S,
        side: Side,
        key: &[u8],
        limit: usize,
    ) -> RsResult<Rows> {
        let mut rows = self.scan_keys(store, side, &[key], limit).await?;
        Ok(rows.pop().unwrap_or_default())
    }

    /// The stored rows (at most `limit` each) of every key of `keys`
    /// (ascending, distinct) on `side`, read in one ordered pass.
    async fn scan_keys<S: StateStore>(
        &self,
        store: &mut S,
        side: Side,
        keys: &[&[u8]],
        limit: usize,
    ) -> RsResult<Vec<Rows>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let prefixes: Vec<Vec<u8>> = keys.iter().map(|key| self.prefix(side, key)).collect();
        let prefix_refs: Vec<&[u8]> = prefixes.iter().map(Vec::as_slice).collect();
        let answers = store.scan_prefixes(&prefix_refs, limit).await?;
        answers
            .into_iter()
            .zip(&prefixes)
            .map(|(entries, prefix)| {
                entries
                    .into_iter()
                    .map(|(stored_key, value)| {
                        Ok((
                            decode_row(&stored_key[prefix.len()..])?,
                            decode_weight(&value),
                        ))
                    })
                    .collect()
            })
            .collect()
    }

    async fn any<S: StateStore>(&self, store: &mut S, side: Side, key: &[u8]) -> RsResult<bool> {
        let prefix = self.prefix(side, key);
        Ok(!store
            .scan_prefix(&prefix, ScanOrder::Ascending, 1)
            .await?
            .is_empty())
    }

    /// Per key of `keys` (ascending, distinct): whether `side` holds a row
    /// with it, read in one ordered pass.
    async fn any_keys<S: StateStore>(
        &self,
        store: &mut S,
        side: Side,
        keys: &[&[u8]],
    ) -> RsResult<Vec<bool>> {
        let rows = self.scan_keys(store, side, keys, 1).await?;
        Ok(rows.iter().map(|rows| !rows.is_empty()).collect())
    }

    async fn apply<S: StateStore>(
        &self,
        store: &mut S,
        side: Side,
        key: &[u8],
        rows: &Rows,
    ) -> RsResult<()> {
        for (row, weight) in rows {
            let mut stored_key = self.prefix(side, key);
            encode_row_into(row, &mut stored_key);
            store.add_count(stored_key, *weight);
        }
        Ok(())
    }

    fn emits_pairs(&self) -> bool {
        matches!(
            self.kind,
            JoinKind::Inner | JoinKind::Left | JoinKind::Right | JoinKind::Full
        )
    }

    fn tracks_left_unmatched(&self) -> bool {
        matches!(
            self.kind,
            JoinKind::Left | JoinKind::Full | JoinKind::LeftSemi | JoinKind::LeftAnti
        )
    }

    fn tracks_right_unmatched(&self) -> bool {
        matches!(self.kind, JoinKind::Right | JoinKind::Full)
    }

    /// Steps every key a delta touches, without a residual. Each key reads
    /// and writes only its own rows, so the keys go phase by phase, each
    /// phase's reads as one ordered pass: the old state, the left deltas,
    /// the new left rows, the right deltas, the new state.
    async fn step_keys<S: StateStore>(
        &self,
        store: &mut S,
        keys: &[&[u8]],
        deltas: &[(&Rows, &Rows)],
        out: &mut ZSet,
    ) -> RsResult<()> {
        let right_before = if self.tracks_left_unmatched() {
            self.any_keys(store, Side::Right, keys).await?
        } else {
            Vec::new()
        };
        let left_before = if self.tracks_right_unmatched() {
            self.any_keys(store, Side::Left, keys).await?
        } else {
            Vec::new()
        };
        if self.emits_pairs() {
            let (with_left, indexes) = select(keys, |index| !deltas[index].0.is_empty());
            let right_old = self
                .scan_keys(store, Side::Right, &with_left, KEY_ROWS_MAX)
                .await?;
            for (index, right_old) in indexes.into_iter().zip(right_old) {
                self.emit_pairs(deltas[index].0, &right_old, out);
            }
        }
        for (key, (left_delta, _)) in keys.iter().zip(deltas) {
            self.apply(store, Side::Left, key, left_delta).await?;
        }
        let mut left_new: Vec<Option<Rows>> = vec![None; keys.len()];
        if self.emits_pairs() {
            let (with_right, indexes) = select(keys, |index| !deltas[index].1.is_empty());
            let rows = self
                .scan_keys(store, Side::Left, &with_right, KEY_ROWS_MAX)
                .await?;
            for (index, rows) in indexes.iter().zip(&rows) {
                self.emit_pairs(rows, deltas[*index].1, out);
            }
            scatter(&mut left_new, indexes, rows);
        }
        for (key, (_, right_delta)) in keys.iter().zip(deltas) {
            self.apply(store, Side::Right, key, right_delta).await?;
        }
        if self.tracks_left_unmatched() {
            let right_after = self.any_keys(store, Side::Right, keys).await?;
            let flipped = |index: usize| right_before[index] != right_after[index];
            let (unread, indexes) =
                select(keys, |index| flipped(index) && left_new[index].is_none());
            let rows = self
                .scan_keys(store, Side::Left, &unread, KEY_ROWS_MAX)
                .await?;
            scatter(&mut left_new, indexes, rows);
            for (index, left_new) in left_new.into_iter().enumerate() {
                let left_delta = deltas[index].0;
                let unmatched = match (right_before[index], right_after[index]) {
                    (false, false) => left_delta.clone(),
                    (true, true) => Vec::new(),
                    (false, true) => subtract(&left_new.unwrap_or_default(), left_delta)
                        .into_iter()
                        .map(|(row, weight)| (row, -weight))
                        .collect(),
                    (true, false) => left_new.unwrap_or_default(),
                };
                self.emit_left_unmatched(left_delta, unmatched, out);
            }
        }
        if self.tracks_right_unmatched() {
            let left_after = self.any_keys(store, Side::Left, keys).await?;
            let (flipped, indexes) = select(keys, |index| left_before[index] != left_after[index]);
            let rows = self
                .scan_keys(store, Side::Right, &flipped, KEY_ROWS_MAX)
                .await?;
            let mut right_new: Vec<Option<Rows>> = vec![None; keys.len()];
            scatter(&mut right_new, indexes, rows);
            for (index, (_, right_delta)) in deltas.iter().enumerate() {
                let unmatched = match (left_before[index], left_after[index]) {
                    (false, false) => (*right_delta).clone(),
                    (true, true) => Vec::new(),
                    (false, true) => {
                        subtract(&right_new[index].take().unwrap_or_default(), right_delta)
                            .into_iter()
                            .map(|(row, weight)| (row, -weight))
                            .collect()
                    }
                    (true, false) => right_new[index].take().unwrap_or_default(),
                };
                for (row, weight) in unmatched {
                    out.push(self.pad_right(&row), weight);
                }
            }
        }
        Ok(())
    }

    /// Steps every key a delta touches, with a residual: the old rows of
    /// both sides of every key are read in one ordered pass each, then
    /// each key's pairs and unmatched rows are decided again.
    async fn step_keys_with_residual<S: StateStore>(
        &self,
        store: &mut S,
        keys: &[&[u8]],
        deltas: &[(&Rows, &Rows)],
        out: &mut ZSet,
    ) -> RsResult<()> {
        let left_olds = self
            .scan_keys(store, Side::Left, keys, KEY_ROWS_MAX)
            .await?;
        let right_olds = self
            .scan_keys(store, Side::Right, keys, KEY_ROWS_MAX)
            .await?;
        for ((key, (left_delta, right_delta)), (left_old, right_old)) in keys
            .iter()
            .zip(deltas)
            .zip(left_olds.iter().zip(&right_olds))
        {
            self.apply(store, Side::Left, key, left_delta).await?;
            self.apply(store, Side::Right, key, right_delta).await?;
            self.step_key_with_residual(left_old, right_old, left_delta, right_delta, out)?;
        }
        Ok(())
    }

    fn step_key_with_residual(
        &self,
        left_old: &Rows,
        right_old: &Rows,
        left_delta: &Rows,
        right_delta: &Rows,
        out: &mut ZSet,
    ) -> RsResult<()> {
        let left_new = add(left_old, left_delta);
        let right_new = add(right_old, right_delta);
        if self.emits_pairs() {
            let mut pairs = self.matching_pairs(left_delta, right_old)?;
            pairs.extend(self.matching_pairs(&left_new, right_delta)?);
            for (row, weight) in pairs {
                out.push(row, weight);
            }
        }
        if self.tracks_left_unmatched() {
            let old = self.unmatched(left_old, right_old, Side::Left)?;
            let new = self.unmatched(&left_new, &right_new, Side::Left)?;
            self.emit_left_unmatched(left_delta, subtract(&new, &old), out);
        }
        if self.tracks_right_unmatched() {
            let old = self.unmatched(right_old, left_old, Side::Right)?;
            let new = self.unmatched(&right_new, &left_new, Side::Right)?;
            for (row, weight) in subtract(&new, &old) {
                out.push(self.pad_right(&row), weight);
            }
        }
        Ok(())
    }

    /// Emits the change of unmatched left rows as the join kind shapes it.
    fn emit_left_unmatched(&self, left_delta: &Rows, unmatched_change: Rows, out: &mut ZSet) {
        match self.kind {
            JoinKind::LeftAnti => {
                for (row, weight) in unmatched_change {
                    out.push(self.trim_left(row), weight);
                }
            }
            JoinKind::LeftSemi => {
                for (row, weight) in subtract(left_delta, &unmatched_change) {
                    out.push(self.trim_left(row), weight);
                }
            }
            _ => {
                for (row, weight) in unmatched_change {
                    out.push(self.pad_left(&row), weight);
                }
            }
        }
    }

    fn emit_pairs(&self, left: &Rows, right: &Rows, out: &mut ZSet) {
        for (left_row, left_weight) in left {
            for (right_row, right_weight) in right {
                out.push(self.joined(left_row, right_row), left_weight * right_weight);
            }
        }
    }

    /// Joined rows of `left × right` that satisfy the residual.
    fn matching_pairs(&self, left: &Rows, right: &Rows) -> RsResult<Rows> {
        let mut candidates: Rows = Vec::with_capacity(left.len() * right.len());
        for (left_row, left_weight) in left {
            for (right_row, right_weight) in right {
                candidates.push((self.joined(left_row, right_row), left_weight * right_weight));
            }
        }
        self.keep_matching(candidates)
    }

    fn keep_matching(&self, candidates: Rows) -> RsResult<Rows> {
        let Some(residual) = &self.residual else {
            return Ok(candidates);
        };
        if candidates.is_empty() {
            return Ok(candidates);
        }
        let rows: Vec<&Row> = candidates.iter().map(|(row, _)| row).collect();
        let keep = residual.evaluate_predicate(&rows)?;
        Ok(candidates
            .into_iter()
            .zip(keep)
            .filter(|(_, keep)| *keep)
            .map(|(pair, _)| pair)
            .collect())
    }

    /// Rows of `rows` (on `side`) with no partner in `others` passing the residual.
    fn unmatched(&self, rows: &Rows, others: &Rows, side: Side) -> RsResult<Rows> {
        let mut result = Vec::new();
        for (row, weight) in rows {
            let candidates: Rows = others
                .iter()
                .map(|(other, other_weight)| {
                    let joined = if side == Side::Left {
                        self.joined(row, other)
                    } else {
                        self.joined(other, row)
                    };
                    (joined, *other_weight)
                })
                .collect();
            if self.keep_matching(candidates)?.is_empty() {
                result.push((row.clone(), *weight));
            }
        }
        Ok(result)
    }

    /// The output row of a matched pair: each side's output columns.
    fn joined(&self, left: &Row, right: &Row) -> Row {
        let mut joined = Vec::with_capacity(self.left_width + self.right_width);
        joined.extend(left[..self.left_width].iter().cloned());
        joined.extend(right[..self.right_width].iter().cloned());
        joined
    }

    /// A left row as semi/anti joins output it.
    fn trim_left(&self, row: Row) -> Row {
        if row.len() == self.left_width {
            row
        } else {
            row[..self.left_width].to_vec()
        }
    }

    fn pad_left(&self, row: &Row) -> Row {
        let mut padded = row[..self.left_width].to_vec();
        padded.extend(std::iter::repeat_n(Datum::Null, self.right_width));
        padded
    }

    fn pad_right(&self, row: &Row) -> Row {
        let mut padded: Row = std::iter::repeat_n(Datum::Null, self.left_width).collect();
        padded.extend(row[..self.right_width].iter().cloned());
        padded
    }

    /// `x NOT IN (subquery)`: a left row qualifies when the right side is
    /// empty, or when its key is not NULL, not on the right, and the right
    /// side holds no NULL. When emptiness or NULL-presence of the right side
    /// flips, every stored left row is re-decided.
    async fn step_not_in<S: StateStore>(
        &self,
        store: &mut S,
        left_delta: ZSet,
        right_delta: ZSet,
    ) -> RsResult<ZSet> {
        let counters_key = op_prefix(SET_OPERATION, self.op_id);
        let counters = match store.get(&counters_key).await? {
            Some(bytes) => decode_row(&bytes)?,
            None => vec![Datum::Int64(0), Datum::Int64(0)],
        };
        let (total_old, nulls_old) = (int(&counters[0]), int(&counters[1]));
        let mut total_new = total_old;
        let mut nulls_new = nulls_old;
        for (row, weight) in &right_delta.updates {
            total_new += weight;
            if any_null(row, &self.right_keys) {
                nulls_new += weight;
            }
        }
        store.put(
            counters_key,
            encode_row(&[Datum::Int64(total_new), Datum::Int64(nulls_new)]),
        );
        let mut out = ZSet::new();
        let global_old = (total_old == 0, nulls_old > 0);
        let global_new = (total_new == 0, nulls_new > 0);
        let left_groups = group_all(&left_delta, &self.left_keys);
        let right_groups = group_all(&right_delta, &self.right_keys);
        if global_old != global_new {
            let all_left = self.scan_all(store, Side::Left).await?;
            for (key, rows) in &all_left {
                let present_old = self.any(store, Side::Right, key).await?;
                for (row, weight) in rows {
                    if not_in_qualifies(row, &self.left_keys, global_old, present_old) {
                        out.push(self.trim_left(row.clone()), -weight);
                    }
                }
            }
            for (key, rows) in &right_groups {
                self.apply(store, Side::Right, key, rows).await?;
            }
            for (key, rows) in &left_groups {
                self.apply(store, Side::Left, key, rows).await?;
            }
            for (key, rows) in self.scan_all(store, Side::Left).await? {
                let present_new = self.any(store, Side::Right, &key).await?;
                for (row, weight) in rows {
                    if not_in_qualifies(&row, &self.left_keys, global_new, present_new) {
                        out.push(self.trim_left(row), weight);
                    }
                }
            }
            return Ok(out.consolidate());
        }
        let mut keys: Vec<&Vec<u8>> = left_groups.keys().chain(right_groups.keys()).collect();
        keys.sort();
        keys.dedup();
        let empty = Vec::new();
        for key in keys {
            let left_rows = left_groups.get(key).unwrap_or(&empty);
            let right_rows = right_groups.get(key).unwrap_or(&empty);
            let present_old = self.any(store, Side::Right, key).await?;
            self.apply(store, Side::Right, key, right_rows).await?;
            let present_new = self.any(store, Side::Right, key).await?;
            let left_old = if present_old != present_new {
                self.scan(store, Side::Left, key, KEY_ROWS_MAX).await?
            } else {
                Vec::new()
            };
            for (row, weight) in &left_old {
                if not_in_qualifies(row, &self.left_keys, global_new, present_old) {
                    out.push(self.trim_left(row.clone()), -weight);
                }
            }
            self.apply(store, Side::Left, key, left_rows).await?;
            let stable: Rows = if present_old != present_new {
                add(&left_old, left_rows)
            } else {
                left_rows.clone()
            };
            for (row, weight) in stable {
                if not_in_qualifies(&row, &self.left_keys, global_new, present_new) {
                    out.push(self.trim_left(row), weight);
                }
            }
        }
        Ok(out.consolidate())
    }

    async fn scan_all<S: StateStore>(
        &self,
        store: &mut S,
        side: Side,
    ) -> RsResult<BTreeMap<Vec<u8>, Rows>> {
        let prefix = self.prefix(side, &[]);
        let key_columns = if side == Side::Left {
            &self.left_keys
        } else {
            &self.right_keys
        };
        let mut groups: BTreeMap<Vec<u8>, Rows> = BTreeMap::new();
        for (stored_key, value) in store
            .scan_prefix(&prefix, ScanOrder::Ascending, usize::MAX)
            .await?
        {
            // The stored key is `key ++ row`: skip the key's datums.
            let (_, key_length) = decode_prefix(&stored_key[prefix.len()..], key_columns.len())?;
            let row = decode_row(&stored_key[prefix.len() + key_length..])?;
            let key: Row = key_columns
                .iter()
                .map(|column| row[*column].clone())
                .collect();
            groups
                .entry(encode_row(&key))
                .or_default()
                .push((row, decode_weight(&value)));
        }
        Ok(groups)
    }
}

fn group_all(delta: &ZSet, keys: &[usize]) -> BTreeMap<Vec<u8>, Rows> {
    let mut groups: BTreeMap<Vec<u8>, Rows> = BTreeMap::new();
    for (row, weight) in &delta.updates {
        let key: Row = keys.iter().map(|column| row[*column].clone()).collect();
        groups
            .entry(encode_row(&key))
            .or_default()
            .push((row.clone(), *weight));
    }
    groups
}

/// `(right_empty, right_has_null)`, `present` = key found on the right.
fn not_in_qualifies(row: &Row, keys: &[usize], global: (bool, bool), present: bool) -> bool {
    let (right_empty, right_has_null) = global;
    right_empty || (!any_null(row, keys) && !present && !right_has_null)
}

fn int(datum: &Datum) -> i64 {
    match datum {
        Datum::Int64(value) => *value,
        _ => 0,
    }
}

/// The keys whose index `keep` accepts, and those indexes; the keys stay
/// ascending.
fn select<'k>(keys: &[&'k [u8]], keep: impl Fn(usize) -> bool) -> (Vec<&'k [u8]>, Vec<usize>) {
    (0..keys.len())
        .filter(|index| keep(*index))
        .map(|index| (keys[index], index))
        .unzip()
}

/// Puts each of `rows` at its index in `slots`.
fn scatter(slots: &mut [Option<Rows>], indexes: Vec<usize>, rows: Vec<Rows>) {
    for (index, rows) in indexes.into_iter().zip(rows) {
        slots[index] = Some(rows);
    }
}

/// Multiset sum of two row lists, consolidated.
fn add(a: &Rows, b: &Rows) -> Rows {
    let mut sum = ZSet::from_updates(a.clone());
    sum.extend(ZSet::from_updates(b.clone()));
    sum.consolidate().updates
}

/// Multiset difference `a - b`, consolidated.
fn subtract(a: &Rows, b: &Rows) -> Rows {
    add(
        a,
        &b.iter()
            .map(|(row, weight)| (row.clone(), -weight))
            .collect(),
    )
}
