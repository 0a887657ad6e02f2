//! Date and timestamp literals in PostgreSQL's input forms.
//!
//! After type coercion, a string compared with or cast to a date or
//! timestamp is a cast of a string literal, which the optimizer folds with
//! Arrow's parser. This analyzer rule first rewrites the literal's text as
//! `rockstream_plan::datetime_text` says, so `at > '2026-01-31 10:00'` and
//! `'2026-01-31 10:00:00+02'::timestamp` mean what they mean in PostgreSQL.

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::expr::{Cast, TryCast};
use datafusion::logical_expr::{Expr, LogicalPlan};
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
        rewrite_exprs(plan, &|expr, _schema| Ok(rewrite(expr)))
    }
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
