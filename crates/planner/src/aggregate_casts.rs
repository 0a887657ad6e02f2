//! Aggregates over casts that DataFusion would name alike.
//!
//! DataFusion names a cast after the expression it casts, so `avg(x)` and
//! `avg(x::float8)` are both named `avg(t.x)`, and an aggregation computing
//! both fails with "duplicate unqualified field name". PostgreSQL has no
//! such limit. While planning an aggregate's arguments, this planner wraps
//! each cast in [`NamedCast`], an identity function whose name includes the
//! cast's type; the optimizer removes it again (keeping the aggregate's
//! name), so it costs nothing when the query runs.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::datatypes::DataType;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{exec_err, Result};
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawAggregateExpr};
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{
    lit, ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

static NAMED_CAST: LazyLock<Arc<ScalarUDF>> = LazyLock::new(|| {
    Arc::new(ScalarUDF::from(NamedCast {
        signature: Signature::any(2, Volatility::Immutable),
    }))
});

/// Names the casts inside aggregate arguments (see the module doc).
#[derive(Debug, Default)]
pub struct NamedAggregateCasts;

impl ExprPlanner for NamedAggregateCasts {
    fn plan_aggregate(
        &self,
        mut expr: RawAggregateExpr,
    ) -> Result<PlannerResult<RawAggregateExpr>> {
        expr.args = expr
            .args
            .into_iter()
            .map(|argument| argument.transform_up(name_cast).map(|named| named.data))
            .collect::<Result<_>>()?;
        Ok(PlannerResult::Original(expr))
    }
}

fn name_cast(expr: Expr) -> Result<Transformed<Expr>> {
    let type_name = match &expr {
        Expr::Cast(cast) => cast.field.data_type().to_string(),
        Expr::TryCast(cast) => cast.field.data_type().to_string(),
        _ => return Ok(Transformed::no(expr)),
    };
    Ok(Transformed::yes(
        NAMED_CAST.call(vec![expr, lit(type_name)]),
    ))
}

/// `pg_cast(value, type name)`: `value`, under a name that tells the type.
#[derive(Debug, PartialEq, Eq, Hash)]
struct NamedCast {
    signature: Signature,
}

impl ScalarUDFImpl for NamedCast {
    fn name(&self) -> &str {
        "pg_cast"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arguments: &[DataType]) -> Result<DataType> {
        match arguments.first() {
            Some(data_type) => Ok(data_type.clone()),
            None => exec_err!("pg_cast takes a value and a type name"),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        match args.args.into_iter().next() {
            Some(value) => Ok(value),
            None => exec_err!("pg_cast takes a value and a type name"),
        }
    }

    fn simplify(&self, mut args: Vec<Expr>, _info: &SimplifyContext) -> Result<ExprSimplifyResult> {
        if args.is_empty() {
            return Ok(ExprSimplifyResult::Original(args));
        }
        Ok(ExprSimplifyResult::Simplified(args.swap_remove(0)))
    }
}
