//! PostgreSQL functions DataFusion lacks: `mod(a, b)`, `pg_typeof(x)`,
//! `age(a, b)`, `sign(x)` (DataFusion's `signum`) and the aggregate
//! `variance(x)` (DataFusion's `var_samp`); and `chr(n)`, whose
//! DataFusion form returns a NUL character PostgreSQL refuses; and
//! `pg_advisory_unlock_all()`, which connection pools call.

use std::sync::{Arc, LazyLock};

use chrono::{DateTime, Datelike, NaiveDate, Timelike};
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, IntervalMonthDayNanoBuilder, StringArray,
};
use datafusion::arrow::compute::kernels::numeric;
use datafusion::arrow::datatypes::{
    DataType, Float64Type, Int64Type, IntervalMonthDayNano, IntervalUnit, TimeUnit,
    TimestampMicrosecondType,
};
use datafusion::common::{exec_err, plan_err, DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::type_coercion::binary::BinaryTypeCoercer;
use datafusion::logical_expr::{
    binary_expr, AggregateUDF, ColumnarValue, Expr, Operator, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};
use rockstream_plan::arrow_types::{arrow_error, sql_type_of};
use rockstream_types::error::{codes, RsError};
use rockstream_types::RsResult;

use crate::columnar::invoke_on_arrays;

/// The scalar functions of this module.
pub static FUNCTIONS: LazyLock<[Arc<ScalarUDF>; 5]> = LazyLock::new(|| {
    [
        Arc::new(ScalarUDF::from(AdvisoryUnlockAll {
            signature: Signature::nullary(Volatility::Volatile),
        })),
        Arc::new(ScalarUDF::from(Chr {
            signature: Signature::uniform(1, vec![DataType::Int64], Volatility::Immutable),
        })),
        Arc::new(ScalarUDF::from(Age {
            signature: Signature::user_defined(Volatility::Immutable),
        })),
        Arc::new(ScalarUDF::from(Modulo {
            signature: Signature::user_defined(Volatility::Immutable),
        })),
        Arc::new(ScalarUDF::from(TypeOf {
            signature: Signature::any(1, Volatility::Immutable),
        })),
    ]
});

/// `pg_advisory_unlock_all()`: releases the session's advisory locks.
/// RockStream has none (`pg_advisory_lock` does not exist), so there is
/// nothing to release; connection pools call it when they take a
/// connection back. PostgreSQL's result is `void`, printed empty.
#[derive(Debug, PartialEq, Eq, Hash)]
struct AdvisoryUnlockAll {
    signature: Signature,
}

impl ScalarUDFImpl for AdvisoryUnlockAll {
    fn name(&self) -> &str {
        "pg_advisory_unlock_all"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arguments: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(
            Some(String::new()),
        )))
    }
}

/// `chr(n)`: the character with code point `n`. PostgreSQL refuses 0 (text
/// holds no NUL), negative numbers and what is no Unicode scalar value,
/// all as "program limit exceeded" (54000).
#[derive(Debug, PartialEq, Eq, Hash)]
struct Chr {
    signature: Signature,
}

impl ScalarUDFImpl for Chr {
    fn name(&self) -> &str {
        "chr"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arguments: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        invoke_on_arrays(&args.args, |arrays| {
            let codes = arrays[0].as_primitive::<Int64Type>();
            let characters = codes
                .iter()
                .map(|code| code.map(character).transpose())
                .collect::<RsResult<StringArray>>()?;
            Ok(Arc::new(characters) as ArrayRef)
        })
    }
}

/// PostgreSQL's `chr` for one code point.
fn character(code: i64) -> RsResult<String> {
    let refused = |message: String| RsError::new(&codes::PROGRAM_LIMIT_EXCEEDED, message);
    if code < 0 {
        return Err(refused("character number must be positive".into()));
    }
    if code == 0 {
        return Err(refused("null character not permitted".into()));
    }
    let scalar = u32::try_from(code).ok().and_then(char::from_u32);
    match scalar {
        Some(scalar) => Ok(scalar.to_string()),
        None if code > 0x10_FFFF => Err(refused(format!(
            "requested character too large for encoding: {code}"
        ))),
        None => Err(refused(format!(
            "requested character not valid for encoding: {code}"
        ))),
    }
}

/// PostgreSQL's largest value (`MaxAllocSize - 1`, just under 1 GiB): a
/// function that would make a longer text fails instead.
const VALUE_BYTES_MAX: i64 = 0x3fff_ffff;

