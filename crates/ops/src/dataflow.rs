//! A materialized view's compiled dataflow and its per-epoch step.
//!
//! [`Dataflow::compile`] flattens a [`PlanNode`] tree into a list of
//! operators in topological order: every operator comes after its inputs,
//! which it names by index, and the root (the view's output) comes last.
//! Operators are push-style: [`Dataflow::step`] walks the list once, hands
//! each operator its input batches by value and keeps the output in a slot
//! until its one consumer takes it (the plan is a tree, so no batch is
//! copied). Each operator implements the DBSP incremental form of its
//! relational operator, reading and writing its state through a
//! [`StateStore`], so the work done is proportional to the delta and the
//! state it touches.
//!
//! Invariants:
//! - operators never step one another: only the walk here calls an
//!   operator's step;
//! - the list is a tree in topological order: inputs are earlier entries and
//!   every output but the root's has exactly one consumer (checked when the
//!   plan is compiled, and again as each batch is taken);
//! - an operator whose input batches are all empty emits nothing, except on
//!   the initial step (the view's backfill), where a `Constant` emits its
//!   rows and a global aggregate its empty-input row; a `Source`'s batch is
//!   its object's delta (checked on every step);
//! - the output is consolidated (maps and filters pass repeats on).
//!
//! On several shards each shard walks the same list over its own state and
//! its own part of the sources' deltas ([`Dataflow::step_on`]); at an
//! `Exchange` entry its batch is repartitioned with the other shards'
//! ([`crate::exchange`]) before the walk goes on, so no operator changes
//! when a view runs sharded. Rows emitted without input (a `Constant`, a
//! global aggregate's empty-input row) are emitted by the one shard that
//! owns the empty key, where the planner gathers such operators' inputs.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::compute::cast;
use datafusion::logical_expr::Expr;
use rockstream_plan::arrow_types::{arrow_error, datafusion_error};
use rockstream_plan::{AggregateCall, JoinKind, PlanNode, SetOperator, Watermarks};
use rockstream_types::{ObjectId, Row, RsError, RsResult, SqlType, ZSet};

use crate::aggregate::AggregateOperator;
use crate::arrow_rows::{array_to_datums, arrow_type};
use crate::clock_series::ClockSeries;
use crate::distinct;
use crate::exchange::{Exchange, Unsharded};
use crate::expr::CompiledExprs;
use crate::join::JoinOperator;
use crate::recursive::RecursiveOperator;
use crate::session_window::SessionWindowOperator;
use crate::state::{StateRead, StateStore};
use crate::temporal_filter::TemporalFilter;
use crate::top_k::TopKOperator;
use crate::unnest::UnnestOperator;
use crate::window::WindowOperator;
use crate::window_close::WindowCloseOperator;

/// A view's plan, compiled for execution.
#[derive(Debug)]
pub struct Dataflow {
    /// In topological order, the root last.
    operators: Vec<Entry>,
}

/// One operator of a dataflow and where its input batches come from.
#[derive(Debug)]
struct Entry {
    /// Indices of the input operators (earlier entries), in the order the
    /// operator takes its inputs.
    inputs: Vec<usize>,
    operator: Operator,
}

#[derive(Debug)]
enum Operator {
    /// Its batch is the epoch's delta of `object_id`.
    Source {
        object_id: ObjectId,
    },
    /// Emitted once, by the first step.
    Constant {
        rows: ZSet,
    },
    Map {
        exprs: CompiledExprs,
        output_types: Vec<SqlType>,
    },
    Filter {
        predicate: CompiledExprs,
    },
    Unnest(Box<UnnestOperator>),
    Join(Box<JoinOperator>),
    Aggregate(Box<AggregateOperator>),
    Distinct {
        op_id: ObjectId,
    },
    TopK(Box<TopKOperator>),
    Window(Box<WindowOperator>),
    TemporalFilter(Box<TemporalFilter>),
    ClockSeries(Box<ClockSeries>),
    UnionAll,
    Recursive(Box<RecursiveOperator>),
    SessionWindow(Box<SessionWindowOperator>),
    WindowClose(Box<WindowCloseOperator>),
    SetOperation {
        op_id: ObjectId,
        operator: SetOperator,
        all: bool,
    },
    /// Repartitions its batch by these columns of its rows.
    Exchange {
        key: Vec<usize>,
    },
}

