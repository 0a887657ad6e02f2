//! `SESSION(table, time_col, gap [, key …])`'s windows as window
//! functions, so that ad-hoc queries run them and view definitions name
//! them: [`crate::time_windows`] rewrites the call into the table's rows
//! with `session_window_start(time_col, gap_µs) OVER (PARTITION BY key …
//! ORDER BY time_col)` and `session_window_end(…)`; the translator plans
//! that window as a `SessionWindow` node, maintained incrementally. Both
//! number sessions with `rockstream_plan::sessions::session_windows`.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array, TimestampMicrosecondArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, TimeUnit, TimestampMicrosecondType};
use datafusion::common::{exec_err, plan_err, Result};
use datafusion::logical_expr::function::{PartitionEvaluatorArgs, WindowUDFFieldArgs};
use datafusion::logical_expr::{
    PartitionEvaluator, Signature, Volatility, WindowUDF, WindowUDFImpl,
};
use rockstream_plan::sessions::session_windows;

/// The window function giving a row's session start.
pub(crate) const SESSION_START: &str = "session_window_start";
/// The window function giving a row's session end (its last time + gap).
pub(crate) const SESSION_END: &str = "session_window_end";

/// Both window functions, to register.
pub(crate) fn session_functions() -> [WindowUDF; 2] {
    [false, true].map(|end| {
        WindowUDF::from(SessionBound {
            end,
            signature: Signature::any(2, Volatility::Immutable),
        })
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct SessionBound {
    end: bool,
    signature: Signature,
}

impl WindowUDFImpl for SessionBound {
    fn name(&self) -> &str {
        if self.end {
            SESSION_END
        } else {
            SESSION_START
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn partition_evaluator(
        &self,
        _arguments: PartitionEvaluatorArgs,
    ) -> Result<Box<dyn PartitionEvaluator>> {
        Ok(Box::new(SessionEvaluator { end: self.end }))
    }

    fn field(&self, arguments: WindowUDFFieldArgs) -> Result<FieldRef> {
        match arguments
            .input_fields()
            .first()
            .map(|field| field.data_type())
        {
            Some(DataType::Timestamp(_, zone)) => Ok(Arc::new(Field::new(
                arguments.name(),
                DataType::Timestamp(TimeUnit::Microsecond, zone.clone()),
                true,
            ))),
            other => plan_err!(
                "SESSION windows need a timestamp time column, not {}",
                other.map_or("none".to_string(), ToString::to_string)
            ),
        }
    }
}

/// Reads a whole partition in time order: DataFusion hands `evaluate_all`
/// every row of a partition at once, sorted by the `OVER` clause's `ORDER
/// BY`, because the evaluator neither uses a frame nor supports bounded
/// execution (enabling either would break this).
#[derive(Debug)]
struct SessionEvaluator {
    end: bool,
}

impl PartitionEvaluator for SessionEvaluator {
    fn evaluate_all(&mut self, values: &[ArrayRef], num_rows: usize) -> Result<ArrayRef> {
        let [times, gap] = values else {
            return exec_err!("session windows take a time and a gap");
        };
        let DataType::Timestamp(_, zone) = times.data_type() else {
            return exec_err!("session windows over {}", times.data_type());
        };
        let zone = zone.clone();
        let times = cast(
            times,
            &DataType::Timestamp(TimeUnit::Microsecond, zone.clone()),
        )?;
        let times = times.as_primitive::<TimestampMicrosecondType>();
        let gap = cast(gap, &DataType::Int64)?;
        // One gap for the whole partition: a constant.
        let gap = gap.as_any().downcast_ref::<Int64Array>().and_then(|gap| {
            let first = gap.iter().next().flatten()?;
            gap.iter()
                .all(|value| value == Some(first))
                .then_some(first)
        });
        let Some(gap) = gap.filter(|gap| *gap > 0) else {
            return exec_err!("a session window's gap must be a positive constant");
        };
        let times: Vec<Option<i64>> = (0..num_rows)
            .map(|row| times.is_valid(row).then(|| times.value(row)))
            .collect();
        let bounds: TimestampMicrosecondArray = session_windows(&times, gap)
            .into_iter()
            .map(|window| window.map(|(start, end)| if self.end { end } else { start }))
            .collect();
        Ok(Arc::new(bounds.with_timezone_opt(zone)))
    }
}
