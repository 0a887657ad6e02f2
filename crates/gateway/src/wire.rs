//! The pgwire [`Backend`] of the gateway: connection, simple and extended
//! query protocol, COPY.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::{Expr, ExprSchemable, LogicalPlan};
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::{
    visit_expressions, visit_expressions_mut, ArrayElemTypeDef, DataType as SqlDataType,
    Expr as SqlExpr, FetchDirection, FetchPosition, Ident, Insert, ObjectName, Statement,
    TableObject, Value,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer};
use rockstream_control::ObjectKind;
use rockstream_ops::arrow_rows::arrow_type;
use rockstream_pgwire::{
    Backend, CopyPart, CopyTarget, Described, IdleLimit, Interrupt, Notice, PreparedStatements,
    StatementResult, TransactionState,
};
use rockstream_planner::{
    alias_select_items, normalize_interval_literals, normalize_number_literals,
    normalize_type_spellings, pg_column_names,
};
use rockstream_types::{codes, RsError, RsResult};

use crate::backend::{
    as_postgres_reads_it, object_name, pg_result_schema, renamed_schema, repeats_a_name,
    show_column_name, show_schema, Gateway,
};
use crate::complexity::{check_nesting, check_select_lists};
use crate::defaults;
use crate::dml::{self, query_error};
use crate::fast_path;
use crate::providers::SnapshotResolver;
use crate::session::{CopyInProgress, GatewaySession};
use crate::streaming::{cut_streaming_clauses, Streaming};

/// A prepared statement's parsed form, kept by the wire layer
/// ([`Described::parsed`]) and copied for each Execute.
struct Parsed(Vec<Command>);

/// A statement as the gateway runs it: one sqlparser reads, or one of
/// PostgreSQL's it lacks.
#[derive(Clone)]
pub(crate) enum Command {
    Sql(Box<Statement>),
    /// A statement with the streaming clauses cut from it (RFC 0013).
    Streaming {
        statement: Box<Statement>,
        clauses: Streaming,
    },
    /// `REFRESH MATERIALIZED VIEW [CONCURRENTLY] name [WITH [NO] DATA]`.
    RefreshMaterializedView {
        name: ObjectName,
        with_data: bool,
    },
    /// `MOVE [direction] [FROM | IN] cursor`: `FETCH` without the rows.
    Move {
        name: Ident,
        direction: FetchDirection,
    },
}

/// Clauses of streaming engines' SQL (RisingWave, Flink) that PostgreSQL's
/// grammar lacks, each with what to call it in the error that refuses it.
const STREAMING_CLAUSES: &[(&[&str], &str)] = &[
    (
        &["WATERMARK", "FOR"],
        "WATERMARK FOR other than among CREATE TABLE's columns",
    ),
    (
        &["EMIT", "ON", "WINDOW", "CLOSE"],
        "EMIT ON WINDOW CLOSE other than after CREATE MATERIALIZED VIEW's query",
    ),
    (&["APPEND", "ONLY"], "APPEND ONLY tables"),
];

/// A streaming clause found in a statement's tokens.
struct StreamingClause {
    /// The index of its first token.
    at: usize,
    /// The index just past the significant token before it.
    after: usize,
    described: &'static str,
}

/// RS-2024 naming the first of `clauses` that `failed_at` says the parse
/// failed on, if any.
fn streaming_refusal(
    clauses: &[StreamingClause],
    failed_at: impl Fn(&StreamingClause) -> bool,
) -> Option<RsError> {
    let clause = clauses.iter().find(|clause| failed_at(clause))?;
    Some(RsError::new(
        &codes::UNSUPPORTED_STATEMENT,
        format!("{} is not supported yet", clause.described),
    ))
}

/// The streaming clauses in `tokens` (unquoted words in order).
fn streaming_clauses(tokens: &[TokenWithSpan]) -> Vec<StreamingClause> {
    let words: Vec<(usize, &str)> = tokens
        .iter()
        .enumerate()
        .filter(|(_, token)| !matches!(token.token, Token::Whitespace(_)))
        .map(|(index, token)| match &token.token {
            Token::Word(word) if word.quote_style.is_none() => (index, word.value.as_str()),
            _ => (index, ""),
        })
        .collect();
    let mut found = Vec::new();
    for (clause, described) in STREAMING_CLAUSES {
        for (position, window) in words.windows(clause.len()).enumerate() {
            let matches = window
                .iter()
                .zip(clause.iter())
                .all(|((_, word), expected)| word.eq_ignore_ascii_case(expected));
            if matches {
                let after = match position.checked_sub(1) {
                    Some(before) => words[before].0 + 1,
                    None => 0,
                };
                found.push(StreamingClause {
                    at: window[0].0,
                    after,
                    described,
                });
            }
        }
    }
    found
}

/// The statements of `sql`, with interval literals in the forms DataFusion
/// reads ([`normalize_interval_literals`]); refused when they nest too
/// deeply ([`check_nesting`]).
pub(crate) fn parse(sql: &str) -> RsResult<Vec<Command>> {
    parse_noting(sql, &mut Vec::new())
}

