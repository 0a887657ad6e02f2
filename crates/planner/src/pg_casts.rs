//! PostgreSQL's rounding where it makes a whole number of a fraction.
//!
//! PostgreSQL rounds when it casts a numeric or a float to an integer type
//! (a numeric half away from zero, a float half to even), and its
//! `round(double precision)` rounds half to even; Arrow's casts truncate and
//! DataFusion's `round` rounds floats half away from zero. This analyzer
//! rule, run after type coercion, rounds with [`round_to_whole`] first.
//! INSERT, UPDATE and COPY round the same way when they store a fraction in
//! an integer column (`rockstream-gateway`).

use std::sync::{Arc, LazyLock};

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::expr::{Cast, ScalarFunction, TryCast};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprSchemable, LogicalPlan, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use rockstream_plan::arrow_types::{cast_rounds, round_to_whole};

use crate::columnar::invoke_on_arrays;
use crate::plan_rewrite::rewrite_exprs;

/// `round_to_whole(x)` as a function of plans.
pub static ROUND_TO_WHOLE: LazyLock<Arc<ScalarUDF>> = LazyLock::new(|| {
    Arc::new(ScalarUDF::from(RoundToWhole {
        signature: Signature::any(1, Volatility::Immutable),
    }))
});

#[derive(Debug, PartialEq, Eq, Hash)]
struct RoundToWhole {
    signature: Signature,
}

impl ScalarUDFImpl for RoundToWhole {
    fn name(&self) -> &str {
        "pg_round_to_whole"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arguments: &[DataType]) -> Result<DataType> {
        Ok(match arguments {
            [DataType::Decimal128(precision, scale)] if *scale > 0 => {
                DataType::Decimal128((*precision as i8 - *scale + 1).clamp(1, 38) as u8, 0)
            }
            [other] => other.clone(),
            _ => DataType::Null,
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        invoke_on_arrays(&args.args, |arrays| round_to_whole(&arrays[0]))
    }
}

#[derive(Debug, Default)]
pub struct PostgresRounding;

impl AnalyzerRule for PostgresRounding {
    fn name(&self) -> &str {
        "postgres_rounding"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        rewrite_exprs(plan, &rewrite)
    }
}

fn rewrite(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let rounds = |inner: &Expr, to: &DataType| {
        inner
            .get_type(schema)
            .is_ok_and(|from| cast_rounds(&from, to))
    };
    let round = |inner: Box<Expr>| Box::new(ROUND_TO_WHOLE.call(vec![*inner]));
    Ok(match expr {
        Expr::Cast(Cast { expr, field }) if rounds(&expr, field.data_type()) => {
            Transformed::yes(Expr::Cast(Cast {
                expr: round(expr),
                field,
            }))
        }
        Expr::TryCast(TryCast { expr, field }) if rounds(&expr, field.data_type()) => {
            Transformed::yes(Expr::TryCast(TryCast {
                expr: round(expr),
                field,
            }))
        }
        Expr::ScalarFunction(ScalarFunction { func, args })
            if func.name() == "round"
                && args.len() == 1
                && matches!(
                    args[0].get_type(schema),
                    Ok(DataType::Float32 | DataType::Float64)
                ) =>
        {
            Transformed::yes(ROUND_TO_WHOLE.call(args))
        }
        other => Transformed::no(other),
    })
}
