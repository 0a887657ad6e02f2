//! What ends a statement early: a cancel request, or `statement_timeout`.
//!
//! Each statement gets a [`Stop`]: the connection's [`Interrupt`] and the
//! deadline `statement_timeout` sets, counted from the statement's start
//! (each statement of a query string on its own, as in PostgreSQL). The
//! interruption points are where a statement reads: a query's execution,
//! and the rows a DML statement computes before it changes anything. An
//! interrupted statement fails with 57014 and, like any failed statement,
//! changes nothing. A commit is not an interruption point: once the engine
//! has a transaction it finishes, so a client is never told a commit that
//! happened failed.

use std::time::Duration;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::dataframe::DataFrame;
use datafusion::execution::memory_pool::MemoryConsumer;
use futures::StreamExt;
use rockstream_common::Runtime;
use rockstream_pgwire::Interrupt;
use rockstream_types::{codes, RsError, RsResult};

use crate::dml::query_error;

/// PostgreSQL's bound on `statement_timeout`, in milliseconds.
const TIMEOUT_MS_MAX: i64 = i32::MAX as i64;

/// What may stop the running statement (see the module docs).
pub(crate) struct Stop {
    interrupt: Interrupt,
    /// When the statement times out, in the runtime's microseconds.
    deadline_micros: Option<i64>,
    runtime: Runtime,
}

impl Stop {
    pub(crate) fn new(
        interrupt: Interrupt,
        deadline_micros: Option<i64>,
        runtime: Runtime,
    ) -> Stop {
        Stop {
            interrupt,
            deadline_micros,
            runtime,
        }
    }

    /// Runs `frame` to its batches, unless the statement is stopped first.
    /// The batches count against the statement's memory
    /// ([`crate::memory`]): a result beyond it fails with 53200.
    pub(crate) async fn collect(&self, frame: DataFrame) -> RsResult<Vec<RecordBatch>> {
        tokio::select! {
            biased;
            reason = self.reached() => Err(reason),
            batches = collect_counted(frame) => batches,
        }
    }

    /// Runs `frame` to its end, unless the statement is stopped first,
    /// keeping none of its rows (it is run for its errors).
    pub(crate) async fn drain(&self, frame: DataFrame) -> RsResult<()> {
        let drained = async {
            let mut stream = frame.execute_stream().await.map_err(query_error)?;
            while let Some(batch) = stream.next().await {
                batch.map_err(query_error)?;
            }
            Ok(())
        };
        tokio::select! {
            biased;
            reason = self.reached() => Err(reason),
            drained = drained => drained,
        }
    }

    /// The error to report if the statement must stop now: a statement
    /// that runs in steps (a COPY's parts) asks between them.
    pub(crate) fn check(&self) -> RsResult<()> {
        if self.interrupt.is_requested() {
            return Err(canceled());
        }
        match self.deadline_micros {
            Some(deadline) if self.runtime.now_micros() >= deadline => Err(timed_out()),
            _ => Ok(()),
        }
    }

    /// Resolves, with the error to report, when the statement must stop.
    async fn reached(&self) -> RsError {
        let deadline = async {
            match self.deadline_micros {
                Some(deadline) => {
                    let left = deadline.saturating_sub(self.runtime.now_micros()).max(0);
                    self.runtime
                        .sleep(Duration::from_micros(left.unsigned_abs()))
                        .await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = self.interrupt.requested() => canceled(),
            () = deadline => timed_out(),
        }
    }
}

fn canceled() -> RsError {
    RsError::new(
        &codes::QUERY_CANCELED,
        "canceling statement due to user request",
    )
}

fn timed_out() -> RsError {
    RsError::new(
        &codes::STATEMENT_TIMEOUT,
        "canceling statement due to statement timeout",
    )
}

/// Runs `frame` to its batches, reserving their memory in the statement's
/// pool while they are collected.
async fn collect_counted(frame: DataFrame) -> RsResult<Vec<RecordBatch>> {
    let pool = frame.task_ctx().memory_pool().clone();
    let reservation = MemoryConsumer::new("query result").register(&pool);
    let mut stream = frame.execute_stream().await.map_err(query_error)?;
    let mut batches = Vec::new();
    while let Some(batch) = stream.next().await {
        let batch = batch.map_err(query_error)?;
        reservation
            .try_grow(batch.get_array_memory_size())
            .map_err(query_error)?;
        batches.push(batch);
    }
    Ok(batches)
}

/// A timeout parameter's value (`statement_timeout`,
/// `idle_in_transaction_session_timeout`, …) as PostgreSQL reads it: a
/// number of milliseconds, or a number with a unit (`'30s'`, `'1.5min'`);
/// 0 turns the limit off (`None`).
pub(crate) fn parse_timeout(name: &str, text: &str) -> RsResult<Option<Duration>> {
    let invalid = || {
        RsError::new(
            &codes::INVALID_PARAMETER_VALUE,
            format!("invalid value for parameter \"{name}\": \"{text}\""),
        )
    };
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let number: f64 = number.parse().map_err(|_| invalid())?;
    let unit_ms = match unit.trim() {
        "" | "ms" => 1.0,
        "us" => 0.001,
        "s" => 1_000.0,
        "min" => 60_000.0,
        "h" => 3_600_000.0,
        "d" => 86_400_000.0,
        _ => return Err(invalid()),
    };
    let ms = (number * unit_ms).round();
    if !(0.0..=TIMEOUT_MS_MAX as f64).contains(&ms) {
        return Err(RsError::new(
            &codes::INVALID_PARAMETER_VALUE,
            format!(
                "{ms} ms is outside the valid range for parameter \"{name}\" (0 .. {TIMEOUT_MS_MAX})"
            ),
        ));
    }
    // In range, so the cast is exact.
    let ms = ms as u64;
    Ok((ms > 0).then(|| Duration::from_millis(ms)))
}

/// `SHOW` of a timeout parameter: PostgreSQL's form, in the largest unit that
/// divides the value (`0` when off).
pub(crate) fn show_timeout(timeout: Option<Duration>) -> String {
    let Some(timeout) = timeout else {
        return "0".to_string();
    };
    let ms = timeout.as_millis();
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("min", 60_000),
        ("s", 1_000),
    ] {
        if ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_read_and_print_as_postgresql() {
        let cases = [
            ("2000", "2s"),
            ("2s", "2s"),
            ("1500", "1500ms"),
            ("1.5min", "90s"),
            (" 3 h", "3h"),
            ("0", "0"),
            ("1d", "1d"),
        ];
        for (text, shown) in cases {
            let timeout =
                parse_timeout("statement_timeout", text).map_err(|error| error.to_string());
            assert_eq!(timeout.map(show_timeout).as_deref(), Ok(shown), "{text}");
        }
        for text in ["2x", "", "-1", "abc", "99999999999"] {
            let Err(error) = parse_timeout("statement_timeout", text) else {
                panic!("{text} must be refused");
            };
            assert_eq!(error.sqlstate(), "22023", "{text}");
        }
    }
}
