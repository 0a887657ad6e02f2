//! The streaming clauses RockStream builds (RFC 0013) that PostgreSQL's
//! grammar lacks: `WATERMARK FOR column AS column [- INTERVAL '…']` among a
//! `CREATE TABLE`'s elements, and `EMIT ON WINDOW CLOSE` after a
//! `CREATE MATERIALIZED VIEW`'s query. Each is cut out of the statement's
//! tokens (blanked, so token positions stay) before sqlparser reads it, and
//! travels beside the statement.

use datafusion::sql::sqlparser::ast::{BinaryOperator, Expr, Ident};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan, Whitespace};
use rockstream_control::WatermarkDef;
use rockstream_planner::fixed_interval_micros;
use rockstream_types::{codes, RsError, RsResult};

/// A statement's streaming clauses.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Streaming {
    pub watermark: Option<WatermarkDef>,
    pub emit_on_window_close: bool,
}

/// The streaming clauses cut from `tokens`, each with the position of its
/// first token (which tells the statement it belongs to).
pub(crate) fn cut_streaming_clauses(
    tokens: &mut [TokenWithSpan],
) -> RsResult<Vec<(usize, Streaming)>> {
    let mut found = Vec::new();
    let mut depth = 0usize;
    // The statement's first significant words, upper case.
    let mut leading: Vec<String> = Vec::new();
    let mut index = 0;
    while index < tokens.len() {
        match &tokens[index].token {
            Token::LParen => depth += 1,
            Token::RParen => depth = depth.saturating_sub(1),
            Token::SemiColon if depth == 0 => leading.clear(),
            Token::Whitespace(_) => {}
            token => {
                let word = word_at(token);
                if leading.len() < 3 {
                    leading.push(word.clone().unwrap_or_default());
                }
                let creates =
                    |kind: &[&str]| leading.len() >= kind.len() && leading[..kind.len()] == *kind;
                if depth == 1
                    && word.as_deref() == Some("WATERMARK")
                    && next_word(tokens, index).as_deref() == Some("FOR")
                    && creates(&["CREATE", "TABLE"])
                {
                    let end = element_end(tokens, index);
                    let watermark = parse_watermark(&tokens[index..end])?;
                    blank_element(tokens, index, end);
                    found.push((
                        index,
                        Streaming {
                            watermark: Some(watermark),
                            emit_on_window_close: false,
                        },
                    ));
                    index = end;
                    continue;
                }
                // (After a plain view's query too, to be refused by name.)
                if depth == 0
                    && word.as_deref() == Some("EMIT")
                    && (creates(&["CREATE", "MATERIALIZED", "VIEW"])
                        || creates(&["CREATE", "VIEW"]))
                {
                    if let Some(end) =
                        words_follow(tokens, index, &["EMIT", "ON", "WINDOW", "CLOSE"])
                    {
                        for token in &mut tokens[index..end] {
                            token.token = Token::Whitespace(Whitespace::Space);
                        }
                        found.push((
                            index,
                            Streaming {
                                watermark: None,
                                emit_on_window_close: true,
                            },
                        ));
                        index = end;
                        continue;
                    }
                }
            }
        }
        index += 1;
    }
    Ok(found)
}

/// An unquoted word's text in upper case.
fn word_at(token: &Token) -> Option<String> {
    match token {
        Token::Word(word) if word.quote_style.is_none() => Some(word.value.to_ascii_uppercase()),
        _ => None,
    }
}

/// The next significant token after `index`, as a word.
fn next_word(tokens: &[TokenWithSpan], index: usize) -> Option<String> {
    tokens[index + 1..]
        .iter()
        .find(|token| !matches!(token.token, Token::Whitespace(_)))
        .and_then(|token| word_at(&token.token))
}

/// The end (exclusive) of `words` spelt from `index` on, if they are.
fn words_follow(tokens: &[TokenWithSpan], index: usize, words: &[&str]) -> Option<usize> {
    let mut at = index;
    for expected in words {
        while matches!(tokens.get(at)?.token, Token::Whitespace(_)) {
            at += 1;
        }
        if word_at(&tokens[at].token).as_deref() != Some(*expected) {
            return None;
        }
        at += 1;
    }
    Some(at)
}

/// Where the table element starting at `start` ends: at the comma or the
/// closing parenthesis of the element list.
fn element_end(tokens: &[TokenWithSpan], start: usize) -> usize {
    let mut depth = 0usize;
    for (index, token) in tokens.iter().enumerate().skip(start) {
        match token.token {
            Token::LParen => depth += 1,
            Token::RParen if depth == 0 => return index,
            Token::RParen => depth -= 1,
            Token::Comma if depth == 0 => return index,
            Token::SemiColon | Token::EOF if depth == 0 => return index,
            _ => {}
        }
    }
    tokens.len()
}

