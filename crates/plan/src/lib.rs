//! PlanIR: the incremental plan of a materialized view, the only contract
//! between the planner and the runtime.
//!
//! A plan is a tree of [`PlanNode`]s, one variant per incremental operator.
//! Every node knows its output [`Schema`] (canonical SQL types, see
//! `rockstream_types::SqlType`). Scalar expressions are DataFusion `Expr`s
//! bound to the DataFusion schema of the node's input (`input_schema`), so the
//! operator can build a physical expression once at install time.
//!
//! Stateful nodes carry an `op_id` that is stable across restarts: the planner
//! derives it from the view id and the node's position in the tree, so the
//! re-planned view finds its state again.

pub mod arrow_types;
pub mod datetime_text;
pub mod partition;
pub mod sessions;
pub mod watermarks;

use std::fmt::Write;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::DFSchemaRef;
use datafusion::logical_expr::{BinaryExpr, Expr, Operator};
use rockstream_types::{ObjectId, SqlType};

pub use watermarks::{Bound, Retirement, Watermarks};

/// One output column.
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    pub name: String,
    pub sql_type: SqlType,
}

/// The columns of a collection, in order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Schema {
    pub columns: Vec<Column>,
}

impl Schema {
    pub fn types(&self) -> Vec<SqlType> {
        self.columns.iter().map(|column| column.sql_type).collect()
    }

    pub fn len(&self) -> usize {
        self.columns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.columns.is_empty()
    }
}

/// Join flavours, as PostgreSQL defines them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinKind {
    Inner,
    Left,
    Right,
    Full,
    /// Left rows with at least one match (EXISTS / IN).
    LeftSemi,
    /// Left rows with no match (NOT EXISTS).
    LeftAnti,
}

/// `EXCEPT` / `INTERSECT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetOperator {
    Except,
    Intersect,
}

/// Aggregate functions maintained incrementally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggregateFunction {
    CountStar,
    Count,
    Sum,
    Avg,
    Min,
    Max,
    /// `string_agg(value, delimiter [ORDER BY ...])`.
    StringAgg,
    /// `array_agg(value [ORDER BY ...])`: NULL values included.
    ArrayAgg,
    /// `bit_xor(integer)`: its own inverse, so retractions just apply again.
    BitXor,
    /// `percentile_cont(fraction) WITHIN GROUP (ORDER BY value)`: the value
    /// at `fraction` of the ordered values, interpolated (float8).
    PercentileCont,
    /// `percentile_disc(fraction) WITHIN GROUP (ORDER BY value)`: the first
    /// value whose position in the order reaches `fraction`.
    PercentileDisc,
    /// `mode() WITHIN GROUP (ORDER BY value)`: the most frequent value, the
    /// first in the order among equally frequent ones.
    Mode,
}

impl AggregateFunction {
    /// An ordered-set aggregate: its result is read from the group's values
    /// in order, kept as a multiset.
    pub fn is_ordered_set(self) -> bool {
        matches!(
            self,
            AggregateFunction::PercentileCont
                | AggregateFunction::PercentileDisc
                | AggregateFunction::Mode
        )
    }
}

/// How a top-K numbers the rows it keeps (the window function a `WHERE`
/// bounds), and so which it keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Numbering {
    /// Positions from 1: the first `limit` rows.
    RowNumber,
    /// 1 + the rows ordered strictly before: rows tied share a rank, and
    /// every row ranked `limit` or better is kept.
    Rank,
    /// 1 + the distinct order keys before: the rows of the first `limit`
    /// order keys.
    DenseRank,
}

/// How a [`ClockBound`]'s value compares with the clock: `value > now() +
/// offset` is `Greater`, and so on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockComparison {
    Greater,
    GreaterOrEqual,
    Less,
    LessOrEqual,
}

/// One condition of a temporal filter: `value <comparison> now() +
/// offset_micros`, `value` a timestamp (or date) over the input row.
#[derive(Debug, Clone)]
pub struct ClockBound {
    pub value: Expr,
    pub comparison: ClockComparison,
    pub offset_micros: i64,
}

/// One `ORDER BY` key of an ordered aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SortKey {
    /// Input column holding the key.
    pub column: usize,
    pub descending: bool,
    pub nulls_first: bool,
}

