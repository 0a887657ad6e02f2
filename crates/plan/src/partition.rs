//! Where a plan's rows live across shards, and the exchanges that move them
//! (RFC 0001 §3, DESIGN §7).
//!
//! Every stateful operator keeps the state of a key on the shard that owns
//! the key's bucket, so each needs its input partitioned by that key: a
//! join's sides by their join keys, an aggregate's input by its group key,
//! DISTINCT and the set operations by the whole row. A view's output is
//! stored the same way, by its storage key. [`place`] derives how each
//! node's output is partitioned, bottom up, and puts a
//! [`PlanNode::Exchange`] wherever an operator needs its input partitioned
//! otherwise; where the input already is (a GROUP BY on a table's primary
//! key, a join on the key of both sides' tables) no rows move. At one shard
//! every row is where it is needed and the plan is returned unchanged.
//!
//! An operator without a key to partition by (a global aggregate, a join
//! without equality keys, `NOT IN`) gathers its inputs on one shard: the
//! owner of the empty key's bucket, which is also where a `Constant` is
//! emitted.

use rockstream_types::ObjectId;

use crate::{JoinKind, PlanNode};

/// How a collection's rows are spread over shards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Partitioning {
    /// Each row on the shard that owns the bucket of these columns' values
    /// (encoded in this order). With no columns, every row is on the one
    /// shard that owns the empty key's bucket.
    Hash(Vec<usize>),
    /// Each row on some shard, which is not known from the row.
    Arbitrary,
}

/// `plan` with the exchanges it needs to run on `shards` shards, its output
/// partitioned by `output_key` (the view's storage key). `source` says how
/// a table's or view's rows are placed.
pub fn place(
    plan: PlanNode,
    output_key: &[usize],
    shards: u16,
    source: &dyn Fn(ObjectId) -> Partitioning,
) -> PlanNode {
    if shards <= 1 {
        return plan;
    }
    let (plan, partitioning) = place_node(plan, source);
    exchange_unless(plan, &partitioning, output_key)
}

/// `input` partitioned by `key`: itself when `have` already says so, else
/// behind an exchange.
fn exchange_unless(input: PlanNode, have: &Partitioning, key: &[usize]) -> PlanNode {
    if matches!(have, Partitioning::Hash(columns) if columns == key) {
        return input;
    }
    PlanNode::Exchange {
        input: Box::new(input),
        key: key.to_vec(),
    }
}

