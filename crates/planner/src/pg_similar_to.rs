//! `SIMILAR TO` with PostgreSQL's meaning.
//!
//! DataFusion matches a SIMILAR TO pattern as an unanchored regular
//! expression as written: `'Bob' SIMILAR TO '%o%'` was false and
//! `'abc' SIMILAR TO 'b'` true. PostgreSQL translates the pattern into an
//! anchored regular expression first (`similar_to_escape`): `%` matches any
//! string, `_` any character, `.` `^` `$` are literal, and `|` `*` `+` `?`
//! `{m,n}`, parentheses and bracket expressions keep their regex meaning.
//! This analyzer rule does the same translation and plans a regex match.

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{not_impl_err, plan_err, DFSchema, Result, ScalarValue};
use datafusion::logical_expr::expr::{BinaryExpr, Cast, Like, TryCast};
use datafusion::logical_expr::{lit, Expr, LogicalPlan, Operator};
use datafusion::optimizer::AnalyzerRule;

use crate::plan_rewrite::rewrite_exprs;

#[derive(Debug, Default)]
pub struct PostgresSimilarTo;

impl AnalyzerRule for PostgresSimilarTo {
    fn name(&self) -> &str {
        "postgres_similar_to"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        rewrite_exprs(plan, &rewrite)
    }
}

fn rewrite(expr: Expr, _schema: &DFSchema) -> Result<Transformed<Expr>> {
    let Expr::SimilarTo(Like {
        negated,
        expr,
        pattern,
        escape_char,
        case_insensitive,
    }) = expr
    else {
        return Ok(Transformed::no(expr));
    };
    // Type coercion may have cast the literal pattern.
    let mut constant = pattern.as_ref();
    while let Expr::Cast(Cast { expr, .. }) | Expr::TryCast(TryCast { expr, .. }) = constant {
        constant = expr;
    }
    let pattern = match constant {
        Expr::Literal(
            ScalarValue::Utf8(text) | ScalarValue::LargeUtf8(text) | ScalarValue::Utf8View(text),
            _,
        ) => text.clone(),
        Expr::Literal(ScalarValue::Null, _) => None,
        _ => return not_impl_err!("SIMILAR TO with a pattern that is not a constant"),
    };
    let Some(pattern) = pattern else {
        // x SIMILAR TO NULL is NULL.
        return Ok(Transformed::yes(lit(ScalarValue::Boolean(None))));
    };
    let regex = similar_to_regex(&pattern, escape_char.unwrap_or('\\'))?;
    let op = match (negated, case_insensitive) {
        (false, false) => Operator::RegexMatch,
        (true, false) => Operator::RegexNotMatch,
        (false, true) => Operator::RegexIMatch,
        (true, true) => Operator::RegexNotIMatch,
    };
    Ok(Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(
        expr,
        op,
        Box::new(lit(regex)),
    ))))
}

/// PostgreSQL's `similar_to_escape`: the anchored regular expression (in
/// Rust's syntax) that a SIMILAR TO pattern stands for.
fn similar_to_regex(pattern: &str, escape: char) -> Result<String> {
    // `(?s)`: `%` and `_` match line breaks too.
    let mut out = String::from("(?s)^(?:");
    let mut after_escape = false;
    let mut in_brackets = false;
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        if after_escape {
            if c == '"' {
                return plan_err!(
                    "SIMILAR TO patterns with escaped double quotes (substring markers) are not supported"
                );
            }
            if c.is_ascii_alphanumeric() {
                // PostgreSQL passes `\d`, `\y`, ... on to its regex engine;
                // each in Rust's spelling.
                out.push_str(class_escape(c)?);
            } else {
                push_literal(&mut out, c);
            }
            after_escape = false;
        } else if c == escape {
            after_escape = true;
        } else if in_brackets {
            if c == '[' && chars.peek() == Some(&':') {
                // A POSIX class (`[:alpha:]`), which Rust reads alike.
                out.push('[');
                for next in chars.by_ref() {
                    out.push(next);
                    if next == ']' {
                        break;
                    }
                }
                continue;
            }
            if c == '[' && matches!(chars.peek(), Some('.' | '=')) {
                return plan_err!(
                    "SIMILAR TO collating elements and equivalence classes ([. .], [= =]) are not supported"
                );
            }
            // Rust reads these as nested classes and set operators.
            if matches!(c, '\\' | '[' | '&' | '~') {
                out.push('\\');
            }
            out.push(c);
            if c == ']' {
                in_brackets = false;
            }
        } else {
            match c {
                '[' => {
                    out.push('[');
                    in_brackets = true;
                    // A leading `^` negates and a leading `]` is literal.
                    if chars.peek() == Some(&'^') {
                        out.push('^');
                        chars.next();
                    }
                    if chars.peek() == Some(&']') {
                        out.push_str("\\]");
                        chars.next();
                    }
                }
                '%' => out.push_str(".*"),
                '_' => out.push('.'),
                '(' => out.push_str("(?:"),
                '.' | '^' | '$' | '\\' => push_literal(&mut out, c),
                other => out.push(other),
            }
        }
    }
    if after_escape {
        return plan_err!("SIMILAR TO pattern must not end with the escape character");
    }
    out.push_str(")$");
    Ok(out)
}

