//! Top-K: `ORDER BY … LIMIT n OFFSET m`, over all rows or per partition
//! (DESIGN §6.10).
//!
//! State is the input as a multiset in output order: `TK op_id partition
//! order row len(row) -> count`, the order key from
//! [`push_order_key`], rows the keys do not order by their encoding, the
//! row's length last so the row can be read back from the key. Counts are
//! blind additions, so keeping the state reads nothing.
//!
//! A change reads the head of each partition it touches and nothing else:
//! with `N = offset + limit` and `d` rows the batch removes from the
//! partition, the first `N + d` entries hold at least `N` rows once the
//! batch is applied, so the new top `N` lies among them and the batch's
//! rows after them cannot enter it. One ordered pass over the partitions'
//! heads ([`StateRead::scan_prefixes`]) gives the old window; merging the
//! batch into it gives the new one; the output is their difference. A
//! change past the `N`-th row emits nothing; one before it moves rows across
//! the window's edges, at most as many as it changed. Numbered (the
//! `ROW_NUMBER() … <= n` form), each row carries its position, so a change
//! also renumbers the rows of the window behind it: at most `limit` rows.

use std::ops::Range;

use rockstream_plan::{Numbering, SortKey};
use rockstream_types::encoding::{decode_row, encode_row_into};
use rockstream_types::{Datum, ObjectId, Row, RsError, RsResult, SqlType, ZSet};

use crate::keys::{decode_weight, op_prefix, push_order_key, TOP_K};
use crate::state::{Entries, StateStore};

#[derive(Debug)]
pub(crate) struct TopKOperator {
    op_id: ObjectId,
    partition: Vec<usize>,
    order_by: Vec<SortKey>,
    /// Rows skipped at the head of each partition.
    offset: i64,
    /// `offset + limit`: where the window ends (for `RANK()` and
    /// `DENSE_RANK()`, the last rank kept).
    end: i64,
    /// How rows are numbered, and the type of the number appended to each.
    numbering: Option<(Numbering, SqlType)>,
}

/// One entry of an ordered multiset a batch changes: `kind op_id
/// partition order row len(row)` (the layout is shared with
/// [`crate::window`]).
pub(crate) struct Change {
    pub(crate) key: Vec<u8>,
    /// Length of the key's prefix naming its partition.
    pub(crate) partition_len: usize,
    pub(crate) weight: i64,
}

impl Change {
    /// `row`'s entry, changed by `weight`.
    pub(crate) fn new(
        (kind, op_id): ([u8; 2], ObjectId),
        partition: &[usize],
        order_by: &[SortKey],
        row: &Row,
        weight: i64,
    ) -> Change {
        let mut key = op_prefix(kind, op_id);
        let values: Vec<Datum> = partition
            .iter()
            .map(|&column| row[column].clone())
            .collect();
        encode_row_into(&values, &mut key);
        let partition_len = key.len();
        push_order_key(row, order_by, &mut key);
        let start = key.len();
        encode_row_into(row, &mut key);
        let row_len = (key.len() - start) as u32;
        key.extend_from_slice(&row_len.to_be_bytes());
        Change {
            key,
            partition_len,
            weight,
        }
    }

    /// Every row of `delta` as a change, in key order: the changes of one
    /// partition are consecutive (partition prefixes are prefix-free).
    pub(crate) fn all_sorted(
        (kind, op_id): ([u8; 2], ObjectId),
        partition: &[usize],
        order_by: &[SortKey],
        delta: &ZSet,
    ) -> Vec<Change> {
        let mut changes: Vec<Change> = delta
            .updates
            .iter()
            .map(|(row, weight)| Change::new((kind, op_id), partition, order_by, row, *weight))
            .collect();
        changes.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        changes
    }

    /// The prefix of every entry of its partition.
    pub(crate) fn partition(&self) -> &[u8] {
        &self.key[..self.partition_len]
    }
}

/// Why a partition's window could not be told from the entries read.
struct NeedMore;

