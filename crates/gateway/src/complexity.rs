//! A bound on how deeply a statement nests, checked before it is parsed.
//!
//! Parsing, planning and evaluating a statement recurse over its syntax
//! tree, and a chain of operators (`a OR b OR c ...`, `1 + 1 + ...`,
//! `SELECT ... UNION ALL SELECT ...`) nests one level per operator. A few
//! thousand of them overflowed a thread's stack, which aborts the whole
//! server. So the tokens are scanned first, without recursion: within each
//! pair of parentheses (or `CASE ... END`), operators chain until a comma
//! (or `WHEN`, `THEN`, `ELSE`) ends the expression (set operations and joins
//! chain across commas), and the chains of the enclosing levels add up. A statement whose deepest point exceeds
//! [`NESTING_MAX`] is refused with `RS-2033` (SQLSTATE 54001), as
//! PostgreSQL refuses one that exceeds its stack depth limit.
//!
//! Planning also grows faster than linearly in a select list's length (a
//! `SELECT` of 16,000 expressions took 10 s to plan, one of 100,000 minutes
//! of CPU). PostgreSQL caps a select list at [`SELECT_LIST_MAX`] items, so
//! [`check_select_lists`] refuses longer ones, as it does (54000), and a
//! scalar subquery without columns.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{Expr, Query, SetExpr, Statement, Visit, Visitor};
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};
use rockstream_types::{codes, RsError, RsResult};

/// The deepest nesting accepted. The server's threads have stacks sized so
/// that twice this much plans in a debug build.
pub const NESTING_MAX: usize = 1000;

/// PostgreSQL's `MaxTupleAttributeNumber`: the most items a select list
/// may have.
pub const SELECT_LIST_MAX: usize = 1664;

/// Refuses a statement with a select list of more than [`SELECT_LIST_MAX`]
/// items, anywhere in it.
pub fn check_select_lists(statement: &Statement) -> RsResult<()> {
    match statement.visit(&mut SelectLists) {
        ControlFlow::Break(error) => Err(error),
        ControlFlow::Continue(()) => Ok(()),
    }
}

struct SelectLists;

impl Visitor for SelectLists {
    type Break = RsError;

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<RsError> {
        check_body(&query.body)
    }

    /// A scalar subquery gives one column: PostgreSQL refuses one with
    /// none (`(SELECT FROM t)`), which DataFusion cannot plan.
    fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<RsError> {
        match expr {
            Expr::Subquery(query) if matches!(query.body.as_ref(), SetExpr::Select(select) if select.projection.is_empty()) => {
                ControlFlow::Break(RsError::new(
                    &codes::SYNTAX_ERROR,
                    "subquery must return only one column",
                ))
            }
            _ => ControlFlow::Continue(()),
        }
    }
}

/// The select lists of one query body (each branch of a set operation).
fn check_body(body: &SetExpr) -> ControlFlow<RsError> {
    match body {
        SetExpr::Select(select) if select.projection.len() > SELECT_LIST_MAX => {
            ControlFlow::Break(RsError::new(
                &codes::PROGRAM_LIMIT_EXCEEDED,
                format!(
                    "target lists can have at most {SELECT_LIST_MAX} entries; this one has {}",
                    select.projection.len()
                ),
            ))
        }
        SetExpr::SetOperation { left, right, .. } => {
            check_body(left)?;
            check_body(right)
        }
        _ => ControlFlow::Continue(()),
    }
}

/// Operators chained within one expression, and set operations and joins
/// chained within one query, at one level of parentheses.
#[derive(Default, Clone, Copy)]
struct Level {
    expression: usize,
    query: usize,
}