/// The Rust regex for PostgreSQL's escape `\c` (a letter or digit).
fn class_escape(c: char) -> Result<&'static str> {
    Ok(match c {
        'd' => "\\d",
        'D' => "\\D",
        's' => "\\s",
        'S' => "\\S",
        'w' => "\\w",
        'W' => "\\W",
        'n' => "\\n",
        't' => "\\t",
        'r' => "\\r",
        'f' => "\\f",
        'v' => "\\v",
        'A' => "\\A",
        'Z' => "\\z",
        'y' => "\\b",
        'Y' => "\\B",
        'm' => "\\b{start}",
        'M' => "\\b{end}",
        // PostgreSQL's `\b` is a backspace, `\B` a backslash.
        'b' => "\\x08",
        'B' => "\\\\",
        other => {
            return plan_err!("SIMILAR TO escape \\{other} is not supported");
        }
    })
}

/// `c` as itself in a Rust regex: its metacharacters escaped (and only
/// those: `\<` is a word boundary there).
fn push_literal(out: &mut String, c: char) {
    if matches!(
        c,
        '\\' | '.'
            | '+'
            | '*'
            | '?'
            | '('
            | ')'
            | '|'
            | '['
            | ']'
            | '{'
            | '}'
            | '^'
            | '$'
            | '#'
            | '&'
            | '-'
            | '~'
    ) {
        out.push('\\');
    }
    out.push(c);
}

#[cfg(test)]
mod tests {
    use super::similar_to_regex;

    fn matches(text: &str, pattern: &str) -> bool {
        let regex = similar_to_regex(pattern, '\\').expect("translates");
        regex::Regex::new(&regex).expect("compiles").is_match(text)
    }

    #[test]
    fn patterns_match_as_in_postgresql() {
        // Each expectation is PostgreSQL 15's answer.
        for (text, pattern, expected) in [
            ("Bob", "%o%", true),
            ("abc", "a_c", true),
            ("abc", "(a|x)bc", true),
            ("abc", "b", false),
            ("a.c", "a.c", true),
            ("abc", "a.c", false),
            ("aaa", "a{2,3}", true),
            ("ab", "[a-b]+", true),
            ("a%", "a\\%", true),
            ("ab", "a\\%", false),
            ("line\nbreak", "line%", true),
            ("x^y", "x^y", true),
            ("]", "[]]", true),
            ("b", "[^a]", true),
            ("a<b", "a\\<b", true),
            ("a1", "a\\d", true),
            ("abc", "[[:alpha:]]+", true),
            ("a]", "[[:alpha:]]+", false),
            ("a b", "a\\yb%", false),
            ("a b", "a\\y %", true),
            ("[", "[[]", true),
            ("a&&b", "a[&]&b", true),
        ] {
            assert_eq!(
                matches(text, pattern),
                expected,
                "{text:?} SIMILAR TO {pattern:?}"
            );
        }
    }
}
