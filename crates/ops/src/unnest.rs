//! `unnest(list)` of a list computed from each row (RFC 0015): each row
//! once per element, followed by it, with the row's weight. Stateless and
//! linear, so a retraction expands to exactly what its insertion did.
//!
//! Memory is bounded per row and per evaluation: a `generate_series` has
//! its length worked out from its arguments before any list is built (a
//! row asking for more than [`UNNEST_ELEMENTS_MAX`] values fails the step,
//! 54000), and rows are evaluated in chunks whose series together stay
//! under that bound. Other lists (`string_to_array`) are no longer than
//! the row they are computed from.

use datafusion::arrow::array::{Array, ListArray};
use datafusion::common::DFSchema;
use datafusion::logical_expr::{Expr, ExprSchemable};
use rockstream_plan::arrow_types::{datafusion_error, sql_type_of};
use rockstream_types::{codes, Datum, Row, RsError, RsResult, SqlType, ZSet};

use crate::arrow_rows::array_to_datums;
use crate::expr::CompiledExprs;

/// Elements one input row's list may have.
pub const UNNEST_ELEMENTS_MAX: usize = 1_000_000;

/// Microseconds a month counts for when a series' length is estimated.
const MONTH_MICROS: i128 = 30 * 86_400_000_000;

#[derive(Debug)]
pub(crate) struct UnnestOperator {
    list: CompiledExprs,
    /// An empty or NULL list gives the row once, followed by NULL.
    keep_empty: bool,
    element: SqlType,
    /// A `generate_series`' arguments (start, stop, step), when the list
    /// is one: its length is known before the list is built.
    series: Option<(CompiledExprs, Vec<SqlType>)>,
}

impl UnnestOperator {
    pub fn new(
        (list, keep_empty): (&Expr, bool),
        input_schema: &DFSchema,
        input_types: Vec<SqlType>,
        element: SqlType,
    ) -> RsResult<UnnestOperator> {
        let series = match list {
            Expr::ScalarFunction(call)
                if call.func.name() == "generate_series" && (2..=3).contains(&call.args.len()) =>
            {
                let types = call
                    .args
                    .iter()
                    .map(|arg| {
                        let data_type = arg.get_type(input_schema).map_err(datafusion_error)?;
                        sql_type_of(&data_type)
                    })
                    .collect::<RsResult<Vec<SqlType>>>()?;
                Some((
                    CompiledExprs::compile(&call.args, input_schema, input_types.clone())?,
                    types,
                ))
            }
            _ => None,
        };
        Ok(UnnestOperator {
            list: CompiledExprs::compile(std::slice::from_ref(list), input_schema, input_types)?,
            keep_empty,
            element,
            series,
        })
    }

    pub fn step(&self, delta: ZSet) -> RsResult<ZSet> {
        if delta.is_empty() {
            return Ok(delta);
        }
        let rows: Vec<&Row> = delta.updates.iter().map(|(row, _)| row).collect();
        let lengths = self.series_lengths(&rows)?;
        let mut updates = Vec::new();
        let mut start = 0;
        while start < rows.len() {
            // Rows whose series together stay under the bound (at least one).
            let mut end = start + 1;
            if let Some(lengths) = &lengths {
                let mut total = lengths[start];
                while end < rows.len() && total + lengths[end] <= UNNEST_ELEMENTS_MAX {
                    total += lengths[end];
                    end += 1;
                }
            } else {
                end = rows.len();
            }
            self.expand(&delta.updates[start..end], &rows[start..end], &mut updates)?;
            start = end;
        }
        Ok(ZSet::from_updates(updates))
    }

    /// Each series' length, as its arguments give it (an upper bound for
    /// steps of months); an error for one past [`UNNEST_ELEMENTS_MAX`].
    fn series_lengths(&self, rows: &[&Row]) -> RsResult<Option<Vec<usize>>> {
        let Some((arguments, types)) = &self.series else {
            return Ok(None);
        };
        let values = arguments.evaluate_rows(rows, types)?;
        values
            .iter()
            .map(|arguments| {
                let length = series_length(arguments).unwrap_or(0);
                if length > UNNEST_ELEMENTS_MAX as i128 {
                    return Err(too_long(length));
                }
                Ok(usize::try_from(length).unwrap_or(0))
            })
            .collect::<RsResult<Vec<usize>>>()
            .map(Some)
    }

