//! `DISTINCT` and `EXCEPT`/`INTERSECT` (DESIGN §6.6).
//!
//! `DISTINCT` keeps `DS op_id row -> weight` and emits `+1`/`-1` when a row's
//! weight crosses zero. Set operations keep both inputs' multiplicities per
//! row, `SO op_id row -> (left, right)`, and emit the change of
//! `f(left, right)`: `EXCEPT ALL` is `max(l - r, 0)`, `INTERSECT ALL` is
//! `min(l, r)`, and the set forms clamp those to 0/1. Rows are compared by
//! their encoding, so NULL equals NULL as SQL set operations require.

use std::collections::BTreeMap;

use rockstream_plan::SetOperator;
use rockstream_types::encoding::{decode_row, encode_row, encode_row_into};
use rockstream_types::{Datum, ObjectId, Row, RsError, RsResult, ZSet};

use crate::keys::{decode_weight, encode_weight, op_prefix, DISTINCT, SET_OPERATION};
use crate::state::StateStore;

pub(crate) async fn distinct<S: StateStore>(
    store: &mut S,
    op_id: ObjectId,
    delta: ZSet,
) -> RsResult<ZSet> {
    // Consolidated: each row once, in row order, so the keys ascend and
    // their counts are read in one ordered pass.
    let updates = delta.consolidate().updates;
    let keys: Vec<Vec<u8>> = updates
        .iter()
        .map(|(row, _)| {
            let mut key = op_prefix(DISTINCT, op_id);
            encode_row_into(row, &mut key);
            key
        })
        .collect();
    let key_refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let stored = store.get_many(&key_refs).await?;
    let mut out = ZSet::new();
    for (((row, weight), key), stored) in updates.into_iter().zip(keys).zip(stored) {
        let old = stored.as_deref().map_or(0, decode_weight);
        let new = old + weight;
        if new < 0 {
            return Err(RsError::internal("DISTINCT count went negative"));
        }
        if new == 0 {
            store.delete(key);
        } else {
            store.put(key, encode_weight(new));
        }
        match (old > 0, new > 0) {
            (false, true) => out.push(row, 1),
            (true, false) => out.push(row, -1),
            _ => {}
        }
    }
    Ok(out)
}

pub(crate) async fn set_operation<S: StateStore>(
    store: &mut S,
    op_id: ObjectId,
    left: ZSet,
    right: ZSet,
    operator: SetOperator,
    all: bool,
) -> RsResult<ZSet> {
    let mut changes: BTreeMap<Vec<u8>, (Row, i64, i64)> = BTreeMap::new();
    for (row, weight) in left.updates {
        changes
            .entry(encode_row(&row))
            .or_insert_with(|| (row, 0, 0))
            .1 += weight;
    }
    for (row, weight) in right.updates {
        changes
            .entry(encode_row(&row))
            .or_insert_with(|| (row, 0, 0))
            .2 += weight;
    }
    let keys: Vec<Vec<u8>> = changes
        .keys()
        .map(|encoded| {
            let mut key = op_prefix(SET_OPERATION, op_id);
            key.extend_from_slice(encoded);
            key
        })
        .collect();
    let key_refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let stored = store.get_many(&key_refs).await?;
    let mut out = ZSet::new();
    for ((key, (row, left_change, right_change)), stored) in
        keys.into_iter().zip(changes.into_values()).zip(stored)
    {
        let (left_old, right_old) = match stored {
            Some(bytes) => decode_counts(&bytes)?,
            None => (0, 0),
        };
        let (left_new, right_new) = (left_old + left_change, right_old + right_change);
        if left_new < 0 || right_new < 0 {
            return Err(RsError::internal("set-operation count went negative"));
        }
        if left_new == 0 && right_new == 0 {
            store.delete(key);
        } else {
            store.put(
                key,
                encode_row(&[Datum::Int64(left_new), Datum::Int64(right_new)]),
            );
        }
        let change = multiplicity(operator, all, left_new, right_new)
            - multiplicity(operator, all, left_old, right_old);
        out.push(row, change);
    }
    Ok(out)
}

fn multiplicity(operator: SetOperator, all: bool, left: i64, right: i64) -> i64 {
    let bag = match operator {
        SetOperator::Except => (left - right).max(0),
        SetOperator::Intersect => left.min(right),
    };
    match (all, operator) {
        (true, _) => bag,
        (false, SetOperator::Except) => i64::from(left > 0 && right == 0),
        (false, SetOperator::Intersect) => i64::from(left > 0 && right > 0),
    }
}

fn decode_counts(bytes: &[u8]) -> RsResult<(i64, i64)> {
    match decode_row(bytes)?.as_slice() {
        [Datum::Int64(left), Datum::Int64(right)] => Ok((*left, *right)),
        _ => Err(RsError::internal("corrupt set-operation state")),
    }
}