/// What a step of a dataflow is besides its input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The view's first step (its backfill), when global aggregates emit
    /// their empty-input row and constants their rows.
    pub initial: bool,
    /// The clock of the step's epoch, microseconds since 1970-01-01 UTC:
    /// the `now()` of temporal filters. It never goes back from one step
    /// of a view to the next.
    pub now_micros: i64,
    /// The tables' watermarks after the step's epoch (RFC 0013): state
    /// below their bounds is final. They never go back from one step of a
    /// view to the next.
    pub watermarks: Arc<Watermarks>,
}

impl Step {
    /// A step after the first, at clock `now_micros`, without watermarks.
    pub fn at(now_micros: i64) -> Step {
        Step {
            initial: false,
            now_micros,
            watermarks: Arc::default(),
        }
    }
}

impl Dataflow {
    pub fn compile(plan: &PlanNode) -> RsResult<Dataflow> {
        let mut operators = Vec::new();
        push_operators(plan, &mut operators)?;
        if !is_tree_in_topological_order(&operators) {
            return Err(RsError::internal(
                "a compiled dataflow is not a tree in topological order",
            ));
        }
        Ok(Dataflow { operators })
    }

    /// Processes one epoch on one shard.
    pub async fn step<S: StateStore>(
        &self,
        store: &mut S,
        inputs: &HashMap<ObjectId, ZSet>,
        step: &Step,
    ) -> RsResult<ZSet> {
        self.step_on(store, inputs, step, &mut Unsharded).await
    }

    /// Whether the output depends on the clock as well as the input (a
    /// temporal filter): then the view must also be stepped, without
    /// input, when [`Dataflow::next_event`] comes.
    pub fn reads_clock(&self) -> bool {
        self.operators.iter().any(|entry| {
            matches!(
                entry.operator,
                Operator::TemporalFilter(_) | Operator::ClockSeries(_)
            )
        })
    }

    /// Whether steps read the watermarks (RFC 0013): an aggregate retires
    /// closed groups, or `EMIT ON WINDOW CLOSE` emits closed windows.
    pub fn reads_watermarks(&self) -> bool {
        self.operators.iter().any(|entry| match &entry.operator {
            Operator::Aggregate(aggregate) => aggregate.retires(),
            Operator::WindowClose(_) => true,
            _ => false,
        })
    }

    /// The earliest clock time at which a step without input changes the
    /// output on the shard of `store`, if any: the head of its temporal
    /// filters' schedules, its clock series' next values.
    pub async fn next_event<S: StateRead>(&self, store: &S) -> RsResult<Option<i64>> {
        let mut next: Option<i64> = None;
        for entry in &self.operators {
            let time = match &entry.operator {
                Operator::TemporalFilter(filter) => filter.next_event(store).await?,
                Operator::ClockSeries(series) => series.next_event(store).await?,
                _ => None,
            };
            if let Some(time) = time {
                next = Some(next.map_or(time, |next| next.min(time)));
            }
        }
        Ok(next)
    }

    /// Processes one epoch on the shard of `exchange`, over that shard's
    /// state and its part of the sources' deltas; returns its part of the
    /// output. Every shard of the step must run it, for the exchanges to
    /// meet.
    pub async fn step_on<S: StateStore, E: Exchange>(
        &self,
        store: &mut S,
        inputs: &HashMap<ObjectId, ZSet>,
        step: &Step,
        exchange: &mut E,
    ) -> RsResult<ZSet> {
        // Per operator stepped so far, its output until its consumer takes it.
        let mut outputs: Vec<Option<ZSet>> = Vec::with_capacity(self.operators.len());
        for entry in &self.operators {
            let batches = entry
                .inputs
                .iter()
                .map(|&input| take_output(&mut outputs, input))
                .collect::<RsResult<Vec<ZSet>>>()?;
            let idle = batches.iter().all(ZSet::is_empty);
            let point = outputs.len();
            exchange.at_operator(Some(point));
            let output = entry
                .operator
                .step(store, inputs, batches, step, (point, &mut *exchange))
                .await?;
            if idle && !output.is_empty() && !entry.operator.emits_when_idle(step.initial) {
                return Err(RsError::internal(format!(
                    "operator {} emitted rows from empty inputs",
                    outputs.len()
                )));
            }
            outputs.push(Some(output));
        }
        exchange.at_operator(None);
        // Maps and filters pass their input's repeats on; the output is
        // consolidated here (cheaply when already in order).
        let output = outputs
            .pop()
            .flatten()
            .ok_or_else(|| RsError::internal("a dataflow without operators"))?
            .consolidate();
        debug_assert!(
            output.is_consolidated(),
            "operator output must be consolidated"
        );
        Ok(output)
    }
}