/// `repeat`, `lpad` and `rpad` bounded as PostgreSQL bounds them: a result
/// beyond [`VALUE_BYTES_MAX`] fails with "requested length too large"
/// (54000) before anything is allocated (DataFusion's own allocate it:
/// `repeat('x', 2^31 - 1)` took 8.7 GB).
pub fn length_bounded() -> Vec<ScalarUDF> {
    use datafusion::functions::{string, unicode};
    [
        (string::repeat(), Bound::Repeat),
        (unicode::lpad(), Bound::Pad),
        (unicode::rpad(), Bound::Pad),
    ]
    .into_iter()
    .map(|(inner, bound)| ScalarUDF::from(LengthBounded { inner, bound }))
    .collect()
}

/// How a function's arguments give its result's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Bound {
    /// `repeat(text, count)`: bytes × count.
    Repeat,
    /// `lpad/rpad(text, length [, fill])`: length characters of up to four
    /// bytes each (PostgreSQL's check for UTF8).
    Pad,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct LengthBounded {
    inner: Arc<ScalarUDF>,
    bound: Bound,
}

impl ScalarUDFImpl for LengthBounded {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arguments: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arguments)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let too_long = match (self.bound, arrays.as_slice()) {
            (Bound::Repeat, [text, count, ..]) => {
                let bytes = datafusion::arrow::compute::kernels::length::length(text)?;
                let bytes = datafusion::arrow::compute::cast(&bytes, &DataType::Int64)?;
                let count = datafusion::arrow::compute::cast(count, &DataType::Int64)?;
                let (bytes, count) = (
                    bytes.as_primitive::<Int64Type>(),
                    count.as_primitive::<Int64Type>(),
                );
                (0..bytes.len()).any(|row| {
                    bytes.is_valid(row)
                        && count.is_valid(row)
                        && bytes
                            .value(row)
                            .checked_mul(count.value(row))
                            .is_none_or(|total| total > VALUE_BYTES_MAX)
                })
            }
            (Bound::Pad, [_, length, ..]) => {
                let length = datafusion::arrow::compute::cast(length, &DataType::Int64)?;
                let length = length.as_primitive::<Int64Type>();
                (0..length.len())
                    .any(|row| length.is_valid(row) && length.value(row) > VALUE_BYTES_MAX / 4)
            }
            _ => false,
        };
        if too_long {
            return Err(DataFusionError::External(Box::new(RsError::new(
                &codes::PROGRAM_LIMIT_EXCEEDED,
                format!("{}: requested length too large", self.inner.name()),
            ))));
        }
        self.inner.invoke_with_args(args)
    }
}

/// `power` (`^`) and `exp` over floats fail as PostgreSQL's do when the
/// result leaves the float range: "value out of range: overflow" for an
/// infinite result of finite arguments, "underflow" for a zero result of a
/// finite non-zero first argument (22003). DataFusion's return `Infinity`
/// and `0`. (DataFusion computes `power` of numerics in floats too, so
/// `power(10::numeric, 400)` fails here where PostgreSQL's exact numeric
/// answers.)
pub fn range_checked() -> Vec<ScalarUDF> {
    use datafusion::functions::math;
    [math::power(), math::exp()]
        .into_iter()
        .map(|inner| ScalarUDF::from(RangeChecked { inner }))
        .collect()
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct RangeChecked {
    inner: Arc<ScalarUDF>,
}

impl ScalarUDFImpl for RangeChecked {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arguments: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arguments)
    }

    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> Result<ExprSimplifyResult> {
        self.inner.simplify(args, info)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arguments = ColumnarValue::values_to_arrays(&args.args)?;
        let number_rows = args.number_rows;
        let result = self.inner.invoke_with_args(args)?;
        let values = result.to_array(number_rows)?;
        let (Some(values), Ok(as_floats)) = (
            values.as_primitive_opt::<Float64Type>(),
            arguments
                .iter()
                .map(|argument| datafusion::arrow::compute::cast(argument, &DataType::Float64))
                .collect::<std::result::Result<Vec<_>, _>>(),
        ) else {
            return Ok(result);
        };
        let inputs: Vec<_> = as_floats
            .iter()
            .map(|array| array.as_primitive::<Float64Type>().clone())
            .collect();
        for row in 0..values.len() {
            if values.is_null(row) || inputs.iter().any(|input| input.is_null(row)) {
                continue;
            }
            let finite = inputs.iter().all(|input| input.value(row).is_finite());
            let value = values.value(row);
            let problem = if finite && value.is_infinite() {
                "overflow"
            } else if finite
                && value == 0.0
                && inputs.first().is_some_and(|first| first.value(row) != 0.0)
            {
                "underflow"
            } else {
                continue;
            };
            return Err(DataFusionError::External(Box::new(RsError::new(
                &codes::NUMERIC_OUT_OF_RANGE,
                format!("value out of range: {problem}"),
            ))));
        }
        Ok(result)
    }
}

/// `sign(x)`: PostgreSQL's name for DataFusion's `signum`.
pub fn sign() -> ScalarUDF {
    datafusion::functions::math::signum()
        .as_ref()
        .clone()
        .with_aliases(["sign"])
}