/// One aggregate of an [`PlanNode::Aggregate`].
#[derive(Debug, Clone, PartialEq)]
pub struct AggregateCall {
    pub function: AggregateFunction,
    /// Input column holding the argument (`None` for `COUNT(*)`).
    pub argument: Option<usize>,
    pub distinct: bool,
    pub input_type: Option<SqlType>,
    pub output_type: SqlType,
    /// `string_agg`: the input column holding each value's delimiter.
    pub delimiter: Option<usize>,
    /// `string_agg`/`array_agg ... ORDER BY`: the order of the values; an ordered-set
    /// aggregate's `WITHIN GROUP (ORDER BY …)`: whether the values are
    /// taken descending (one key, over the argument).
    pub order_by: Vec<SortKey>,
    /// `percentile_cont`/`percentile_disc`: the fraction, in `[0, 1]`;
    /// `None` when it is NULL (the result is NULL).
    pub fraction: Option<f64>,
    /// `array_agg(…) FILTER (WHERE …)`: the input column holding the
    /// condition; only rows where it is true are aggregated. (The other
    /// aggregates skip NULLs, and take `agg(CASE WHEN c THEN x END)`.)
    pub filter: Option<usize>,
}

/// A node of the incremental plan.
#[derive(Debug, Clone)]
pub enum PlanNode {
    /// Changes of a table or of another materialized view.
    Source {
        object_id: ObjectId,
        name: String,
        schema: Schema,
        /// The source's unique key, if it has one (see [`PlanNode::unique_key`]).
        unique_key: Option<Vec<usize>>,
    },
    /// Rows that never change (`VALUES`, a `SELECT` without `FROM`), as
    /// literals: emitted once, by the view's first step.
    Constant {
        rows: Vec<Vec<Expr>>,
        schema: Schema,
    },
    /// `generate_series(start, now() + offset, step)`: the timestamps
    /// `start + k * step` (microseconds, `step > 0`), each emitted once the
    /// clock plus `offset` reaches it; one column, `timestamp` or
    /// `timestamptz`.
    ClockSeries {
        op_id: ObjectId,
        start_micros: i64,
        step_micros: i64,
        offset_micros: i64,
        schema: Schema,
    },
    /// Projection: one expression per output column.
    Map {
        input: Box<PlanNode>,
        exprs: Vec<Expr>,
        input_schema: DFSchemaRef,
        schema: Schema,
    },
    /// `unnest(list)` of a list computed from each row (a set-returning
    /// `generate_series(…)`, `unnest(string_to_array(…))`, a constant
    /// array): each input row followed, once per element of `list` (a
    /// DataFusion expression over `input_schema`), by that element; for an
    /// empty or NULL list no row, or with `keep_empty` (`LEFT JOIN LATERAL
    /// … ON true`) the row once, followed by NULL. Stateless and linear.
    Unnest {
        input: Box<PlanNode>,
        list: Expr,
        keep_empty: bool,
        input_schema: DFSchemaRef,
        schema: Schema,
    },
    /// Keeps rows where the predicate is true.
    Filter {
        input: Box<PlanNode>,
        predicate: Expr,
        input_schema: DFSchemaRef,
    },
    /// Equi-join with an optional residual predicate over the joined row.
    /// Output: left columns then right columns (only left for semi/anti).
    Join {
        op_id: ObjectId,
        left: Box<PlanNode>,
        right: Box<PlanNode>,
        kind: JoinKind,
        left_keys: Vec<usize>,
        right_keys: Vec<usize>,
        /// `IS NOT DISTINCT FROM` keys (set operations): NULL matches NULL.
        nulls_equal: bool,
        residual: Option<Expr>,
        /// DataFusion schema of `left ++ right`, for the residual predicate.
        joined_schema: DFSchemaRef,
        /// NOT IN semantics: a NULL key on the right side empties the result
        /// and left rows with NULL keys never qualify.
        null_aware: bool,
        /// Output columns taken from each side: the leading columns of its
        /// rows (trailing ones are computed join keys).
        left_width: usize,
        right_width: usize,
        schema: Schema,
    },
    /// Grouped aggregation: input columns `0..group_count` are the group key.
    Aggregate {
        op_id: ObjectId,
        input: Box<PlanNode>,
        group_count: usize,
        aggregates: Vec<AggregateCall>,
        /// Groups below a watermark's bound are final: their state is
        /// deleted (RFC 0013).
        retire: Option<Retirement>,
        schema: Schema,
    },
    /// Set semantics: every row with positive multiplicity once.
    Distinct {
        op_id: ObjectId,
        input: Box<PlanNode>,
    },
    /// Bag union.
    UnionAll {
        inputs: Vec<PlanNode>,
        schema: Schema,
    },
    /// `SESSION(table, time, gap [, key …])`: each input row with the
    /// window of its session (see [`sessions`]) among the rows of its
    /// partition: the input columns, then per `ends` entry the session's
    /// start (`false`) or end (`true`), of the time column's type.
    SessionWindow {
        op_id: ObjectId,
        input: Box<PlanNode>,
        partition: Vec<usize>,
        time: usize,
        gap_micros: i64,
        ends: Vec<bool>,
        schema: Schema,
    },
    /// `WITH RECURSIVE`: the least fixed point of `base ∪ step(self)`
    /// (RFC 0017). Its inputs are `base` and the parts of the recursive
    /// term that do not read the recursion (`external`), computed outside
    /// the loop and gathered on one shard; `step` is the rest of the
    /// recursive term, over [`PlanNode::LoopInput`]s, run in a loop by the
    /// operator until it adds nothing.
    Recursive {
        op_id: ObjectId,
        base: Box<PlanNode>,
        external: Vec<PlanNode>,
        step: Box<PlanNode>,
        /// `UNION` (each row once, PostgreSQL's set semantics) rather than
        /// `UNION ALL` (a row per derivation).
        distinct: bool,
        schema: Schema,
    },
    /// Inside a [`PlanNode::Recursive`]'s `step` only: the recursion's rows
    /// (index 0) or the recursive node's `external[index - 1]`.
    LoopInput { index: usize, schema: Schema },
    /// `EXCEPT [ALL]` / `INTERSECT [ALL]` over rows compared with NULL = NULL.
    SetOperation {
        op_id: ObjectId,
        left: Box<PlanNode>,
        right: Box<PlanNode>,
        operator: SetOperator,
        all: bool,
    },
    /// `ORDER BY … LIMIT limit OFFSET offset` within each partition (rows
    /// agreeing on the `partition` columns; one partition when there are
    /// none): the rows at positions `offset..offset + limit` of the
    /// partition in `order_by` order, rows the keys do not order taken in
    /// the order of their encoding. Its rows are its input's, each
    /// followed by its number when `numbering` says how to number them
    /// (`ROW_NUMBER()`, `RANK()`, `DENSE_RANK()`; the last two keep the
    /// rows numbered `limit` or less, with `offset` 0).
    TopK {
        op_id: ObjectId,
        input: Box<PlanNode>,
        partition: Vec<usize>,
        order_by: Vec<SortKey>,
        offset: u64,
        limit: u64,
        numbering: Option<Numbering>,
        schema: Schema,
    },
    /// Window functions sharing one `PARTITION BY` (the `partition`
    /// columns) and `ORDER BY` (`order_by`): each input row followed by
    /// the value of each of `functions` (DataFusion window expressions
    /// over `input_schema`) for it.
    Window {
        op_id: ObjectId,
        input: Box<PlanNode>,
        partition: Vec<usize>,
        order_by: Vec<SortKey>,
        functions: Vec<Expr>,
        input_schema: DFSchemaRef,
        schema: Schema,
    },
    /// Keeps each input row while the clock meets every one of `bounds`
    /// (`WHERE ts > now() - INTERVAL '1 hour'`): a row enters when the
    /// clock reaches its lower bounds and leaves when it passes an upper
    /// one, each at the first step at or after that time.
    TemporalFilter {
        op_id: ObjectId,
        input: Box<PlanNode>,
        bounds: Vec<ClockBound>,
        input_schema: DFSchemaRef,
    },
    /// `EMIT ON WINDOW CLOSE` (RFC 0013): holds its input's rows until
    /// `bound` passes their `column`, then emits them, once; a row whose
    /// `column` is NULL never closes.
    WindowClose {
        op_id: ObjectId,
        input: Box<PlanNode>,
        column: usize,
        bound: Bound,
    },
    /// Moves each row to the shard that owns the bucket of its `key`
    /// columns (all rows to one shard when `key` is empty); inserted by
    /// [`partition::place`]. Stateless: the rows pass on unchanged.
    Exchange {
        input: Box<PlanNode>,
        key: Vec<usize>,
    },
}