/// Moves an earlier operator's output to its consumer: the plan is a tree,
/// so no output is wanted twice.
fn take_output(outputs: &mut [Option<ZSet>], input: usize) -> RsResult<ZSet> {
    outputs
        .get_mut(input)
        .and_then(Option::take)
        .ok_or_else(|| RsError::internal("an operator input is not an earlier, unconsumed output"))
}

/// Appends the operators of `plan` (its inputs first, left to right) and
/// returns the index of its root.
fn push_operators(plan: &PlanNode, operators: &mut Vec<Entry>) -> RsResult<usize> {
    // A node's own compile errors are reported before its inputs'.
    let operator = Operator::compile(plan)?;
    let inputs = plan
        .inputs()
        .into_iter()
        .map(|input| push_operators(input, operators))
        .collect::<RsResult<Vec<usize>>>()?;
    operators.push(Entry { inputs, operator });
    Ok(operators.len() - 1)
}

/// Every input is an earlier entry, every entry but the last is the input
/// of exactly one entry, and the last (the root) of none.
fn is_tree_in_topological_order(operators: &[Entry]) -> bool {
    let mut consumers = vec![0usize; operators.len()];
    for (index, entry) in operators.iter().enumerate() {
        for &input in &entry.inputs {
            if input >= index {
                return false;
            }
            consumers[input] += 1;
        }
    }
    match consumers.split_last() {
        Some((root, others)) => *root == 0 && others.iter().all(|&count| count == 1),
        None => false,
    }
}

impl Operator {
    /// The operator of one plan node, without its inputs.
    fn compile(plan: &PlanNode) -> RsResult<Operator> {
        Ok(match plan {
            PlanNode::Source { object_id, .. } => Operator::Source {
                object_id: *object_id,
            },
            PlanNode::Constant { rows, schema } => Operator::Constant {
                rows: constant_rows(rows, &schema.types())?,
            },
            PlanNode::Map {
                input,
                exprs,
                input_schema,
                schema,
            } => Operator::Map {
                exprs: CompiledExprs::compile(exprs, input_schema, input.schema().types())?,
                output_types: schema.types(),
            },
            PlanNode::Filter {
                input,
                predicate,
                input_schema,
            } => Operator::Filter {
                predicate: CompiledExprs::compile(
                    std::slice::from_ref(predicate),
                    input_schema,
                    input.schema().types(),
                )?,
            },
            PlanNode::Unnest {
                input,
                list,
                keep_empty,
                input_schema,
                schema,
            } => Operator::Unnest(Box::new(UnnestOperator::new(
                (list, *keep_empty),
                input_schema,
                input.schema().types(),
                schema
                    .types()
                    .last()
                    .copied()
                    .ok_or_else(|| RsError::internal("an unnest without its element column"))?,
            )?)),
            PlanNode::Join { .. } => Operator::Join(Box::new(JoinOperator::compile(plan)?)),
            PlanNode::Aggregate {
                op_id,
                input,
                group_count,
                aggregates,
                retire,
                schema,
            } => Operator::Aggregate(Box::new(
                AggregateOperator::new(
                    *op_id,
                    *group_count,
                    aggregates.clone(),
                    input.schema().types(),
                    schema.types(),
                )?
                .retiring(retire.clone())?,
            )),
            PlanNode::WindowClose {
                op_id,
                column,
                bound,
                ..
            } => Operator::WindowClose(Box::new(WindowCloseOperator::new(
                *op_id,
                *column,
                bound.clone(),
            ))),
            PlanNode::Distinct { op_id, .. } => Operator::Distinct { op_id: *op_id },
            PlanNode::TopK {
                op_id,
                partition,
                order_by,
                offset,
                limit,
                numbering,
                schema,
                ..
            } => Operator::TopK(Box::new(TopKOperator::new(
                *op_id,
                partition.clone(),
                order_by.clone(),
                (*offset, *limit),
                numbering.zip(schema.columns.last().map(|column| column.sql_type)),
            )?)),
            PlanNode::Window {
                op_id,
                input,
                partition,
                order_by,
                functions,
                input_schema,
                schema,
            } => {
                let values = schema
                    .types()
                    .get(input.schema().len()..)
                    .map(<[SqlType]>::to_vec)
                    .ok_or_else(|| RsError::internal("a window without its functions' columns"))?;
                Operator::Window(Box::new(WindowOperator::new(
                    *op_id,
                    (partition.clone(), order_by.clone()),
                    functions,
                    input_schema,
                    (input.schema().types(), values),
                )?))
            }
            PlanNode::TemporalFilter {
                op_id,
                input,
                bounds,
                input_schema,
            } => Operator::TemporalFilter(Box::new(TemporalFilter::new(
                *op_id,
                bounds,
                input_schema,
                input.schema().types(),
            )?)),
            PlanNode::ClockSeries {
                op_id,
                start_micros,
                step_micros,
                offset_micros,
                schema,
            } => Operator::ClockSeries(Box::new(ClockSeries::new(
                *op_id,
                (*start_micros, *step_micros, *offset_micros),
                schema
                    .types()
                    .first()
                    .copied()
                    .ok_or_else(|| RsError::internal("a clock series without its column"))?,
            )?)),
            PlanNode::UnionAll { .. } => Operator::UnionAll,
            PlanNode::Recursive {
                op_id,
                distinct,
                step,
                ..
            } => Operator::Recursive(Box::new(RecursiveOperator::new(
                *op_id,
                *distinct,
                Dataflow::compile(step)?,
            ))),
            PlanNode::SessionWindow {
                op_id,
                partition,
                time,
                gap_micros,
                ends,
                ..
            } => Operator::SessionWindow(Box::new(SessionWindowOperator::new(
                *op_id,
                (partition.clone(), *time),
                *gap_micros,
                ends.clone(),
            )?)),
            // Within a recursive node's step: its sources, by index.
            PlanNode::LoopInput { index, .. } => Operator::Source {
                object_id: *index as ObjectId,
            },
            PlanNode::SetOperation {
                op_id,
                operator,
                all,
                ..
            } => Operator::SetOperation {
                op_id: *op_id,
                operator: *operator,
                all: *all,
            },
            PlanNode::Exchange { key, .. } => Operator::Exchange { key: key.clone() },
        })
    }