/// [`parse`], adding to `notices` PostgreSQL's for what it does to the
/// text (identifiers truncated).
pub(crate) fn parse_noting(sql: &str, notices: &mut Vec<Notice>) -> RsResult<Vec<Command>> {
    let syntax_error = |error: ParserError| RsError::new(&codes::SYNTAX_ERROR, error.to_string());
    let dialect = PostgreSqlDialect {};
    // Tokenized once, for the nesting bound and the parser alike (which
    // reports a tokenizer error just as `Parser::parse_sql` would).
    let mut tokens = Tokenizer::new(&dialect, sql)
        .tokenize_with_location()
        .map_err(|error| syntax_error(ParserError::from(error)))?;
    notices.extend(truncate_identifiers(&mut tokens));
    check_nesting(&tokens)?;
    check_parameter_numbers(&tokens)?;
    let mut built = cut_streaming_clauses(&mut tokens)?;
    let streaming = streaming_clauses(&tokens);
    let mut parser = Parser::new(&dialect).with_tokens_with_locations(tokens);
    let mut commands = Vec::new();
    // `Parser::parse_statements`, with the statements it lacks.
    loop {
        while parser.consume_token(&Token::SemiColon) {}
        if parser.peek_token_ref().token == Token::EOF {
            break;
        }
        let start = parser.index();
        let command = if parser.parse_keyword(Keyword::REFRESH) {
            parse_refresh(&mut parser).map_err(syntax_error)?
        } else if parser.parse_keywords(&[Keyword::CREATE, Keyword::USER]) {
            // PostgreSQL's CREATE USER: CREATE ROLE that may log in (the
            // parser reads another dialect's form).
            let mut create = parser.parse_create_role().map_err(syntax_error)?;
            create.login.get_or_insert(true);
            Command::Sql(Box::new(Statement::CreateRole(create)))
        } else if parser.parse_keywords(&[Keyword::ALTER, Keyword::USER]) {
            // ALTER USER: ALTER ROLE's other name.
            Command::Sql(Box::new(parser.parse_alter_role().map_err(syntax_error)?))
        } else if matches!(&parser.peek_token_ref().token,
            Token::Word(word) if word.quote_style.is_none() && word.value.eq_ignore_ascii_case("move"))
        {
            parser.next_token();
            let (name, direction) = match bare_cursor(&mut parser) {
                Some(name) => (name, FetchDirection::Next),
                None => match parser.parse_fetch_statement().map_err(syntax_error)? {
                    Statement::Fetch {
                        name, direction, ..
                    } => (name, direction),
                    _ => return Err(RsError::internal("MOVE did not parse as FETCH")),
                },
            };
            Command::Move { name, direction }
        } else if parser.peek_keyword(Keyword::FETCH) && cursor_alone_at(&parser, 1) {
            parser.next_token();
            let name = bare_cursor(&mut parser)
                .ok_or_else(|| RsError::internal("FETCH names no cursor"))?;
            Command::Sql(Box::new(Statement::Fetch {
                name,
                direction: FetchDirection::Next,
                position: FetchPosition::From,
                into: None,
            }))
        } else {
            let mut statement = parser.parse_statement().map_err(|error| {
                let end = parser.index();
                streaming_refusal(&streaming, |clause| (start..=end).contains(&clause.at))
                    .unwrap_or_else(|| syntax_error(error))
            })?;
            check_select_lists(&statement)?;
            normalize_interval_literals(&mut statement);
            normalize_type_spellings(&mut statement);
            normalize_number_literals(&mut statement);
            Command::Sql(Box::new(statement))
        };
        let terminated = parser.consume_token(&Token::SemiColon);
        // The statement's streaming clauses: cut from its tokens, up to
        // its semicolon (the parser stops before blanked tokens).
        let end = if terminated {
            parser.index()
        } else {
            usize::MAX
        };
        commands.push(with_streaming_clauses(command, &mut built, start..end)?);
        if !terminated && parser.peek_token_ref().token != Token::EOF {
            let error = syntax_error(ParserError::ParserError(format!(
                "Expected: end of statement, found: {}",
                parser.peek_token_ref()
            )));
            // The statement ended where a streaming clause begins, or
            // read part of one as something else (`ADD WATERMARK FOR …`
            // as a column, `EMIT` as an alias).
            let end = parser.index();
            let refusal = streaming_refusal(&streaming, |clause| {
                (clause.after..=clause.at).contains(&end) || (start..end).contains(&clause.at)
            });
            return Err(refusal.unwrap_or(error));
        }
    }
    Ok(commands)
}

/// `command` with the streaming clauses of `built` cut from within
/// `tokens` (which are taken from `built`).
fn with_streaming_clauses(
    command: Command,
    built: &mut Vec<(usize, Streaming)>,
    tokens: std::ops::Range<usize>,
) -> RsResult<Command> {
    let mut clauses = Streaming::default();
    let mut watermarks = 0;
    built.retain(|(at, clause)| {
        let within = tokens.contains(at);
        if within {
            watermarks += usize::from(clause.watermark.is_some());
            clauses.watermark = clauses.watermark.take().or(clause.watermark.clone());
            clauses.emit_on_window_close |= clause.emit_on_window_close;
        }
        !within
    });
    if watermarks > 1 {
        return Err(RsError::new(
            &codes::UNSUPPORTED_STATEMENT,
            "a table with more than one WATERMARK FOR is not supported",
        ));
    }
    Ok(match command {
        Command::Sql(statement) if clauses != Streaming::default() => {
            Command::Streaming { statement, clauses }
        }
        other => other,
    })
}

