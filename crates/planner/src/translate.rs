//! DataFusion logical plan → PlanIR.
//!
//! The optimized logical plan is walked bottom-up; each relational operator
//! maps onto its incremental counterpart. Aggregates get a `Map` below them
//! computing the group keys and arguments, so the aggregate operator works on
//! plain columns. Join keys that are expressions (e.g. casts) are appended to
//! their side by a `Map` and the join trims them from its output.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::tree_node::Transformed;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, DFSchemaRef, JoinType, NullEquality};
use datafusion::common::{ScalarValue, TableReference};
use datafusion::datasource::cte_worktable::CteWorkTable;
use datafusion::datasource::source_as_provider;
use datafusion::execution::context::SessionContext;
use datafusion::functions_window::expr_fn::row_number;
use datafusion::logical_expr::expr::AggregateFunction as DfAggregateFunction;
use datafusion::logical_expr::expr::WindowFunctionParams;
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::{col, lit, ExprFunctionExt, LogicalPlanBuilder};
use datafusion::logical_expr::{
    when, BinaryExpr, Distinct, DistinctOn, Expr, ExprSchemable, FetchType, Filter, GroupingSet,
    LogicalPlan, Operator, Projection, SkipType, SortExpr, Volatility, Window,
    WindowFunctionDefinition,
};
use datafusion::sql::sqlparser::ast::{SetExpr, Statement};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use rockstream_plan::arrow_types::{datafusion_error, sql_type_of};
use rockstream_plan::{
    AggregateCall, AggregateFunction, Column, JoinKind, Numbering, PlanNode, Schema, SetOperator,
    SortKey,
};
use rockstream_types::{codes, ObjectId, RsError, RsResult};

use crate::resolver::SchemaOnlyTable;
use crate::session_windows::{SESSION_END, SESSION_START};
use crate::set_operations;
use crate::temporal_filters::{clock_bound, mark_clock_bounds, stray_clock_bound};
use crate::time_windows::rewrite_time_windows;
use crate::using_joins::rewrite_using_joins;

/// Plans `query` (a SELECT) as the incremental plan of view `view_id`.
pub async fn plan_view(
    context: &SessionContext,
    view_id: ObjectId,
    query: &str,
) -> RsResult<PlanNode> {
    plan_view_with(context, view_id, query, PlanOptions::default()).await
}

/// How a view is planned where builds have planned it differently: a view
/// keeps the plan it was created with, its state being laid out for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanOptions {
    /// A scalar subquery joined to rows computes its expressions above the
    /// join ([`lift_subquery_expressions`]); views created before it did,
    /// below.
    pub lift_subquery_expressions: bool,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            lift_subquery_expressions: true,
        }
    }
}

/// [`plan_view`] with `options`.
pub async fn plan_view_with(
    context: &SessionContext,
    view_id: ObjectId,
    query: &str,
    options: PlanOptions,
) -> RsResult<PlanNode> {
    let mut translator = Translator {
        view_id,
        next_op: 0,
        numbered_window: None,
        recursion: None,
        options,
    };
    let mut statements = Parser::parse_sql(&PostgreSqlDialect {}, query)
        .map_err(|e| RsError::new(&codes::SYNTAX_ERROR, e.to_string()))?;
    let mut query = query.to_string();
    if let [Statement::Query(parsed)] = statements.as_mut_slice() {
        // As ad-hoc queries are read (set-returning functions, PostgreSQL's
        // column names, …).
        crate::pg_compat::normalize_view_definition(parsed);
        rewrite_time_windows(parsed)?;
        rewrite_using_joins(context, parsed)
            .await
            .map_err(plan_error)?;
        if let Some((operator, all, left, right)) = set_operations::top_level_set_operation(parsed)
        {
            return Ok(
                plan_set_tree(context, &mut translator, operator, all, left, right)
                    .await?
                    .0,
            );
        }
        query = parsed.to_string();
    }
    if set_operations::uses_bag_set_operation(&query) {
        return Err(RsError::unsupported(
            "EXCEPT ALL / INTERSECT ALL inside a subquery",
        ));
    }
    let (node, _) = plan_branch(context, &mut translator, &query).await?;
    Ok(node)
}

/// Plans one SELECT: its PlanIR and its optimized logical plan.
async fn plan_branch(
    context: &SessionContext,
    translator: &mut Translator,
    query: &str,
) -> RsResult<(PlanNode, LogicalPlan)> {
    let mut state = context.state();
    // A view's uncorrelated scalar subquery is a join with its one row
    // (maintained like any join), not a value computed once at execution.
    state
        .config_mut()
        .options_mut()
        .optimizer
        .enable_physical_uncorrelated_scalar_subquery = false;
    let logical = state.create_logical_plan(query).await.map_err(plan_error)?;
    let logical = crate::clock_series::plan_clock_series(&state, logical)?;
    let logical = mark_clock_bounds(&state, logical)?;
    refuse_as_written(&logical)?;
    let logical = distinct_on_as_row_number(logical)?;
    let optimized = state.optimize(&logical).map_err(plan_error)?;
    stray_clock_bound(&optimized)?;
    Ok((translator.translate(&optimized)?, optimized))
}

/// Name of the row number a DISTINCT ON is rewritten with.
const DISTINCT_ON_NUMBER: &str = "__distinct_on_number";

/// `plan` with every `SELECT DISTINCT ON (keys) … ORDER BY …` written as
/// PostgreSQL defines it: the rows numbered 1 by `ROW_NUMBER() OVER
/// (PARTITION BY keys ORDER BY …)`, in that order, projected. DataFusion
/// would rewrite it into a `first_value` aggregate, which keeps no order to
/// maintain; this form plans as a top-1 per group (a numbered top-K), a
/// LIMIT above it keeps the first groups in the order, and filters above
/// it are pushed below it only on the keys.
fn distinct_on_as_row_number(plan: LogicalPlan) -> RsResult<LogicalPlan> {
    plan.transform_up_with_subqueries(|node| match node {
        LogicalPlan::Distinct(Distinct::On(on)) => {
            let DistinctOn {
                on_expr,
                select_expr,
                sort_expr,
                input,
                ..
            } = on;
            let number = row_number()
                .partition_by(on_expr)
                .order_by(sort_expr.clone().unwrap_or_default())
                .build()?
                .alias(DISTINCT_ON_NUMBER);
            let mut builder = LogicalPlanBuilder::from(input)
                .window(vec![number])?
                .filter(col(DISTINCT_ON_NUMBER).eq(lit(1i64)))?;
            if let Some(sort) = sort_expr {
                builder = builder.sort(sort)?;
            }
            Ok(Transformed::yes(builder.project(select_expr)?.build()?))
        }
        other => Ok(Transformed::no(other)),
    })
    .map(|transformed| transformed.data)
    .map_err(plan_error)
}

/// Refuses what the optimizer would hide from [`Translator`]: functions whose result
/// changes from one call to the next (`now()`, `random()`, ...), which
/// DataFusion may fold into a constant. A view calling those cannot be
/// maintained: a retraction must recompute exactly the row it retracts, and
/// a view filtering on `now()` would have to change as time passes.
fn refuse_as_written(plan: &LogicalPlan) -> RsResult<()> {
    let mut refused: Option<RsError> = None;
    plan.apply_with_subqueries(|node| {
        node.apply_expressions(|expr| {
            expr.apply(|expr| {
                // Joined with the outer rows (`plan_branch`): more than one
                // row would multiply them, where PostgreSQL fails.
                if let Expr::ScalarSubquery(subquery) = expr {
                    let at_most_one =
                        matches!(subquery.subquery.max_rows(), Some(rows) if rows <= 1);
                    if subquery.outer_ref_columns.is_empty() && !at_most_one {
                        refused = Some(RsError::unsupported(
                            "a scalar subquery that is not correlated and may return more than \
                             one row (aggregate it, or add LIMIT 1)",
                        ));
                        return Ok(TreeNodeRecursion::Stop);
                    }
                }
                if let Expr::Exists(exists) = expr {
                    // DataFusion turns a correlated EXISTS into a semi join
                    // and drops its LIMIT, and with it an OFFSET, which
                    // changes the answer.
                    if skips_rows(&exists.subquery.subquery)? {
                        refused = Some(RsError::unsupported("OFFSET in an EXISTS subquery"));
                        return Ok(TreeNodeRecursion::Stop);
                    }
                }
                let Expr::ScalarFunction(call) = expr else {
                    return Ok(TreeNodeRecursion::Continue);
                };
                let name = call.func.name();
                refused = match call.func.signature().volatility {
                    Volatility::Immutable => return Ok(TreeNodeRecursion::Continue),
                    Volatility::Volatile => Some(RsError::unsupported(format!(
                        "the volatile function {name}()"
                    ))),
                    Volatility::Stable => Some(RsError::unsupported(format!(
                        "{name}(), whose result depends on when the statement runs,"
                    ))),
                };
                Ok(TreeNodeRecursion::Stop)
            })
        })
    })
    .map_err(datafusion_error)?;
    refused.map_or(Ok(()), Err)
}