    /// The operator's output delta for its input batches; a source reads
    /// its batch from `sources`, an exchange meets the other shards' at
    /// its `point` (its index in the list).
    async fn step<S: StateStore, E: Exchange>(
        &self,
        store: &mut S,
        sources: &HashMap<ObjectId, ZSet>,
        inputs: Vec<ZSet>,
        step: &Step,
        (point, exchange): (usize, &mut E),
    ) -> RsResult<ZSet> {
        // What is emitted without input is emitted once, by the shard that
        // owns the empty key.
        let initial_here = step.initial && exchange.owns(&[]);
        match self {
            Operator::Source { object_id } => {
                Ok(sources.get(object_id).cloned().unwrap_or_default())
            }
            Operator::Constant { rows } if initial_here => Ok(rows.clone()),
            Operator::Constant { .. } => Ok(ZSet::new()),
            Operator::Map {
                exprs,
                output_types,
            } => {
                let [input] = exactly(inputs)?;
                map(exprs, output_types, input)
            }
            Operator::Filter { predicate } => {
                let [input] = exactly(inputs)?;
                filter(predicate, input)
            }
            Operator::Unnest(unnest) => {
                let [input] = exactly(inputs)?;
                unnest.step(input)
            }
            Operator::Join(join) => {
                let [left, right] = exactly(inputs)?;
                join.step(store, left, right).await
            }
            Operator::Aggregate(aggregate) => {
                let [input] = exactly(inputs)?;
                aggregate
                    .step(store, input, initial_here, &step.watermarks)
                    .await
            }
            Operator::WindowClose(close) => {
                let [input] = exactly(inputs)?;
                close.step(store, input, &step.watermarks).await
            }
            Operator::Distinct { op_id } => {
                let [input] = exactly(inputs)?;
                distinct::distinct(store, *op_id, input).await
            }
            Operator::TopK(top_k) => {
                let [input] = exactly(inputs)?;
                top_k.step(store, input).await
            }
            Operator::Window(window) => {
                let [input] = exactly(inputs)?;
                window.step(store, input).await
            }
            Operator::TemporalFilter(filter) => {
                let [input] = exactly(inputs)?;
                filter.step(store, input, step.now_micros).await
            }
            Operator::ClockSeries(series) => {
                series
                    .step(store, step.now_micros, exchange.owns(&[]))
                    .await
            }
            Operator::UnionAll => {
                let mut out = ZSet::new();
                for input in inputs {
                    out.extend(input);
                }
                Ok(out.consolidate())
            }
            Operator::Recursive(recursive) => recursive.step(store, inputs, step).await,
            Operator::SessionWindow(session) => {
                let [input] = exactly(inputs)?;
                session.step(store, input).await
            }
            Operator::SetOperation {
                op_id,
                operator,
                all,
            } => {
                let [left, right] = exactly(inputs)?;
                distinct::set_operation(store, *op_id, left, right, *operator, *all).await
            }
            Operator::Exchange { key } => {
                let [input] = exactly(inputs)?;
                // One row's changes may come from several shards (a row
                // inserted on one and retracted on another): summed here,
                // as a source's delta is.
                Ok(exchange.exchange(point, key, input).await?.consolidate())
            }
        }
    }