/// `variance(x)`: PostgreSQL's name for the sample variance.
pub fn variance() -> AggregateUDF {
    datafusion::functions_aggregate::variance::var_samp_udaf()
        .as_ref()
        .clone()
        .with_aliases(["variance"])
}

/// `mod(a, b)`: `a % b`, with the operator's types and errors.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Modulo {
    signature: Signature,
}

impl ScalarUDFImpl for Modulo {
    fn name(&self) -> &str {
        "mod"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arguments: &[DataType]) -> Result<Vec<DataType>> {
        let [dividend, divisor] = arguments else {
            return plan_err!("mod takes two arguments");
        };
        if !(dividend.is_numeric() || dividend.is_null())
            || !(divisor.is_numeric() || divisor.is_null())
        {
            return plan_err!("function mod({dividend}, {divisor}) does not exist");
        }
        let (dividend, divisor) =
            BinaryTypeCoercer::new(dividend, &Operator::Modulo, divisor).get_input_types()?;
        Ok(vec![dividend, divisor])
    }

    fn return_type(&self, arguments: &[DataType]) -> Result<DataType> {
        let [dividend, divisor] = arguments else {
            return plan_err!("mod takes two arguments");
        };
        BinaryTypeCoercer::new(dividend, &Operator::Modulo, divisor).get_result_type()
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        invoke_on_arrays(&args.args, |arrays| {
            numeric::rem(&arrays[0], &arrays[1]).map_err(arrow_error)
        })
    }

    /// Plans as the `%` operator once the arguments are coerced.
    fn simplify(&self, args: Vec<Expr>, _info: &SimplifyContext) -> Result<ExprSimplifyResult> {
        match <[Expr; 2]>::try_from(args) {
            Ok([dividend, divisor]) => Ok(ExprSimplifyResult::Simplified(binary_expr(
                dividend,
                Operator::Modulo,
                divisor,
            ))),
            Err(args) => Ok(ExprSimplifyResult::Original(args)),
        }
    }
}

/// `pg_typeof(x)`: the name of `x`'s PostgreSQL type, as `format_type`
/// spells it without modifiers (`numeric`, `timestamp without time zone`).
#[derive(Debug, PartialEq, Eq, Hash)]
struct TypeOf {
    signature: Signature,
}

impl ScalarUDFImpl for TypeOf {
    fn name(&self) -> &str {
        "pg_typeof"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arguments: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let Some(argument) = args.args.first() else {
            return exec_err!("pg_typeof takes one argument");
        };
        let name = match argument.data_type() {
            DataType::Null => "unknown".to_string(),
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "text".to_string(),
            other => match sql_type_of(&other) {
                Ok(sql_type) => {
                    let spelled = sql_type.pg_name();
                    match spelled.split_once('(') {
                        // `numeric(38,6)[]` is `numeric[]`.
                        Some((base, _)) if spelled.ends_with("[]") => format!("{base}[]"),
                        Some((base, _)) => base.to_string(),
                        None => spelled,
                    }
                }
                Err(_) => return exec_err!("pg_typeof: no PostgreSQL type for {other}"),
            },
        };
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(name))))
    }
}

/// `age(a, b)`: `a - b` as years, months and days, then time, as
/// PostgreSQL's `timestamp_age` counts them (a month is counted when the
/// day of month comes round again). Dates count from midnight.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Age {
    signature: Signature,
}

const TIMESTAMP: DataType = DataType::Timestamp(TimeUnit::Microsecond, None);

impl ScalarUDFImpl for Age {
    fn name(&self) -> &str {
        "age"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arguments: &[DataType]) -> Result<Vec<DataType>> {
        if arguments.len() != 2 {
            return plan_err!(
                "age() with one argument (age from today's date) is not supported yet: \
                 write age(CURRENT_DATE, value)"
            );
        }
        arguments
            .iter()
            .map(|argument| match argument {
                DataType::Date32
                | DataType::Date64
                | DataType::Timestamp(..)
                | DataType::Utf8
                | DataType::LargeUtf8
                | DataType::Utf8View
                | DataType::Null => Ok(TIMESTAMP),
                other => plan_err!("function age({other}) does not exist"),
            })
            .collect()
    }

    fn return_type(&self, _arguments: &[DataType]) -> Result<DataType> {
        Ok(DataType::Interval(IntervalUnit::MonthDayNano))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        invoke_on_arrays(&args.args, |arrays| {
            let cast = |array: &ArrayRef| {
                datafusion::arrow::compute::cast(array, &TIMESTAMP).map_err(arrow_error)
            };
            let (later, earlier) = (cast(&arrays[0])?, cast(&arrays[1])?);
            let later = later.as_primitive::<TimestampMicrosecondType>();
            let earlier = earlier.as_primitive::<TimestampMicrosecondType>();
            let mut out = IntervalMonthDayNanoBuilder::with_capacity(later.len());
            for row in 0..later.len() {
                if later.is_null(row) || earlier.is_null(row) {
                    out.append_null();
                    continue;
                }
                out.append_value(timestamp_age(later.value(row), earlier.value(row))?);
            }
            Ok(Arc::new(out.finish()) as ArrayRef)
        })
    }
}