/// Refuses a statement's `tokens` when they nest deeper than
/// [`NESTING_MAX`].
pub fn check_nesting(tokens: &[TokenWithSpan]) -> RsResult<()> {
    let mut levels = vec![Level::default()];
    let mut depth = 0usize;
    for TokenWithSpan { token, .. } in tokens {
        let keyword = match token {
            Token::Word(word) => Some(word.keyword),
            _ => None,
        };
        match (token, keyword) {
            // A CASE's branches are a list, like the arguments of a call.
            (Token::LParen, _) | (_, Some(Keyword::CASE)) => levels.push(Level::default()),
            (Token::RParen, _) | (_, Some(Keyword::END)) if levels.len() > 1 => {
                if let Some(closed) = levels.pop() {
                    depth -= closed.expression + closed.query;
                }
            }
            (Token::Comma | Token::SemiColon, _)
            | (_, Some(Keyword::WHEN | Keyword::THEN | Keyword::ELSE)) => {
                if let Some(level) = levels.last_mut() {
                    depth -= level.expression;
                    level.expression = 0;
                    if *token == Token::SemiColon {
                        depth -= level.query;
                        level.query = 0;
                    }
                }
            }
            (_, Some(Keyword::UNION | Keyword::INTERSECT | Keyword::EXCEPT | Keyword::JOIN)) => {
                if let Some(level) = levels.last_mut() {
                    level.query += 1;
                    depth += 1;
                }
            }
            (_, Some(Keyword::AND | Keyword::OR))
            | (
                Token::Plus
                | Token::Minus
                | Token::Mul
                | Token::Div
                | Token::Mod
                | Token::StringConcat,
                _,
            ) => {
                if let Some(level) = levels.last_mut() {
                    level.expression += 1;
                    depth += 1;
                }
            }
            _ => {}
        }
        if depth > NESTING_MAX {
            return Err(RsError::new(
                &codes::STATEMENT_TOO_COMPLEX,
                format!(
                    "statement is too complex: its expressions or set operations nest more than {NESTING_MAX} levels deep"
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! Goal: long chains are refused wherever they nest, and long flat lists are not.
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::tokenizer::Tokenizer;

    fn check(sql: &str) -> RsResult<()> {
        let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
            .tokenize_with_location()
            .expect("tokenizes");
        check_nesting(&tokens)
    }

    fn chained(separator: &str, count: usize) -> String {
        vec!["1"; count].join(separator)
    }

    #[test]
    fn long_chains_are_refused_and_lists_are_not() {
        let deep = [
            format!("SELECT 1 WHERE {}", chained(" = 1 OR 1", NESTING_MAX + 2)),
            format!("SELECT {}", chained(" + ", NESTING_MAX + 2)),
            (0..=NESTING_MAX + 1)
                .map(|_| "SELECT 1, 2")
                .collect::<Vec<_>>()
                .join(" UNION ALL "),
            // Chains in nested parentheses add up.
            format!(
                "SELECT {} + ({} - 1)",
                chained(" + ", 600),
                chained(" * ", 600)
            ),
        ];
        for (index, sql) in deep.iter().enumerate() {
            let error = check(sql).expect_err(&format!("case {index} is too deep"));
            assert_eq!(error.code.sqlstate, "54001");
        }
        let flat = [
            format!("SELECT {}", chained(", -", 5000)),
            format!(
                "INSERT INTO t VALUES {}",
                (0..5000)
                    .map(|i| format!("({i}, -{i})"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            format!("SELECT 1 WHERE x IN ({})", chained(", ", 5000)),
            // Side by side, chains do not add up.
            format!(
                "SELECT ({}), ({})",
                chained(" + ", 900),
                chained(" + ", 900)
            ),
            format!(
                "SELECT ({}) * ({})",
                chained(" + ", 900),
                chained(" * ", 900)
            ),
            format!("{}; {}", chained(" + ", 900), chained(" + ", 900)),
            format!(
                "SELECT CASE {} END",
                (0..2000)
                    .map(|i| format!("WHEN a = {i} AND b = {i} THEN {i} + 1"))
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        ];
        for sql in &flat {
            check(sql).expect("flat enough");
        }
    }
}