    /// Whether the operator may emit rows when its input batches are all
    /// empty (a source's batch comes from outside the dataflow).
    fn emits_when_idle(&self, initial: bool) -> bool {
        match self {
            // Its input is what the other shards sent.
            Operator::Source { .. } | Operator::Exchange { .. } => true,
            // Rows enter and leave as the clock passes, windows close as
            // the watermarks pass (which rows of another branch moved).
            Operator::TemporalFilter(_) | Operator::ClockSeries(_) | Operator::WindowClose(_) => {
                true
            }
            Operator::Constant { .. } => initial,
            Operator::Aggregate(aggregate) => initial && aggregate.is_global(),
            _ => false,
        }
    }
}

/// An operator's input batches as an array of the operator's arity.
fn exactly<const N: usize>(inputs: Vec<ZSet>) -> RsResult<[ZSet; N]> {
    inputs.try_into().map_err(|inputs: Vec<ZSet>| {
        RsError::internal(format!(
            "an operator of {N} inputs was handed {}",
            inputs.len()
        ))
    })
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
            .chain(call.filter)
            .chain(call.order_by.iter().map(|key| key.column))
            .all(|column| column < input_width)
    })
}

#[cfg(test)]
mod tests {
    //! Goal: a compiled dataflow is a tree in topological order, and its
    //! step can run on another thread. Method: compile an aggregate over a
    //! join over two sources and read the list back; feed the order check
    //! lists that break it.
    use rockstream_plan::JoinKind;

    use super::*;
    use crate::proptests::{aggregate_of, join, LEFT, RIGHT};
    use crate::MemoryStore;

    fn nested() -> Dataflow {
        Dataflow::compile(&aggregate_of(1, join(JoinKind::Inner))).expect("compiles")
    }

    #[test]
    fn operators_come_after_their_inputs_and_the_root_last() {
        let dataflow = nested();
        assert!(matches!(
            dataflow.operators.as_slice(),
            [
                Entry {
                    operator: Operator::Source { object_id: LEFT },
                    ..
                },
                Entry {
                    operator: Operator::Source { object_id: RIGHT },
                    ..
                },
                Entry {
                    operator: Operator::Join(_),
                    ..
                },
                Entry {
                    operator: Operator::Aggregate(_),
                    ..
                },
            ]
        ));
        let inputs: Vec<&[usize]> = dataflow
            .operators
            .iter()
            .map(|entry| entry.inputs.as_slice())
            .collect();
        assert_eq!(inputs, [&[][..], &[], &[0, 1], &[2]]);
        assert!(is_tree_in_topological_order(&dataflow.operators));
    }

    #[test]
    fn the_order_check_refuses_what_is_not_a_tree_in_order() {
        let entry = |inputs: Vec<usize>| Entry {
            inputs,
            operator: Operator::UnionAll,
        };
        let valid = |inputs: [Vec<usize>; 2]| is_tree_in_topological_order(&inputs.map(entry));
        assert!(valid([vec![], vec![0]]));
        // An input that is not earlier; one output taken twice; one never taken.
        assert!(!valid([vec![1], vec![]]));
        assert!(!valid([vec![], vec![0, 0]]));
        assert!(!valid([vec![], vec![]]));
        assert!(!is_tree_in_topological_order(&[]));
    }

    #[test]
    fn a_step_can_be_spawned() {
        // The runtime spawns view steps onto its worker threads.
        fn assert_send<T: Send>(_: &T) {}
        let dataflow = nested();
        let mut store = MemoryStore::default();
        let inputs = HashMap::new();
        assert_send(&dataflow.step(&mut store, &inputs, &Step::at(0)));
    }
}