/// A percentile's fraction: a constant in `[0, 1]` (PostgreSQL's error
/// otherwise), `None` when NULL.
fn percentile_fraction(given: &Expr) -> RsResult<Option<f64>> {
    let value = match given {
        Expr::Literal(value, _) => value,
        Expr::Cast(cast) => match cast.expr.as_ref() {
            Expr::Literal(value, _) => value,
            _ => {
                return Err(RsError::unsupported(
                    "a percentile fraction that is not a constant",
                ))
            }
        },
        _ => {
            return Err(RsError::unsupported(
                "a percentile fraction that is not a constant",
            ))
        }
    };
    if value.is_null() {
        return Ok(None);
    }
    let fraction = value
        .cast_to(&DataType::Float64)
        .ok()
        .and_then(|value| match value {
            ScalarValue::Float64(fraction) => fraction,
            _ => None,
        })
        .ok_or_else(|| RsError::unsupported("a percentile fraction that is not a number"))?;
    if !(0.0..=1.0).contains(&fraction) {
        return Err(RsError::new(
            &codes::NUMERIC_OUT_OF_RANGE,
            format!("percentile value {fraction} is not between 0 and 1"),
        ));
    }
    Ok(Some(fraction))
}

/// Whether `plan` has a LIMIT that skips rows (an OFFSET that is not 0).
fn skips_rows(plan: &LogicalPlan) -> datafusion::error::Result<bool> {
    plan.exists(|node| {
        Ok(match node {
            LogicalPlan::Limit(limit) => !matches!(limit.get_skip_type()?, SkipType::Literal(0)),
            _ => false,
        })
    })
}

type BranchFuture<'a> = std::pin::Pin<
    Box<dyn std::future::Future<Output = RsResult<(PlanNode, LogicalPlan)>> + Send + 'a>,
>;

/// Plans an EXCEPT/INTERSECT tree branch by branch (see `set_operations`).
fn plan_set_tree<'a>(
    context: &'a SessionContext,
    translator: &'a mut Translator,
    operator: SetOperator,
    all: bool,
    left: &'a SetExpr,
    right: &'a SetExpr,
) -> BranchFuture<'a> {
    Box::pin(async move {
        let op_id = translator.op_id();
        let (left_node, left_plan) = match set_operations::split(left) {
            Some((operator, all, l, r)) => {
                plan_set_tree(context, translator, operator, all, l, r).await?
            }
            None => plan_branch(context, translator, &left.to_string()).await?,
        };
        let (right_node, right_plan) = match set_operations::split(right) {
            Some((operator, all, l, r)) => {
                plan_set_tree(context, translator, operator, all, l, r).await?
            }
            None => plan_branch(context, translator, &right.to_string()).await?,
        };
        let types = set_operations::unify(&left_plan, &right_plan)?;
        let left_node = set_operations::coerce(left_node, &left_plan, &types)?;
        let right_node = set_operations::coerce(right_node, &right_plan, &types)?;
        let node = PlanNode::SetOperation {
            op_id,
            left: Box::new(left_node),
            right: Box::new(right_node),
            operator,
            all,
        };
        // The combined plan's schema is the left branch's with unified types.
        let schema_plan = left_plan;
        Ok((node, schema_plan))
    })
}

/// Our schema of a DataFusion schema (canonical SQL types).
pub fn schema_of(schema: &DFSchema) -> RsResult<Schema> {
    let columns = schema
        .fields()
        .iter()
        .map(|field| {
            Ok(Column {
                name: field.name().clone(),
                sql_type: sql_type_of(field.data_type())?,
            })
        })
        .collect::<RsResult<Vec<_>>>()?;
    Ok(Schema { columns })
}

fn plan_error(error: datafusion::error::DataFusionError) -> RsError {
    if let datafusion::error::DataFusionError::External(inner) = &error {
        if let Some(ours) = inner.downcast_ref::<RsError>() {
            return ours.clone();
        }
    }
    undefined_relation(&error).unwrap_or_else(|| datafusion_error(error))
}

/// DataFusion's "table 'rockstream.public.x' not found" as PostgreSQL says
/// it: `relation "x" does not exist` (RS-1505).
pub fn undefined_relation(error: &datafusion::error::DataFusionError) -> Option<RsError> {
    let text = error.to_string();
    let quoted = text.split("table '").nth(1)?.split("' not found").next()?;
    let name = quoted.strip_prefix("rockstream.").unwrap_or(quoted);
    let name = name.strip_prefix("public.").unwrap_or(name);
    Some(RsError::new(
        &codes::UNDEFINED_OBJECT,
        format!("relation \"{name}\" does not exist"),
    ))
}

struct Translator {
    view_id: ObjectId,
    next_op: u32,
    /// A `ROW_NUMBER()` window a filter above keeps the first rows of (its
    /// address, and how many rows), to plan as a top-K when reached.
    numbered_window: Option<(usize, u64)>,
    /// The recursive query whose recursive term is being translated.
    recursion: Option<String>,
    options: PlanOptions,
}

impl Translator {
    /// Stable across restarts: the same SQL yields the same ids in the same order.
    fn op_id(&mut self) -> ObjectId {
        self.next_op += 1;
        rockstream_plan::op_id(self.view_id, self.next_op)
    }

    fn translate(&mut self, plan: &LogicalPlan) -> RsResult<PlanNode> {
        match plan {
            LogicalPlan::Projection(projection) => Ok(PlanNode::Map {
                input: Box::new(self.translate(&projection.input)?),
                exprs: projection.expr.clone(),
                input_schema: projection.input.schema().clone(),
                schema: schema_of(&projection.schema)?,
            }),
            LogicalPlan::Filter(filter) => {
                // The filter stays: its other conditions, and the one on
                // the row number, which the top-K's rows meet.
                if let Some(numbered) = ranking_limit(filter) {
                    self.numbered_window = Some(numbered);
                }
                let input = self.translate(&filter.input);
                self.numbered_window = None;
                // Conditions on the clock make a temporal filter above
                // the others.
                let (bounds, conditions): (Vec<_>, Vec<_>) = split_conjunction(&filter.predicate)
                    .into_iter()
                    .partition(|conjunct| clock_bound(conjunct).is_some());
                let mut node = input?;
                if let Some(predicate) = conjunction(conditions.into_iter().cloned()) {
                    node = PlanNode::Filter {
                        input: Box::new(node),
                        predicate,
                        input_schema: filter.input.schema().clone(),
                    };
                }
                if !bounds.is_empty() {
                    node = PlanNode::TemporalFilter {
                        op_id: self.op_id(),
                        input: Box::new(node),
                        bounds: bounds.into_iter().filter_map(clock_bound).collect(),
                        input_schema: filter.input.schema().clone(),
                    };
                }
                Ok(node)
            }
            LogicalPlan::TableScan(scan) => self.table_scan(scan),
            LogicalPlan::SubqueryAlias(alias) => self.translate(&alias.input),
            // A view's rows have no order: ORDER BY without LIMIT sorts
            // nothing.
            LogicalPlan::Sort(sort) if sort.fetch.is_none() => self.translate(&sort.input),
            LogicalPlan::Sort(_) => self.window(plan, 0, u64::MAX),
            LogicalPlan::Limit(limit) => {
                let offset = match limit.get_skip_type().map_err(datafusion_error)? {
                    SkipType::Literal(offset) => offset as u64,
                    SkipType::UnsupportedExpr => {
                        return Err(RsError::unsupported("an OFFSET that is not a constant"))
                    }
                };
                let count = match limit.get_fetch_type().map_err(datafusion_error)? {
                    FetchType::Literal(Some(count)) => count as u64,
                    // Bounded below already: the rows after the offset
                    // are at most those.
                    FetchType::Literal(None) if bounded(&limit.input) => u64::MAX,
                    FetchType::Literal(None) => {
                        return Err(RsError::unsupported(
                            "OFFSET without LIMIT (every change before the offset would \
                             shift the whole rest of the view)",
                        ))
                    }
                    FetchType::UnsupportedExpr => {
                        return Err(RsError::unsupported("a LIMIT that is not a constant"))
                    }
                };
                self.window(&limit.input, offset, count)
            }
            LogicalPlan::Join(join) => self.join(join),
            LogicalPlan::Aggregate(aggregate) => match aggregate.group_expr.as_slice() {
                [Expr::GroupingSet(set)] => self.grouping_sets(aggregate, set),
                _ => self.aggregate(aggregate),
            },
            LogicalPlan::Distinct(Distinct::All(input)) => Ok(PlanNode::Distinct {
                op_id: self.op_id(),
                input: Box::new(self.translate(input)?),
            }),
            LogicalPlan::Distinct(Distinct::On(_)) => {
                Err(RsError::internal("a DISTINCT ON left after its rewrite"))
            }
            LogicalPlan::Union(union) => Ok(PlanNode::UnionAll {
                inputs: union
                    .inputs
                    .iter()
                    .map(|input| self.translate(input))
                    .collect::<RsResult<_>>()?,
                schema: schema_of(&union.schema)?,
            }),
            LogicalPlan::Window(window) => match self.numbered_window.take() {
                Some((address, limit)) if address == window_address(window) => {
                    self.numbered_top_k(window, limit)
                }
                _ => match self.session_window(window)? {
                    Some(session) => Ok(session),
                    None => self.window_functions(window),
                },
            },
            LogicalPlan::RecursiveQuery(query) => self.recursive(query),
            LogicalPlan::Values(values) => Ok(PlanNode::Constant {
                rows: values.values.clone(),
                schema: schema_of(&values.schema)?,
            }),
            LogicalPlan::EmptyRelation(empty) => Ok(PlanNode::Constant {
                rows: if empty.produce_one_row {
                    vec![Vec::new()]
                } else {
                    Vec::new()
                },
                schema: schema_of(&empty.schema)?,
            }),
            LogicalPlan::Unnest(unnest) => self.unnest(unnest),
            LogicalPlan::Extension(extension) => {
                let Some(series) = extension
                    .node
                    .as_any()
                    .downcast_ref::<crate::clock_series::ClockSeriesNode>()
                else {
                    return Err(RsError::unsupported(format!(
                        "the plan node {}",
                        extension.node.name()
                    )));
                };
                Ok(PlanNode::ClockSeries {
                    op_id: self.op_id(),
                    start_micros: series.start_micros,
                    step_micros: series.step_micros,
                    offset_micros: series.offset_micros,
                    schema: schema_of(&series.schema)?,
                })
            }
            other => Err(RsError::unsupported(format!(
                "the plan node {}",
                other.display()
            ))),
        }
    }

