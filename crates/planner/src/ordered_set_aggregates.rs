//! `percentile_cont(fraction)`, `percentile_disc(fraction)` and `mode()`
//! `WITHIN GROUP (ORDER BY value)` for ad hoc queries, as PostgreSQL
//! computes them (DataFusion lacks the last two, and its `percentile_cont`
//! keeps the input's type and refuses a NULL fraction). Each accumulator
//! keeps its group's non-NULL values and reads the answer from them in
//! order, as PostgreSQL does. A materialized view plans the same calls
//! onto the incremental aggregate instead ([`crate::translate`]).

use std::mem::size_of_val;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{exec_err, plan_err, Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility,
};
use datafusion::physical_expr::expressions::Literal;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum OrderedSet {
    PercentileCont,
    PercentileDisc,
    Mode,
}

/// The aggregates, registered in every session.
pub(crate) fn ordered_set_aggregates() -> Vec<AggregateUDF> {
    [
        OrderedSet::PercentileCont,
        OrderedSet::PercentileDisc,
        OrderedSet::Mode,
    ]
    .into_iter()
    .map(|kind| {
        AggregateUDF::from(OrderedSetAggregate {
            kind,
            signature: match kind {
                OrderedSet::Mode => Signature::any(1, Volatility::Immutable),
                _ => Signature::user_defined(Volatility::Immutable),
            },
            aliases: match kind {
                OrderedSet::PercentileCont => vec!["quantile_cont".to_string()],
                _ => Vec::new(),
            },
        })
    })
    .collect()
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct OrderedSetAggregate {
    kind: OrderedSet,
    signature: Signature,
    aliases: Vec<String>,
}

impl AggregateUDFImpl for OrderedSetAggregate {
    fn name(&self) -> &str {
        match self.kind {
            OrderedSet::PercentileCont => "percentile_cont",
            OrderedSet::PercentileDisc => "percentile_disc",
            OrderedSet::Mode => "mode",
        }
    }

    fn aliases(&self) -> &[String] {
        &self.aliases
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    /// A fraction is a float8, as PostgreSQL takes it; so are the values
    /// `percentile_cont` interpolates.
    fn coerce_types(&self, arguments: &[DataType]) -> Result<Vec<DataType>> {
        match (self.kind, arguments) {
            (OrderedSet::PercentileCont, [value, _])
                if value.is_numeric() || value.is_null() =>
            {
                Ok(vec![DataType::Float64, DataType::Float64])
            }
            (OrderedSet::PercentileCont, [value, _]) => plan_err!(
                "function percentile_cont(double precision) within group (order by {value}) does not exist"
            ),
            (_, [value, _]) => Ok(vec![value.clone(), DataType::Float64]),
            _ => plan_err!(
                "{} takes a fraction and WITHIN GROUP (ORDER BY value)",
                self.name()
            ),
        }
    }

    fn return_type(&self, arguments: &[DataType]) -> Result<DataType> {
        Ok(match self.kind {
            OrderedSet::PercentileCont => DataType::Float64,
            _ => arguments.first().cloned().unwrap_or(DataType::Null),
        })
    }

    fn supports_within_group_clause(&self) -> bool {
        true
    }

    fn state_fields(&self, arguments: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let value_type = arguments.return_field.data_type().clone();
        Ok(vec![Arc::new(Field::new(
            format!("{}[values]", arguments.name),
            DataType::List(Arc::new(Field::new_list_field(value_type, true))),
            true,
        ))])
    }

    fn accumulator(&self, arguments: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let fraction = match self.kind {
            OrderedSet::Mode => None,
            OrderedSet::PercentileCont | OrderedSet::PercentileDisc => {
                let Some(literal) = arguments
                    .exprs
                    .get(1)
                    .and_then(|expr| expr.downcast_ref::<Literal>())
                else {
                    return plan_err!("{}'s fraction must be a constant", self.name());
                };
                match literal.value() {
                    ScalarValue::Float64(fraction) => fraction.to_owned(),
                    other => return plan_err!("{}'s fraction {other} is not float8", self.name()),
                }
            }
        };
        if let Some(fraction) = fraction.filter(|fraction| !(0.0..=1.0).contains(fraction)) {
            return exec_err!("percentile value {fraction} is not between 0 and 1");
        }
        Ok(Box::new(OrderedSetAccumulator {
            kind: self.kind,
            fraction,
            descending: arguments
                .order_bys
                .first()
                .is_some_and(|sort| sort.options.descending),
            value_type: arguments.return_field.data_type().clone(),
            values: Vec::new(),
        }))
    }
}

#[derive(Debug)]
struct OrderedSetAccumulator {
    kind: OrderedSet,
    /// `percentile_disc`'s; `None` for `mode` or a NULL fraction.
    fraction: Option<f64>,
    descending: bool,
    value_type: DataType,
    values: Vec<ScalarValue>,
}

impl OrderedSetAccumulator {
    fn add(&mut self, values: &ArrayRef) -> Result<()> {
        for index in 0..values.len() {
            if values.is_valid(index) {
                self.values
                    .push(ScalarValue::try_from_array(values, index)?);
            }
        }
        Ok(())
    }
}

impl Accumulator for OrderedSetAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        match values.first() {
            Some(values) => self.add(values),
            None => Ok(()),
        }
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let Some(lists) = states.first() else {
            return Ok(());
        };
        for list in lists.as_list::<i32>().iter().flatten() {
            self.add(&list)?;
        }
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![ScalarValue::List(ScalarValue::new_list_nullable(
            &self.values,
            &self.value_type,
        ))])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        let null = || ScalarValue::try_from(&self.value_type);
        if self.values.is_empty() {
            return null();
        }
        let mut values = self.values.clone();
        values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        if self.descending {
            values.reverse();
        }
        match self.kind {
            OrderedSet::PercentileCont => {
                let Some(fraction) = self.fraction else {
                    return null();
                };
                let float = |value: &ScalarValue| match value {
                    ScalarValue::Float64(Some(value)) => Ok(*value),
                    other => exec_err!("percentile_cont over {other}"),
                };
                // Interpolated between the rows around `fraction`, as
                // PostgreSQL's `float8_lerp`.
                let position = fraction * (values.len() - 1) as f64;
                let (first, second) = (position.floor(), position.ceil());
                let low = float(&values[first as usize])?;
                let high = float(&values[second as usize])?;
                Ok(ScalarValue::Float64(Some(
                    low + (high - low) * (position - first),
                )))
            }
            OrderedSet::PercentileDisc => {
                let Some(fraction) = self.fraction else {
                    return null();
                };
                let row = ((fraction * values.len() as f64).ceil() as usize).max(1);
                Ok(values[row - 1].clone())
            }
            OrderedSet::Mode => {
                // The first of the most frequent, in the order.
                let mut best: Option<(&ScalarValue, usize)> = None;
                let mut run_start = 0;
                for index in 1..=values.len() {
                    if index == values.len() || values[index] != values[run_start] {
                        let run = index - run_start;
                        if best.is_none_or(|(_, longest)| run > longest) {
                            best = Some((&values[run_start], run));
                        }
                        run_start = index;
                    }
                }
                Ok(best.map_or_else(
                    || ScalarValue::try_from(&self.value_type),
                    |(value, _)| Ok(value.clone()),
                )?)
            }
        }
    }

    fn size(&self) -> usize {
        size_of_val(self) + self.values.iter().map(ScalarValue::size).sum::<usize>()
    }
}