impl PlanNode {
    /// The output columns of this node.
    pub fn schema(&self) -> &Schema {
        match self {
            PlanNode::Source { schema, .. }
            | PlanNode::Constant { schema, .. }
            | PlanNode::Map { schema, .. }
            | PlanNode::Unnest { schema, .. }
            | PlanNode::ClockSeries { schema, .. }
            | PlanNode::Join { schema, .. }
            | PlanNode::Aggregate { schema, .. }
            | PlanNode::TopK { schema, .. }
            | PlanNode::Window { schema, .. }
            | PlanNode::UnionAll { schema, .. }
            | PlanNode::Recursive { schema, .. }
            | PlanNode::SessionWindow { schema, .. }
            | PlanNode::LoopInput { schema, .. } => schema,
            PlanNode::Filter { input, .. }
            | PlanNode::TemporalFilter { input, .. }
            | PlanNode::Distinct { input, .. }
            | PlanNode::WindowClose { input, .. }
            | PlanNode::Exchange { input, .. } => input.schema(),
            PlanNode::SetOperation { left, .. } => left.schema(),
        }
    }

    /// The children, left to right. A recursive node's are its base and
    /// its external inputs; its `step` is a plan of its own.
    pub fn inputs(&self) -> Vec<&PlanNode> {
        match self {
            PlanNode::Source { .. }
            | PlanNode::Constant { .. }
            | PlanNode::ClockSeries { .. }
            | PlanNode::LoopInput { .. } => vec![],
            PlanNode::Recursive { base, external, .. } => {
                std::iter::once(&**base).chain(external).collect()
            }
            PlanNode::Map { input, .. }
            | PlanNode::Unnest { input, .. }
            | PlanNode::Filter { input, .. }
            | PlanNode::TemporalFilter { input, .. }
            | PlanNode::Aggregate { input, .. }
            | PlanNode::Distinct { input, .. }
            | PlanNode::TopK { input, .. }
            | PlanNode::Window { input, .. }
            | PlanNode::SessionWindow { input, .. }
            | PlanNode::WindowClose { input, .. }
            | PlanNode::Exchange { input, .. } => vec![input],
            PlanNode::Join { left, right, .. } | PlanNode::SetOperation { left, right, .. } => {
                vec![left, right]
            }
            PlanNode::UnionAll { inputs, .. } => inputs.iter().collect(),
        }
    }