    /// `unnest(list)` of a list computed from the row (DataFusion's plan of
    /// a set-returning `generate_series(…)`, of `unnest(string_to_array(…))`
    /// or of a constant array), the list computed by the projection below:
    /// a [`PlanNode::Unnest`] over the projection's input, then the
    /// `Unnest`'s columns computed over its rows and the element. Several
    /// lists at once, structs and `WITH ORDINALITY`-like options are
    /// refused.
    fn unnest(&mut self, unnest: &datafusion::logical_expr::Unnest) -> RsResult<PlanNode> {
        let refused = || RsError::unsupported("this UNNEST (one list per SELECT, not nested)");
        let ([(list, depth)], []) = (
            unnest.list_type_columns.as_slice(),
            unnest.struct_type_columns.as_slice(),
        ) else {
            return Err(refused());
        };
        let keep_empty = match unnest.options.null_handling {
            datafusion::common::NullHandling::Drop => false,
            datafusion::common::NullHandling::PreserveAndExpandEmpty => true,
            datafusion::common::NullHandling::Preserve => return Err(refused()),
        };
        if depth.depth != 1 {
            return Err(refused());
        }
        let LogicalPlan::Projection(projection) = unnest.input.as_ref() else {
            return Err(refused());
        };
        // The operator reads Arrow's `List` (not large or fixed-size lists).
        if !matches!(
            projection.schema.field(*list).data_type(),
            DataType::List(_)
        ) {
            return Err(refused());
        }
        let list_expr = projection
            .expr
            .get(*list)
            .map(|expr| expr.clone().unalias())
            .ok_or_else(|| RsError::internal("an unnest of a column its input lacks"))?;
        let element = unnest
            .dependency_indices
            .iter()
            .position(|input| input == list)
            .map(|output| unnest.schema.field(output).clone())
            .ok_or_else(|| RsError::internal("an unnest without its unnested column"))?;
        let input = self.translate(&projection.input)?;
        let input_schema = projection.input.schema().clone();
        let value = format!("__rs_unnested_{}", self.next_op);
        let value_schema = DFSchema::try_from(datafusion::arrow::datatypes::Schema::new(vec![
            datafusion::arrow::datatypes::Field::new(&value, element.data_type().clone(), true),
        ]))
        .map_err(datafusion_error)?;
        let extended = Arc::new(input_schema.join(&value_schema).map_err(datafusion_error)?);
        let unnested = PlanNode::Unnest {
            input: Box::new(input),
            list: list_expr,
            keep_empty,
            input_schema,
            schema: schema_of(&extended)?,
        };
        let exprs = unnest
            .dependency_indices
            .iter()
            .map(|input| {
                if input == list {
                    Ok(col(datafusion::common::Column::from_name(&value)))
                } else {
                    projection
                        .expr
                        .get(*input)
                        .map(|expr| expr.clone().unalias())
                        .ok_or_else(|| RsError::internal("an unnest column without its input"))
                }
            })
            .collect::<RsResult<Vec<_>>>()?;
        Ok(PlanNode::Map {
            input: Box::new(unnested),
            exprs,
            input_schema: extended,
            schema: schema_of(&unnest.schema)?,
        })
    }

    /// The rows at positions `offset..offset + count` of `plan`'s rows: a
    /// top-K in the order of the `ORDER BY` that `plan` is or ends in
    /// (below projections, which keep rows and their order), or, without
    /// one, in an order of its own (PostgreSQL keeps some `count` rows).
    fn window(&mut self, plan: &LogicalPlan, offset: u64, count: u64) -> RsResult<PlanNode> {
        match plan {
            LogicalPlan::Projection(projection) => Ok(PlanNode::Map {
                input: Box::new(self.window(&projection.input, offset, count)?),
                exprs: projection.expr.clone(),
                input_schema: projection.input.schema().clone(),
                schema: schema_of(&projection.schema)?,
            }),
            LogicalPlan::SubqueryAlias(alias) => self.window(&alias.input, offset, count),
            LogicalPlan::Sort(sort) => {
                // Its own LIMIT (DataFusion pushes one down, as `offset +
                // count`) keeps rows `0..fetch`.
                let count = match sort.fetch {
                    Some(fetch) => count.min((fetch as u64).saturating_sub(offset)),
                    None => count,
                };
                self.top_k(&sort.input, &[], &sort.expr, (offset, count), None)
            }
            other => self.top_k(other, &[], &[], (offset, count), None),
        }
    }

    /// A top-K over `input`, partitioned by `partition` and ordered by
    /// `sort`; with `number` (a `ROW_NUMBER()` window's output field, its
    /// qualifier with it), each row's position in its partition follows
    /// its columns. Keys that are not columns of `input` are computed into
    /// extra columns beside them, dropped again above the top-K.
    fn top_k(
        &mut self,
        input: &LogicalPlan,
        partition: &[Expr],
        sort: &[SortExpr],
        (offset, limit): (u64, u64),
        number: Option<(Numbering, Option<TableReference>, FieldRef)>,
    ) -> RsResult<PlanNode> {
        let op_id = self.op_id();
        let mut node = self.translate(input)?;
        let schema = input.schema();
        let width = schema.fields().len();
        let mut extra: Vec<Expr> = Vec::new();
        let mut column_of = |expr: &Expr| {
            let column = match unalias(expr) {
                Expr::Column(column) => schema.index_of_column(column).ok(),
                _ => None,
            };
            column.unwrap_or_else(|| {
                extra.push(expr.clone().alias(format!("__top_k_key_{}", extra.len())));
                width + extra.len() - 1
            })
        };
        let partition: Vec<usize> = partition.iter().map(&mut column_of).collect();
        let order_by: Vec<SortKey> = sort
            .iter()
            .map(|key| SortKey {
                column: column_of(&key.expr),
                descending: !key.asc,
                nulls_first: key.nulls_first,
            })
            .collect();
        let mut numbered_schema = schema.clone();
        if !extra.is_empty() {
            let exprs: Vec<Expr> = schema
                .columns()
                .into_iter()
                .map(Expr::Column)
                .chain(extra)
                .collect();
            let projection =
                Projection::try_new(exprs, Arc::new(input.clone())).map_err(datafusion_error)?;
            node = PlanNode::Map {
                input: Box::new(node),
                exprs: projection.expr,
                input_schema: schema.clone(),
                schema: schema_of(&projection.schema)?,
            };
            numbered_schema = projection.schema;
        }
        let mut top_k_schema = node.schema().clone();
        let mut output_schema = schema_of(schema)?;
        let numbering = match &number {
            Some((numbering, qualifier, field)) => {
                let column = Column {
                    name: field.name().clone(),
                    sql_type: sql_type_of(field.data_type())?,
                };
                top_k_schema.columns.push(column.clone());
                output_schema.columns.push(column);
                let number_schema = DFSchema::new_with_metadata(
                    vec![(qualifier.clone(), field.clone())],
                    Default::default(),
                )
                .map_err(datafusion_error)?;
                numbered_schema = Arc::new(
                    numbered_schema
                        .join(&number_schema)
                        .map_err(datafusion_error)?,
                );
                Some(*numbering)
            }
            None => None,
        };
        let trimmed = node.schema().len() > width;
        node = PlanNode::TopK {
            op_id,
            input: Box::new(node),
            partition,
            order_by,
            offset,
            limit,
            numbering,
            schema: top_k_schema,
        };
        if trimmed {
            let columns = numbered_schema.columns();
            let kept = (0..width).chain(numbering.map(|_| columns.len() - 1));
            node = PlanNode::Map {
                input: Box::new(node),
                exprs: kept
                    .map(|index| Expr::Column(columns[index].clone()))
                    .collect(),
                input_schema: numbered_schema,
                schema: output_schema,
            };
        }
        Ok(node)
    }

