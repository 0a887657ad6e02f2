//! Where a plan's rows live across shards, and the exchanges that move them
//! (RFC 0001 §3, DESIGN §7).
//!
//! Every stateful operator keeps the state of a key on the shard that owns
//! the key's bucket, so each needs its input partitioned by that key: a
//! join's sides by their join keys, an aggregate's input by its group key,
//! DISTINCT and the set operations by the whole row, a top-K by its
//! partition columns. A view's output is
//! stored the same way, by its storage key. [`place`] derives how each
//! node's output is partitioned, bottom up, and puts a
//! [`PlanNode::Exchange`] wherever an operator needs its input partitioned
//! otherwise; where the input already is (a GROUP BY on a table's primary
//! key, a join on the key of both sides' tables) no rows move. At one shard
//! every row is where it is needed and the plan is returned unchanged.
//!
//! An operator without a key to partition by (a global aggregate, a join
//! without equality keys, `NOT IN`, a top-K over all rows) gathers its inputs on one shard: the
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
    mut plan: PlanNode,
    source: &dyn Fn(ObjectId) -> Partitioning,
) -> (PlanNode, Partitioning) {
    let mut inputs_have = Vec::new();
    for input in plan.inputs_mut() {
        let (placed, have) = place_node(take(input), source);
        *input = placed;
        inputs_have.push(have);
    }
    let needs = required(&plan);
    for ((input, have), need) in plan.inputs_mut().into_iter().zip(&inputs_have).zip(needs) {
        if let Some(key) = need {
            *input = exchange_unless(take(input), have, &key);
        }
    }
    let partitioning = output(&plan, &inputs_have, source);
    (plan, partitioning)
}

/// Moves a node out of the tree, leaving an empty constant in its place.
fn take(node: &mut PlanNode) -> PlanNode {
    let empty = PlanNode::Constant {
        rows: Vec::new(),
        schema: crate::Schema::default(),
    };
    std::mem::replace(node, empty)
}

/// The columns each input of `plan` must be partitioned by (`None`: any
/// partitioning will do), in the order of [`PlanNode::inputs`].
fn required(plan: &PlanNode) -> Vec<Option<Vec<usize>>> {
    let whole_row = |node: &PlanNode| Some((0..node.schema().len()).collect());
    match plan {
        PlanNode::Join {
            left_keys,
            right_keys,
            null_aware,
            ..
        } => {
            // NOT IN empties its result on any NULL key of the right side,
            // which every left row must see: it gathers, as does a join
            // without equality keys.
            if gathers(left_keys, *null_aware) {
                vec![Some(Vec::new()), Some(Vec::new())]
            } else {
                vec![Some(left_keys.clone()), Some(right_keys.clone())]
            }
        }
        PlanNode::Aggregate { group_count, .. } => vec![Some((0..*group_count).collect())],
        PlanNode::Distinct { input, .. } => vec![whole_row(input)],
        PlanNode::TopK { partition, .. }
        | PlanNode::Window { partition, .. }
        | PlanNode::SessionWindow { partition, .. } => vec![Some(partition.clone())],
        PlanNode::SetOperation { left, .. } => vec![whole_row(left), whole_row(left)],
        // The loop runs on one shard, over all of its inputs.
        PlanNode::Recursive { external, .. } => vec![Some(Vec::new()); 1 + external.len()],
        other => other.inputs().iter().map(|_| None).collect(),
    }
}

fn gathers(left_keys: &[usize], null_aware: bool) -> bool {
    left_keys.is_empty() || null_aware
}

/// How `plan`'s output is partitioned, its inputs placed and partitioned as
/// `inputs_have` says (before any exchange `required` added).
fn output(
    plan: &PlanNode,
    inputs_have: &[Partitioning],
    source: &dyn Fn(ObjectId) -> Partitioning,
) -> Partitioning {
    match plan {
        PlanNode::Source { object_id, .. } => source(*object_id),
        PlanNode::Constant { .. }
        | PlanNode::ClockSeries { .. }
        | PlanNode::Recursive { .. }
        | PlanNode::LoopInput { .. } => Partitioning::Hash(Vec::new()),
        // Kept when every key column is passed on unchanged.
        PlanNode::Map {
            exprs,
            input_schema,
            ..
        } => match &inputs_have[0] {
            Partitioning::Hash(columns) => columns
                .iter()
                .map(|column| {
                    exprs
                        .iter()
                        .position(|expr| crate::passed_column(expr, input_schema) == Some(*column))
                })
                .collect::<Option<Vec<usize>>>()
                .map_or(Partitioning::Arbitrary, Partitioning::Hash),
            Partitioning::Arbitrary => Partitioning::Arbitrary,
        },
        // Each output row starts with its input row.
        PlanNode::Filter { .. }
        | PlanNode::TemporalFilter { .. }
        | PlanNode::Unnest { .. }
        | PlanNode::WindowClose { .. } => inputs_have[0].clone(),
        PlanNode::Join {
            kind,
            left_keys,
            right_keys,
            null_aware,
            left_width,
            right_width,
            ..
        } => {
            if gathers(left_keys, *null_aware) {
                return Partitioning::Hash(Vec::new());
            }
            join_output(*kind, (left_keys, *left_width), (right_keys, *right_width))
        }
        // The group columns come first in the output.
        PlanNode::Aggregate { group_count, .. } => Partitioning::Hash((0..*group_count).collect()),
        PlanNode::TopK { partition, .. }
        | PlanNode::Window { partition, .. }
        | PlanNode::SessionWindow { partition, .. } => Partitioning::Hash(partition.clone()),
        PlanNode::Distinct { .. } | PlanNode::SetOperation { .. } => {
            Partitioning::Hash((0..plan.schema().len()).collect())
        }
        // A union passes every row on where it is: partitioned as its
        // inputs when they all agree.
        PlanNode::UnionAll { .. } => match inputs_have.split_first() {
            Some((first, rest)) if rest.iter().all(|other| other == first) => first.clone(),
            _ => Partitioning::Arbitrary,
        },
        PlanNode::Exchange { key, .. } => Partitioning::Hash(key.clone()),
    }
}

/// How a join's output is partitioned, its sides partitioned by their join
/// keys. An output row carries the columns of the side it came from, so it
/// is partitioned by that side's key columns when they are output columns
/// and every output row has that side (a left join's unmatched rows have
/// no right columns).
fn join_output(
    kind: JoinKind,
    (left_key, left_width): (&[usize], usize),
    (right_key, right_width): (&[usize], usize),
) -> Partitioning {
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
