//! A materialized view's compiled dataflow and its per-epoch step.
//!
//! [`Dataflow::step`] takes the epoch's input deltas (one Z-set per source
//! object) and returns the view's output delta, reading and writing operator
//! state through a [`StateStore`]. Each operator implements the DBSP
//! incremental form of its relational operator, so the work done is
//! proportional to the delta and the state it touches.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;

use datafusion::arrow::compute::cast;
use datafusion::logical_expr::Expr;
use rockstream_plan::arrow_types::{arrow_error, datafusion_error};
use rockstream_plan::{AggregateCall, JoinKind, PlanNode, SetOperator};
use rockstream_types::{ObjectId, Row, RsError, RsResult, SqlType, ZSet};

use crate::aggregate;
use crate::arrow_rows::{array_to_datums, arrow_type};
use crate::distinct;
use crate::expr::CompiledExprs;
use crate::join;
use crate::state::StateStore;

/// A view's plan, compiled for execution.
#[derive(Debug)]
pub struct Dataflow {
    root: Node,
}

#[derive(Debug)]
pub(crate) enum Node {
    Source {
        object_id: ObjectId,
    },
    /// Emitted once, by the first step.
    Constant {
        rows: ZSet,
    },
    Map {
        input: Box<Node>,
        exprs: CompiledExprs,
        output_types: Vec<SqlType>,
    },
    Filter {
        input: Box<Node>,
        predicate: CompiledExprs,
    },
    Join(Box<join::JoinNode>),
    Aggregate(Box<aggregate::AggregateNode>),
    Distinct {
        op_id: ObjectId,
        input: Box<Node>,
    },
    UnionAll {
        inputs: Vec<Node>,
    },
    SetOperation {
        op_id: ObjectId,
        left: Box<Node>,
        right: Box<Node>,
        operator: SetOperator,
        all: bool,
    },
}

/// Output of one step: the delta, plus whether global aggregates must emit
/// their first row (true once, when the view is created).
pub(crate) struct StepContext<'a> {
    pub inputs: &'a HashMap<ObjectId, ZSet>,
    pub initial: bool,
}

impl Dataflow {
    pub fn compile(plan: &PlanNode) -> RsResult<Dataflow> {
        Ok(Dataflow {
            root: compile_node(plan)?,
        })
    }

    /// Processes one epoch. `initial` is true for the first step of a new
    /// view (its backfill), when global aggregates emit their empty-input row.
    pub async fn step<S: StateStore>(
        &self,
        store: &mut S,
        inputs: &HashMap<ObjectId, ZSet>,
        initial: bool,
    ) -> RsResult<ZSet> {
        let context = StepContext { inputs, initial };
        // Maps and filters pass their input's repeats on; the output is
        // consolidated here (cheaply when already in order).
        let output = step_node(&self.root, store, &context).await?.consolidate();
        debug_assert!(
            output.is_consolidated(),
            "operator output must be consolidated"
        );
        Ok(output)
    }
}

/// The rows of a constant relation, each literal read as its column's type.
fn constant_rows(rows: &[Vec<Expr>], types: &[SqlType]) -> RsResult<ZSet> {
    let mut zset = ZSet::new();
    for row in rows {
        let datums = row
            .iter()
            .zip(types)
            .map(|(expr, sql_type)| {
                let Expr::Literal(value, _) = expr else {
                    return Err(RsError::unsupported(format!(
                        "the non-constant VALUES expression {expr}"
                    )));
                };
                let array = value.to_array().map_err(datafusion_error)?;
                let array = cast(&array, &arrow_type(*sql_type)).map_err(arrow_error)?;
                Ok(array_to_datums(&array, *sql_type)?.remove(0))
            })
            .collect::<RsResult<Row>>()?;
        zset.push(datums, 1);
    }
    Ok(zset.consolidate())
}

