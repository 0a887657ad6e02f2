//! `to_char(date or timestamp, pattern)`, `to_timestamp(text, pattern)` and
//! `to_date(text, pattern)` with PostgreSQL's patterns.
//!
//! DataFusion's functions read chrono's `%` patterns, and `to_char` copies
//! anything else, so `to_char(at, 'YYYY-MM-DD')` printed `YYYY-MM-DD`. This
//! analyzer rule translates a constant PostgreSQL pattern into chrono's. Patterns
//! without a chrono equivalent (blank-padded `Month`, upper-case `MON`,
//! quarters, ...) are refused with a coded error rather than printed wrong.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, Result, ScalarValue};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{Expr, ExprSchemable, LogicalPlan};
use datafusion::optimizer::AnalyzerRule;
use rockstream_types::{codes, RsError};

use crate::plan_rewrite::rewrite_exprs;

#[derive(Debug, Default)]
pub struct PostgresToChar;

impl AnalyzerRule for PostgresToChar {
    fn name(&self) -> &str {
        "postgres_to_char"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        rewrite_exprs(plan, &rewrite)
    }
}

fn rewrite(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let Expr::ScalarFunction(ScalarFunction { func, args }) = &expr else {
        return Ok(Transformed::no(expr));
    };
    let [value, Expr::Literal(ScalarValue::Utf8(Some(pattern)), metadata)] = args.as_slice() else {
        return Ok(Transformed::no(expr));
    };
    let input = value.get_type(schema);
    let applies = match func.name() {
        // Formatting a date or timestamp.
        "to_char" | "date_format" => matches!(
            input,
            Ok(DataType::Date32 | DataType::Date64 | DataType::Timestamp(..) | DataType::Time64(_))
        ),
        // Reading one from text.
        "to_timestamp" | "to_date" => matches!(input, Ok(DataType::Utf8 | DataType::Utf8View)),
        _ => false,
    };
    if !applies {
        return Ok(Transformed::no(expr));
    }
    let chrono = chrono_pattern(pattern).map_err(|unsupported| {
        DataFusionError::External(Box::new(RsError::new(
            &codes::UNSUPPORTED_STATEMENT,
            format!(
                "{} pattern \"{unsupported}\" (in '{pattern}') is not supported yet",
                func.name()
            ),
        )))
    })?;
    let args = vec![
        value.clone(),
        Expr::Literal(ScalarValue::Utf8(Some(chrono)), metadata.clone()),
    ];
    Ok(Transformed::yes(Expr::ScalarFunction(ScalarFunction {
        func: func.clone(),
        args,
    })))
}

/// PostgreSQL's template patterns and their chrono equivalents, longest
/// first where one is a prefix of another; the numeric ones are matched
/// whatever their case, as PostgreSQL matches them.
const NUMERIC: &[(&str, &str)] = &[
    ("HH24", "H"),
    ("HH12", "I"),
    ("HH", "I"),
    ("MI", "M"),
    ("SS", "S"),
    ("MS", "3f"),
    ("US", "6f"),
    ("IYYY", "G"),
    ("YYYY", "Y"),
    ("YY", "y"),
    ("MM", "m"),
    ("DDD", "j"),
    ("DD", "d"),
    ("IW", "V"),
];

/// Name patterns, matched with their exact case.
const NAMES: &[(&str, &str)] = &[
    ("Mon", "%b"),
    ("Dy", "%a"),
    ("AM", "%p"),
    ("PM", "%p"),
    ("am", "%P"),
    ("pm", "%P"),
];

/// Patterns with no chrono equivalent here (some only without `FM`).
const REFUSED: &[&str] = &[
    "MONTH", "Month", "month", "MON", "mon", "DAY", "Day", "day", "DY", "dy", "A.M.", "P.M.",
    "a.m.", "p.m.", "TZ", "tz", "OF", "SSSS", "Q", "WW", "W", "J", "D", "CC", "Y,YYY", "YYY",
    "IYY", "IY", "I", "RM", "rm", "TH", "th", "FF",
];

/// `pattern` in chrono's syntax, or the first PostgreSQL pattern that has no
/// equivalent.
fn chrono_pattern(pattern: &str) -> Result<String, String> {
    let mut out = String::with_capacity(pattern.len() * 2);
    let mut rest = pattern;
    while !rest.is_empty() {
        if let Some(quoted) = rest.strip_prefix('"') {
            let end = quoted.find('"').unwrap_or(quoted.len());
            out.push_str(&quoted[..end].replace('%', "%%"));
            rest = quoted.get(end + 1..).unwrap_or("");
            continue;
        }
        let fill = rest.starts_with("FM") || rest.starts_with("fm");
        let body = if fill { &rest[2..] } else { rest };
        if let Some((template, chrono)) = NUMERIC.iter().find(|(template, _)| {
            body.get(..template.len())
                .is_some_and(|head| head.eq_ignore_ascii_case(template))
        }) {
            out.push('%');
            if fill && !chrono.ends_with('f') {
                out.push('-');
            }
            out.push_str(chrono);
            rest = &body[template.len()..];
            continue;
        }
        if fill && (body.starts_with("Month") || body.starts_with("Day")) {
            let (template, chrono) = if body.starts_with("Month") {
                ("Month", "%B")
            } else {
                ("Day", "%A")
            };
            out.push_str(chrono);
            rest = &body[template.len()..];
            continue;
        }
        // The longest name or refused pattern here (`Month` before `Mon`).
        let named = NAMES
            .iter()
            .map(|(template, chrono)| (*template, Some(*chrono)))
            .chain(REFUSED.iter().map(|template| (*template, None)))
            .filter(|(template, _)| body.starts_with(template))
            .max_by_key(|(template, _)| template.len());
        match named {
            Some((template, Some(chrono))) => {
                out.push_str(chrono);
                rest = &body[template.len()..];
                continue;
            }
            Some((template, None)) => return Err(template.to_string()),
            None => {}
        }
        let next = rest.chars().next().expect("rest is not empty");
        if next == '%' {
            out.push_str("%%");
        } else {
            out.push(next);
        }
        rest = &rest[next.len_utf8()..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_patterns_translate() {
        let cases = [
            ("YYYY-MM-DD", "%Y-%m-%d"),
            ("yyyy-mm-dd hh24:mi:ss", "%Y-%m-%d %H:%M:%S"),
            ("HH12:MI AM", "%I:%M %p"),
            ("FMDD FMMonth YYYY", "%-d %B %Y"),
            ("Dy, DD Mon YY", "%a, %d %b %y"),
            ("SS.MS US", "%S.%3f %6f"),
            ("IYYY-IW", "%G-%V"),
            ("\"Day\" DDD: 100%", "Day %j: 100%%"),
            ("FMHH24h", "%-Hh"),
        ];
        for (pattern, chrono) in cases {
            assert_eq!(chrono_pattern(pattern).as_deref(), Ok(chrono), "{pattern}");
        }
    }

    #[test]
    fn patterns_without_an_equivalent_are_named() {
        for (pattern, refused) in [
            ("Month DD", "Month"),
            ("YYYY-Q", "Q"),
            ("DAY", "DAY"),
            ("HH:MI TZ", "TZ"),
        ] {
            assert_eq!(
                chrono_pattern(pattern),
                Err(refused.to_string()),
                "{pattern}"
            );
        }
    }
}