    /// The children, left to right, to change in place.
    pub fn inputs_mut(&mut self) -> Vec<&mut PlanNode> {
        match self {
            PlanNode::Source { .. }
            | PlanNode::Constant { .. }
            | PlanNode::ClockSeries { .. }
            | PlanNode::LoopInput { .. } => vec![],
            PlanNode::Recursive { base, external, .. } => {
                std::iter::once(&mut **base).chain(external).collect()
            }
            PlanNode::Map { input, .. }
            | PlanNode::Unnest { input, .. }
            | PlanNode::Filter { input, .. }
            | PlanNode::TemporalFilter { input, .. }
            | PlanNode::Aggregate { input, .. }
            | PlanNode::Distinct { input, .. }
            | PlanNode::TopK { input, .. }
            | PlanNode::Window { input, .. }
            | PlanNode::SessionWindow { input, .. }
            | PlanNode::WindowClose { input, .. }
            | PlanNode::Exchange { input, .. } => vec![input],
            PlanNode::Join { left, right, .. } | PlanNode::SetOperation { left, right, .. } => {
                vec![left, right]
            }
            PlanNode::UnionAll { inputs, .. } => inputs.iter_mut().collect(),
        }
    }

    /// Every object (table or view) this plan reads.
    pub fn sources(&self) -> Vec<ObjectId> {
        let mut found = Vec::new();
        self.visit(&mut |node| {
            if let PlanNode::Source { object_id, .. } = node {
                if !found.contains(object_id) {
                    found.push(*object_id);
                }
            }
        });
        found
    }

    /// Output columns that identify a row: no two rows agree on all of
    /// them, and every row has multiplicity one, so a change of the row
    /// with a given key replaces it. Known for sources with a key (a
    /// table's primary key) and for grouped aggregation (its group columns;
    /// none for a global aggregate, which has one row). Kept through
    /// filters, through projections that pass each key column on as a plain
    /// column reference, and through joins that match each row of the
    /// keyed side with at most one row of the other (see [`join_key`]).
    /// `None` when not derived.
    pub fn unique_key(&self) -> Option<Vec<usize>> {
        match self {
            PlanNode::Source { unique_key, .. } => unique_key.clone(),
            PlanNode::Aggregate { group_count, .. } => Some((0..*group_count).collect()),
            PlanNode::Join {
                left,
                right,
                kind,
                left_keys,
                right_keys,
                left_width,
                right_width,
                ..
            } => join_key(
                *kind,
                (left.unique_key(), left_keys, *left_width),
                (right.unique_key(), right_keys, *right_width),
            ),
            // Numbered or not, its rows are some of its input's.
            PlanNode::Filter { input, .. }
            | PlanNode::TemporalFilter { input, .. }
            | PlanNode::TopK { input, .. }
            | PlanNode::Window { input, .. }
            | PlanNode::SessionWindow { input, .. }
            | PlanNode::WindowClose { input, .. }
            | PlanNode::Exchange { input, .. } => input.unique_key(),
            PlanNode::Map {
                input,
                exprs,
                input_schema,
                ..
            } => input
                .unique_key()?
                .into_iter()
                .map(|column| {
                    exprs
                        .iter()
                        .position(|expr| passed_column(expr, input_schema) == Some(column))
                })
                .collect(),
            _ => None,
        }
    }