/// Blanks the element `start..end` and the comma that separates it from
/// the element before it (or, when first, after it).
fn blank_element(tokens: &mut [TokenWithSpan], start: usize, end: usize) {
    let before = tokens[..start]
        .iter()
        .rposition(|token| !matches!(token.token, Token::Whitespace(_)));
    let comma = match before {
        Some(before) if tokens[before].token == Token::Comma => Some(before),
        _ if tokens
            .get(end)
            .is_some_and(|token| token.token == Token::Comma) =>
        {
            Some(end)
        }
        _ => None,
    };
    for token in &mut tokens[start..end] {
        token.token = Token::Whitespace(Whitespace::Space);
    }
    if let Some(comma) = comma {
        tokens[comma].token = Token::Whitespace(Whitespace::Space);
    }
}

/// `WATERMARK FOR column AS column [- INTERVAL '…']`.
fn parse_watermark(tokens: &[TokenWithSpan]) -> RsResult<WatermarkDef> {
    let syntax = |detail: String| {
        RsError::new(
            &codes::SYNTAX_ERROR,
            format!("WATERMARK FOR column AS column [- INTERVAL '...']: {detail}"),
        )
    };
    let mut parser = Parser::new(&PostgreSqlDialect {}).with_tokens_with_locations(tokens.to_vec());
    let mut read = || -> Result<(Ident, Expr), datafusion::sql::sqlparser::parser::ParserError> {
        parser.next_token();
        parser.next_token();
        let column = parser.parse_identifier()?;
        parser.expect_keyword_is(Keyword::AS)?;
        let expr = parser.parse_expr()?;
        parser.expect_token(&Token::EOF)?;
        Ok((column, expr))
    };
    let (column, expr) = read().map_err(|error| syntax(error.to_string()))?;
    let name = identifier_name(&column);
    let unsupported = || {
        RsError::new(
            &codes::UNSUPPORTED_STATEMENT,
            format!(
                "the watermark \"{expr}\" is not supported: write \"{name}\" or \"{name} - INTERVAL '...'\" (a constant interval without months)"
            ),
        )
    };
    let same_column =
        |expr: &Expr| matches!(expr, Expr::Identifier(ident) if identifier_name(ident) == name);
    let delay_micros = match &expr {
        expr if same_column(expr) => 0,
        Expr::BinaryOp {
            left,
            op: BinaryOperator::Minus,
            right,
        } if same_column(left) => fixed_interval_micros(right).ok_or_else(unsupported)?,
        _ => return Err(unsupported()),
    };
    if delay_micros < 0 {
        return Err(unsupported());
    }
    Ok(WatermarkDef {
        column: name,
        delay_micros,
    })
}