impl TopKOperator {
    pub(crate) fn new(
        op_id: ObjectId,
        partition: Vec<usize>,
        order_by: Vec<SortKey>,
        (offset, limit): (u64, u64),
        numbering: Option<(Numbering, SqlType)>,
    ) -> RsResult<TopKOperator> {
        if let Some((numbering, sql_type)) = numbering {
            number_datum(sql_type, 1)?;
            if numbering != Numbering::RowNumber && offset != 0 {
                return Err(RsError::internal("a ranked top-K with an offset"));
            }
        }
        let offset = i64::try_from(offset).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        Ok(TopKOperator {
            op_id,
            partition,
            order_by,
            offset,
            end: offset.saturating_add(limit),
            numbering,
        })
    }

    pub(crate) async fn step<S: StateStore>(&self, store: &mut S, delta: ZSet) -> RsResult<ZSet> {
        let delta = delta.consolidate();
        if delta.is_empty() {
            return Ok(ZSet::new());
        }
        let changes =
            Change::all_sorted((TOP_K, self.op_id), &self.partition, &self.order_by, &delta);
        let mut pending = partitions(&changes);
        let removed_most = pending
            .iter()
            .map(|range| {
                changes[range.clone()]
                    .iter()
                    .map(|change| (-change.weight).max(0))
                    .sum::<i64>()
            })
            .max()
            .unwrap_or(0);
        let mut out = ZSet::new();
        // An empty window (`LIMIT 0`) shows nothing: no head to read.
        if self.end <= self.offset {
            pending.clear();
        }
        // Ranks need the entry after the window too, to see it starts
        // another rank.
        let ranked = matches!(
            self.numbering,
            Some((Numbering::Rank | Numbering::DenseRank, _))
        );
        let head = self
            .end
            .saturating_add(removed_most)
            .saturating_add(i64::from(ranked));
        let mut scan_limit = usize::try_from(head).unwrap_or(usize::MAX);
        while !pending.is_empty() {
            let prefixes: Vec<&[u8]> = pending
                .iter()
                .map(|range| changes[range.start].partition())
                .collect();
            let heads = store.scan_prefixes(&prefixes, scan_limit).await?;
            let mut unfinished = Vec::new();
            for (range, head) in pending.into_iter().zip(heads) {
                match self.window_changes(&head, &changes[range.clone()], scan_limit)? {
                    Ok(changed) => out.extend(changed),
                    // Ranks tied past what was read: read further.
                    Err(NeedMore) => unfinished.push(range),
                }
            }
            pending = unfinished;
            scan_limit = scan_limit.saturating_mul(2);
        }
        for change in changes {
            store.add_count(change.key, change.weight);
        }
        Ok(out.consolidate())
    }

    /// How one partition's window changes: `head` is its first
    /// `scan_limit` entries (all of them if fewer), `changes` the batch's
    /// changes to it, both in key order. `Err(NeedMore)` when a window
    /// may go on past the entries read (rows tied for the last rank kept).
    fn window_changes(
        &self,
        head: &Entries,
        changes: &[Change],
        scan_limit: usize,
    ) -> RsResult<Result<ZSet, NeedMore>> {
        let mut out = ZSet::new();
        let Some(partition_len) = changes.first().map(|change| change.partition_len) else {
            return Ok(Ok(out));
        };
        let read_all = head.len() < scan_limit;
        let (mut old_side, mut new_side) = (Side::default(), Side::default());
        let mut merged = Merged::new(head, changes);
        loop {
            if old_side.ended(self) && new_side.ended(self) {
                break;
            }
            if merged.entries_done() && !read_all {
                return Ok(Err(NeedMore));
            }
            let Some((key, old, new)) = merged.next().transpose()? else {
                break;
            };
            let order = order_key(key, partition_len)?;
            let shown_before = old_side.place(self, order, old);
            let shown_now = new_side.place(self, order, new);
            if shown_before == shown_now {
                continue;
            }
            let row = entry_row(key)?;
            for (shown, sign) in [(shown_before, -1), (shown_now, 1)] {
                for (number, copies) in shown {
                    let mut row = row.clone();
                    if let (Some(number), Some((_, sql_type))) = (number, self.numbering) {
                        row.push(number_datum(sql_type, number)?);
                    }
                    out.push(row, sign * copies);
                }
            }
        }
        Ok(Ok(out))
    }
}