    /// Pre-order traversal, into a recursive node's `step` too (after its
    /// inputs).
    pub fn visit(&self, visitor: &mut impl FnMut(&PlanNode)) {
        visitor(self);
        for input in self.inputs() {
            input.visit(visitor);
        }
        if let PlanNode::Recursive { step, .. } = self {
            step.visit(visitor);
        }
    }

    /// What the plan computes and stores, in a form that changes when
    /// either would: every operator's kind, each stateful one's operator id
    /// (its key prefix), keys and the types it keeps, and every expression
    /// as DataFusion prints it. A view's stored state (and output) is
    /// readable by a plan with the same layout only: the catalog keeps it,
    /// and a later build that plans the view otherwise leaves the view
    /// unmaintained rather than misreading its state.
    pub fn state_layout(&self) -> String {
        let types = |node: &PlanNode| {
            node.schema()
                .columns
                .iter()
                .map(|column| column.sql_type.pg_name())
                .collect::<Vec<_>>()
                .join(",")
        };
        let mut out = String::new();
        self.visit(&mut |node| match node {
            PlanNode::Join {
                op_id,
                left,
                right,
                kind,
                left_keys,
                right_keys,
                nulls_equal,
                null_aware,
                residual,
                ..
            } => {
                let _ = write!(
                    out,
                    "join {op_id} {kind:?} {left_keys:?}={right_keys:?} \
                     nulls_equal={nulls_equal} null_aware={null_aware} [{}] [{}]",
                    types(left),
                    types(right)
                );
                if let Some(residual) = residual {
                    let _ = write!(out, " on {}", layout_text(residual));
                }
                out.push_str("; ");
            }
            PlanNode::Aggregate {
                op_id,
                input,
                group_count,
                aggregates,
                retire,
                ..
            } => {
                let _ = write!(
                    out,
                    "aggregate {op_id} groups={group_count} [{}]",
                    types(input)
                );
                for call in aggregates {
                    let _ = write!(
                        out,
                        " {:?}(distinct={} {:?} {:?})->{}",
                        call.function,
                        call.distinct,
                        call.argument,
                        call.input_type.as_ref().map(SqlType::pg_name),
                        call.output_type.pg_name()
                    );
                    if call.delimiter.is_some() || !call.order_by.is_empty() {
                        let _ = write!(
                            out,
                            " delimiter={:?} order={:?}",
                            call.delimiter, call.order_by
                        );
                    }
                    if let Some(fraction) = call.fraction {
                        let _ = write!(out, " fraction={fraction}");
                    }
                    if let Some(filter) = call.filter {
                        let _ = write!(out, " filter={filter}");
                    }
                }
                if let Some(Retirement { column, bound }) = retire {
                    let _ = write!(out, " retire {column} below {bound}");
                }
                out.push_str("; ");
            }
            PlanNode::Distinct { op_id, input } => {
                let _ = write!(out, "distinct {op_id} [{}]; ", types(input));
            }
            PlanNode::TopK {
                op_id,
                input,
                partition,
                order_by,
                offset,
                limit,
                numbering,
                ..
            } => {
                let _ = write!(
                    out,
                    "topk {op_id} partition={partition:?} order={order_by:?} \
                     offset={offset} limit={limit} numbering={numbering:?} [{}] [{}]; ",
                    types(input),
                    types(node)
                );
            }
            PlanNode::SetOperation {
                op_id,
                left,
                operator,
                all,
                ..
            } => {
                let _ = write!(
                    out,
                    "set {op_id} {operator:?} all={all} [{}]; ",
                    types(left)
                );
            }
            PlanNode::Window {
                op_id,
                input,
                partition,
                order_by,
                functions,
                ..
            } => {
                let _ = write!(
                    out,
                    "window {op_id} partition={partition:?} order={order_by:?} [{}] [{}]",
                    types(input),
                    types(node)
                );
                for function in functions {
                    let _ = write!(out, " {},", layout_text(function));
                }
                out.push_str("; ");
            }
            PlanNode::Source { object_id, .. } => {
                let _ = write!(out, "source {object_id} [{}]; ", types(node));
            }
            PlanNode::Constant { rows, .. } => {
                let _ = write!(out, "constant [{}] {rows:?}; ", types(node));
            }
            PlanNode::Map { exprs, .. } => {
                out.push_str("map");
                for expr in exprs {
                    let _ = write!(out, " {},", layout_text(expr));
                }
                let _ = write!(out, " [{}]; ", types(node));
            }
            PlanNode::Filter { predicate, .. } => {
                let _ = write!(out, "filter {}; ", layout_text(predicate));
            }
            PlanNode::Unnest {
                list, keep_empty, ..
            } => {
                let _ = write!(
                    out,
                    "unnest {}{} [{}]; ",
                    layout_text(list),
                    if *keep_empty { " keep_empty" } else { "" },
                    types(node)
                );
            }
            PlanNode::ClockSeries {
                op_id,
                start_micros,
                step_micros,
                offset_micros,
                ..
            } => {
                let _ = write!(
                    out,
                    "clock_series {op_id} {start_micros} {step_micros} {offset_micros} [{}]; ",
                    types(node)
                );
            }
            PlanNode::TemporalFilter { op_id, bounds, .. } => {
                let _ = write!(out, "temporal {op_id} [{}]", types(node));
                for bound in bounds {
                    let _ = write!(
                        out,
                        " {} {:?} {},",
                        layout_text(&bound.value),
                        bound.comparison,
                        bound.offset_micros
                    );
                }
                out.push_str("; ");
            }
            PlanNode::UnionAll { inputs, .. } => {
                let _ = write!(out, "union {}; ", inputs.len());
            }
            PlanNode::Recursive {
                op_id,
                external,
                distinct,
                ..
            } => {
                let _ = write!(
                    out,
                    "recursive {op_id} distinct={distinct} external={} [{}]; ",
                    external.len(),
                    types(node)
                );
            }
            PlanNode::LoopInput { index, .. } => {
                let _ = write!(out, "loop_input {index} [{}]; ", types(node));
            }
            PlanNode::SessionWindow {
                op_id,
                input,
                partition,
                time,
                gap_micros,
                ends,
                ..
            } => {
                let _ = write!(
                    out,
                    "session {op_id} partition={partition:?} time={time} gap={gap_micros} \
                     ends={ends:?} [{}]; ",
                    types(input)
                );
            }
            PlanNode::WindowClose {
                op_id,
                column,
                bound,
                ..
            } => {
                let _ = write!(
                    out,
                    "window_close {op_id} column={column} below {bound} [{}]; ",
                    types(node)
                );
            }
            // Where rows are computed, not what is kept: a view planned
            // for more shards keeps its state in the same layout.
            PlanNode::Exchange { .. } => {}
        });
        out
    }