    /// Window functions: one window operator, when every function shares
    /// one `PARTITION BY` and `ORDER BY` of columns (DataFusion stacks a
    /// window per distinct pair).
    fn window_functions(&mut self, window: &Window) -> RsResult<PlanNode> {
        let specs: Vec<&WindowFunctionParams> = window
            .window_expr
            .iter()
            .map(|expr| match unalias(expr) {
                Expr::WindowFunction(function) => Ok(&function.params),
                other => Err(RsError::unsupported(format!(
                    "the window expression {other}"
                ))),
            })
            .collect::<RsResult<_>>()?;
        let Some(first) = specs.first() else {
            return Err(RsError::internal("a window without functions"));
        };
        if specs
            .iter()
            .any(|spec| spec.partition_by != first.partition_by || spec.order_by != first.order_by)
        {
            return Err(RsError::unsupported(
                "window functions over different PARTITION BY / ORDER BY in one window",
            ));
        }
        let schema = window.input.schema();
        let width = schema.fields().len();
        // Keys that are expressions are computed into columns appended to
        // the input (each distinct one once), and dropped above.
        let mut computed: Vec<Expr> = Vec::new();
        let mut key_column = |expr: &Expr| -> usize {
            let expr = unalias(expr);
            if let Expr::Column(column) = expr {
                if let Ok(index) = schema.index_of_column(column) {
                    return index;
                }
            }
            match computed.iter().position(|known| known == expr) {
                Some(position) => width + position,
                None => {
                    computed.push(expr.clone());
                    width + computed.len() - 1
                }
            }
        };
        let partition: Vec<usize> = first.partition_by.iter().map(&mut key_column).collect();
        let order_by: Vec<SortKey> = first
            .order_by
            .iter()
            .map(|key| SortKey {
                column: key_column(&key.expr),
                descending: !key.asc,
                nulls_first: key.nulls_first,
            })
            .collect();
        let op_id = self.op_id();
        let input = self.translate(&window.input)?;
        if computed.is_empty() {
            return Ok(PlanNode::Window {
                op_id,
                input: Box::new(input),
                partition,
                order_by,
                functions: window.window_expr.clone(),
                input_schema: schema.clone(),
                schema: schema_of(&window.schema)?,
            });
        }
        let key_fields = computed
            .iter()
            .enumerate()
            .map(|(index, expr)| {
                let data_type = expr.get_type(schema).map_err(datafusion_error)?;
                Ok((
                    None,
                    Arc::new(datafusion::arrow::datatypes::Field::new(
                        format!("__window_key_{index}"),
                        data_type,
                        true,
                    )),
                ))
            })
            .collect::<RsResult<Vec<_>>>()?;
        let columns_of = |schema: &DFSchema, range: std::ops::Range<usize>| -> Vec<Expr> {
            range
                .map(|index| {
                    Expr::Column(datafusion::common::Column::from(
                        schema.qualified_field(index),
                    ))
                })
                .collect()
        };
        let fields_of = |schema: &DFSchema, range: std::ops::Range<usize>| {
            range
                .map(|index| {
                    let (qualifier, field) = schema.qualified_field(index);
                    (qualifier.cloned(), Arc::clone(field))
                })
                .collect::<Vec<_>>()
        };
        let extended_fields: Vec<_> = fields_of(schema, 0..width)
            .into_iter()
            .chain(key_fields)
            .collect();
        let extended = Arc::new(
            DFSchema::new_with_metadata(extended_fields.clone(), Default::default())
                .map_err(datafusion_error)?,
        );
        let functions_width = window.schema.fields().len() - width;
        let stepped = Arc::new(
            DFSchema::new_with_metadata(
                extended_fields
                    .into_iter()
                    .chain(fields_of(&window.schema, width..width + functions_width))
                    .collect(),
                Default::default(),
            )
            .map_err(datafusion_error)?,
        );
        let mut exprs = columns_of(schema, 0..width);
        exprs.extend(computed);
        let keyed = PlanNode::Map {
            input: Box::new(input),
            exprs,
            input_schema: schema.clone(),
            schema: schema_of(&extended)?,
        };
        let keys = extended.fields().len() - width;
        let stepped_node = PlanNode::Window {
            op_id,
            input: Box::new(keyed),
            partition,
            order_by,
            functions: window.window_expr.clone(),
            input_schema: extended,
            schema: schema_of(&stepped)?,
        };
        let mut kept = columns_of(&stepped, 0..width);
        kept.extend(columns_of(
            &stepped,
            width + keys..width + keys + functions_width,
        ));
        Ok(PlanNode::Map {
            input: Box::new(stepped_node),
            exprs: kept,
            input_schema: stepped,
            schema: schema_of(&window.schema)?,
        })
    }

    /// `window`, whose `ROW_NUMBER()`, `RANK()` or `DENSE_RANK()` a filter
    /// above keeps up to `limit`: those rows of each partition, numbered.
    fn numbered_top_k(&mut self, window: &Window, limit: u64) -> RsResult<PlanNode> {
        let [expr] = window.window_expr.as_slice() else {
            return Err(RsError::unsupported(
                "a window function beside the ranking one in its window",
            ));
        };
        let Some((numbering, params)) = ranking_params(expr) else {
            return Err(RsError::unsupported("a window function"));
        };
        let width = window.input.schema().fields().len();
        let (qualifier, field) = window.schema.qualified_field(width);
        self.top_k(
            &window.input,
            &params.partition_by,
            &params.order_by,
            (0, limit),
            Some((numbering, qualifier.cloned(), field.clone())),
        )
    }

    fn table_scan(&mut self, scan: &datafusion::logical_expr::TableScan) -> RsResult<PlanNode> {
        let provider = source_as_provider(&scan.source).map_err(datafusion_error)?;
        // A recursive query's reference to itself, in its recursive term.
        let work_table = provider.downcast_ref::<CteWorkTable>();
        let table_schema = match (work_table, provider.downcast_ref::<SchemaOnlyTable>()) {
            // Only the recursion being translated's own (DataFusion allows
            // no other where a view's plan reads one).
            (Some(work_table), _) if self.recursion.as_deref() == Some(scan.table_name.table()) => {
                work_table.schema()
            }
            (Some(_), _) => {
                return Err(RsError::unsupported(format!(
                    "reading the recursive query {} outside its recursive term",
                    scan.table_name
                )))
            }
            (None, Some(table)) => table.schema.clone(),
            (None, None) => {
                return Err(RsError::unsupported(format!("reading {}", scan.table_name)))
            }
        };
        // A LIMIT DataFusion pushed into the scan is applied above it (a
        // top-K, [`Translator::window`]): the scan reads every row.
        let full_schema = Arc::new(
            DFSchema::try_from_qualified_schema(scan.table_name.clone(), &table_schema)
                .map_err(datafusion_error)?,
        );
        let mut node = match provider.downcast_ref::<SchemaOnlyTable>() {
            Some(table) => PlanNode::Source {
                object_id: table.object_id,
                name: table.name.clone(),
                schema: schema_of(&full_schema)?,
                unique_key: table.unique_key.clone(),
            },
            None => PlanNode::LoopInput {
                index: 0,
                schema: schema_of(&full_schema)?,
            },
        };
        if let Some(projection) = &scan.projection {
            let exprs = projection
                .iter()
                .map(|index| {
                    Expr::Column(datafusion::common::Column::from(
                        full_schema.qualified_field(*index),
                    ))
                })
                .collect();
            let projected = Arc::new(
                DFSchema::try_from_qualified_schema(
                    scan.table_name.clone(),
                    &Arc::new(
                        table_schema
                            .project(projection)
                            .map_err(|e| datafusion_error(e.into()))?,
                    ),
                )
                .map_err(datafusion_error)?,
            );
            node = PlanNode::Map {
                input: Box::new(node),
                exprs,
                input_schema: full_schema.clone(),
                schema: schema_of(&projected)?,
            };
        }
        if !scan.filters.is_empty() {
            let predicate = scan
                .filters
                .iter()
                .cloned()
                .reduce(|a, b| a.and(b))
                .expect("non-empty filters");
            node = PlanNode::Filter {
                input: Box::new(node),
                predicate,
                input_schema: scan.projected_schema.clone(),
            };
        }
        Ok(node)
    }