/// PostgreSQL's `timestamp_age` over microseconds since 1970.
fn timestamp_age(later: i64, earlier: i64) -> RsResult<IntervalMonthDayNano> {
    let fields = |micros: i64| {
        let at = DateTime::from_timestamp_micros(micros)
            .ok_or_else(|| RsError::new(&codes::NUMERIC_OUT_OF_RANGE, "timestamp out of range"))?
            .naive_utc();
        Ok::<_, RsError>((
            [
                i64::from(at.year()),
                i64::from(at.month()),
                i64::from(at.day()),
                i64::from(at.hour()),
                i64::from(at.minute()),
                i64::from(at.second()),
                i64::from(at.nanosecond() / 1_000),
            ],
            at,
        ))
    };
    let (first, first_at) = fields(later)?;
    let (second, second_at) = fields(earlier)?;
    let negative = later < earlier;
    let sign = if negative { -1 } else { 1 };
    let [mut years, mut months, mut days, mut hours, mut minutes, mut seconds, mut micros] =
        std::array::from_fn(|field| sign * (first[field] - second[field]));
    while micros < 0 {
        micros += 1_000_000;
        seconds -= 1;
    }
    while seconds < 0 {
        seconds += 60;
        minutes -= 1;
    }
    while minutes < 0 {
        minutes += 60;
        hours -= 1;
    }
    while hours < 0 {
        hours += 24;
        days -= 1;
    }
    // Borrowed days are the days of the earlier timestamp's month (of the
    // later one's when the result is negative, as PostgreSQL borrows).
    let borrowed_month = if negative { first_at } else { second_at };
    while days < 0 {
        days += days_in_month(borrowed_month.year(), borrowed_month.month());
        months -= 1;
    }
    while months < 0 {
        months += 12;
        years -= 1;
    }
    let time = ((hours * 60 + minutes) * 60 + seconds) * 1_000_000 + micros;
    let out_of_range = || RsError::new(&codes::NUMERIC_OUT_OF_RANGE, "interval out of range");
    Ok(IntervalMonthDayNano {
        months: i32::try_from(sign * (years * 12 + months)).map_err(|_| out_of_range())?,
        days: i32::try_from(sign * days).map_err(|_| out_of_range())?,
        nanoseconds: (sign * time).checked_mul(1_000).ok_or_else(out_of_range)?,
    })
}

fn days_in_month(year: i32, month: u32) -> i64 {
    let (next_year, next_month) = if month == 12 {
        (year + 1, 1)
    } else {
        (year, month + 1)
    };
    match (
        NaiveDate::from_ymd_opt(year, month, 1),
        NaiveDate::from_ymd_opt(next_year, next_month, 1),
    ) {
        (Some(first), Some(next)) => (next - first).num_days(),
        _ => 30,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests may unwrap: a panic is the failure report.
mod tests {
    use super::*;

    fn age(later: &str, earlier: &str) -> (i32, i32, i64) {
        let micros = |text: &str| {
            chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f")
                .unwrap()
                .and_utc()
                .timestamp_micros()
        };
        let interval = timestamp_age(micros(later), micros(earlier)).unwrap();
        (interval.months, interval.days, interval.nanoseconds / 1_000)
    }

    #[test]
    fn ages_count_as_postgresql_counts_them() {
        // PostgreSQL 15: 1 year 1 mon 17 days.
        assert_eq!(
            age("2024-03-01 00:00:00", "2023-01-15 00:00:00"),
            (13, 17, 0)
        );
        assert_eq!(
            age("2023-01-15 00:00:00", "2024-03-01 00:00:00"),
            (-13, -17, 0)
        );
        // 1 mon 1 day 21:29:44.5
        assert_eq!(
            age("2024-03-31 10:00:00", "2024-02-29 12:30:15.5"),
            (1, 1, 77_384_500_000)
        );
        // -1 mons -2 days; -11 mons -28 days
        assert_eq!(
            age("2024-02-29 00:00:00", "2024-03-31 00:00:00"),
            (-1, -2, 0)
        );
        assert_eq!(
            age("2020-02-29 00:00:00", "2021-02-28 00:00:00"),
            (-11, -28, 0)
        );
        // 6 mons 15 days 12:00:00
        assert_eq!(
            age("2024-01-01 00:00:00", "2023-06-15 12:00:00"),
            (6, 15, 43_200_000_000)
        );
    }
}