/// Where one state (before or after the batch) of a partition's walk is.
#[derive(Default)]
struct Side<'a> {
    /// Rows placed so far.
    at: i64,
    /// Where the rows tied with the last one placed begin, and how many
    /// distinct order keys were placed.
    group_start: i64,
    groups: i64,
    last_order: Option<&'a [u8]>,
    /// Every row from here on is past the window.
    past: bool,
}

impl<'a> Side<'a> {
    /// Whether every further row is past the window, known before the next
    /// entry is seen (by position; ranks wait for the next order key).
    fn ended(&self, top_k: &TopKOperator) -> bool {
        self.past
            || (matches!(top_k.numbering, None | Some((Numbering::RowNumber, _)))
                && self.at >= top_k.end)
    }

    /// Places `count` copies of an entry ordered by `order`; returns how
    /// they show in the window: `(number, copies)` pairs.
    fn place(
        &mut self,
        top_k: &TopKOperator,
        order: &'a [u8],
        count: i64,
    ) -> Vec<(Option<i64>, i64)> {
        if count == 0 || self.past {
            return Vec::new();
        }
        if self.last_order != Some(order) {
            self.group_start = self.at;
            self.groups += 1;
            self.last_order = Some(order);
        }
        let at = self.at;
        self.at += count;
        match top_k.numbering {
            None => {
                let shown = (at.saturating_add(count).min(top_k.end) - at.max(top_k.offset)).max(0);
                if shown == 0 {
                    Vec::new()
                } else {
                    vec![(None, shown)]
                }
            }
            Some((Numbering::RowNumber, _)) => (at.max(top_k.offset)
                ..at.saturating_add(count).min(top_k.end))
                .map(|position| (Some(position + 1), 1))
                .collect(),
            Some((Numbering::Rank, _)) if self.group_start < top_k.end => {
                vec![(Some(self.group_start + 1), count)]
            }
            Some((Numbering::DenseRank, _)) if self.groups <= top_k.end => {
                vec![(Some(self.groups), count)]
            }
            Some(_) => {
                self.past = true;
                Vec::new()
            }
        }
    }
}

/// A row's number as its column holds it.
fn number_datum(sql_type: SqlType, number: i64) -> RsResult<Datum> {
    match sql_type {
        SqlType::Int64 => Ok(Datum::Int64(number)),
        SqlType::Numeric { scale: 0, .. } => Ok(Datum::Numeric(i128::from(number))),
        other => Err(RsError::internal(format!(
            "a row number of type {}",
            other.pg_name()
        ))),
    }
}

/// The order key of an entry: between its partition and its row.
fn order_key(key: &[u8], partition_len: usize) -> RsResult<&[u8]> {
    let (start, _) = row_bounds(key)?;
    key.get(partition_len..start)
        .ok_or_else(|| RsError::internal("corrupt top-K entry"))
}

/// Where the row an entry's key ends with lies in the key.
fn row_bounds(key: &[u8]) -> RsResult<(usize, usize)> {
    let corrupt = || RsError::internal("corrupt top-K entry");
    let len_at = key.len().checked_sub(4).ok_or_else(corrupt)?;
    let len = u32::from_be_bytes(key[len_at..].try_into().map_err(|_| corrupt())?) as usize;
    let start = len_at.checked_sub(len).ok_or_else(corrupt)?;
    Ok((start, len_at))
}

/// A partition's stored entries merged with a batch's changes to it, both
/// in key order: each key once, with its count before and after the batch.
pub(crate) struct Merged<'a> {
    entries: &'a Entries,
    changes: &'a [Change],
    next_entry: usize,
    next_change: usize,
}

