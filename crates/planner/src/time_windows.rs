//! Time windows as streaming SQL spells them (RisingWave, Flink, the
//! Nexmark queries): `TUMBLE(table, time_col, size)` and `HOP(table,
//! time_col, slide, size)` in a FROM clause are the table's rows, each with
//! the `window_start` and `window_end` of a window it falls in — one window
//! for TUMBLE, `size / slide` overlapping ones for HOP. Windows are aligned
//! to the Unix epoch and hold `[window_start, window_end)`.
//!
//! DataFusion has no table functions over tables, so before planning each
//! call becomes a derived table named as the table (or as the call's alias,
//! so `FROM TUMBLE(bid, …)` is still `bid`): TUMBLE a projection adding
//! `date_bin(size, time_col, epoch)` and that plus `size`; HOP the `UNION
//! ALL` of `size / slide` such projections, the `i`-th window starting `i`
//! slides before the row's slide. Both plan and maintain like any
//! projection and union: a row's windows are a function of the row. Without
//! a watermark (not built yet) every window stays open, and its state stays.
//!
//! `SESSION(table, time_col, gap [, key …])` is the table's rows with the
//! window of their session among the rows of the same keys (see
//! [`crate::session_windows`]): window functions over the whole partition,
//! which views maintain incrementally.
//!
//! Refused with a coded error: arguments other than a
//! table name, a column and constant intervals, a HOP whose size is not a
//! whole number of slides, and intervals with months (not a fixed length).

use std::ops::ControlFlow;

use datafusion::arrow::compute::kernels::cast_utils::parse_interval_month_day_nano;
use datafusion::sql::sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, Interval, ObjectName, Query, SetExpr, Statement,
    TableAlias, TableFactor, TableFunctionArgs, Value, ValueWithSpan, VisitMut, VisitorMut,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use rockstream_types::{codes, RsError, RsResult};

use crate::session_windows::{SESSION_END, SESSION_START};

/// Most windows one row of a HOP falls in: its `size / slide`.
const HOP_WINDOWS_MAX: i128 = 64;

/// The origin windows are aligned to.
const EPOCH: &str = "TIMESTAMP '1970-01-01 00:00:00'";

/// Rewrites every TUMBLE and HOP call in `query`'s FROM clauses (see the
/// module documentation).
pub fn rewrite_time_windows(query: &mut Query) -> RsResult<()> {
    let mut rewriter = TimeWindows;
    match query.visit(&mut rewriter) {
        ControlFlow::Continue(()) => Ok(()),
        ControlFlow::Break(error) => Err(error),
    }
}

struct TimeWindows;

impl VisitorMut for TimeWindows {
    type Break = RsError;

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<RsError> {
        let TableFactor::Table {
            name,
            alias,
            args: Some(TableFunctionArgs { args, .. }),
            ..
        } = factor
        else {
            return ControlFlow::Continue(());
        };
        let function = name.to_string().to_ascii_lowercase();
        let rewritten = match function.as_str() {
            "tumble" | "hop" | "session" => window_table(&function, args, alias.as_ref()),
            _ => return ControlFlow::Continue(()),
        };
        match rewritten {
            Ok(derived) => {
                *factor = derived;
                ControlFlow::Continue(())
            }
            Err(error) => ControlFlow::Break(error),
        }
    }
}