    /// A window of `session_window_start`/`_end` calls (a `SESSION(…)`
    /// call, rewritten) as a session window node; `None` for other
    /// windows.
    fn session_window(&mut self, window: &Window) -> RsResult<Option<PlanNode>> {
        let mut ends = Vec::new();
        let mut specs = Vec::new();
        for expr in &window.window_expr {
            let Expr::WindowFunction(function) = unalias(expr) else {
                return Ok(None);
            };
            ends.push(match function.fun.name() {
                SESSION_START => false,
                SESSION_END => true,
                _ => return Ok(None),
            });
            specs.push(&function.params);
        }
        let refused = || {
            RsError::unsupported("a session window other than SESSION(table, time, gap [, key …])")
        };
        let Some(spec) = specs.first() else {
            return Ok(None);
        };
        // One session per row: the same time, gap and keys for every bound
        // (a hand-written call could differ), in time order.
        if specs.iter().any(|other| {
            other.args != spec.args
                || other.partition_by != spec.partition_by
                || other.order_by != spec.order_by
        }) {
            return Err(refused());
        }
        let schema = window.input.schema();
        let column = |expr: &Expr| match unalias(expr) {
            Expr::Column(column) => schema.index_of_column(column).map_err(|_| refused()),
            _ => Err(refused()),
        };
        let time = column(spec.args.first().ok_or_else(refused)?)?;
        match spec.order_by.as_slice() {
            [key] if key.asc && column(&key.expr)? == time => {}
            _ => return Err(refused()),
        }
        // An integer literal, of whichever width it was typed.
        let gap_micros = match spec.args.get(1).map(unalias) {
            Some(Expr::Literal(value, _)) => match value.cast_to(&DataType::Int64) {
                Ok(ScalarValue::Int64(Some(gap))) if gap > 0 => gap,
                _ => return Err(refused()),
            },
            _ => return Err(refused()),
        };
        let partition = spec
            .partition_by
            .iter()
            .map(column)
            .collect::<RsResult<Vec<usize>>>()?;
        let op_id = self.op_id();
        let input = self.translate(&window.input)?;
        Ok(Some(PlanNode::SessionWindow {
            op_id,
            input: Box::new(input),
            partition,
            time,
            gap_micros,
            ends,
            schema: schema_of(&window.schema)?,
        }))
    }

    /// `WITH RECURSIVE name AS (base UNION [ALL] recursive term)`: the
    /// recursive term's parts that do not read `name` become the node's
    /// external inputs, the rest its step (RFC 0017).
    fn recursive(
        &mut self,
        query: &datafusion::logical_expr::RecursiveQuery,
    ) -> RsResult<PlanNode> {
        let op_id = self.op_id();
        let base = self.translate(&query.static_term)?;
        let schema = schema_of(query.static_term.schema())?;
        let outer = self.recursion.replace(query.name.clone());
        let step = self.translate(&query.recursive_term);
        self.recursion = outer;
        let step = step?;
        match loop_reads(&step) {
            1 => {}
            0 => {
                return Err(RsError::internal(format!(
                    "a recursive query \"{}\" whose recursive term does not read it",
                    query.name
                )))
            }
            _ => {
                return Err(RsError::new(
                    &codes::INVALID_RECURSION,
                    format!(
                        "recursive reference to query \"{}\" must not appear more than once",
                        query.name
                    ),
                ))
            }
        }
        if step.schema().types() != schema.types() || base.schema().types() != schema.types() {
            return Err(RsError::new(
                &codes::PLAN_ERROR,
                format!(
                    "recursive query \"{}\": its terms' column types differ",
                    query.name
                ),
            ));
        }
        let mut external = Vec::new();
        let step = split_external(step, &mut external);
        loop_operators_allowed(&step, query.is_distinct)?;
        Ok(PlanNode::Recursive {
            op_id,
            base: Box::new(base),
            external,
            step: Box::new(step),
            distinct: query.is_distinct,
            schema,
        })
    }

    fn join(&mut self, join: &datafusion::logical_expr::Join) -> RsResult<PlanNode> {
        let kind = match join.join_type {
            JoinType::Inner => JoinKind::Inner,
            JoinType::Left => JoinKind::Left,
            JoinType::Right => JoinKind::Right,
            JoinType::Full => JoinKind::Full,
            JoinType::LeftSemi => JoinKind::LeftSemi,
            JoinType::LeftAnti => JoinKind::LeftAnti,
            other => return Err(RsError::unsupported(format!("{other} join"))),
        };
        let op_id = self.op_id();
        let left_exprs: Vec<Expr> = join.on.iter().map(|(left, _)| left.clone()).collect();
        let right_exprs: Vec<Expr> = join.on.iter().map(|(_, right)| right.clone()).collect();
        let (left, left_keys) = self.join_side(&join.left, &left_exprs)?;
        let (right, right_keys) = self.join_side(&join.right, &right_exprs)?;
        let joined_schema = Arc::new(
            join.left
                .schema()
                .join(join.right.schema())
                .map_err(datafusion_error)?,
        );
        let schema = schema_of(&join.schema)?;
        let join = PlanNode::Join {
            op_id,
            left: Box::new(left),
            right: Box::new(right),
            kind,
            left_keys,
            right_keys,
            nulls_equal: join.null_equality == NullEquality::NullEqualsNull,
            residual: join.filter.clone(),
            joined_schema,
            null_aware: join.null_aware,
            left_width: join.left.schema().fields().len(),
            right_width: join.right.schema().fields().len(),
            schema,
        };
        match self.options.lift_subquery_expressions {
            true => lift_subquery_expressions(join),
            false => Ok(join),
        }
    }

    /// Translates one join input; key expressions that are not plain
    /// columns are appended as extra columns by a `Map`.
    fn join_side(
        &mut self,
        input: &Arc<LogicalPlan>,
        keys: &[Expr],
    ) -> RsResult<(PlanNode, Vec<usize>)> {
        let node = self.translate(input)?;
        let schema = input.schema();
        let mut indices = Vec::with_capacity(keys.len());
        let mut extra: Vec<Expr> = Vec::new();
        for key in keys {
            match key {
                Expr::Column(column) => {
                    indices.push(schema.index_of_column(column).map_err(datafusion_error)?);
                }
                other => {
                    indices.push(schema.fields().len() + extra.len());
                    extra.push(other.clone());
                }
            }
        }
        if extra.is_empty() {
            return Ok((node, indices));
        }
        let mut exprs: Vec<Expr> = schema.columns().into_iter().map(Expr::Column).collect();
        let mut columns = node.schema().columns.clone();
        for (index, expr) in extra.into_iter().enumerate() {
            let data_type = expr.get_type(schema).map_err(datafusion_error)?;
            columns.push(Column {
                name: format!("__join_key_{index}"),
                sql_type: sql_type_of(&data_type)?,
            });
            exprs.push(expr);
        }
        let mapped = PlanNode::Map {
            input: Box::new(node),
            exprs,
            input_schema: schema.clone(),
            schema: Schema { columns },
        };
        Ok((mapped, indices))
    }