/// `plan` with exchanges below each of its operators, and how its output is
/// partitioned.
fn place_node(
    plan: PlanNode,
    source: &dyn Fn(ObjectId) -> Partitioning,
) -> (PlanNode, Partitioning) {
    match plan {
        PlanNode::Source { object_id, .. } => {
            let partitioning = source(object_id);
            (plan, partitioning)
        }
        PlanNode::Constant { .. } => (plan, Partitioning::Hash(Vec::new())),
        PlanNode::Map {
            input,
            exprs,
            input_schema,
            schema,
        } => {
            let (input, have) = place_node(*input, source);
            let partitioning = match have {
                // Kept when every key column is passed on unchanged.
                Partitioning::Hash(columns) => columns
                    .iter()
                    .map(|column| {
                        exprs.iter().position(|expr| {
                            crate::passed_column(expr, &input_schema) == Some(*column)
                        })
                    })
                    .collect::<Option<Vec<usize>>>()
                    .map_or(Partitioning::Arbitrary, Partitioning::Hash),
                Partitioning::Arbitrary => Partitioning::Arbitrary,
            };
            let plan = PlanNode::Map {
                input: Box::new(input),
                exprs,
                input_schema,
                schema,
            };
            (plan, partitioning)
        }
        PlanNode::Filter {
            input,
            predicate,
            input_schema,
        } => {
            let (input, have) = place_node(*input, source);
            let plan = PlanNode::Filter {
                input: Box::new(input),
                predicate,
                input_schema,
            };
            (plan, have)
        }
        PlanNode::Join {
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
            schema,
        } => {
            let (left, left_have) = place_node(*left, source);
            let (right, right_have) = place_node(*right, source);
            // NOT IN empties its result on any NULL key of the right side,
            // which every left row must see: it gathers, as does a join
            // without equality keys.
            let by_key = !left_keys.is_empty() && !null_aware;
            let (left_need, right_need) = if by_key {
                (left_keys.clone(), right_keys.clone())
            } else {
                (Vec::new(), Vec::new())
            };
            let left = exchange_unless(left, &left_have, &left_need);
            let right = exchange_unless(right, &right_have, &right_need);
            let partitioning = join_output(
                kind,
                (&left_need, left_width),
                (&right_need, right_width),
                by_key,
            );
            let plan = PlanNode::Join {
                op_id,
                left: Box::new(left),
                right: Box::new(right),
                kind,
                left_keys,
                right_keys,
                nulls_equal,
                residual,
                joined_schema,
                null_aware,
                left_width,
                right_width,
                schema,
            };
            (plan, partitioning)
        }
        PlanNode::Aggregate {
            op_id,
            input,
            group_count,
            aggregates,
            schema,
        } => {
            let (input, have) = place_node(*input, source);
            let key: Vec<usize> = (0..group_count).collect();
            let input = exchange_unless(input, &have, &key);
            let plan = PlanNode::Aggregate {
                op_id,
                input: Box::new(input),
                group_count,
                aggregates,
                schema,
            };
            // The group columns come first in the output.
            (plan, Partitioning::Hash(key))
        }
        PlanNode::Distinct { op_id, input } => {
            let (input, have) = place_node(*input, source);
            let key: Vec<usize> = (0..input.schema().len()).collect();
            let input = exchange_unless(input, &have, &key);
            let plan = PlanNode::Distinct {
                op_id,
                input: Box::new(input),
            };
            (plan, Partitioning::Hash(key))
        }
        PlanNode::SetOperation {
            op_id,
            left,
            right,
            operator,
            all,
        } => {
            let (left, left_have) = place_node(*left, source);
            let (right, right_have) = place_node(*right, source);
            let key: Vec<usize> = (0..left.schema().len()).collect();
            let left = exchange_unless(left, &left_have, &key);
            let right = exchange_unless(right, &right_have, &key);
            let plan = PlanNode::SetOperation {
                op_id,
                left: Box::new(left),
                right: Box::new(right),
                operator,
                all,
            };
            (plan, Partitioning::Hash(key))
        }
        PlanNode::UnionAll { inputs, schema } => {
            let (inputs, partitionings): (Vec<PlanNode>, Vec<Partitioning>) = inputs
                .into_iter()
                .map(|input| place_node(input, source))
                .unzip();
            // A union passes every row on where it is: partitioned as its
            // inputs when they all agree.
            let partitioning = match partitionings.split_first() {
                Some((first, rest)) if rest.iter().all(|other| other == first) => first.clone(),
                _ => Partitioning::Arbitrary,
            };
            (PlanNode::UnionAll { inputs, schema }, partitioning)
        }
        PlanNode::Exchange { input, key } => {
            let (input, _) = place_node(*input, source);
            let plan = PlanNode::Exchange {
                input: Box::new(input),
                key: key.clone(),
            };
            (plan, Partitioning::Hash(key))
        }
    }
}

/// How a join's output is partitioned, given the keys its sides were
/// partitioned by. An output row carries the columns of the side it came
/// from, so it is partitioned by that side's key columns when they are
/// output columns and every output row has that side (a left join's
/// unmatched rows have no right columns). A gathering join's output is
/// gathered.
fn join_output(
    kind: JoinKind,
    (left_key, left_width): (&[usize], usize),
    (right_key, right_width): (&[usize], usize),
    by_key: bool,
) -> Partitioning {
    if !by_key {
        return Partitioning::Hash(Vec::new());
    }
    let within = |key: &[usize], width: usize| key.iter().all(|column| *column < width);
    match kind {
        JoinKind::Inner | JoinKind::Left | JoinKind::LeftSemi | JoinKind::LeftAnti
            if within(left_key, left_width) =>
        {
            Partitioning::Hash(left_key.to_vec())
        }
        JoinKind::Right if within(right_key, right_width) => {
            Partitioning::Hash(right_key.iter().map(|column| column + left_width).collect())
        }
        _ => Partitioning::Arbitrary,
    }
}