/// The derived table a TUMBLE or HOP call stands for.
fn window_table(
    function: &str,
    args: &[FunctionArg],
    alias: Option<&TableAlias>,
) -> RsResult<TableFactor> {
    let usage = || {
        RsError::new(
            &codes::SYNTAX_ERROR,
            format!(
                "{} takes a table, its time column and {}",
                function.to_uppercase(),
                match function {
                    "hop" => "a slide and a size (constant intervals)",
                    "session" => "a gap (a constant interval), then any partition columns",
                    _ => "a size (a constant interval)",
                }
            ),
        )
    };
    let exprs: Vec<&Expr> = args
        .iter()
        .map(|arg| match arg {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(expr)) => Some(expr),
            _ => None,
        })
        .collect::<Option<_>>()
        .ok_or_else(usage)?;
    let (table, time, intervals) = match exprs.as_slice() {
        [table, time, rest @ ..] => (*table, *time, rest),
        _ => return Err(usage()),
    };
    let table = match table {
        Expr::Identifier(ident) => ObjectName::from(vec![ident.clone()]),
        Expr::CompoundIdentifier(parts) => ObjectName::from(parts.clone()),
        _ => return Err(usage()),
    };
    if !matches!(time, Expr::Identifier(_) | Expr::CompoundIdentifier(_)) {
        return Err(usage());
    }
    // Its alias whole (column names too), else the table's name.
    let name = match alias {
        Some(alias) => {
            let mut alias = alias.clone();
            alias.explicit = false;
            alias.to_string()
        }
        None => table
            .0
            .last()
            .and_then(|part| part.as_ident())
            .map(ToString::to_string)
            .ok_or_else(usage)?,
    };
    // The window `back` bins before the row's bin of length `bin`.
    let window = |bin: &Expr, back: String, size: &Expr| {
        let start = format!("date_bin({bin}, {time}, {EPOCH}){back}");
        format!("SELECT *, {start} AS window_start, {start} + {size} AS window_end FROM {table}")
    };
    let body = match (function, intervals) {
        ("tumble", [size]) => {
            interval_nanos(size)?;
            window(size, String::new(), size)
        }
        ("hop", [slide, size]) => {
            let (slide_nanos, size_nanos) = (interval_nanos(slide)?, interval_nanos(size)?);
            if size_nanos % slide_nanos != 0 {
                return Err(RsError::unsupported(format!(
                    "a HOP whose size ({size}) is not a whole number of slides ({slide})"
                )));
            }
            let windows = size_nanos / slide_nanos;
            if windows > HOP_WINDOWS_MAX {
                return Err(RsError::unsupported(format!(
                    "a HOP putting each row in more than {HOP_WINDOWS_MAX} windows ({windows})"
                )));
            }
            (0..windows)
                .map(|back| {
                    let back = if back == 0 {
                        String::new()
                    } else {
                        format!(" - {slide} * {back}")
                    };
                    window(slide, back, size)
                })
                .collect::<Vec<_>>()
                .join(" UNION ALL ")
        }
        ("session", [gap, keys @ ..]) => {
            // Whole microseconds: `interval_nanos` checks.
            let gap = interval_nanos(gap)? / 1000;
            let keys = keys
                .iter()
                .map(|key| match key {
                    Expr::Identifier(_) | Expr::CompoundIdentifier(_) => Ok(key.to_string()),
                    _ => Err(usage()),
                })
                .collect::<RsResult<Vec<String>>>()?;
            let partition = if keys.is_empty() {
                String::new()
            } else {
                format!("PARTITION BY {} ", keys.join(", "))
            };
            let over = format!("OVER ({partition}ORDER BY {time})");
            format!(
                "SELECT *, {SESSION_START}({time}, {gap}) {over} AS window_start, \
                 {SESSION_END}({time}, {gap}) {over} AS window_end FROM {table}"
            )
        }
        _ => return Err(usage()),
    };
    let sql = format!("SELECT * FROM ({body}) AS {name}");
    let parsed = Parser::parse_sql(&PostgreSqlDialect {}, &sql)
        .map_err(|error| RsError::internal(format!("a rewritten time window: {error}")))?;
    let [Statement::Query(query)] = parsed.as_slice() else {
        return Err(RsError::internal("a rewritten time window is not a query"));
    };
    let SetExpr::Select(select) = query.body.as_ref() else {
        return Err(RsError::internal("a rewritten time window is not a SELECT"));
    };
    select
        .from
        .first()
        .map(|from| from.relation.clone())
        .ok_or_else(|| RsError::internal("a rewritten time window has no FROM"))
}

/// The length of a constant interval without months, in nanoseconds: a
/// positive whole number of microseconds, up to about 292 years.
fn interval_nanos(expr: &Expr) -> RsResult<i128> {
    let not_constant = || {
        RsError::unsupported(format!(
            "the window length {expr} (a constant interval of days or less is)"
        ))
    };
    let nanos = fixed_interval_nanos(expr).ok_or_else(not_constant)?;
    // `date_bin` takes whole microseconds (as timestamps hold) that fit in
    // 64-bit nanoseconds.
    if nanos <= 0 || nanos % 1000 != 0 || i64::try_from(nanos).is_err() {
        return Err(not_constant());
    }
    Ok(nanos)
}

/// The length of `INTERVAL '…'`, a constant without months (days taken as
/// 24 hours), in nanoseconds.
fn fixed_interval_nanos(expr: &Expr) -> Option<i128> {
    let Expr::Interval(Interval {
        value,
        leading_field,
        ..
    }) = expr
    else {
        return None;
    };
    let Expr::Value(ValueWithSpan {
        value: Value::SingleQuotedString(text),
        ..
    }) = value.as_ref()
    else {
        return None;
    };
    let text = match leading_field {
        Some(field) => format!("{text} {field}"),
        None => text.clone(),
    };
    let interval = parse_interval_month_day_nano(&text).ok()?;
    if interval.months != 0 {
        return None;
    }
    Some(i128::from(interval.days) * 86_400_000_000_000 + i128::from(interval.nanoseconds))
}