    /// `GROUP BY GROUPING SETS / ROLLUP / CUBE`: the union of one grouped
    /// aggregate per set, each row laid out as DataFusion lays the
    /// aggregate's out (every grouping expression, NULL where the set does
    /// not group by it; the grouping id `GROUPING()` reads; the
    /// aggregates).
    fn grouping_sets(
        &mut self,
        aggregate: &datafusion::logical_expr::Aggregate,
        set: &GroupingSet,
    ) -> RsResult<PlanNode> {
        let sets: Vec<Vec<Expr>> = match set {
            GroupingSet::Rollup(exprs) => (0..=exprs.len())
                .rev()
                .map(|length| exprs[..length].to_vec())
                .collect(),
            GroupingSet::Cube(exprs) if exprs.len() <= GROUPING_CUBE_COLUMNS_MAX => (0..1usize
                << exprs.len())
                .map(|mask| {
                    let grouped = exprs.iter().enumerate();
                    grouped
                        .filter(|(index, _)| mask & (1 << index) != 0)
                        .map(|(_, expr)| expr.clone())
                        .collect()
                })
                .collect(),
            GroupingSet::Cube(_) => {
                return Err(RsError::unsupported(format!(
                    "a CUBE of more than {GROUPING_CUBE_COLUMNS_MAX} expressions"
                )))
            }
            GroupingSet::GroupingSets(sets) => sets.clone(),
        };
        if sets.len() > GROUPING_SETS_MAX {
            return Err(RsError::unsupported(format!(
                "more than {GROUPING_SETS_MAX} grouping sets ({}: each is an aggregate of its own)",
                sets.len()
            )));
        }
        let grouped = set.distinct_expr();
        if grouped.len() >= 64 {
            return Err(RsError::unsupported(
                "grouping sets over 64 expressions or more",
            ));
        }
        let output = schema_of(&aggregate.schema)?;
        let aggregates = aggregate.aggr_expr.len();
        if output.len() != grouped.len() + 1 + aggregates {
            return Err(RsError::internal(
                "a grouping-set aggregate without its grouping id",
            ));
        }
        let id_type = aggregate.schema.field(grouped.len()).data_type().clone();
        let input_schema = aggregate.input.schema();
        let mut branches = Vec::with_capacity(sets.len());
        for (index, set_exprs) in sets.iter().enumerate() {
            // A set given twice is told apart by its ordinal above the bits.
            let ordinal = sets[..index].iter().filter(|set| *set == set_exprs).count() as u64;
            // `GROUP BY a, ROLLUP (a, b)` groups by `a` twice in a set.
            let mut exprs: Vec<Expr> = Vec::with_capacity(set_exprs.len());
            for expr in set_exprs {
                if !exprs.contains(expr) {
                    exprs.push(expr.clone());
                }
            }
            // An aggregate needs a group or an aggregate: the empty set
            // over no aggregates counts rows, unread.
            let mut aggr_expr = aggregate.aggr_expr.clone();
            if aggr_expr.is_empty() && exprs.is_empty() {
                aggr_expr.push(datafusion::functions_aggregate::count::count_all());
            }
            let single = datafusion::logical_expr::Aggregate::try_new(
                aggregate.input.clone(),
                exprs.clone(),
                aggr_expr,
            )
            .map_err(datafusion_error)?;
            let node = self.aggregate(&single)?;
            let columns = single.schema.columns();
            let mut id = 0u64;
            let mut row = Vec::with_capacity(output.len());
            for expr in &grouped {
                id <<= 1;
                match exprs.iter().position(|grouping| grouping == *expr) {
                    Some(position) => row.push(Expr::Column(columns[position].clone())),
                    None => {
                        id |= 1;
                        let data_type = expr.get_type(input_schema).map_err(datafusion_error)?;
                        let null = ScalarValue::try_from(&data_type).map_err(datafusion_error)?;
                        row.push(Expr::Literal(null, None));
                    }
                }
            }
            id |= ordinal << grouped.len();
            let id = ScalarValue::UInt64(Some(id))
                .cast_to(&id_type)
                .map_err(datafusion_error)?;
            row.push(Expr::Literal(id, None));
            row.extend(
                columns[exprs.len()..]
                    .iter()
                    .take(aggregates)
                    .map(|column| Expr::Column(column.clone())),
            );
            branches.push(PlanNode::Map {
                input: Box::new(node),
                exprs: row,
                input_schema: single.schema.clone(),
                schema: output.clone(),
            });
        }
        Ok(match branches.len() {
            1 => branches.remove(0),
            _ => PlanNode::UnionAll {
                inputs: branches,
                schema: output,
            },
        })
    }

    fn aggregate(&mut self, aggregate: &datafusion::logical_expr::Aggregate) -> RsResult<PlanNode> {
        let op_id = self.op_id();
        let input = self.translate(&aggregate.input)?;
        let input_schema: DFSchemaRef = aggregate.input.schema().clone();
        let mut exprs: Vec<Expr> = Vec::new();
        let mut columns: Vec<Column> = Vec::new();
        for (index, expr) in aggregate.group_expr.iter().enumerate() {
            if matches!(expr, Expr::GroupingSet(_)) {
                return Err(RsError::unsupported("GROUPING SETS / ROLLUP / CUBE"));
            }
            let data_type = expr.get_type(&input_schema).map_err(datafusion_error)?;
            columns.push(Column {
                name: format!("__group_{index}"),
                sql_type: sql_type_of(&data_type)?,
            });
            exprs.push(expr.clone());
        }
        let group_count = exprs.len();
        let output_schema = schema_of(&aggregate.schema)?;
        let mut calls = Vec::new();
        for (index, expr) in aggregate.aggr_expr.iter().enumerate() {
            let function = unalias(expr);
            let Expr::AggregateFunction(DfAggregateFunction { func, params }) = function else {
                return Err(RsError::unsupported(format!(
                    "the aggregate expression {expr}"
                )));
            };
            let name = func.name().to_lowercase();
            let count_star = name == "count"
                && params
                    .args
                    .iter()
                    .all(|arg| matches!(arg, Expr::Literal(value, _) if !value.is_null()));
            let function = match name.as_str() {
                "count" if count_star && !params.distinct && params.filter.is_none() => {
                    AggregateFunction::CountStar
                }
                "count" => AggregateFunction::Count,
                "sum" => AggregateFunction::Sum,
                "avg" | "mean" => AggregateFunction::Avg,
                // Over booleans false < true: the conjunction is the minimum
                // and the disjunction the maximum, with the same NULLs.
                "min" | "bool_and" => AggregateFunction::Min,
                "max" | "bool_or" => AggregateFunction::Max,
                "string_agg" => AggregateFunction::StringAgg,
                "array_agg" => AggregateFunction::ArrayAgg,
                "bit_xor" => AggregateFunction::BitXor,
                "percentile_cont" => AggregateFunction::PercentileCont,
                "percentile_disc" => AggregateFunction::PercentileDisc,
                "mode" => AggregateFunction::Mode,
                other => {
                    return Err(RsError::unsupported(format!(
                        "the aggregate function {other}"
                    )))
                }
            };
            if params.distinct
                && !params
                    .order_by
                    .iter()
                    .all(|sort| params.args.contains(&sort.expr))
            {
                return Err(RsError::new(
                    &codes::PLAN_ERROR,
                    "in an aggregate with DISTINCT, ORDER BY expressions must appear in argument list",
                ));
            }
            if function.is_ordered_set() && params.distinct {
                return Err(RsError::unsupported(format!("DISTINCT in {name}")));
            }
            let mut delimiter = None;
            let mut order_by = Vec::new();
            let mut fraction = None;
            let mut filter = None;
            let (argument, input_type) = if function == AggregateFunction::CountStar {
                (None, None)
            } else {
                let arguments = match (function, params.args.as_slice()) {
                    (AggregateFunction::StringAgg, [value, _])
                    | (AggregateFunction::ArrayAgg, [value]) => {
                        if let [_, separator] = params.args.as_slice() {
                            delimiter = Some(push_column(
                                &mut exprs,
                                &mut columns,
                                format!("__delimiter_{index}"),
                                separator.clone(),
                                &input_schema,
                            )?);
                        }
                        for (position, sort) in params.order_by.iter().enumerate() {
                            order_by.push(SortKey {
                                column: push_column(
                                    &mut exprs,
                                    &mut columns,
                                    format!("__order_{index}_{position}"),
                                    sort.expr.clone(),
                                    &input_schema,
                                )?,
                                descending: !sort.asc,
                                nulls_first: sort.nulls_first,
                            });
                        }
                        std::slice::from_ref(value)
                    }
                    (
                        AggregateFunction::PercentileCont | AggregateFunction::PercentileDisc,
                        [value, given],
                    ) => {
                        fraction = percentile_fraction(given)?;
                        std::slice::from_ref(value)
                    }
                    // The other aggregates do not depend on the order.
                    (_, arguments) => arguments,
                };
                let [arg] = arguments else {
                    return Err(RsError::unsupported(format!(
                        "{name} with {} arguments",
                        params.args.len()
                    )));
                };
                // These aggregates skip NULLs, so `agg(x) FILTER (WHERE c)`
                // is `agg(CASE WHEN c THEN x END)`; `array_agg` keeps them,
                // and reads the condition from a column of its own.
                if let (AggregateFunction::ArrayAgg, Some(condition)) = (function, &params.filter) {
                    filter = Some(push_column(
                        &mut exprs,
                        &mut columns,
                        format!("__filter_{index}"),
                        condition.as_ref().clone(),
                        &input_schema,
                    )?);
                }
                let arg = match &params.filter {
                    Some(_) if filter.is_some() => arg.clone(),
                    Some(filter) => when(filter.as_ref().clone(), arg.clone())
                        .end()
                        .map_err(datafusion_error)?,
                    None => arg.clone(),
                };
                let data_type = arg.get_type(&input_schema).map_err(datafusion_error)?;
                let sql_type = sql_type_of(&data_type)?;
                columns.push(Column {
                    name: format!("__argument_{index}"),
                    sql_type,
                });
                exprs.push(arg);
                if function.is_ordered_set() {
                    // WITHIN GROUP (ORDER BY the argument): its direction.
                    order_by = params
                        .order_by
                        .iter()
                        .map(|sort| SortKey {
                            column: columns.len() - 1,
                            descending: !sort.asc,
                            nulls_first: sort.nulls_first,
                        })
                        .collect();
                }
                (Some(columns.len() - 1), Some(sql_type))
            };
            calls.push(AggregateCall {
                function,
                argument,
                distinct: params.distinct,
                input_type,
                output_type: output_schema.columns[group_count + index].sql_type,
                delimiter,
                order_by,
                fraction,
                filter,
            });
        }
        let mapped = PlanNode::Map {
            input: Box::new(input),
            exprs,
            input_schema,
            schema: Schema { columns },
        };
        Ok(PlanNode::Aggregate {
            op_id,
            input: Box::new(mapped),
            group_count,
            aggregates: calls,
            // Bound by the view's watermarks, if any ([`crate::bind_watermarks`]).
            retire: None,
            schema: output_schema,
        })
    }
}

