//! PostgreSQL's interval input forms that DataFusion's parser lacks.
//!
//! DataFusion reads `'1 day 3 hours'`, with fractions and PostgreSQL's unit
//! abbreviations, but not a time of day (`'01:30:00'`, `'1 day 02:00'`,
//! `'-1:30'`), PostgreSQL's `@` prefix, or a trailing `ago`, all of which
//! PostgreSQL accepts and prints (`'1 mon 1 day 01:00:00'`). These are
//! rewritten, in the parsed statement, into the unit form meaning the same:
//! `'1 day 02:00'` becomes `'1 day 2 hours 0 minutes'`, and `'2 hours ago'`
//! becomes `'-2 hours'`. Other literals are left as written, and text this
//! module does not understand is left for DataFusion to refuse.
//!
//! It applies to queries and to view definitions alike: the stored
//! definition of a view carries the rewritten literal, which plans again on
//! every restart.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    DataType, Expr, Interval, TypedString, Value, ValueWithSpan, VisitMut, VisitorMut,
};

/// Rewrites the interval literals of a statement (or any part of one) in
/// place (see the module documentation).
pub fn normalize_interval_literals<T: VisitMut>(node: &mut T) {
    let _ = node.visit(&mut IntervalLiterals);
}

struct IntervalLiterals;

impl VisitorMut for IntervalLiterals {
    type Break = ();

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        let text = match expr {
            Expr::Interval(Interval {
                value,
                leading_field: None,
                ..
            }) => match value.as_mut() {
                Expr::Value(value) => string_of(value),
                _ => None,
            },
            Expr::Cast {
                expr: inner,
                data_type: DataType::Interval { .. },
                ..
            } => match inner.as_mut() {
                Expr::Value(value) => string_of(value),
                _ => None,
            },
            Expr::TypedString(TypedString {
                data_type: DataType::Interval { .. },
                value,
                ..
            }) => string_of(value),
            _ => None,
        };
        if let Some(text) = text {
            // Only a rewrite DataFusion reads replaces the text, so an error
            // still quotes what the user wrote.
            if let Some(rewritten) = unit_form(text).filter(|unit| parses(unit)) {
                *text = rewritten;
            }
        }
        ControlFlow::Continue(())
    }
}

/// `text` as DataFusion reads it: in the unit form where it uses one of the
/// forms this module rewrites, else unchanged.
pub fn readable_interval(text: &str) -> String {
    unit_form(text)
        .filter(|unit| parses(unit))
        .unwrap_or_else(|| text.to_string())
}

fn parses(text: &str) -> bool {
    datafusion::arrow::compute::kernels::cast_utils::parse_interval_month_day_nano(text).is_ok()
}

fn string_of(value: &mut ValueWithSpan) -> Option<&mut String> {
    match &mut value.value {
        Value::SingleQuotedString(text) | Value::EscapedStringLiteral(text) => Some(text),
        _ => None,
    }
}

/// `text` in the unit form, when it uses a form DataFusion lacks and this
/// function understands; `None` otherwise (left as written).
fn unit_form(text: &str) -> Option<String> {
    let lower = text.trim().to_lowercase();
    let mut words: Vec<&str> = lower.split_whitespace().collect();
    if words.first() == Some(&"@") {
        words.remove(0);
    } else if let Some(first) = words.first_mut() {
        if let Some(rest) = first.strip_prefix('@') {
            *first = rest;
        }
    }
    let ago = words.last() == Some(&"ago");
    if ago {
        words.pop();
    }
    let has_time = words.iter().any(|word| word.contains(':'));
    if !ago && !has_time && !lower.trim_start().starts_with('@') {
        return None;
    }
    let mut parts: Vec<String> = Vec::with_capacity(words.len() + 2);
    for (index, word) in words.iter().enumerate() {
        let next_is_time = words.get(index + 1).is_some_and(|next| next.contains(':'));
        if word.contains(':') {
            parts.extend(time_of_day(word)?);
        } else if next_is_time && word.parse::<i64>().is_ok() {
            // A bare number before a time of day counts days (`'3 4:05:06'`).
            parts.push(format!("{word} days"));
        } else if word.parse::<f64>().is_ok()
            && !words
                .get(index + 1)
                .is_some_and(|next| next.starts_with(|c: char| c.is_ascii_alphabetic()))
        {
            // A number without a unit counts seconds, as PostgreSQL reads it.
            parts.push(format!("{word} seconds"));
        } else {
            parts.push(word.to_string());
        }
    }
    if ago {
        // Every amount changes sign; units stay.
        for part in &mut parts {
            if part.starts_with(|c: char| c.is_ascii_digit() || c == '.' || c == '-' || c == '+') {
                *part = negated(part);
            }
        }
    }
    Some(parts.join(" "))
}

