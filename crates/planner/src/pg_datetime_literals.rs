//! Date and timestamp literals in PostgreSQL's input forms.
//!
//! After type coercion, a string compared with or cast to a date or
//! timestamp is a cast of a string literal, which the optimizer folds with
//! Arrow's parser. This analyzer rule first rewrites the literal's text as
//! `rockstream_plan::datetime_text` says, so `at > '2026-01-31 10:00'` and
//! `'2026-01-31 10:00:00+02'::timestamp` mean what they mean in PostgreSQL.
//! It also keeps a comparison of a timestamp column with such a string in
//! the column's microseconds ([`compare_in_micros`]).

use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, Result, ScalarValue};
use datafusion::logical_expr::expr::{Between, Cast, InList, TryCast};
use datafusion::logical_expr::{BinaryExpr, Expr, ExprSchemable, LogicalPlan, Operator};
use datafusion::optimizer::AnalyzerRule;
use rockstream_plan::datetime_text::{arrow_datetime_text, DatetimeInput};

use crate::plan_rewrite::rewrite_exprs;

#[derive(Debug, Default)]
pub struct PostgresDatetimeLiterals;

impl AnalyzerRule for PostgresDatetimeLiterals {
    fn name(&self) -> &str {
        "postgres_datetime_literals"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        rewrite_exprs(plan, &|expr, schema| {
            Ok(match rewrite(expr) {
                Transformed {
                    data,
                    transformed: false,
                    ..
                } => compare_in_micros(data, schema)?,
                rewritten => rewritten,
            })
        })
    }
}

/// A timestamp column compared with a string (or another timestamp of
/// the same type) compared in the column's microseconds: DataFusion
/// coerces both sides to nanoseconds, which hold only the years 1677 to
/// 2262, so `valid_to = '9999-12-31'` would fail where PostgreSQL's
/// timestamps go on to the year 294276.
fn compare_in_micros(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let rewritten = match &expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right })
            if matches!(
                op,
                Operator::Eq
                    | Operator::NotEq
                    | Operator::Lt
                    | Operator::LtEq
                    | Operator::Gt
                    | Operator::GtEq
                    | Operator::IsDistinctFrom
                    | Operator::IsNotDistinctFrom
            ) =>
        {
            in_micros(&[left, right], schema)?.and_then(|sides| {
                let mut sides = sides.into_iter().map(Box::new);
                Some(Expr::BinaryExpr(BinaryExpr::new(
                    sides.next()?,
                    *op,
                    sides.next()?,
                )))
            })
        }
        Expr::Between(Between {
            expr: value,
            negated,
            low,
            high,
        }) => in_micros(&[value, low, high], schema)?.and_then(|sides| {
            let mut sides = sides.into_iter().map(Box::new);
            Some(Expr::Between(Between::new(
                sides.next()?,
                *negated,
                sides.next()?,
                sides.next()?,
            )))
        }),
        Expr::InList(InList {
            expr: value,
            list,
            negated,
        }) => {
            let sides: Vec<&Expr> = std::iter::once(value.as_ref()).chain(list).collect();
            in_micros(&sides, schema)?.map(|mut sides| {
                let value = sides.remove(0);
                Expr::InList(InList::new(Box::new(value), sides, *negated))
            })
        }
        _ => None,
    };
    Ok(match rewritten {
        Some(rewritten) => Transformed::yes(rewritten),
        None => Transformed::no(expr),
    })
}

/// The operands of a comparison, each a cast to nanoseconds, rewritten to
/// the type of the one that is a timestamp column in coarser units: the
/// others must be timestamps of that type or string literals. `None` when
/// they are not so.
fn in_micros(sides: &[&Expr], schema: &DFSchema) -> Result<Option<Vec<Expr>>> {
    let mut target = None;
    for side in sides {
        if let Some((_, data_type)) = micros_side(side, schema)? {
            target = Some(data_type);
            break;
        }
    }
    let Some(target) = target else {
        return Ok(None);
    };
    let mut rewritten = Vec::with_capacity(sides.len());
    for side in sides {
        match micros_side(side, schema)? {
            Some((value, data_type)) if data_type == target => rewritten.push(value),
            Some(_) => return Ok(None),
            None => match text_side(side, &target) {
                Some(text) => rewritten.push(text),
                None => return Ok(None),
            },
        }
    }
    Ok(Some(rewritten))
}

/// A cast to nanoseconds of a timestamp held in coarser units: the value
/// and its own type.
fn micros_side(expr: &Expr, schema: &DFSchema) -> Result<Option<(Expr, DataType)>> {
    let Expr::Cast(Cast { expr: inner, field }) = expr else {
        return Ok(None);
    };
    if !matches!(
        field.data_type(),
        DataType::Timestamp(TimeUnit::Nanosecond, _)
    ) {
        return Ok(None);
    }
    let inner_type = inner.get_type(schema)?;
    Ok(match &inner_type {
        DataType::Timestamp(unit, _) if *unit != TimeUnit::Nanosecond => {
            Some((inner.as_ref().clone(), inner_type))
        }
        _ => None,
    })
}

/// A cast of a string literal to nanoseconds, as a cast to `target`.
fn text_side(expr: &Expr, target: &DataType) -> Option<Expr> {
    let Expr::Cast(Cast { expr: inner, field }) = expr else {
        return None;
    };
    let DataType::Timestamp(TimeUnit::Nanosecond, _) = field.data_type() else {
        return None;
    };
    let Expr::Literal(
        ScalarValue::Utf8(Some(_))
        | ScalarValue::LargeUtf8(Some(_))
        | ScalarValue::Utf8View(Some(_)),
        _,
    ) = inner.as_ref()
    else {
        return None;
    };
    Some(Expr::Cast(Cast::new(inner.clone(), target.clone())))
}

fn rewrite(expr: Expr) -> Transformed<Expr> {
    let (inner, data_type) = match &expr {
        Expr::Cast(Cast { expr, field }) => (expr, field.data_type()),
        Expr::TryCast(TryCast { expr, field }) => (expr, field.data_type()),
        _ => return Transformed::no(expr),
    };
    let (Some(input), Expr::Literal(value, metadata)) = (DatetimeInput::of(data_type), &**inner)
    else {
        return Transformed::no(expr);
    };
    let text = match value {
        ScalarValue::Utf8(Some(text))
        | ScalarValue::LargeUtf8(Some(text))
        | ScalarValue::Utf8View(Some(text)) => text,
        _ => return Transformed::no(expr),
    };
    let Some(rewritten) = arrow_datetime_text(text, input) else {
        return Transformed::no(expr);
    };
    let literal = Box::new(Expr::Literal(
        ScalarValue::Utf8(Some(rewritten)),
        metadata.clone(),
    ));
    Transformed::yes(match expr {
        Expr::Cast(Cast { field, .. }) => Expr::Cast(Cast {
            expr: literal,
            field,
        }),
        Expr::TryCast(TryCast { field, .. }) => Expr::TryCast(TryCast {
            expr: literal,
            field,
        }),
        other => other,
    })
}