/// A join with a scalar subquery's one row — expressions over a global
/// aggregate, joined without keys — computes those expressions above the
/// join, for each joined row. PostgreSQL evaluates such a subquery only
/// once a row needs it, so an expression that fails over the aggregate of
/// no rows (a division by a count of 0 while the tables are empty) fails
/// only once rows meet it, as there. Inner joins (their residual becomes a
/// filter above), and left joins without a residual (the aggregate's one
/// row always matches); other joins are returned as they are.
fn lift_subquery_expressions(join: PlanNode) -> RsResult<PlanNode> {
    let Some((lifted_schema, lifted_exprs)) = lifted_parts(&join) else {
        return Ok(join);
    };
    let not_liftable = || RsError::internal("a join to lift is not one");
    let PlanNode::Join {
        op_id,
        left,
        right,
        kind,
        residual,
        joined_schema,
        left_width,
        schema,
        ..
    } = join
    else {
        return Err(not_liftable());
    };
    let PlanNode::Map {
        input: aggregate, ..
    } = *right
    else {
        return Err(not_liftable());
    };
    let mut columns = left.schema().columns.clone();
    columns.extend(aggregate.schema().columns.iter().cloned());
    let right_width = aggregate.schema().len();
    let joined = PlanNode::Join {
        op_id,
        left,
        right: aggregate,
        kind,
        left_keys: Vec::new(),
        right_keys: Vec::new(),
        nulls_equal: false,
        residual: None,
        joined_schema: lifted_schema.clone(),
        null_aware: false,
        left_width,
        right_width,
        schema: Schema { columns },
    };
    let mut exprs: Vec<Expr> = (0..left_width)
        .map(|index| {
            Expr::Column(datafusion::common::Column::from(
                lifted_schema.qualified_field(index),
            ))
        })
        .collect();
    exprs.extend(lifted_exprs);
    let mapped = PlanNode::Map {
        input: Box::new(joined),
        exprs,
        input_schema: lifted_schema,
        schema,
    };
    Ok(match residual {
        Some(predicate) => PlanNode::Filter {
            input: Box::new(mapped),
            predicate,
            input_schema: joined_schema,
        },
        None => mapped,
    })
}

/// For a join [`lift_subquery_expressions`] rewrites: the schema of its
/// rows as the lifted expressions read them (the left input's columns, then
/// the aggregate's, each side qualified apart: DataFusion refuses a name
/// both bare and qualified) and the subquery's expressions over it; `None`
/// for any other join, or one whose names do not resolve so.
fn lifted_parts(join: &PlanNode) -> Option<(DFSchemaRef, Vec<Expr>)> {
    let PlanNode::Join {
        kind,
        left_keys,
        residual,
        right,
        joined_schema,
        left_width,
        ..
    } = join
    else {
        return None;
    };
    let PlanNode::Map {
        input,
        exprs,
        input_schema: aggregate_schema,
        ..
    } = right.as_ref()
    else {
        return None;
    };
    let liftable = left_keys.is_empty()
        && (*kind == JoinKind::Inner || (*kind == JoinKind::Left && residual.is_none()))
        && matches!(input.as_ref(), PlanNode::Aggregate { group_count: 0, .. })
        && exprs
            .iter()
            .any(|expr| !matches!(unalias(expr), Expr::Column(_)));
    if !liftable {
        return None;
    }
    let qualifier = TableReference::bare("__rs_subquery");
    let left_fields = (0..*left_width)
        .map(|index| {
            let (own, field) = joined_schema.qualified_field(index);
            let own = own
                .cloned()
                .unwrap_or_else(|| TableReference::bare("__rs_row"));
            (Some(own), Arc::clone(field))
        })
        .collect();
    let aggregate =
        DFSchema::try_from_qualified_schema(qualifier.clone(), aggregate_schema.as_arrow()).ok()?;
    let lifted = DFSchema::new_with_metadata(left_fields, Default::default())
        .and_then(|left| left.join(&aggregate))
        .ok()?;
    let exprs = exprs
        .iter()
        .map(|expr| {
            expr.clone()
                .transform(|node| match &node {
                    Expr::Column(column) => {
                        let index = aggregate_schema.index_of_column(column)?;
                        let name = aggregate_schema.field(index).name();
                        Ok(Transformed::yes(Expr::Column(
                            datafusion::common::Column::new(Some(qualifier.clone()), name),
                        )))
                    }
                    _ => Ok(Transformed::no(node)),
                })
                .map(|transformed| transformed.data)
                .ok()
        })
        .collect::<Option<Vec<Expr>>>()?;
    Some((Arc::new(lifted), exprs))
}

/// How often `plan` reads the recursion it is the step of (not counting a
/// nested recursive query's own).
fn loop_reads(plan: &PlanNode) -> usize {
    match plan {
        PlanNode::LoopInput { index: 0, .. } => 1,
        other => other.inputs().into_iter().map(loop_reads).sum(),
    }
}

/// `step` with each largest part that does not read the recursion moved to
/// `external`, a [`PlanNode::LoopInput`] in its place.
fn split_external(mut step: PlanNode, external: &mut Vec<PlanNode>) -> PlanNode {
    if loop_reads(&step) == 0 {
        let schema = step.schema().clone();
        external.push(step);
        return PlanNode::LoopInput {
            index: external.len(),
            schema,
        };
    }
    for input in step.inputs_mut() {
        let placeholder = PlanNode::LoopInput {
            index: 0,
            schema: Schema::default(),
        };
        let taken = std::mem::replace(input, placeholder);
        *input = split_external(taken, external);
    }
    step
}

/// The operators a recursion's rows may pass through. Each must be linear
/// in the recursion (a row's output does not depend on the other rows), so
/// that feeding the recursion's changes through it gives the change of its
/// output; under `UNION` (`distinct`) each must also only grow as any input
/// grows, so that the loop's lost derivations are found by following
/// deletions alone (RFC 0017): no outer or anti joins there.
fn loop_operators_allowed(step: &PlanNode, distinct: bool) -> RsResult<()> {
    let refused = |what: &str| {
        Err(RsError::unsupported(format!(
            "{what} in the recursive term of WITH RECURSIVE"
        )))
    };
    match step {
        PlanNode::LoopInput { .. }
        | PlanNode::Map { .. }
        | PlanNode::Filter { .. }
        | PlanNode::Unnest { .. } => {}
        PlanNode::Join {
            kind, left, right, ..
        } => {
            let (on_left, on_right) = (loop_reads(left) > 0, loop_reads(right) > 0);
            let allowed = match kind {
                JoinKind::Inner => true,
                JoinKind::LeftSemi => on_left,
                JoinKind::Left | JoinKind::LeftAnti => on_left && !distinct,
                JoinKind::Right => on_right && !distinct,
                JoinKind::Full => false,
            };
            if !allowed {
                let under = if distinct { " under UNION" } else { "" };
                return refused(&format!("a {kind:?} join{under}"));
            }
        }
        PlanNode::Aggregate { .. } => return refused("an aggregate"),
        PlanNode::Distinct { .. } => return refused("DISTINCT"),
        PlanNode::TopK { .. } => return refused("ORDER BY … LIMIT"),
        PlanNode::Window { .. } | PlanNode::SessionWindow { .. } => {
            return refused("a window function")
        }
        PlanNode::UnionAll { .. } | PlanNode::SetOperation { .. } => {
            return refused("a set operation")
        }
        PlanNode::Recursive { .. } => return refused("a nested recursive query"),
        PlanNode::TemporalFilter { .. } | PlanNode::ClockSeries { .. } => return refused("now()"),
        PlanNode::WindowClose { .. } => return refused("EMIT ON WINDOW CLOSE"),
        PlanNode::Source { .. } | PlanNode::Constant { .. } | PlanNode::Exchange { .. } => {
            return Err(RsError::internal(
                "a recursive step reads a relation outside its external inputs",
            ))
        }
    }
    step.inputs()
        .into_iter()
        .try_for_each(|input| loop_operators_allowed(input, distinct))
}

/// Most expressions of a CUBE: it groups by every subset of them, one
/// aggregate each.
const GROUPING_CUBE_COLUMNS_MAX: usize = 6;

/// Most grouping sets of one GROUP BY: each is an aggregate, over a copy
/// of the input's plan.
const GROUPING_SETS_MAX: usize = 64;

/// Adds `expr` as a column of the projection below an aggregate; returns
/// its position.
fn push_column(
    exprs: &mut Vec<Expr>,
    columns: &mut Vec<Column>,
    name: String,
    expr: Expr,
    input_schema: &DFSchema,
) -> RsResult<usize> {
    let data_type = expr.get_type(input_schema).map_err(datafusion_error)?;
    columns.push(Column {
        name,
        sql_type: sql_type_of(&data_type)?,
    });
    exprs.push(expr);
    Ok(columns.len() - 1)
}