impl<'a> Merged<'a> {
    pub(crate) fn new(entries: &'a Entries, changes: &'a [Change]) -> Merged<'a> {
        Merged {
            entries,
            changes,
            next_entry: 0,
            next_change: 0,
        }
    }

    /// Whether every stored entry has been met (changes may remain).
    pub(crate) fn entries_done(&self) -> bool {
        self.next_entry == self.entries.len()
    }
}

impl<'a> Iterator for Merged<'a> {
    /// `(key, count before, count after)`; `Err` if a count goes negative.
    type Item = RsResult<(&'a [u8], i64, i64)>;

    fn next(&mut self) -> Option<Self::Item> {
        let entry = self.entries.get(self.next_entry);
        let change = self.changes.get(self.next_change);
        let (key, old, weight) = match (entry, change) {
            (None, None) => return None,
            (Some((key, value)), change)
                if change.is_none_or(|change| key.as_slice() <= change.key.as_slice()) =>
            {
                self.next_entry += 1;
                let weight = match change {
                    Some(change) if change.key == *key => {
                        self.next_change += 1;
                        change.weight
                    }
                    _ => 0,
                };
                (key.as_slice(), decode_weight(value), weight)
            }
            (_, Some(change)) => {
                self.next_change += 1;
                (change.key.as_slice(), 0, change.weight)
            }
            (Some(_), None) => return None,
        };
        let new = old + weight;
        if new < 0 {
            return Some(Err(RsError::internal(
                "an ordered multiset's count went negative",
            )));
        }
        Some(Ok((key, old, new)))
    }
}

/// The ranges of `changes` (in key order) that share a partition.
pub(crate) fn partitions(changes: &[Change]) -> Vec<Range<usize>> {
    let mut ranges: Vec<Range<usize>> = Vec::new();
    for (index, change) in changes.iter().enumerate() {
        let partition = &change.key[..change.partition_len];
        match ranges.last_mut() {
            Some(range) if changes[range.start].key.starts_with(partition) => range.end = index + 1,
            _ => ranges.push(index..index + 1),
        }
    }
    ranges
}

/// The row an entry's key ends with.
pub(crate) fn entry_row(key: &[u8]) -> RsResult<Row> {
    let (start, end) = row_bounds(key)?;
    decode_row(&key[start..end])
}

#[cfg(test)]
mod tests {
    //! Goal: the window is PostgreSQL's `ORDER BY … LIMIT … OFFSET`, ties
    //! and NULLs included, and a change past the window emits nothing.
    //! Method: one step over all rows against sorting them; steps of one
    //! change each against what they must emit. (Incremental equals
    //! recomputation over random histories: `proptests`.)
    use rockstream_types::encoding::{compare_datum, compare_rows};

    use super::*;
    use crate::MemoryStore;

    fn rows(values: &[(i64, Option<i64>)]) -> ZSet {
        let mut zset = ZSet::new();
        for (id, value) in values {
            zset.push(
                vec![Datum::Int64(*id), value.map_or(Datum::Null, Datum::Int64)],
                1,
            );
        }
        zset
    }

    fn by_value(descending: bool, nulls_first: bool) -> Vec<SortKey> {
        vec![SortKey {
            column: 1,
            descending,
            nulls_first,
        }]
    }

    fn step(operator: &TopKOperator, store: &mut MemoryStore, delta: ZSet) -> ZSet {
        futures::executor::block_on(operator.step(store, delta)).expect("steps")
    }

    /// `a` before `b` as `ORDER BY value [DESC] NULLS FIRST|LAST, row`
    /// orders them, from SQL's rules alone (not from the encoding).
    fn sql_order(a: &Row, b: &Row, descending: bool, nulls_first: bool) -> std::cmp::Ordering {
        use std::cmp::Ordering;
        let by_value = match (&a[1], &b[1]) {
            (Datum::Null, Datum::Null) => Ordering::Equal,
            (Datum::Null, _) if nulls_first => Ordering::Less,
            (Datum::Null, _) => Ordering::Greater,
            (_, Datum::Null) if nulls_first => Ordering::Greater,
            (_, Datum::Null) => Ordering::Less,
            (x, y) if descending => compare_datum(y, x),
            (x, y) => compare_datum(x, y),
        };
        by_value.then_with(|| compare_rows(a, b))
    }

