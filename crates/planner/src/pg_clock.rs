//! `now()` (`CURRENT_TIMESTAMP`), `LOCALTIMESTAMP` and `LOCALTIME`.
//!
//! Each is the statement's start time, the same wherever it appears in the
//! statement; sessions run in UTC, so the local time is UTC's. The
//! timestamps are in microseconds, as PostgreSQL's and every stored
//! timestamp are (DataFusion's own `now()`, replaced here, is in
//! nanoseconds, which end in 2262: `now() + INTERVAL '1000 years'` would
//! overflow). They depend on when the statement runs, so a materialized
//! view refuses them except in a temporal filter
//! ([`crate::temporal_filters`]).

use std::sync::{Arc, LazyLock};

use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::{plan_err, Result, ScalarValue};
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

const NANOS_PER_DAY: i64 = 86_400_000_000_000;

/// The functions, registered in every session.
pub static CLOCK_FUNCTIONS: LazyLock<Vec<Arc<ScalarUDF>>> = LazyLock::new(|| {
    [Clock::Now, Clock::Timestamp, Clock::Time]
        .into_iter()
        .map(|clock| {
            Arc::new(ScalarUDF::from(LocalClock {
                clock,
                signature: Signature::nullary(Volatility::Stable),
                aliases: match clock {
                    Clock::Now => vec!["current_timestamp".to_string()],
                    _ => Vec::new(),
                },
            }))
        })
        .collect()
});

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Clock {
    Now,
    Timestamp,
    Time,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct LocalClock {
    clock: Clock,
    signature: Signature,
    aliases: Vec<String>,
}

impl ScalarUDFImpl for LocalClock {
    fn aliases(&self) -> &[String] {
        &self.aliases
    }

    fn name(&self) -> &str {
        match self.clock {
            Clock::Now => "now",
            Clock::Timestamp => "localtimestamp",
            Clock::Time => "localtime",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arguments: &[DataType]) -> Result<DataType> {
        Ok(match self.clock {
            Clock::Now => DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
            Clock::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, None),
            Clock::Time => DataType::Time64(TimeUnit::Nanosecond),
        })
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        plan_err!(
            "{}() is replaced by the statement's start time while planning",
            self.name()
        )
    }

    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> Result<ExprSimplifyResult> {
        let Some(start) = info.query_execution_start_time() else {
            return Ok(ExprSimplifyResult::Original(args));
        };
        let Some(nanos) = start.timestamp_nanos_opt() else {
            return plan_err!("the statement's start time is out of range");
        };
        let micros = nanos.div_euclid(1_000);
        let value = match self.clock {
            Clock::Now => ScalarValue::TimestampMicrosecond(Some(micros), Some("+00:00".into())),
            Clock::Timestamp => ScalarValue::TimestampMicrosecond(Some(micros), None),
            // Whole microseconds, PostgreSQL's precision, as a time prints
            // every digit it has.
            Clock::Time => {
                let time = nanos.rem_euclid(NANOS_PER_DAY);
                ScalarValue::Time64Nanosecond(Some(time - time % 1_000))
            }
        };
        Ok(ExprSimplifyResult::Simplified(Expr::Literal(value, None)))
    }
}
