//! Integer `+`, `-` and `*` that fail on overflow, as PostgreSQL's do.
//!
//! DataFusion's integer arithmetic wraps around: `2147483647::int + 1`
//! gave -2147483648, in queries and in views alike, where PostgreSQL raises
//! "integer out of range". This analyzer rule, run after type coercion,
//! plans such operations as calls of [`CheckedArithmetic`], which uses
//! Arrow's checked kernels (SQLSTATE 22003 on overflow).

use std::sync::{Arc, LazyLock};

use datafusion::arrow::compute::kernels::numeric;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::expr::BinaryExpr;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use rockstream_plan::arrow_types::arrow_error;

use crate::columnar::invoke_on_arrays;
use crate::plan_rewrite::rewrite_exprs;

/// One checked operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Arithmetic {
    Add,
    Subtract,
    Multiply,
}

static FUNCTIONS: LazyLock<[Arc<ScalarUDF>; 3]> = LazyLock::new(|| {
    [Arithmetic::Add, Arithmetic::Subtract, Arithmetic::Multiply].map(|operation| {
        Arc::new(ScalarUDF::from(CheckedArithmetic {
            operation,
            signature: Signature::any(2, Volatility::Immutable),
        }))
    })
});

#[derive(Debug, PartialEq, Eq, Hash)]
struct CheckedArithmetic {
    operation: Arithmetic,
    signature: Signature,
}

impl ScalarUDFImpl for CheckedArithmetic {
    fn name(&self) -> &str {
        match self.operation {
            Arithmetic::Add => "pg_int_add",
            Arithmetic::Subtract => "pg_int_sub",
            Arithmetic::Multiply => "pg_int_mul",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arguments: &[DataType]) -> Result<DataType> {
        Ok(arguments.first().cloned().unwrap_or(DataType::Int64))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        invoke_on_arrays(&args.args, |arrays| {
            let (left, right) = (&arrays[0], &arrays[1]);
            match self.operation {
                Arithmetic::Add => numeric::add(left, right),
                Arithmetic::Subtract => numeric::sub(left, right),
                Arithmetic::Multiply => numeric::mul(left, right),
            }
            .map_err(arrow_error)
        })
    }
}

#[derive(Debug, Default)]
pub struct PostgresIntegerArithmetic;

impl AnalyzerRule for PostgresIntegerArithmetic {
    fn name(&self) -> &str {
        "postgres_integer_arithmetic"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        rewrite_exprs(plan, &rewrite)
    }
}

fn rewrite(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = &expr else {
        return Ok(Transformed::no(expr));
    };
    let index = match op {
        Operator::Plus => 0,
        Operator::Minus => 1,
        Operator::Multiply => 2,
        _ => return Ok(Transformed::no(expr)),
    };
    let integer = |side: &Expr| {
        matches!(
            side.get_type(schema),
            Ok(DataType::Int16 | DataType::Int32 | DataType::Int64)
        )
    };
    let same_type = left.get_type(schema).ok() == right.get_type(schema).ok();
    if !(integer(left) && integer(right) && same_type) {
        return Ok(Transformed::no(expr));
    }
    Ok(Transformed::yes(
        FUNCTIONS[index].call(vec![left.as_ref().clone(), right.as_ref().clone()]),
    ))
}