    /// `EXPLAIN`-style rendering, one operator per line.
    pub fn explain(&self) -> String {
        let mut out = String::new();
        self.explain_into(0, &mut out);
        out
    }

    fn explain_into(&self, depth: usize, out: &mut String) {
        let indent = "  ".repeat(depth);
        let line = match self {
            PlanNode::Source { name, .. } => format!("Source {name}"),
            PlanNode::Constant { rows, .. } => format!("Constant {} row(s)", rows.len()),
            PlanNode::Map { exprs, .. } => {
                format!(
                    "Map [{}]",
                    exprs
                        .iter()
                        .map(|e| e.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
            PlanNode::Filter { predicate, .. } => format!("Filter {predicate}"),
            PlanNode::Unnest { list, .. } => format!("Unnest {list}"),
            PlanNode::ClockSeries {
                start_micros,
                step_micros,
                offset_micros,
                ..
            } => format!(
                "ClockSeries from {start_micros} µs by {step_micros} µs up to now() + {offset_micros} µs"
            ),
            PlanNode::TemporalFilter { bounds, .. } => format!(
                "TemporalFilter {}",
                bounds
                    .iter()
                    .map(|bound| format!(
                        "{} {:?} now() + {} µs",
                        bound.value, bound.comparison, bound.offset_micros
                    ))
                    .collect::<Vec<_>>()
                    .join(" AND ")
            ),
            PlanNode::Join {
                kind,
                left_keys,
                right_keys,
                residual,
                ..
            } => format!(
                "Join {kind:?} on left{left_keys:?} = right{right_keys:?}{}",
                residual
                    .as_ref()
                    .map(|r| format!(" residual {r}"))
                    .unwrap_or_default()
            ),
            PlanNode::Aggregate {
                group_count,
                aggregates,
                retire,
                ..
            } => format!(
                "Aggregate group by {group_count} column(s): {}{}",
                aggregates
                    .iter()
                    .map(|a| format!("{:?}", a.function))
                    .collect::<Vec<_>>()
                    .join(", "),
                retire
                    .as_ref()
                    .map(|retire| format!(
                        "; retires groups once column {} is below {}",
                        retire.column, retire.bound
                    ))
                    .unwrap_or_default()
            ),
            PlanNode::Distinct { .. } => "Distinct".to_string(),
            PlanNode::Window { functions, .. } => format!(
                "Window [{}]",
                functions
                    .iter()
                    .map(|function| function.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            PlanNode::TopK {
                partition,
                order_by,
                offset,
                limit,
                numbering,
                ..
            } => format!(
                "TopK partition by {partition:?} order by {order_by:?} offset {offset} limit {limit}{}",
                numbering.map(|numbering| format!(" {numbering:?}")).unwrap_or_default()
            ),
            PlanNode::UnionAll { .. } => "UnionAll".to_string(),
            PlanNode::Recursive { distinct, .. } => format!(
                "Recursive {} (base, external inputs; then the step)",
                if *distinct { "UNION" } else { "UNION ALL" }
            ),
            PlanNode::LoopInput { index: 0, .. } => "LoopInput the recursion".to_string(),
            PlanNode::SessionWindow {
                partition,
                time,
                gap_micros,
                ..
            } => format!(
                "SessionWindow partition by {partition:?} time column {time} gap {gap_micros} µs"
            ),
            PlanNode::LoopInput { index, .. } => format!("LoopInput external {}", index - 1),
            PlanNode::SetOperation { operator, all, .. } => {
                format!("{operator:?}{}", if *all { " ALL" } else { "" })
            }
            PlanNode::WindowClose { column, bound, .. } => {
                format!("WindowClose column {column} once below {bound}")
            }
            PlanNode::Exchange { key, .. } if key.is_empty() => "Exchange to one shard".to_string(),
            PlanNode::Exchange { key, .. } => format!("Exchange by column(s) {key:?}"),
        };
        let _ = writeln!(out, "{indent}{line}");
        for input in self.inputs() {
            input.explain_into(depth + 1, out);
        }
        if let PlanNode::Recursive { step, .. } = self {
            step.explain_into(depth + 1, out);
        }
    }
}

/// The unique key of a join's output, given each side's unique key, join
/// key columns and output width. A side whose unique key lies within its
/// join keys has at most one row per join key value, so each row of the
/// other side meets at most one partner: that other side's key then
/// identifies output rows, when the join keeps each of its rows at most
/// once (inner, its outer side, semi and anti joins) and the key columns
/// are output ones.
fn join_key(
    kind: JoinKind,
    (left_key, left_join, left_width): (Option<Vec<usize>>, &[usize], usize),
    (right_key, right_join, right_width): (Option<Vec<usize>>, &[usize], usize),
) -> Option<Vec<usize>> {
    let at_most_one = |key: &Option<Vec<usize>>, join: &[usize]| {
        key.as_ref()
            .is_some_and(|key| key.iter().all(|column| join.contains(column)))
    };
    let output = |key: Option<Vec<usize>>, width: usize, offset: usize| {
        key.filter(|key| key.iter().all(|column| *column < width))
            .map(|key| key.into_iter().map(|column| column + offset).collect())
    };
    match kind {
        JoinKind::LeftSemi | JoinKind::LeftAnti => output(left_key, left_width, 0),
        JoinKind::Inner | JoinKind::Left if at_most_one(&right_key, right_join) => {
            output(left_key, left_width, 0)
        }
        JoinKind::Inner | JoinKind::Right if at_most_one(&left_key, left_join) => {
            output(right_key, right_width, left_width)
        }
        _ => None,
    }
}

/// The input column `expr` passes on unchanged (a column reference, maybe
/// renamed).
fn passed_column(expr: &Expr, input_schema: &DFSchemaRef) -> Option<usize> {
    match expr {
        Expr::Alias(alias) => passed_column(&alias.expr, input_schema),
        Expr::Column(column) => input_schema.index_of_column(column).ok(),
        _ => None,
    }
}

/// The id of a view's `n`th stateful operator (counting from 1):
/// `view_id << 32 | n`. Catalog ids are 64-bit counters, so every operator
/// of a view shares the first 12 bytes of its id with the view's other
/// operators and no other view's: the view's operator state can be found,
/// and deleted, from the view's id alone.
pub fn op_id(view_id: ObjectId, n: u32) -> ObjectId {
    debug_assert!(view_id >> 64 == 0, "catalog ids are 64-bit");
    (view_id << 32) | n as ObjectId
}

/// `expr` as a state layout shows it: float `+`, `-` and `*`, which the
/// planner computes with functions checking their range (`pg_float_add`,
/// …), shown as the operators that views created before those functions
/// computed, with the same results in range: their stored state is kept
/// the same way. The planner keeps an output column's name by aliasing the
/// function call to the operator's text; that alias, which the operator
/// never needed, is not shown either.
fn layout_text(expr: &Expr) -> String {
    let shown = match expr {
        Expr::Alias(alias) if alias.relation.is_none() => {
            operators_shown(&alias.expr).map(|inner| {
                if inner.transformed && inner.data.schema_name().to_string() == alias.name {
                    inner.data
                } else {
                    Expr::Alias(datafusion::logical_expr::expr::Alias {
                        expr: Box::new(inner.data),
                        ..alias.clone()
                    })
                }
            })
        }
        other => operators_shown(other).map(|shown| shown.data),
    };
    match shown {
        Ok(shown) => shown.to_string(),
        Err(_) => expr.to_string(),
    }
}

/// `expr` with each range-checked float function call as its operator.
fn operators_shown(expr: &Expr) -> datafusion::common::Result<Transformed<Expr>> {
    expr.clone().transform_up(|expr| {
        let Expr::ScalarFunction(call) = &expr else {
            return Ok(Transformed::no(expr));
        };
        let op = match call.name() {
            "pg_float_add" => Operator::Plus,
            "pg_float_sub" => Operator::Minus,
            "pg_float_mul" => Operator::Multiply,
            _ => return Ok(Transformed::no(expr)),
        };
        let [left, right] = call.args.as_slice() else {
            return Ok(Transformed::no(expr));
        };
        Ok(Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(
            Box::new(left.clone()),
            op,
            Box::new(right.clone()),
        ))))
    })
}

#[cfg(test)]
mod tests {
    //! Goal: a view planned with the range-checked float operators keeps
    //! the state layout it had when they were plain operators. Method:
    //! layouts of expressions calling functions of those names.
    use super::*;
    use datafusion::arrow::datatypes::DataType;
    use datafusion::logical_expr::{
        col, lit, ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
        Volatility,
    };

    #[derive(Debug, PartialEq, Eq, Hash)]
    struct Named {
        name: &'static str,
        signature: Signature,
    }

    impl ScalarUDFImpl for Named {
        fn name(&self) -> &str {
            self.name
        }

        fn signature(&self) -> &Signature {
            &self.signature
        }

        fn return_type(&self, _: &[DataType]) -> datafusion::common::Result<DataType> {
            Ok(DataType::Float64)
        }

        fn invoke_with_args(
            &self,
            _: ScalarFunctionArgs,
        ) -> datafusion::common::Result<ColumnarValue> {
            datafusion::common::not_impl_err!("only planned in this test")
        }
    }

    fn call(name: &'static str, args: Vec<Expr>) -> Expr {
        ScalarUDF::from(Named {
            name,
            signature: Signature::any(2, Volatility::Immutable),
        })
        .call(args)
    }

    #[test]
    fn range_checked_float_operators_show_as_operators_in_state_layouts() {
        let product = call("pg_float_mul", vec![col("a"), lit(2.0)]);
        assert_eq!(layout_text(&product), (col("a") * lit(2.0)).to_string());
        let sum = call("pg_float_add", vec![product, col("b")]);
        assert_eq!(
            layout_text(&sum),
            (col("a") * lit(2.0) + col("b")).to_string()
        );
        let difference = call("pg_float_sub", vec![col("b"), sum]);
        assert_eq!(
            layout_text(&difference),
            (col("b") - (col("a") * lit(2.0) + col("b"))).to_string()
        );
        // The alias keeping a projected column's name is not shown; one
        // the query wrote is.
        let kept = call("pg_float_mul", vec![col("a"), col("b")]).alias("a * b");
        assert_eq!(layout_text(&kept), "a * b");
        let written = call("pg_float_mul", vec![col("a"), col("b")]).alias("area");
        assert_eq!(
            layout_text(&written),
            (col("a") * col("b")).alias("area").to_string()
        );
        // Division was a function before: views keep showing it as one.
        let quotient = call("pg_float_div", vec![col("a"), col("b")]);
        assert_eq!(layout_text(&quotient), quotient.to_string());
    }
}