/// Whether `plan` keeps a bounded number of rows: it is, below
/// projections and aliases, a LIMIT or an `ORDER BY … LIMIT`.
fn bounded(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::Projection(projection) => bounded(&projection.input),
        LogicalPlan::SubqueryAlias(alias) => bounded(&alias.input),
        LogicalPlan::Sort(sort) => sort.fetch.is_some(),
        LogicalPlan::Limit(limit) => {
            matches!(limit.get_fetch_type(), Ok(FetchType::Literal(Some(_))))
        }
        _ => false,
    }
}

/// The ranking window (`ROW_NUMBER()`, `RANK()`, `DENSE_RANK()`) below
/// `filter` (through projections and aliases) and the number `k` it keeps
/// of each partition, if one of the filter's conditions is `n <= k`, `n <
/// k` or `n = 1` on the window's number `n`.
fn ranking_limit(filter: &Filter) -> Option<(usize, u64)> {
    for condition in split_conjunction(&filter.predicate) {
        let Expr::BinaryExpr(BinaryExpr { left, op, right }) = condition else {
            continue;
        };
        let (column, op, bound) = match (without_casts(left), without_casts(right)) {
            (Expr::Column(column), Expr::Literal(bound, _)) => (column, *op, bound),
            (Expr::Literal(bound, _), Expr::Column(column)) => (column, op.swap()?, bound),
            _ => continue,
        };
        // An integer bound: `n < 2.5` keeps 2, which a cast to 2 would not.
        if !bound.data_type().is_integer() {
            continue;
        }
        let Ok(ScalarValue::Int64(Some(bound))) = bound.cast_to(&DataType::Int64) else {
            continue;
        };
        let limit = match op {
            Operator::LtEq => bound,
            Operator::Lt => bound.saturating_sub(1),
            Operator::Eq if bound == 1 => 1,
            _ => continue,
        };
        let Some((window, index)) = window_column(&filter.input, column) else {
            continue;
        };
        if window.window_expr.len() == 1 && ranking_params(&window.window_expr[index]).is_some() {
            return Some((window_address(window), limit.max(0) as u64));
        }
    }
    None
}

/// `expr` without the casts to integer types around it (a row number cast
/// to another integer type orders alike; a cast to text does not).
fn without_casts(expr: &Expr) -> &Expr {
    match expr {
        Expr::Cast(cast) if cast.field.data_type().is_integer() => without_casts(&cast.expr),
        Expr::TryCast(cast) if cast.field.data_type().is_integer() => without_casts(&cast.expr),
        other => other,
    }
}

/// The window `column` of `plan`'s output is a window function of, and
/// that function's index, when `plan` passes it on from a window below.
fn window_column<'a>(
    mut plan: &'a LogicalPlan,
    column: &datafusion::common::Column,
) -> Option<(&'a Window, usize)> {
    let mut index = plan.schema().index_of_column(column).ok()?;
    loop {
        match plan {
            LogicalPlan::Projection(projection) => {
                // A number cast to another integer type orders alike.
                let Expr::Column(inner) = without_casts(unalias(projection.expr.get(index)?))
                else {
                    return None;
                };
                plan = &projection.input;
                index = plan.schema().index_of_column(inner).ok()?;
            }
            LogicalPlan::SubqueryAlias(alias) => plan = &alias.input,
            LogicalPlan::Window(window) => {
                let width = window.input.schema().fields().len();
                return index.checked_sub(width).map(|index| (window, index));
            }
            _ => return None,
        }
    }
}

/// The window's identity while one plan is translated.
fn window_address(window: &Window) -> usize {
    window as *const Window as usize
}

/// How `expr` numbers rows, and its partitions and order, if it is
/// `ROW_NUMBER()`, `RANK()` or `DENSE_RANK()` `OVER (…)`.
fn ranking_params(expr: &Expr) -> Option<(Numbering, &WindowFunctionParams)> {
    let Expr::WindowFunction(function) = unalias(expr) else {
        return None;
    };
    let WindowFunctionDefinition::WindowUDF(udf) = &function.fun else {
        return None;
    };
    let numbering = match udf.name() {
        "row_number" => Numbering::RowNumber,
        "rank" => Numbering::Rank,
        "dense_rank" => Numbering::DenseRank,
        _ => return None,
    };
    function
        .params
        .args
        .is_empty()
        .then_some((numbering, &function.params))
}

fn unalias(expr: &Expr) -> &Expr {
    match expr {
        Expr::Alias(alias) => unalias(&alias.expr),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    //! Goal: each SQL form plans onto the operator meant for it — a
    //! bounded ranking onto a numbered top-K rather than a window over
    //! every row, DISTINCT ON onto a top-1, grouping sets onto one
    //! aggregate per set. (What they compute is checked against
    //! PostgreSQL by the differential tests.)
    use std::sync::Arc;

    use datafusion::arrow::datatypes::{DataType, Field, Schema as ArrowSchema};

    use crate::resolver::OneTable;

    /// `t (id bigint, g text, v bigint, at timestamp)`.
    fn scores() -> ArrowSchema {
        ArrowSchema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("g", DataType::Utf8, true),
            Field::new("v", DataType::Int64, true),
            Field::new(
                "at",
                DataType::Timestamp(datafusion::arrow::datatypes::TimeUnit::Microsecond, None),
                true,
            ),
        ])
    }

    async fn explained(query: &str) -> String {
        let context = crate::new_context(Arc::new(OneTable(scores())));
        crate::plan_view(&context, 9, query)
            .await
            .unwrap_or_else(|error| panic!("{query}: {error}"))
            .explain()
    }

    #[tokio::test]
    async fn a_scalar_subquerys_expressions_are_computed_above_its_join_unless_planned_as_before() {
        // Goal: the subquery's division is evaluated per joined row (none
        // while no row meets it), and a view created before keeps the plan
        // its state is laid out for.
        let query = "SELECT g, count(*) FROM t GROUP BY g \
                     HAVING count(*) >= (SELECT count(*) / count(DISTINCT g) FROM t)";
        let context = crate::new_context(Arc::new(OneTable(scores())));
        let lifted = crate::plan_view(&context, 9, query).await.expect("plans");
        let before = crate::plan_view_with(
            &context,
            9,
            query,
            crate::PlanOptions {
                lift_subquery_expressions: false,
            },
        )
        .await
        .expect("plans");
        let (lifted_text, before_text) = (lifted.explain(), before.explain());
        assert!(lifted_text.starts_with("Map"), "{lifted_text}");
        assert!(lifted_text.contains("\n  Filter"), "{lifted_text}");
        assert!(!lifted_text.contains("residual"), "{lifted_text}");
        assert!(before_text.contains("residual"), "{before_text}");
        assert_ne!(lifted.state_layout(), before.state_layout());
        assert_eq!(lifted.schema(), before.schema());
    }

    #[tokio::test]
    async fn each_form_plans_onto_its_operator() {
        for (query, wanted, unwanted) in [
            (
                "SELECT * FROM (SELECT id, row_number() OVER (PARTITION BY g ORDER BY v) AS rn FROM t) x WHERE rn <= 2",
                "limit 2 RowNumber",
                "Window [",
            ),
            (
                "SELECT id FROM (SELECT id, rank() OVER (ORDER BY v DESC) AS r FROM t) x WHERE r = 1",
                "limit 1 Rank",
                "Window [",
            ),
            (
                "SELECT id FROM (SELECT id, dense_rank() OVER (PARTITION BY g ORDER BY v) AS r FROM t) x WHERE 3 > r",
                "limit 2 DenseRank",
                "Window [",
            ),
            ("SELECT id, sum(v) OVER (PARTITION BY g ORDER BY id) FROM t", "Window [", "TopK"),
            ("SELECT DISTINCT ON (g) g, id FROM t ORDER BY g, v DESC", "TopK partition by [1]", "Aggregate"),
            ("SELECT id FROM t ORDER BY v DESC LIMIT 3 OFFSET 1", "offset 1 limit 3", "Window ["),
            ("SELECT g, count(*) FROM t GROUP BY ROLLUP (g)", "UnionAll", "Window ["),
            (
                "SELECT window_start, count(*) FROM TUMBLE(t, at, INTERVAL '1' MINUTE) GROUP BY window_start",
                "date_bin",
                "Window [",
            ),
            (
                "SELECT id, sum(v) OVER (PARTITION BY upper(g) ORDER BY v * 2, id) FROM t",
                "Window [",
                "TopK",
            ),
            (
                "SELECT id FROM t WHERE at > now() - INTERVAL '1 hour' AND v > 1",
                "TemporalFilter t.at Greater now() + -3600000000 µs",
                "Filter now",
            ),
            (
                "SELECT g, count(*) FROM t WHERE at BETWEEN now() AND now() + INTERVAL '1 day' * 2 GROUP BY g",
                "TemporalFilter t.at GreaterOrEqual now() + 0 µs AND t.at LessOrEqual now() + 172800000000 µs",
                "Filter now",
            ),
        ] {
            let plan = explained(query).await;
            assert!(plan.contains(wanted), "{query}: wanted {wanted}\n{plan}");
            assert!(!plan.contains(unwanted), "{query}: did not want {unwanted}\n{plan}");
        }
    }
}