    fn expand(
        &self,
        updates: &[(Row, i64)],
        rows: &[&Row],
        out: &mut Vec<(Row, i64)>,
    ) -> RsResult<()> {
        let lists = self.list.evaluate_array(rows)?;
        let lists = lists
            .as_any()
            .downcast_ref::<ListArray>()
            .ok_or_else(|| RsError::internal("an unnested value is not a list"))?;
        for (index, (row, weight)) in updates.iter().enumerate() {
            if lists.is_null(index) || lists.value_length(index) == 0 {
                if self.keep_empty {
                    let mut kept = Vec::with_capacity(row.len() + 1);
                    kept.extend(row.iter().cloned());
                    kept.push(Datum::Null);
                    out.push((kept, *weight));
                }
                continue;
            }
            let values = lists.value(index);
            if values.len() > UNNEST_ELEMENTS_MAX {
                return Err(too_long(values.len() as i128));
            }
            for value in array_to_datums(&values, self.element)? {
                let mut expanded = Vec::with_capacity(row.len() + 1);
                expanded.extend(row.iter().cloned());
                expanded.push(value);
                out.push((expanded, *weight));
            }
        }
        Ok(())
    }
}

/// How many values `generate_series(start, stop[, step])` has, if its
/// arguments say (`None` for NULLs and a zero step, which give no list or
/// an error when the list is built).
fn series_length(arguments: &[Datum]) -> Option<i128> {
    let number = |datum: &Datum| -> Option<i128> {
        match datum {
            Datum::Int16(value) => Some(i128::from(*value)),
            Datum::Int32(value) => Some(i128::from(*value)),
            Datum::Int64(value) => Some(i128::from(*value)),
            Datum::Date(days) => Some(i128::from(*days) * 86_400_000_000),
            Datum::Timestamp(micros) | Datum::TimestampTz(micros) => Some(i128::from(*micros)),
            _ => None,
        }
    };
    let start = number(arguments.first()?)?;
    let stop = number(arguments.get(1)?)?;
    let step = match arguments.get(2) {
        None => 1,
        Some(Datum::Interval(interval)) => {
            i128::from(interval.months) * MONTH_MICROS
                + i128::from(interval.days) * 86_400_000_000
                + i128::from(interval.nanoseconds) / 1_000
        }
        Some(step) => number(step)?,
    };
    if step == 0 {
        return None;
    }
    let span = (stop - start) / step;
    Some(if span < 0 { 0 } else { span + 1 })
}

fn too_long(length: i128) -> RsError {
    RsError::new(
        &codes::PROGRAM_LIMIT_EXCEEDED,
        format!(
            "a set-returning function in a materialized view gives {length} rows for one row; at most {UNNEST_ELEMENTS_MAX} are supported"
        ),
    )
}

#[cfg(test)]
mod tests {
    //! Goal: a series' length is known from its arguments, for numbers,
    //! dates and timestamps, backwards and empty.
    use super::*;
    use rockstream_types::Interval;

    #[test]
    fn series_lengths_follow_their_arguments() {
        let ints = |a: i64, b: i64, c: i64| {
            series_length(&[Datum::Int64(a), Datum::Int64(b), Datum::Int64(c)])
        };
        assert_eq!(ints(1, 10, 1), Some(10));
        assert_eq!(ints(1, 10, 3), Some(4));
        assert_eq!(ints(10, 1, -2), Some(5));
        assert_eq!(ints(10, 1, 1), Some(0));
        assert_eq!(ints(1, 2_000_000_000, 1), Some(2_000_000_000));
        assert_eq!(series_length(&[Datum::Int32(1), Datum::Int32(3)]), Some(3));
        assert_eq!(series_length(&[Datum::Null, Datum::Int32(3)]), None);
        let hour = Interval {
            months: 0,
            days: 0,
            nanoseconds: 3_600_000_000_000,
        };
        let day = 86_400_000_000;
        assert_eq!(
            series_length(&[
                Datum::Timestamp(0),
                Datum::Timestamp(day),
                Datum::Interval(hour)
            ]),
            Some(25)
        );
    }
}