/// An identifier as the catalog names it: folded to lower case unless
/// quoted.
fn identifier_name(ident: &Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    //! Goal: the clauses are cut from the statements they belong to and
    //! nowhere else, the rest parses as PostgreSQL's grammar, and a
    //! watermark other than `column [- interval]` is refused.
    use super::*;
    use datafusion::sql::sqlparser::tokenizer::Tokenizer;

    fn cut(sql: &str) -> RsResult<(String, Vec<Streaming>)> {
        let mut tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
            .tokenize_with_location()
            .expect("as written");
        let found = cut_streaming_clauses(&mut tokens)?;
        let text: String = tokens.iter().map(|token| token.token.to_string()).collect();
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        Ok((text, found.into_iter().map(|(_, clause)| clause).collect()))
    }

    #[test]
    fn a_watermark_is_cut_from_the_column_list() {
        let (text, found) = cut(
            "CREATE TABLE bids (id int, \"At\" timestamp, WATERMARK FOR \"At\" AS \"At\" - INTERVAL '5 seconds', price int)",
        )
        .expect("as written");
        assert_eq!(
            text,
            "CREATE TABLE bids (id int, \"At\" timestamp , price int)"
        );
        assert_eq!(
            found,
            vec![Streaming {
                watermark: Some(WatermarkDef {
                    column: "At".into(),
                    delay_micros: 5_000_000
                }),
                emit_on_window_close: false
            }]
        );
        let (text, found) =
            cut("CREATE TABLE t (WATERMARK FOR ts AS ts, ts TIMESTAMP); SELECT watermark FROM t")
                .expect("as written");
        assert_eq!(
            text,
            "CREATE TABLE t ( ts TIMESTAMP); SELECT watermark FROM t"
        );
        assert_eq!(
            found[0]
                .watermark
                .as_ref()
                .expect("as written")
                .delay_micros,
            0
        );
        // A column named `watermark`, a clause outside CREATE TABLE: untouched.
        let (_, found) =
            cut("CREATE TABLE t (watermark int); ALTER TABLE t ADD WATERMARK FOR ts AS ts")
                .expect("as written");
        assert!(found.is_empty());
    }

    #[test]
    fn emit_on_window_close_is_cut_after_a_materialized_views_query() {
        let (text, found) = cut(
            "CREATE MATERIALIZED VIEW v AS SELECT window_start, count(*) FROM TUMBLE(t, ts, INTERVAL '1' MINUTE) GROUP BY 1 EMIT ON WINDOW CLOSE; SELECT 1",
        )
        .expect("as written");
        assert!(text.ends_with("GROUP BY 1 ; SELECT 1"), "{text}");
        assert!(found[0].emit_on_window_close);
        let (_, found) = cut("SELECT 1 EMIT ON WINDOW CLOSE").expect("as written");
        assert!(found.is_empty());
    }

    #[test]
    fn each_statement_carries_its_own_clauses() {
        let commands = crate::wire::parse(
            "CREATE TABLE t (ts timestamp, WATERMARK FOR ts AS ts);\
             CREATE MATERIALIZED VIEW v AS SELECT ts FROM t EMIT ON WINDOW CLOSE ; SELECT 1;\
             CREATE MATERIALIZED VIEW w AS SELECT ts FROM t EMIT ON WINDOW CLOSE",
        )
        .expect("as written");
        let clauses: Vec<Option<Streaming>> = commands
            .into_iter()
            .map(|command| match command {
                crate::wire::Command::Streaming { clauses, .. } => Some(clauses),
                _ => None,
            })
            .collect();
        assert_eq!(clauses.len(), 4);
        assert!(clauses[0].as_ref().expect("as written").watermark.is_some());
        assert!(
            clauses[1]
                .as_ref()
                .expect("as written")
                .emit_on_window_close
        );
        assert!(clauses[2].is_none());
        assert!(
            clauses[3]
                .as_ref()
                .expect("as written")
                .emit_on_window_close
        );
    }

    proptest::proptest! {
        /// Whatever the tokens around and inside them, the clauses are cut
        /// or refused with a coded error, never a panic, and what parses
        /// carries each clause with its own statement.
        #[test]
        fn any_arrangement_of_the_clauses_parses_or_is_refused(
            words in proptest::collection::vec(
                proptest::sample::select(vec![
                    "CREATE", "TABLE", "MATERIALIZED", "VIEW", "t", "ts", "watermark", "WATERMARK",
                    "FOR", "AS", "-", "INTERVAL '1 second'", "(", ")", ",", ";", "EMIT", "ON",
                    "WINDOW", "CLOSE", "SELECT", "FROM", "timestamp", "\"ts\"", "1",
                ]),
                0..24,
            ),
        ) {
            let sql = words.join(" ");
            if let Err(error) = crate::wire::parse(&sql) {
                proptest::prop_assert!(
                    [&codes::SYNTAX_ERROR, &codes::UNSUPPORTED_STATEMENT]
                        .iter()
                        .any(|code| code.number == error.code.number),
                    "{sql}: {error:?}"
                );
            }
        }
    }

    #[test]
    fn other_watermarks_are_refused() {
        for sql in [
            "CREATE TABLE t (ts timestamp, WATERMARK FOR ts AS ts + INTERVAL '1 second')",
            "CREATE TABLE t (ts timestamp, u timestamp, WATERMARK FOR ts AS u)",
            "CREATE TABLE t (ts timestamp, WATERMARK FOR ts AS ts - INTERVAL '1 month')",
        ] {
            let error = cut(sql).expect_err("refused");
            assert_eq!(error.code, &codes::UNSUPPORTED_STATEMENT, "{sql}");
        }
        let Err(error) = crate::wire::parse(
            "CREATE TABLE t (ts timestamp, WATERMARK FOR ts AS ts, WATERMARK FOR ts AS ts)",
        ) else {
            panic!("two watermarks are refused");
        };
        assert_eq!(error.code, &codes::UNSUPPORTED_STATEMENT);
        let error = cut("CREATE TABLE t (ts timestamp, WATERMARK FOR ts ts)").expect_err("refused");
        assert_eq!(error.code, &codes::SYNTAX_ERROR);
    }
}