/// [`fixed_interval_nanos`] in whole microseconds, if it is whole and fits.
pub fn fixed_interval_micros(expr: &Expr) -> Option<i64> {
    let nanos = fixed_interval_nanos(expr)?;
    if nanos % 1000 != 0 {
        return None;
    }
    i64::try_from(nanos / 1000).ok()
}

#[cfg(test)]
mod tests {
    //! Goal: TUMBLE and HOP become the projections the module describes,
    //! named as the table; what cannot be rewritten is refused by name.
    use super::*;

    fn rewritten(sql: &str) -> RsResult<String> {
        let mut statements = Parser::parse_sql(&PostgreSqlDialect {}, sql).expect("parses");
        let Statement::Query(query) = &mut statements[0] else {
            panic!("not a query");
        };
        rewrite_time_windows(query)?;
        Ok(query.to_string())
    }

    #[test]
    fn tumble_adds_its_window_and_keeps_the_table_name() {
        let sql = rewritten(
            "SELECT bid.auction, window_end FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND)",
        )
        .expect("rewrites");
        assert!(
            sql.contains("date_bin(INTERVAL '10' SECOND, date_time, TIMESTAMP '1970-01-01 00:00:00') AS window_start"),
            "{sql}"
        );
        assert!(sql.contains("FROM bid) AS bid"), "{sql}");
    }

    #[test]
    fn hop_is_a_union_of_its_windows() {
        let sql = rewritten(
            "SELECT * FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND) AS h",
        )
        .expect("rewrites");
        assert_eq!(sql.matches("UNION ALL").count(), 4, "{sql}");
        assert!(sql.contains("- INTERVAL '2' SECOND * 4"), "{sql}");
        assert!(
            sql.contains("+ INTERVAL '10' SECOND AS window_end"),
            "{sql}"
        );
        assert!(sql.ends_with("AS h"), "{sql}");
    }

    #[test]
    fn session_is_two_window_functions_over_the_partition_in_time_order() {
        let sql = rewritten("SELECT * FROM SESSION(clicks, at, INTERVAL '30 minutes', user_id)")
            .expect("rewrites");
        assert!(
            sql.contains(
                "session_window_start(at, 1800000000) OVER (PARTITION BY user_id ORDER BY at) \
                 AS window_start"
            ),
            "{sql}"
        );
        assert!(sql.ends_with("AS clicks"), "{sql}");
    }

    #[test]
    fn an_alias_is_kept_whole() {
        let sql =
            rewritten("SELECT b, ws FROM TUMBLE(bid, at, INTERVAL '1' MINUTE) AS w (a, b, ws, we)")
                .expect("rewrites");
        assert!(sql.ends_with("AS w (a, b, ws, we)"), "{sql}");
    }

    #[test]
    fn what_cannot_be_rewritten_is_refused() {
        for (sql, words) in [
            (
                "SELECT * FROM HOP(t, ts, INTERVAL '3 seconds', INTERVAL '10 seconds')",
                "whole number of slides",
            ),
            (
                "SELECT * FROM HOP(t, ts, INTERVAL '2 microseconds', INTERVAL '5 microseconds')",
                "whole number of slides",
            ),
            (
                "SELECT * FROM TUMBLE(t, ts, INTERVAL '1500 nanoseconds')",
                "window length",
            ),
            (
                "SELECT * FROM TUMBLE(t, ts, INTERVAL '200000 days')",
                "window length",
            ),
            (
                "SELECT * FROM TUMBLE(t, ts, INTERVAL '1 month')",
                "window length",
            ),
            ("SELECT * FROM TUMBLE(t, ts, x)", "window length"),
            ("SELECT * FROM TUMBLE(t, ts)", "TUMBLE takes"),
            (
                "SELECT * FROM SESSION(t, ts, INTERVAL '1 month')",
                "window length",
            ),
            (
                "SELECT * FROM SESSION(t, ts, INTERVAL '1 minute', k + 1)",
                "SESSION takes",
            ),
        ] {
            let error = rewritten(sql).expect_err(sql);
            assert!(error.message.contains(words), "{sql}: {}", error.message);
        }
    }
}