/// `[+-]H:MM[:SS[.fraction]]` as signed amounts of hours, minutes and
/// seconds; `None` if it is not one.
fn time_of_day(word: &str) -> Option<Vec<String>> {
    let (negative, digits) = match word.as_bytes().first() {
        Some(b'-') => (true, &word[1..]),
        Some(b'+') => (false, &word[1..]),
        _ => (false, word),
    };
    let fields: Vec<&str> = digits.split(':').collect();
    if !(2..=3).contains(&fields.len()) {
        return None;
    }
    let whole = |field: &str| !field.is_empty() && field.bytes().all(|b| b.is_ascii_digit());
    let seconds_ok = |field: &str| {
        let (integer, fraction) = field.split_once('.').unwrap_or((field, "0"));
        whole(integer) && (fraction.is_empty() || whole(fraction))
    };
    if !whole(fields[0]) || !whole(fields[1]) || (fields.len() == 3 && !seconds_ok(fields[2])) {
        return None;
    }
    // Minutes and seconds stay below 60, or PostgreSQL refuses the value.
    let below_sixty = |field: &str| {
        field
            .split('.')
            .next()
            .and_then(|whole| whole.parse::<u32>().ok())
            .is_some_and(|value| value < 60)
    };
    if !below_sixty(fields[1]) || fields.get(2).is_some_and(|seconds| !below_sixty(seconds)) {
        return None;
    }
    let sign = if negative { "-" } else { "" };
    let mut amounts = vec![
        format!("{sign}{} hours", fields[0]),
        format!("{sign}{} minutes", fields[1]),
    ];
    if let Some(seconds) = fields.get(2) {
        amounts.push(format!("{sign}{seconds} seconds"));
    }
    Some(amounts)
}

fn negated(amount: &str) -> String {
    match amount.as_bytes().first() {
        Some(b'-') => amount[1..].to_string(),
        Some(b'+') => format!("-{}", &amount[1..]),
        _ => format!("-{amount}"),
    }
}

#[cfg(test)]
mod tests {
    //! Goal: each rewrite means what PostgreSQL reads (the printed values are
    //! checked end to end in `tests/slt/intervals.slt`).
    use super::*;

    #[test]
    fn times_of_day_at_and_ago_become_units() {
        for (text, expected) in [
            ("01:30:00", Some("01 hours 30 minutes 00 seconds")),
            ("1:30", Some("1 hours 30 minutes")),
            ("-01:30", Some("-01 hours -30 minutes")),
            (
                "1 day 02:00:00.5",
                Some("1 day 02 hours 00 minutes 00.5 seconds"),
            ),
            (
                "1 mon 1 day 01:00:00",
                Some("1 mon 1 day 01 hours 00 minutes 00 seconds"),
            ),
            ("2 hours ago", Some("-2 hours")),
            ("-1 day +02:00 ago", Some("1 day -02 hours -00 minutes")),
            ("@ 3 days", Some("3 days")),
            ("@3 days ago", Some("-3 days")),
            ("3 4:05:06", Some("3 days 4 hours 05 minutes 06 seconds")),
            ("5 ago", Some("-5 seconds")),
            ("1 day 5 ago", Some("-1 day -5 seconds")),
            // Forms DataFusion reads already, or that are not intervals.
            ("1 day 3 hours", None),
            ("1.5 months", None),
        ] {
            assert_eq!(unit_form(text).as_deref(), expected, "{text}");
        }
        assert_eq!(unit_form("1:2:3:4"), None);
        assert_eq!(unit_form("a:b"), None);
        assert_eq!(unit_form("1:75"), None);
        assert_eq!(unit_form("1:30:60"), None);
    }
}