/// Whether the token `offset` ahead is a cursor's name standing alone (the
/// statement ends after it): `FETCH c` and `MOVE c`, which PostgreSQL reads
/// as `… NEXT FROM c` and sqlparser refuses.
fn cursor_alone_at(parser: &Parser<'_>, offset: usize) -> bool {
    let named = match &parser.peek_nth_token_ref(offset).token {
        Token::Word(word) => {
            word.quote_style.is_some()
                || !matches!(
                    word.keyword,
                    Keyword::NEXT
                        | Keyword::PRIOR
                        | Keyword::FIRST
                        | Keyword::LAST
                        | Keyword::ABSOLUTE
                        | Keyword::RELATIVE
                        | Keyword::ALL
                        | Keyword::FORWARD
                        | Keyword::BACKWARD
                        | Keyword::FROM
                        | Keyword::IN
                )
        }
        _ => false,
    };
    named
        && matches!(
            parser.peek_nth_token_ref(offset + 1).token,
            Token::SemiColon | Token::EOF
        )
}

/// The cursor's name when it stands alone next ([`cursor_alone_at`]).
fn bare_cursor(parser: &mut Parser<'_>) -> Option<Ident> {
    if !cursor_alone_at(parser, 0) {
        return None;
    }
    parser.parse_identifier().ok()
}

/// PostgreSQL's `NAMEDATALEN - 1`: the bytes of an identifier it keeps.
const IDENTIFIER_BYTES_MAX: usize = 63;

/// Truncates identifiers (quoted or not) to [`IDENTIFIER_BYTES_MAX`] bytes
/// at a character boundary, as PostgreSQL does: `CREATE TABLE` with a long
/// name creates the truncated name, and the long name still finds it.
/// Returns PostgreSQL's NOTICE for each.
fn truncate_identifiers(tokens: &mut [TokenWithSpan]) -> Vec<Notice> {
    let mut notices = Vec::new();
    for token in tokens {
        if let Token::Word(word) = &mut token.token {
            if word.value.len() > IDENTIFIER_BYTES_MAX {
                let mut end = IDENTIFIER_BYTES_MAX;
                while !word.value.is_char_boundary(end) {
                    end -= 1;
                }
                let long = word.value.clone();
                word.value.truncate(end);
                notices.push(Notice {
                    sqlstate: "42622",
                    message: format!(
                        "identifier \"{long}\" will be truncated to \"{}\"",
                        word.value
                    ),
                    detail: None,
                });
            }
        }
    }
    notices
}

/// Refuses a `$n` beyond PostgreSQL's 65 535 parameters before anything
/// sizes a list of parameter types by it.
fn check_parameter_numbers(tokens: &[TokenWithSpan]) -> RsResult<()> {
    for token in tokens {
        let Token::Placeholder(name) = &token.token else {
            continue;
        };
        let Some(digits) = name.strip_prefix('$') else {
            continue;
        };
        if digits.parse::<u16>().is_err() && digits.bytes().all(|byte| byte.is_ascii_digit()) {
            return Err(RsError::new(
                &codes::UNDEFINED_PARAMETER,
                format!("there is no parameter {name}: a statement has at most $65535"),
            ));
        }
    }
    Ok(())
}

/// The rest of `REFRESH MATERIALIZED VIEW [CONCURRENTLY] name [WITH [NO] DATA]`.
fn parse_refresh(parser: &mut Parser<'_>) -> Result<Command, ParserError> {
    parser.expect_keywords(&[Keyword::MATERIALIZED, Keyword::VIEW])?;
    let _ = parser.parse_keyword(Keyword::CONCURRENTLY);
    let name = parser.parse_object_name(false)?;
    let with_data = if parser.parse_keyword(Keyword::WITH) {
        let no = parser.parse_keyword(Keyword::NO);
        parser.expect_keyword_is(Keyword::DATA)?;
        !no
    } else {
        true
    };
    Ok(Command::RefreshMaterializedView { name, with_data })
}