    #[test]
    fn one_step_keeps_the_rows_sql_order_puts_in_the_window() {
        let text = |value: &str| Datum::Text(value.into());
        let inputs: [Vec<Row>; 2] = [
            [
                (1, Some(5)),
                (2, None),
                (3, Some(1)),
                (4, Some(9)),
                (5, Some(5)),
                (6, Some(-3)),
            ]
            .iter()
            .map(|(id, value)| vec![Datum::Int64(*id), value.map_or(Datum::Null, Datum::Int64)])
            .collect(),
            // A text sorts before every longer one it starts, either way.
            [
                text("ab"),
                text("a"),
                Datum::Null,
                text("b"),
                text("B"),
                text(""),
            ]
            .into_iter()
            .enumerate()
            .map(|(id, value)| vec![Datum::Int64(id as i64), value])
            .collect(),
        ];
        for input in inputs {
            for (descending, nulls_first) in
                [(false, false), (true, true), (false, true), (true, false)]
            {
                let order_by = by_value(descending, nulls_first);
                for (offset, limit) in [(0, 2), (1, 3), (0, 0), (4, 10), (0, 10)] {
                    let operator =
                        TopKOperator::new(1, vec![], order_by.clone(), (offset, limit), None)
                            .expect("valid");
                    let mut delta = ZSet::new();
                    for row in &input {
                        delta.push(row.clone(), 1);
                    }
                    let out = step(&operator, &mut MemoryStore::default(), delta);
                    let mut sorted = input.clone();
                    sorted.sort_by(|a, b| sql_order(a, b, descending, nulls_first));
                    let mut expected = ZSet::new();
                    for row in sorted
                        .into_iter()
                        .skip(offset as usize)
                        .take(limit as usize)
                    {
                        expected.push(row, 1);
                    }
                    assert_eq!(
                        out,
                        expected.consolidate(),
                        "{input:?} descending={descending} nulls_first={nulls_first} \
                         offset={offset} limit={limit}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_change_past_the_window_emits_nothing_and_one_inside_shifts_it() {
        let operator =
            TopKOperator::new(1, vec![], by_value(false, false), (0, 2), None).expect("valid");
        let mut store = MemoryStore::default();
        step(
            &operator,
            &mut store,
            rows(&[(1, Some(1)), (2, Some(2)), (3, Some(3))]),
        );
        let out = step(&operator, &mut store, rows(&[(4, Some(7))]));
        assert!(out.is_empty(), "{out:?}");
        // A smaller value enters and pushes (2, 2) out.
        let out = step(&operator, &mut store, rows(&[(5, Some(0))]));
        let mut expected = rows(&[(5, Some(0))]);
        expected.push(vec![Datum::Int64(2), Datum::Int64(2)], -1);
        assert_eq!(out, expected.consolidate());
        // Deleting a row of the window brings the next one in.
        let mut delete = ZSet::new();
        delete.push(vec![Datum::Int64(5), Datum::Int64(0)], -1);
        let out = step(&operator, &mut store, delete.clone());
        let mut expected = delete;
        expected.push(vec![Datum::Int64(2), Datum::Int64(2)], 1);
        assert_eq!(out, expected.consolidate());
    }

    #[test]
    fn numbered_rows_are_renumbered_behind_a_change() {
        let operator = TopKOperator::new(
            1,
            vec![],
            by_value(false, false),
            (0, 2),
            Some((Numbering::RowNumber, SqlType::Int64)),
        )
        .expect("valid");
        let numbered = |id: i64, value: i64, number: i64| {
            vec![Datum::Int64(id), Datum::Int64(value), Datum::Int64(number)]
        };
        let mut store = MemoryStore::default();
        let out = step(
            &operator,
            &mut store,
            rows(&[(1, Some(1)), (2, Some(2)), (3, Some(3))]),
        );
        let mut expected = ZSet::new();
        expected.push(numbered(1, 1, 1), 1);
        expected.push(numbered(2, 2, 2), 1);
        assert_eq!(out, expected.consolidate());
        // A new first row: (1, 1) becomes second, (2, 2) leaves.
        let out = step(&operator, &mut store, rows(&[(4, Some(0))]));
        let mut expected = ZSet::new();
        expected.push(numbered(4, 0, 1), 1);
        expected.push(numbered(1, 1, 1), -1);
        expected.push(numbered(1, 1, 2), 1);
        expected.push(numbered(2, 2, 2), -1);
        assert_eq!(out, expected.consolidate());
        // A change behind the window renumbers nothing.
        let out = step(&operator, &mut store, rows(&[(5, Some(9))]));
        assert!(out.is_empty(), "{out:?}");
    }

    #[test]
    fn ranks_tied_past_the_first_read_are_all_kept() {
        // Ranked 2 or better, over six rows tied first: the head read first
        // (three entries) ends inside the tie, so the operator reads
        // further. RANK() then ranks (7, 2) 7th, out; DENSE_RANK() 2nd, in.
        for numbering in [Numbering::Rank, Numbering::DenseRank] {
            let operator = TopKOperator::new(
                1,
                vec![],
                by_value(false, false),
                (0, 2),
                Some((numbering, SqlType::Int64)),
            )
            .expect("valid");
            let ranked = |id: i64, value: i64, rank: i64| {
                vec![Datum::Int64(id), Datum::Int64(value), Datum::Int64(rank)]
            };
            let mut store = MemoryStore::default();
            let tied: Vec<(i64, Option<i64>)> = (1..=6).map(|id| (id, Some(1))).collect();
            let mut input = rows(&tied);
            input.extend(rows(&[(7, Some(2)), (8, Some(3))]));
            let out = step(&operator, &mut store, input);
            let mut expected = ZSet::new();
            for id in 1..=6 {
                expected.push(ranked(id, 1, 1), 1);
            }
            if numbering == Numbering::DenseRank {
                expected.push(ranked(7, 2, 2), 1);
            }
            assert_eq!(out, expected.consolidate(), "{numbering:?}");
            // One more row tied first joins them; nothing else changes.
            let out = step(&operator, &mut store, rows(&[(0, Some(1))]));
            let mut expected = ZSet::new();
            expected.push(ranked(0, 1, 1), 1);
            assert_eq!(out, expected.consolidate(), "{numbering:?}");
            // Without the tie, RANK() ranks (7, 2) second again.
            let mut delete = ZSet::new();
            for id in 0..=6 {
                if id != 3 {
                    delete.push(vec![Datum::Int64(id), Datum::Int64(1)], -1);
                }
            }
            let out = step(&operator, &mut store, delete);
            let mut expected = ZSet::new();
            for id in 0..=6 {
                if id != 3 {
                    expected.push(ranked(id, 1, 1), -1);
                }
            }
            if numbering == Numbering::Rank {
                expected.push(ranked(7, 2, 2), 1);
            }
            assert_eq!(out, expected.consolidate(), "{numbering:?}");
        }
    }

    #[test]
    fn partitions_keep_their_own_windows() {
        // Column 0 is the partition; the largest value of each is kept.
        let operator =
            TopKOperator::new(1, vec![0], by_value(true, false), (0, 1), None).expect("valid");
        let mut store = MemoryStore::default();
        let input = rows(&[(0, Some(4)), (0, Some(8)), (1, Some(3)), (1, Some(1))]);
        let out = step(&operator, &mut store, input);
        assert_eq!(out, rows(&[(0, Some(8)), (1, Some(3))]).consolidate());
        let out = step(&operator, &mut store, rows(&[(1, Some(9))]));
        let mut expected = rows(&[(1, Some(9))]);
        expected.push(vec![Datum::Int64(1), Datum::Int64(3)], -1);
        assert_eq!(out, expected.consolidate());
    }
}