fn compile_node(plan: &PlanNode) -> RsResult<Node> {
    Ok(match plan {
        PlanNode::Source { object_id, .. } => Node::Source {
            object_id: *object_id,
        },
        PlanNode::Constant { rows, schema } => Node::Constant {
            rows: constant_rows(rows, &schema.types())?,
        },
        PlanNode::Map {
            input,
            exprs,
            input_schema,
            schema,
        } => Node::Map {
            exprs: CompiledExprs::compile(exprs, input_schema, input.schema().types())?,
            output_types: schema.types(),
            input: Box::new(compile_node(input)?),
        },
        PlanNode::Filter {
            input,
            predicate,
            input_schema,
        } => Node::Filter {
            predicate: CompiledExprs::compile(
                std::slice::from_ref(predicate),
                input_schema,
                input.schema().types(),
            )?,
            input: Box::new(compile_node(input)?),
        },
        PlanNode::Join { .. } => Node::Join(Box::new(join::JoinNode::compile(plan, compile_node)?)),
        PlanNode::Aggregate {
            op_id,
            input,
            group_count,
            aggregates,
            schema,
        } => Node::Aggregate(Box::new(aggregate::AggregateNode::new(
            *op_id,
            compile_node(input)?,
            *group_count,
            aggregates.clone(),
            input.schema().types(),
            schema.types(),
        )?)),
        PlanNode::Distinct { op_id, input } => Node::Distinct {
            op_id: *op_id,
            input: Box::new(compile_node(input)?),
        },
        PlanNode::UnionAll { inputs, .. } => Node::UnionAll {
            inputs: inputs.iter().map(compile_node).collect::<RsResult<_>>()?,
        },
        PlanNode::SetOperation {
            op_id,
            left,
            right,
            operator,
            all,
        } => Node::SetOperation {
            op_id: *op_id,
            left: Box::new(compile_node(left)?),
            right: Box::new(compile_node(right)?),
            operator: *operator,
            all: *all,
        },
    })
}

type StepFuture<'a> = Pin<Box<dyn Future<Output = RsResult<ZSet>> + Send + 'a>>;

pub(crate) fn step_node<'a, S: StateStore>(
    node: &'a Node,
    store: &'a mut S,
    context: &'a StepContext<'a>,
) -> StepFuture<'a> {
    Box::pin(async move {
        match node {
            Node::Source { object_id } => {
                Ok(context.inputs.get(object_id).cloned().unwrap_or_default())
            }
            Node::Constant { rows } if context.initial => Ok(rows.clone()),
            Node::Constant { .. } => Ok(ZSet::new()),
            Node::Map {
                input,
                exprs,
                output_types,
            } => {
                let delta = step_node(input, store, context).await?;
                map(exprs, output_types, delta)
            }
            Node::Filter { input, predicate } => {
                let delta = step_node(input, store, context).await?;
                filter(predicate, delta)
            }
            Node::Join(join) => join.step(store, context).await,
            Node::Aggregate(aggregate) => aggregate.step(store, context).await,
            Node::Distinct { op_id, input } => {
                let delta = step_node(input, store, context).await?;
                distinct::distinct(store, *op_id, delta).await
            }
            Node::UnionAll { inputs } => {
                let mut out = ZSet::new();
                for input in inputs {
                    out.extend(step_node(input, store, context).await?);
                }
                Ok(out.consolidate())
            }
            Node::SetOperation {
                op_id,
                left,
                right,
                operator,
                all,
            } => {
                let left_delta = step_node(left, store, context).await?;
                let right_delta = step_node(right, store, context).await?;
                distinct::set_operation(store, *op_id, left_delta, right_delta, *operator, *all)
                    .await
            }
        }
    })
}

fn map(exprs: &CompiledExprs, output_types: &[SqlType], delta: ZSet) -> RsResult<ZSet> {
    if delta.is_empty() {
        return Ok(delta);
    }
    let rows: Vec<&Row> = delta.updates.iter().map(|(row, _)| row).collect();
    let mapped = exprs.evaluate_rows(&rows, output_types)?;
    let updates = mapped
        .into_iter()
        .zip(delta.updates.iter().map(|(_, weight)| *weight))
        .collect();
    // Not consolidated: rows mapped alike stay apart until an operator that
    // groups its input (or the dataflow's output) sums them.
    Ok(ZSet::from_updates(updates))
}

fn filter(predicate: &CompiledExprs, delta: ZSet) -> RsResult<ZSet> {
    if delta.is_empty() {
        return Ok(delta);
    }
    let rows: Vec<&Row> = delta.updates.iter().map(|(row, _)| row).collect();
    let keep = predicate.evaluate_predicate(&rows)?;
    let updates = delta
        .updates
        .into_iter()
        .zip(keep)
        .filter(|(_, keep)| *keep)
        .map(|(update, _)| update)
        .collect();
    Ok(ZSet::from_updates(updates))
}

/// Helpers shared by the operators.
pub(crate) fn unsupported_join(kind: JoinKind) -> RsError {
    RsError::unsupported(format!("{kind:?} join"))
}

pub(crate) fn aggregate_calls_valid(calls: &[AggregateCall], input_width: usize) -> bool {
    calls.iter().all(|call| {
        call.argument
            .into_iter()
            .chain(call.delimiter)
            .chain(call.order_by.iter().map(|key| key.column))
            .all(|column| column < input_width)
    })
}