/// The types of the `$n` placeholders written directly under a cast
/// (`$1::int`), by number: PostgreSQL types such a parameter as the cast's
/// target, where DataFusion leaves it untyped.
fn cast_parameter_types(statement: &Statement) -> BTreeMap<usize, DataType> {
    let mut types = BTreeMap::new();
    let _ = visit_expressions(statement, |expr: &SqlExpr| {
        if let SqlExpr::Cast {
            expr: inner,
            data_type,
            ..
        } = expr
        {
            if let SqlExpr::Value(value) = inner.as_ref() {
                if let Value::Placeholder(name) = &value.value {
                    let index = name.trim_start_matches('$').parse::<usize>().unwrap_or(0);
                    let typed = match data_type {
                        // `$1::int[]`: an array of the element type.
                        SqlDataType::Array(
                            ArrayElemTypeDef::SquareBracket(element, _)
                            | ArrayElemTypeDef::AngleBracket(element),
                        ) => cast_type(element).map(|element| DataType::new_list(element, true)),
                        _ => cast_type(data_type),
                    };
                    if let Some(typed) = typed {
                        types.entry(index).or_insert(typed);
                    }
                }
            }
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    types
}

/// The type a parameter cast to `data_type` has: a column type's, or
/// `oid` (described as `oid`, bound as the bigint oids are).
fn cast_type(data_type: &SqlDataType) -> Option<DataType> {
    if let SqlDataType::Custom(name, modifiers) = data_type {
        let last = name.0.last().and_then(|part| part.as_ident());
        if modifiers.is_empty() && last.is_some_and(|ident| ident.value.eq_ignore_ascii_case("oid"))
        {
            return Some(DataType::UInt32);
        }
    }
    crate::ddl::sql_type(data_type).ok().map(arrow_type)
}

/// Whether `data_type` is `oid` or `oid[]` as [`cast_type`] gives it:
/// planning types such a parameter bigint, but clients must be told oid.
fn is_oid_type(data_type: &DataType) -> bool {
    match data_type {
        DataType::List(element) => element.data_type() == &DataType::UInt32,
        other => other == &DataType::UInt32,
    }
}

/// Replaces `$n` placeholders with typed literals.
fn bind_parameters(
    statement: &mut Statement,
    params: &[Option<String>],
    types: &[DataType],
) -> RsResult<()> {
    let mut failure = None;
    let _ = visit_expressions_mut(statement, |expr: &mut SqlExpr| {
        if let SqlExpr::Value(value) = expr {
            if let Value::Placeholder(name) = &value.value {
                let index = name.trim_start_matches('$').parse::<usize>().unwrap_or(0);
                match params.get(index.wrapping_sub(1)) {
                    Some(param) => {
                        // The common case, a value of a scalar type: its
                        // cast built from the type's parsed template.
                        if let (Some(text), Some(data_type)) = (param, types.get(index - 1)) {
                            if !matches!(data_type, DataType::List(_)) {
                                match typed_literal(text, data_type) {
                                    Ok(typed) => *expr = typed,
                                    Err(error) => failure = Some(error),
                                }
                                return std::ops::ControlFlow::Continue(());
                            }
                        }
                        let literal = match param {
                            None => "NULL".to_string(),
                            Some(text) => format!("'{}'", text.replace('\'', "''")),
                        };
                        let cast = match (types.get(index - 1), param) {
                            (Some(DataType::List(element)), Some(text)) => {
                                match array_literal(text, element.data_type()) {
                                    Some(array) => array,
                                    None => {
                                        failure = Some(RsError::new(
                                            &codes::INVALID_INPUT_VALUE,
                                            format!("malformed array literal: \"{text}\""),
                                        ));
                                        return std::ops::ControlFlow::Continue(());
                                    }
                                }
                            }
                            (Some(data_type), Some(_)) => {
                                format!("CAST({literal} AS {})", sql_type_name(data_type))
                            }
                            _ => literal,
                        };
                        match Parser::new(&PostgreSqlDialect {})
                            .try_with_sql(&cast)
                            .and_then(|mut parser| parser.parse_expr())
                        {
                            Ok(parsed) => *expr = parsed,
                            Err(error) => {
                                failure =
                                    Some(RsError::new(&codes::SYNTAX_ERROR, error.to_string()))
                            }
                        }
                    }
                    None => {
                        failure = Some(RsError::new(
                            &codes::SYNTAX_ERROR,
                            format!("there is no parameter {name}"),
                        ))
                    }
                }
            }
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    failure.map_or(Ok(()), Err)
}

/// `CAST('text' AS type)` for a parameter of `data_type`, exactly as the
/// parser reads it: each type's cast is parsed once, and a copy of it takes
/// the value, so binding costs no parse.
fn typed_literal(text: &str, data_type: &DataType) -> RsResult<SqlExpr> {
    static TEMPLATES: std::sync::LazyLock<std::sync::Mutex<HashMap<String, SqlExpr>>> =
        std::sync::LazyLock::new(Default::default);
    let type_name = sql_type_name(data_type);
    let cached = TEMPLATES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .get(&type_name)
        .cloned();
    let mut cast = match cached {
        Some(template) => template,
        None => {
            let template = Parser::new(&PostgreSqlDialect {})
                .try_with_sql(&format!("CAST('' AS {type_name})"))
                .and_then(|mut parser| parser.parse_expr())
                .map_err(|error| RsError::new(&codes::SYNTAX_ERROR, error.to_string()))?;
            TEMPLATES
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .insert(type_name, template.clone());
            template
        }
    };
    let SqlExpr::Cast { expr, .. } = &mut cast else {
        return Err(RsError::internal(
            "a parameter's cast did not parse as a cast",
        ));
    };
    **expr = SqlExpr::Value(Value::SingleQuotedString(text.to_string()).into());
    Ok(cast)
}

/// `statement` as DataFusion plans it for its parameter types: a write
/// without its `RETURNING` list (and an `INSERT` without the target's alias
/// the list may use), which DataFusion does not plan.
/// The types of `$1` … `$n` (`n` the highest placeholder of `statement`):
/// as planned, else as cast (`$1::int`), else text.
fn padded_parameters(
    planned: Vec<(usize, DataType)>,
    statement: &Statement,
    casts: &BTreeMap<usize, DataType>,
) -> Vec<DataType> {
    let highest = highest_placeholder(statement).max(planned.len());
    let planned: BTreeMap<usize, DataType> = planned.into_iter().collect();
    (1..=highest)
        .map(|index| {
            planned
                .get(&index)
                .or_else(|| casts.get(&index))
                .cloned()
                .unwrap_or(DataType::Utf8)
        })
        .collect()
}

/// The highest `$n` of `statement` (0 without placeholders; PostgreSQL's
/// bound of 65535 is checked when the statement is parsed).
fn highest_placeholder(statement: &Statement) -> usize {
    let mut highest = 0;
    let _ = visit_expressions(statement, |expr: &SqlExpr| {
        if let SqlExpr::Value(value) = expr {
            if let Value::Placeholder(name) = &value.value {
                if let Some(index) = name.strip_prefix('$').and_then(|n| n.parse::<u16>().ok()) {
                    highest = highest.max(usize::from(index));
                }
            }
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    highest
}

fn without_returning(statement: &Statement) -> std::borrow::Cow<'_, Statement> {
    let returns = match statement {
        Statement::Insert(insert) => {
            insert.returning.is_some() || insert.table_alias.is_some() || insert.on.is_some()
        }
        Statement::Update(update) => update.returning.is_some(),
        Statement::Delete(delete) => delete.returning.is_some(),
        _ => false,
    };
    if !returns {
        return std::borrow::Cow::Borrowed(statement);
    }
    let mut stripped = statement.clone();
    match &mut stripped {
        Statement::Insert(insert) => {
            insert.returning = None;
            insert.table_alias = None;
            insert.on = None;
        }
        Statement::Update(update) => update.returning = None,
        Statement::Delete(delete) => delete.returning = None,
        _ => {}
    }
    std::borrow::Cow::Owned(stripped)
}

/// An array parameter's text form (`{1,3}`) as an array expression of
/// `element` values; `None` if it is not an array's text form.
fn array_literal(text: &str, element: &DataType) -> Option<String> {
    let items: Vec<String> = rockstream_types::pg_array::elements(text)?
        .into_iter()
        .map(|item| match item {
            None => format!("CAST(NULL AS {})", sql_type_name(element)),
            Some(item) => format!(
                "CAST('{}' AS {})",
                item.replace('\'', "''"),
                sql_type_name(element)
            ),
        })
        .collect();
    Some(format!("make_array({})", items.join(", ")))
}

/// The types of parameters an array comparison uses as its array (`x =
/// ANY($1)`, which DataFusion plans as `array_has($1, x)`), which
/// DataFusion leaves untyped: arrays of `x`'s type.
fn array_parameter_types(plan: &LogicalPlan) -> BTreeMap<String, DataType> {
    let mut types = BTreeMap::new();
    let _ = plan.apply(|node| {
        let schema = match node.inputs().as_slice() {
            [input] => input.schema().clone(),
            _ => node.schema().clone(),
        };
        for expr in node.expressions() {
            let _ = expr.apply(|expr| {
                if let Expr::ScalarFunction(function) = expr {
                    if let (true, [Expr::Placeholder(placeholder), element]) =
                        (function.name() == "array_has", function.args.as_slice())
                    {
                        if placeholder.field.is_none() {
                            if let Ok(element_type) = element.get_type(&schema) {
                                types.insert(
                                    placeholder.id.clone(),
                                    DataType::new_list(element_type, true),
                                );
                            }
                        }
                    }
                }
                Ok(TreeNodeRecursion::Continue)
            });
        }
        Ok(TreeNodeRecursion::Continue)
    });
    types
}

impl Gateway {
    /// Types the placeholders of an `ON CONFLICT DO UPDATE` that planning
    /// the INSERT left untyped (`types`, by `$n`).
    async fn type_conflict_placeholders(
        &self,
        session: &GatewaySession,
        context: &SessionContext,
        insert: &Insert,
        types: &mut HashMap<String, Option<DataType>>,
    ) {
        let Some(conflict) = crate::upsert::conflict_placeholders(insert) else {
            return;
        };
        let mut found: Vec<(String, DataType)> = Vec::new();
        let table = match &insert.table {
            TableObject::TableName(name) => self
                .entry(
                    session,
                    &object_name(&name.to_string()),
                    Some(ObjectKind::Table),
                )
                .ok(),
            _ => None,
        };
        let schema = table.and_then(|entry| rockstream_control::arrow_schema(&entry).ok());
        for (placeholder, column) in &conflict.assigned {
            if let Some(field) = schema
                .as_ref()
                .and_then(|schema| schema.field_with_name(column).ok())
            {
                found.push((placeholder.clone(), field.data_type().clone()));
            }
        }
        if let Some(select) = &conflict.select {
            if let Ok(plan) = context.state().create_logical_plan(select).await {
                found.extend(
                    plan.get_parameter_types()
                        .unwrap_or_default()
                        .into_iter()
                        .filter_map(|(name, data_type)| Some((name, data_type?))),
                );
            }
        }
        for (name, data_type) in found {
            let typed = types.entry(name).or_default();
            if typed.is_none() {
                *typed = Some(data_type);
            }
        }
    }
}

pub(crate) fn sql_type_name(data_type: &DataType) -> String {
    match data_type {
        DataType::Boolean => "BOOLEAN".into(),
        DataType::Int16 => "SMALLINT".into(),
        DataType::Int32 => "INT".into(),
        DataType::Int64 | DataType::UInt32 => "BIGINT".into(),
        DataType::Float32 => "REAL".into(),
        DataType::Float64 => "DOUBLE PRECISION".into(),
        DataType::Decimal128(p, s) => format!("NUMERIC({p},{s})"),
        DataType::Date32 => "DATE".into(),
        DataType::Timestamp(_, None) => "TIMESTAMP".into(),
        DataType::Timestamp(_, Some(_)) => "TIMESTAMPTZ".into(),
        DataType::Interval(_) => "INTERVAL".into(),
        _ => "TEXT".into(),
    }
}

impl Gateway {
    /// What Describe answers for a statement a fast path runs, without
    /// planning it (`None`: plan it to find out).
    fn describe_simple(
        &self,
        session: &GatewaySession,
        statement: &Statement,
    ) -> Option<Described> {
        let table = |name: &str| self.entry(session, name, Some(ObjectKind::Table)).ok();
        match statement {
            Statement::Query(query) => {
                if let Some(columns) = fast_path::constant_select_schema(query) {
                    return Some(Described {
                        parameter_types: Vec::new(),
                        columns: Some(columns),
                        ..Default::default()
                    });
                }
                let (parameter_types, columns) = fast_path::point_lookup_types(query, table)?;
                Some(Described {
                    parameter_types,
                    columns: Some(columns),
                    ..Default::default()
                })
            }
            Statement::Insert(insert) => Some(Described {
                parameter_types: fast_path::insert_parameter_types(insert, table)?,
                columns: None,
                ..Default::default()
            }),
            Statement::ShowVariable { variable } => {
                let variable: Vec<String> =
                    variable.iter().map(|part| part.value.clone()).collect();
                Some(Described {
                    parameter_types: Vec::new(),
                    columns: Some(show_schema(show_column_name(&variable.join(" ")))),
                    ..Default::default()
                })
            }
            _ => None,
        }
    }
}

#[async_trait]
impl Backend for Gateway {
    type Session = GatewaySession;

    async fn connect(
        &self,
        user: &str,
        database: &str,
        interrupt: Interrupt,
    ) -> Result<GatewaySession, RsError> {
        let attachment = self.database().attach(database)?;
        Ok(GatewaySession {
            cursors: Default::default(),
            cursors_declared: 0,
            namespace: database.to_string(),
            attachment,
            user: user.to_string(),
            transaction: None,
            default_isolation: Default::default(),
            interrupt,
            parameters: Default::default(),
            statement_deadline: None,
            sequence_values: Default::default(),
            copy: None,
            notices: Vec::new(),
        })
    }

    fn take_notices(&self, session: &mut GatewaySession) -> Vec<Notice> {
        std::mem::take(&mut session.notices)
    }

    async fn execute(
        &self,
        session: &mut GatewaySession,
        sql: &str,
        prepared: &dyn PreparedStatements,
    ) -> Vec<Result<StatementResult, RsError>> {
        // Held until the query string's statements are done with.
        let _text = match self.memory().reserve_text(sql) {
            Ok(reservation) => reservation,
            Err(error) => return vec![Err(error)],
        };
        let statements = match parse_noting(sql, &mut session.notices) {
            Ok(statements) => statements,
            Err(error) => return vec![Err(error)],
        };
        let mut results = Vec::with_capacity(statements.len());
        for statement in &statements {
            let result = self.execute_command(session, statement, prepared).await;
            let failed = result.is_err();
            results.push(result);
            if failed {
                break;
            }
        }
        results
    }

    async fn describe(
        &self,
        session: &mut GatewaySession,
        sql: &str,
    ) -> Result<Described, RsError> {
        let _text = self.memory().reserve_text(sql)?;
        let mut statements = parse_noting(sql, &mut session.notices)?;
        // Executes take the first statement (the extended protocol runs one).
        statements.truncate(1);
        let parsed: Arc<dyn std::any::Any + Send + Sync> = Arc::new(Parsed(statements));
        let Some(Parsed(statements)) = parsed.downcast_ref::<Parsed>() else {
            return Err(RsError::internal("a parsed statement of another type"));
        };
        let Some(Command::Sql(statement)) = statements.first() else {
            return Ok(Described {
                parameter_types: Vec::new(),
                columns: None,
                parsed: Some(parsed.clone()),
            });
        };
        let mut described = self.describe_statement(session, statement).await?;
        // A write with RETURNING answers rows.
        if let Some(columns) = self.returning_columns(session, statement).await? {
            described.columns = Some(columns);
        }
        described.parsed = Some(parsed.clone());
        Ok(described)
    }

    async fn execute_with_params(
        &self,
        session: &mut GatewaySession,
        sql: &str,
        described: &Described,
        params: &[Option<String>],
        prepared: &dyn PreparedStatements,
    ) -> Result<StatementResult, RsError> {
        // Types PostgreSQL fixed at Parse; described again only if Parse
        // could not type every parameter (a table created since).
        let redescribed;
        let described = if described.parameter_types.len() >= params.len() {
            described
        } else {
            redescribed = self.describe(session, sql).await?;
            &redescribed
        };
        let parameter_types = &described.parameter_types;
        let _text = self.memory().reserve_text(sql)?;
        // Parsed at Parse (a copy, which binding rewrites), or now.
        let mut statements = match described
            .parsed
            .as_ref()
            .and_then(|parsed| parsed.downcast_ref::<Parsed>())
        {
            Some(Parsed(statements)) => statements.clone(),
            None => parse(sql)?,
        };
        let Some(command) = statements.first_mut() else {
            return Ok(StatementResult::Command { tag: String::new() });
        };
        if let Command::Sql(statement) = &mut *command {
            if !params.is_empty() {
                bind_parameters(statement, params, parameter_types)?;
                normalize_interval_literals(statement);
                normalize_type_spellings(statement);
            }
        }
        self.execute_command(session, command, prepared).await
    }

    async fn copy_in(
        &self,
        session: &mut GatewaySession,
        target: &CopyTarget,
        rows: Vec<Vec<Option<String>>>,
        part: CopyPart,
    ) -> Result<u64, RsError> {
        let in_explicit = session.in_explicit_transaction();
        let result = async {
            let entry = self.entry(session, &target.table, Some(ObjectKind::Table))?;
            if part.first {
                // The table the statement found, which the first part
                // checks too: its data may come long after the statement.
                session.copy = Some(CopyInProgress {
                    savepoint: session.savepoint(),
                    table_id: target.table_id.unwrap_or(entry.id),
                });
            }
            // Each part is a point where the COPY may be canceled or time out.
            self.stop(session).check()?;
            if session.copy.as_ref().map(|copy| copy.table_id) != Some(entry.id) {
                return Err(RsError::new(
                    &codes::OPTIMISTIC_CONFLICT,
                    format!(
                        "table \"{}\" was dropped or replaced while COPY loaded it",
                        target.table
                    ),
                ));
            }
            let mut typed = dml::copy_rows(&entry, &target.columns, rows)?;
            let supplied = dml::copy_column_positions(&entry, &target.columns)?;
            defaults::fill_defaults(self, session, &entry, &supplied, &mut typed).await?;
            let count = dml::insert_rows(self, session, &entry, typed, false).await?;
            if !in_explicit {
                crate::staging::stage_if_large(self, session, &entry).await?;
            }
            if part.last {
                // The COPY ends here, whatever follows: a failure below
                // restores the savepoint it took.
                let copy = session.copy.take();
                if let (true, Some(taken)) = (in_explicit, &copy) {
                    let checked =
                        crate::unique::check_statement(self, session, &taken.savepoint).await;
                    if checked.is_err() {
                        session.copy = copy;
                    }
                    checked?;
                }
                self.autocommit(session, in_explicit).await?;
            }
            Ok(count)
        }
        .await;
        if result.is_err() {
            // Restores the transaction as the COPY found it (the savepoint
            // its first part took).
            session.statement_failed(None);
        }
        session.statement_ended();
        result
    }

    async fn statement_failed(&self, session: &mut GatewaySession) {
        session.statement_failed(None);
    }

    fn idle_limit(&self, session: &GatewaySession) -> Option<IdleLimit> {
        let in_block = session
            .transaction
            .as_ref()
            .is_some_and(|transaction| transaction.explicit);
        if in_block {
            session
                .parameters
                .idle_in_transaction_timeout
                .map(|after| IdleLimit {
                    after,
                    error: RsError::new(
                        &codes::IDLE_IN_TRANSACTION_TIMEOUT,
                        "terminating connection due to idle-in-transaction timeout",
                    ),
                })
        } else {
            session
                .parameters
                .idle_session_timeout
                .map(|after| IdleLimit {
                    after,
                    error: RsError::new(
                        &codes::IDLE_SESSION_TIMEOUT,
                        "terminating connection due to idle-session timeout",
                    ),
                })
        }
    }

    fn cursor_columns(&self, session: &GatewaySession, name: &str) -> Option<SchemaRef> {
        session.cursors.get(name).map(|cursor| cursor.rows.schema())
    }

    fn transaction_state(&self, session: &GatewaySession) -> TransactionState {
        match &session.transaction {
            Some(transaction) if transaction.explicit && transaction.aborted => {
                TransactionState::Failed
            }
            Some(transaction) if transaction.explicit => TransactionState::InTransaction,
            _ => TransactionState::Idle,
        }
    }

    async fn disconnect(&self, _session: GatewaySession) {}
}

impl Gateway {
    /// What Describe answers for `statement`, but for a `RETURNING` list.
    /// `statement`, an INSERT with its defaults written in
    /// ([`defaults::rewrite_insert`]); anything else as it is.
    fn with_defaults<'a>(
        &self,
        session: &GatewaySession,
        statement: &'a Statement,
    ) -> RsResult<std::borrow::Cow<'a, Statement>> {
        let Statement::Insert(insert) = statement else {
            return Ok(std::borrow::Cow::Borrowed(statement));
        };
        let TableObject::TableName(name) = &insert.table else {
            return Ok(std::borrow::Cow::Borrowed(statement));
        };
        let name = crate::backend::object_name(&name.to_string());
        let Ok(entry) = self.entry(session, &name, Some(ObjectKind::Table)) else {
            return Ok(std::borrow::Cow::Borrowed(statement));
        };
        let mut rewritten = insert.clone();
        defaults::rewrite_insert(&entry, &mut rewritten)?;
        if rewritten == *insert {
            return Ok(std::borrow::Cow::Borrowed(statement));
        }
        let mut rewritten = Statement::Insert(rewritten);
        normalize_interval_literals(&mut rewritten);
        normalize_type_spellings(&mut rewritten);
        Ok(std::borrow::Cow::Owned(rewritten))
    }

    async fn describe_statement(
        &self,
        session: &mut GatewaySession,
        statement: &Statement,
    ) -> Result<Described, RsError> {
        if let Some(described) = self.describe_simple(session, statement) {
            return Ok(described);
        }
        // FETCH returns its cursor's columns.
        if let Statement::Fetch { name, .. } = statement {
            let name = crate::ddl::ident_name(name);
            return Ok(Described {
                parameter_types: Vec::new(),
                columns: session
                    .cursors
                    .get(&name)
                    .map(|cursor| cursor.rows.schema()),
                ..Default::default()
            });
        }
        let resolver = Arc::new(SnapshotResolver {
            context: Arc::new(self.read_context(session, false)),
        });
        let context = self.statement_context(session, resolver);
        let mut normalized = match statement {
            Statement::Query(query) => {
                self.register_session_functions(&context, session, query);
                Some(as_postgres_reads_it(&context, query).await?)
            }
            _ => None,
        };
        // An INSERT is planned with its defaults written in, as it runs
        // (`DEFAULT` values and short VALUES lists plan only so).
        let with_defaults = self.with_defaults(session, statement)?;
        let sql = match &normalized {
            Some(query) => query.to_string(),
            None => without_returning(with_defaults.as_ref()).to_string(),
        };
        let mut planned = context.state().create_logical_plan(&sql).await;
        if let (Err(error), Some(query)) = (&planned, &mut normalized) {
            if repeats_a_name(&error.to_string()) && alias_select_items(query) {
                planned = context
                    .state()
                    .create_logical_plan(&query.to_string())
                    .await;
            }
        }
        if planned.is_err() && matches!(with_defaults, std::borrow::Cow::Owned(_)) {
            // As written, without its defaults.
            planned = context
                .state()
                .create_logical_plan(&without_returning(statement).to_string())
                .await;
        }
        let casts = cast_parameter_types(statement);
        let Ok(plan) = planned else {
            // Not plannable before it runs: every placeholder is text
            // unless cast, as PostgreSQL's unknown.
            return Ok(Described {
                parameter_types: padded_parameters(Vec::new(), statement, &casts),
                columns: None,
                ..Default::default()
            });
        };
        // Before a query's SQL functions are inlined.
        let function_arguments = rockstream_planner::sql_function_parameter_types(&plan);
        let plan = match statement {
            Statement::Query(_) => context.state().optimize(&plan).map_err(query_error)?,
            _ => plan,
        };
        let mut types = plan.get_parameter_types().unwrap_or_default();
        if let Statement::Insert(insert) = statement {
            self.type_conflict_placeholders(session, &context, insert, &mut types)
                .await;
        }
        let arrays = array_parameter_types(&plan);
        let parameter_types: Vec<(usize, DataType)> = types
            .into_iter()
            .map(|(name, data_type)| {
                let index = name.trim_start_matches('$').parse().unwrap_or(0);
                let cast_to_oid = casts.get(&index).filter(|cast| is_oid_type(cast));
                let data_type = cast_to_oid
                    .cloned()
                    .or(data_type)
                    .or_else(|| arrays.get(&name).cloned())
                    .or_else(|| function_arguments.get(&name).cloned())
                    .or_else(|| casts.get(&index).cloned())
                    .unwrap_or(DataType::Utf8);
                (index, data_type)
            })
            .collect();
        // Placeholders planning did not see are text unless cast.
        let parameter_types = padded_parameters(parameter_types, statement, &casts);
        let columns = match statement {
            Statement::Query(query) => Some(renamed_schema(
                pg_result_schema(&crate::backend::result_schema(&plan)),
                pg_column_names(query),
            )),
            _ => None,
        };
        Ok(Described {
            parameter_types,
            columns,
            ..Default::default()
        })
    }
}
