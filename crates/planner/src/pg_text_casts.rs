//! Casts to text that print values as PostgreSQL's output functions do.
//!
//! Arrow's casts print a timestamp as `2021-06-01T17:45:10.500`, an
//! interval as `1 days 2 hours` and a float with all its digits, where
//! PostgreSQL prints `2021-06-01 17:45:10.5`, `1 day 02:00:00` and
//! `1e+20`. This analyzer rule, run after type coercion (which adds the
//! implicit casts of `'at ' || ts`), plans such casts as [`TextOut`], which
//! prints each value as the wire protocol does (`rockstream_types::pg_text`).

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{
    DataType, Date32Type, Float32Type, Float64Type, IntervalMonthDayNanoType, IntervalUnit,
    Time64MicrosecondType, TimeUnit, TimestampMicrosecondType,
};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::expr::{Cast, TryCast};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprSchemable, LogicalPlan, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use rockstream_plan::arrow_types::{arrow_error, duration_to_interval};
use rockstream_types::error::{codes, RsError};
use rockstream_types::{pg_text, RsResult};

use crate::columnar::invoke_on_arrays;
use crate::plan_rewrite::rewrite_exprs;

static TEXT_OUT: LazyLock<Arc<ScalarUDF>> = LazyLock::new(|| {
    Arc::new(ScalarUDF::from(TextOut {
        signature: Signature::any(1, Volatility::Immutable),
    }))
});

#[derive(Debug, Default)]
pub struct PostgresTextCasts;

impl AnalyzerRule for PostgresTextCasts {
    fn name(&self) -> &str {
        "postgres_text_casts"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        rewrite_exprs(plan, &rewrite)
    }
}

/// Whether Arrow's text for values of this type differs from PostgreSQL's.
fn printed_differently(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Float32
            | DataType::Float64
            | DataType::Date32
            | DataType::Date64
            | DataType::Timestamp(..)
            | DataType::Time32(_)
            | DataType::Time64(_)
            | DataType::Interval(_)
            | DataType::Duration(_)
    )
}

fn is_text(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    )
}

fn rewrite(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let prints = |inner: &Expr, to: &DataType| {
        is_text(to)
            && inner
                .get_type(schema)
                .is_ok_and(|from| printed_differently(&from))
    };
    // The call gives Utf8; a cast to another string layout stays around it.
    let print = |inner: Box<Expr>| Box::new(TEXT_OUT.call(vec![*inner]));
    Ok(match expr {
        Expr::Cast(Cast { expr, field }) if prints(&expr, field.data_type()) => {
            Transformed::yes(Expr::Cast(Cast {
                expr: print(expr),
                field,
            }))
        }
        Expr::TryCast(TryCast { expr, field }) if prints(&expr, field.data_type()) => {
            Transformed::yes(Expr::TryCast(TryCast {
                expr: print(expr),
                field,
            }))
        }
        other => Transformed::no(other),
    })
}

/// `pg_text_out(x)`: `x` as PostgreSQL's output function prints it.
#[derive(Debug, PartialEq, Eq, Hash)]
struct TextOut {
    signature: Signature,
}

impl ScalarUDFImpl for TextOut {
    fn name(&self) -> &str {
        "pg_text_out"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arguments: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        invoke_on_arrays(&args.args, |arrays| print_array(&arrays[0]))
    }
}

fn print_array(array: &ArrayRef) -> RsResult<ArrayRef> {
    let canonical = |to: DataType| cast(array, &to).map_err(arrow_error);
    let out_of_range =
        |what: &str| RsError::new(&codes::NUMERIC_OUT_OF_RANGE, format!("{what} out of range"));
    let mut out = StringBuilder::with_capacity(array.len(), array.len() * 16);
    let mut each = |print: &dyn Fn(usize) -> RsResult<String>| -> RsResult<()> {
        for row in 0..array.len() {
            if array.is_null(row) {
                out.append_null();
            } else {
                out.append_value(print(row)?);
            }
        }
        Ok(())
    };
    match array.data_type() {
        DataType::Float32 => {
            let values = array.as_primitive::<Float32Type>();
            each(&|row| Ok(pg_text::float4(values.value(row))))?;
        }
        DataType::Float64 => {
            let values = array.as_primitive::<Float64Type>();
            each(&|row| Ok(pg_text::float8(values.value(row))))?;
        }
        DataType::Date32 | DataType::Date64 => {
            let days = canonical(DataType::Date32)?;
            let values = days.as_primitive::<Date32Type>();
            each(&|row| pg_text::date(values.value(row)).ok_or_else(|| out_of_range("date")))?;
        }
        DataType::Timestamp(_, zone) => {
            let with_zone = zone.is_some();
            let micros = canonical(DataType::Timestamp(TimeUnit::Microsecond, zone.clone()))?;
            let values = micros.as_primitive::<TimestampMicrosecondType>();
            each(&|row| {
                let value = values.value(row);
                if with_zone {
                    pg_text::timestamptz(value)
                } else {
                    pg_text::timestamp(value)
                }
                .ok_or_else(|| out_of_range("timestamp"))
            })?;
        }
        DataType::Time32(_) | DataType::Time64(_) => {
            let micros = canonical(DataType::Time64(TimeUnit::Microsecond))?;
            let values = micros.as_primitive::<Time64MicrosecondType>();
            each(&|row| Ok(pg_text::time(values.value(row))))?;
        }
        DataType::Interval(_) | DataType::Duration(_) => {
            // A duration (`timestamp - timestamp`) splits into days and
            // time as PostgreSQL's interval does.
            let intervals = match array.data_type() {
                DataType::Duration(_) => duration_to_interval(array)?,
                _ => canonical(DataType::Interval(IntervalUnit::MonthDayNano))?,
            };
            let values = intervals.as_primitive::<IntervalMonthDayNanoType>();
            each(&|row| {
                let value = values.value(row);
                Ok(pg_text::interval(
                    value.months,
                    value.days,
                    value.nanoseconds / 1_000,
                ))
            })?;
        }
        _ => return cast(array, &DataType::Utf8).map_err(arrow_error),
    }
    Ok(Arc::new(out.finish()))
}
