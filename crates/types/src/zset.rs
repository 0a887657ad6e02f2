//! Z-sets: collections of `(row, weight)` with integer weights.
//!
//! A delta is a Z-set: `+1` inserts a row, `-1` retracts one. A batch is
//! *consolidated* when every row appears once and no weight is zero; every
//! operator's output is consolidated before it leaves the operator.

use std::cmp::Ordering;

use crate::datum::Row;
use crate::encoding::{compare_rows, encode_row};

/// A Z-set of rows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ZSet {
    pub updates: Vec<(Row, i64)>,
}

impl ZSet {
    pub fn new() -> Self {
        ZSet {
            updates: Vec::new(),
        }
    }

    pub fn from_updates(updates: Vec<(Row, i64)>) -> Self {
        ZSet { updates }
    }

    pub fn push(&mut self, row: Row, weight: i64) {
        if weight != 0 {
            self.updates.push((row, weight));
        }
    }

    pub fn extend(&mut self, other: ZSet) {
        self.updates.extend(other.updates);
    }

    pub fn is_empty(&self) -> bool {
        self.updates.is_empty()
    }

    pub fn len(&self) -> usize {
        self.updates.len()
    }

    /// Sums the weights of equal rows (equality by encoding) and drops zeros.
    /// The result is sorted in encoding order, so it is deterministic. Rows
    /// are compared in place (no encoding), and input already in order (a
    /// `COPY` in key order, say) sorts in linear time.
    pub fn consolidate(mut self) -> ZSet {
        self.updates.sort_by(|(a, _), (b, _)| compare_rows(a, b));
        let mut consolidated: Vec<(Row, i64)> = Vec::with_capacity(self.updates.len());
        for (row, weight) in self.updates {
            match consolidated.last_mut() {
                Some((last, sum)) if compare_rows(last, &row) == Ordering::Equal => *sum += weight,
                _ => {
                    if consolidated.last().is_some_and(|(_, sum)| *sum == 0) {
                        consolidated.pop();
                    }
                    consolidated.push((row, weight));
                }
            }
        }
        if consolidated.last().is_some_and(|(_, sum)| *sum == 0) {
            consolidated.pop();
        }
        ZSet {
            updates: consolidated,
        }
    }

    /// True when consolidated: no zero weights and no repeated rows.
    pub fn is_consolidated(&self) -> bool {
        let mut seen = std::collections::HashSet::new();
        self.updates
            .iter()
            .all(|(row, weight)| *weight != 0 && seen.insert(encode_row(row)))
    }
}

#[cfg(test)]
mod tests {
    //! Goal: consolidation is the Z-set sum (group algebra laws).
    use super::*;
    use crate::datum::Datum;
    use proptest::prelude::*;

    fn zset_strategy() -> impl Strategy<Value = ZSet> {
        proptest::collection::vec((0i64..5, -3i64..4), 0..20).prop_map(|pairs| {
            ZSet::from_updates(
                pairs
                    .into_iter()
                    .map(|(v, w)| (vec![Datum::Int64(v)], w))
                    .collect(),
            )
        })
    }

    proptest! {
        #[test]
        fn consolidation_is_associative_and_commutative(a in zset_strategy(), b in zset_strategy()) {
            let mut ab = a.clone();
            ab.extend(b.clone());
            let mut ba = b;
            ba.extend(a);
            let left = ab.consolidate();
            prop_assert!(left.is_consolidated());
            prop_assert_eq!(left, ba.consolidate());
        }

        #[test]
        fn adding_the_negation_gives_zero(a in zset_strategy()) {
            let mut sum = a.clone();
            sum.extend(ZSet::from_updates(a.updates.into_iter().map(|(r, w)| (r, -w)).collect()));
            prop_assert!(sum.consolidate().is_empty());
        }
    }
}
