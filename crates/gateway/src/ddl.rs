//! `CREATE TABLE` and `ALTER TABLE … ADD COLUMN` column definitions →
//! catalog columns.

use datafusion::sql::sqlparser::ast::{
    ColumnDef as SqlColumnDef, ColumnOption, CreateTable, DataType, DeferrableInitial,
    Expr as SqlExpr, GeneratedAs, Ident, IndexColumn, NullsDistinctOption, ObjectName,
    TableConstraint, UniqueConstraint,
};
use rockstream_control::{ColumnDef, DeclaredIndex, Generated, Identity};
use rockstream_types::{codes, RsError, RsResult, SqlType};

/// The declared type's name and its numeric arguments (`numeric(12,2)`:
/// `numeric`, `[12, 2]`), lower-cased.
fn declared_type(data_type: &DataType) -> (String, String, Vec<i64>) {
    let text = data_type.to_string().to_lowercase();
    let base = text.split('(').next().unwrap_or("").trim().to_string();
    let arguments: Vec<i64> = text
        .split_once('(')
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(inside, _)| {
            inside
                .split(',')
                .filter_map(|part| part.trim().parse().ok())
                .collect()
        })
        .unwrap_or_default();
    (text, base, arguments)
}

/// Longest `VARCHAR(n)` PostgreSQL accepts.
const VARCHAR_LENGTH_MAX: i64 = 10_485_760;

/// A column's type as the catalog spells it (PostgreSQL's spelling, as
/// `format_type` prints it): `VARCHAR(n)` keeps its length, which writes
/// enforce; `CHAR(n)` is refused, since its blank padding is not built.
pub fn column_type_name(data_type: &DataType) -> RsResult<String> {
    let (text, base, arguments) = declared_type(data_type);
    match base.as_str() {
        "varchar" | "character varying" => match arguments.first() {
            None => Ok("character varying".to_string()),
            Some(length) if (1..=VARCHAR_LENGTH_MAX).contains(length) => {
                Ok(format!("character varying({length})"))
            }
            Some(length) => Err(RsError::new(
                &codes::UNSUPPORTED_TYPE,
                format!("length for type varchar must be between 1 and {VARCHAR_LENGTH_MAX}, not {length}"),
            )),
        },
        "char" | "character" | "bpchar" | "nchar" => Err(RsError::new(
            &codes::UNSUPPORTED_TYPE,
            format!("type {text} is not supported: blank-padded character columns are not built yet; use text or varchar(n)"),
        )),
        _ => Ok(sql_type(data_type)?.pg_name()),
    }
}

/// Maps a declared SQL type onto ours.
pub fn sql_type(data_type: &DataType) -> RsResult<SqlType> {
    let (text, base, arguments) = declared_type(data_type);
    Ok(match base.as_str() {
        "boolean" | "bool" => SqlType::Bool,
        "smallint" | "int2" => SqlType::Int16,
        "int" | "integer" | "int4" => SqlType::Int32,
        "bigint" | "int8" => SqlType::Int64,
        "real" | "float4" => SqlType::Float32,
        "double precision" | "double" | "float8" | "float" => SqlType::Float64,
        "numeric" | "decimal" => {
            let precision = arguments.first().copied().unwrap_or(38);
            let scale = arguments
                .get(1)
                .copied()
                .unwrap_or(if arguments.is_empty() { 6 } else { 0 });
            if !(1..=38).contains(&precision) || scale < 0 || scale > precision {
                return Err(RsError::new(
                    &codes::UNSUPPORTED_TYPE,
                    format!("NUMERIC({precision},{scale}) is outside the supported range (precision 1..38, 0 <= scale <= precision)"),
                ));
            }
            SqlType::Numeric {
                precision: precision as u8,
                scale: scale as i8,
            }
        }
        "text" | "varchar" | "character varying" | "string" => SqlType::Text,
        "date" => SqlType::Date,
        "timestamp" | "timestamp without time zone" => SqlType::Timestamp,
        "timestamptz" | "timestamp with time zone" => SqlType::TimestampTz,
        "interval" => SqlType::Interval,
        _ if text.starts_with("timestamp")
            && text.contains("with time zone")
            && !text.contains("without") =>
        {
            SqlType::TimestampTz
        }
        _ if text.starts_with("timestamp") => SqlType::Timestamp,
        _ => {
            return Err(RsError::new(
                &codes::UNSUPPORTED_TYPE,
                format!("type {text} is not supported"),
            ))
        }
    })
}

/// An identifier as PostgreSQL names it: folded to lower case unless quoted.
pub(crate) fn ident_name(ident: &Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_lowercase(),
    }
}

/// The name of a role or database as written: one identifier, folded
/// unless quoted (`kind` names what it is for errors).
pub(crate) fn unqualified_name(name: &ObjectName, kind: &str) -> RsResult<String> {
    match name.0.as_slice() {
        [part] => part.as_ident().map(ident_name).ok_or_else(|| {
            RsError::new(&codes::SYNTAX_ERROR, format!("{name} is not a {kind} name"))
        }),
        _ => Err(RsError::new(
            &codes::SYNTAX_ERROR,
            format!("{name} is not a {kind} name: {kind}s are not qualified"),
        )),
    }
}

/// Statements outside transactions (roles, databases) are durable at
/// once, so inside a transaction block, where ROLLBACK would not undo
/// them, they are refused (25001), as PostgreSQL refuses `CREATE DATABASE`.
pub(crate) fn refuse_in_transaction_block(in_explicit: bool, statement: &str) -> RsResult<()> {
    if in_explicit {
        return Err(RsError::new(
            &codes::NOT_IN_TRANSACTION_BLOCK,
            format!("{statement} cannot run inside a transaction block here"),
        ));
    }
    Ok(())
}

/// What a `CREATE TABLE` declares.
#[derive(Debug)]
pub struct TableDefinition {
    pub columns: Vec<ColumnDef>,
    /// Column positions of the primary key (empty: hidden row id).
    pub primary_key: Vec<usize>,
    /// `SERIAL` and identity columns, whose sequences the catalog creates.
    pub generated: Vec<Generated>,
    /// `DEFAULT` expressions by column position, checked (and put in the
    /// columns) by [`crate::defaults::check_defaults`].
    pub defaults: Vec<(usize, SqlExpr)>,
    /// `UNIQUE` constraints besides the primary key (RFC 0006).
    pub unique: Vec<DeclaredIndex>,
}

/// `SERIAL` and its kin: the integer type they stand for.
fn serial_type(data_type: &DataType) -> Option<&'static str> {
    let (_, base, arguments) = declared_type(data_type);
    if !arguments.is_empty() {
        return None;
    }
    match base.as_str() {
        "smallserial" | "serial2" => Some("smallint"),
        "serial" | "serial4" => Some("integer"),
        "bigserial" | "serial8" => Some("bigint"),
        _ => None,
    }
}

fn invalid_definition(message: String) -> RsError {
    RsError::new(&codes::INVALID_TABLE_DEFINITION, message)
}

/// One column as `CREATE TABLE` or `ALTER TABLE … ADD COLUMN` declares it.
#[derive(Debug)]
pub struct DeclaredColumn {
    pub column: ColumnDef,
    pub primary_key: bool,
    /// `SERIAL` or identity: a sequence of its own generates it.
    pub owns_sequence: bool,
    pub identity: Option<Identity>,
    pub default: Option<SqlExpr>,
    /// `UNIQUE` (with `CONSTRAINT name`, its name).
    pub unique: Option<Option<String>>,
}

/// Column `column` of table `table`, its options checked.
pub fn declared_column(table: &str, column: &SqlColumnDef) -> RsResult<DeclaredColumn> {
    let name = ident_name(&column.name);
    let serial = serial_type(&column.data_type);
    let type_name = match serial {
        Some(integer) => integer.to_string(),
        None => column_type_name(&column.data_type)?,
    };
    let mut not_null = false;
    let mut primary_key = false;
    let mut default = None;
    let mut identity = None;
    let mut unique = None;
    for option in &column.options {
        match &option.option {
            ColumnOption::NotNull => not_null = true,
            ColumnOption::Null => {}
            ColumnOption::PrimaryKey(_) => {
                not_null = true;
                primary_key = true;
            }
            ColumnOption::Unique(constraint) => {
                refuse_unique_options(constraint)?;
                unique = Some(option.name.as_ref().map(ident_name));
            }
            ColumnOption::Default(expr) => {
                if default.is_some() || serial.is_some() {
                    return Err(invalid_definition(format!(
                        "multiple default values specified for column \"{name}\" of table \"{table}\""
                    )));
                }
                default = Some(expr.clone());
            }
            ColumnOption::Generated {
                generated_as,
                sequence_options,
                generation_expr: None,
                ..
            } if matches!(generated_as, GeneratedAs::Always | GeneratedAs::ByDefault) => {
                if sequence_options
                    .as_ref()
                    .is_some_and(|options| !options.is_empty())
                {
                    return Err(RsError::new(
                        &codes::UNSUPPORTED_STATEMENT,
                        "identity columns with sequence options (START WITH, INCREMENT BY, ...) are not supported; sequences start at 1 and count up by 1",
                    ));
                }
                if identity.is_some() || serial.is_some() {
                    return Err(invalid_definition(format!(
                        "multiple identity specifications for column \"{name}\" of table \"{table}\""
                    )));
                }
                identity = Some(match generated_as {
                    GeneratedAs::Always => Identity::Always,
                    _ => Identity::ByDefault,
                });
            }
            ColumnOption::Generated { .. } => {
                return Err(RsError::new(
                    &codes::UNSUPPORTED_STATEMENT,
                    "generated columns (GENERATED ALWAYS AS (expression) STORED) are not supported",
                ))
            }
            other => {
                return Err(RsError::new(
                    &codes::UNSUPPORTED_STATEMENT,
                    format!("column option {other} is not supported"),
                ))
            }
        }
    }
    if identity.is_some() {
        if default.is_some() {
            return Err(invalid_definition(format!(
                "both default and identity specified for column \"{name}\" of table \"{table}\""
            )));
        }
        if !matches!(type_name.as_str(), "smallint" | "integer" | "bigint") {
            return Err(RsError::new(
                &codes::INVALID_PARAMETER_VALUE,
                format!("identity column type must be smallint, integer, or bigint (column \"{name}\" is {type_name})"),
            ));
        }
    }
    Ok(DeclaredColumn {
        column: ColumnDef::new(name, type_name, not_null),
        primary_key,
        owns_sequence: serial.is_some() || identity.is_some(),
        identity,
        default,
        unique,
    })
}

/// The columns, keys, sequences and defaults of a CREATE TABLE.
pub fn table_columns(create: &CreateTable) -> RsResult<TableDefinition> {
    let table = create.name.to_string();
    let mut columns: Vec<ColumnDef> = Vec::new();
    let mut primary_key = Vec::new();
    let mut generated = Vec::new();
    let mut defaults = Vec::new();
    let mut unique = Vec::new();
    for (index, column) in create.columns.iter().enumerate() {
        let declared = declared_column(&table, column)?;
        let name = &declared.column.name;
        if columns.iter().any(|existing| existing.name == *name) {
            return Err(invalid_definition(format!(
                "column \"{name}\" specified more than once"
            )));
        }
        if declared.primary_key {
            primary_key.push(index);
        }
        if declared.owns_sequence {
            generated.push(Generated {
                column: index,
                identity: declared.identity,
            });
        }
        if let Some(expr) = declared.default {
            defaults.push((index, expr));
        }
        if let Some(name) = declared.unique {
            unique.push(DeclaredIndex::unique_constraint(name, vec![index]));
        }
        columns.push(declared.column);
    }
    for constraint in &create.constraints {
        match constraint {
            TableConstraint::PrimaryKey(key) => {
                if !primary_key.is_empty() {
                    return Err(invalid_definition(
                        "multiple primary keys are not allowed".to_string(),
                    ));
                }
                for column in &key.columns {
                    let position = key_column(&columns, column, true)?;
                    columns[position].not_null = true;
                    primary_key.push(position);
                }
            }
            TableConstraint::Unique(constraint) => {
                refuse_unique_options(constraint)?;
                unique.push(DeclaredIndex::unique_constraint(
                    constraint.name.as_ref().map(ident_name),
                    unique_columns(&columns, &constraint.columns)?,
                ));
            }
            other => {
                return Err(RsError::new(
                    &codes::UNSUPPORTED_STATEMENT,
                    format!("table constraint {other} is not supported"),
                ))
            }
        }
    }
    if columns.is_empty() {
        return Err(invalid_definition(
            "a table needs at least one column".to_string(),
        ));
    }
    // As PostgreSQL: a constraint on the primary key's columns, or on
    // those of an earlier one, is the same constraint (the first name
    // given stands).
    let mut distinct: Vec<DeclaredIndex> = Vec::new();
    for declared in unique {
        if declared.columns == primary_key {
            continue;
        }
        match distinct
            .iter_mut()
            .find(|earlier| earlier.columns == declared.columns)
        {
            Some(earlier) => {
                earlier.name = earlier.name.take().or(declared.name);
            }
            None => distinct.push(declared),
        }
    }
    Ok(TableDefinition {
        columns,
        primary_key,
        generated,
        defaults,
        unique: distinct,
    })
}

/// The position of a key's column among `columns`.
/// The position of a key's column; `constraint`: a constraint's key,
/// whose missing column PostgreSQL names so.
fn key_column(columns: &[ColumnDef], column: &IndexColumn, constraint: bool) -> RsResult<usize> {
    let name = match &column.column.expr {
        SqlExpr::Identifier(ident) => ident_name(ident),
        other => {
            return Err(RsError::new(
                &codes::UNSUPPORTED_STATEMENT,
                format!("keys on expressions ({other}) are not supported: name columns"),
            ))
        }
    };
    columns
        .iter()
        .position(|existing| existing.name == name)
        .ok_or_else(|| {
            let named_in = if constraint { " named in key" } else { "" };
            RsError::new(
                &codes::UNDEFINED_COLUMN,
                format!("column \"{name}\"{named_in} does not exist"),
            )
        })
}

/// The positions of a UNIQUE constraint's columns, each named once.
pub(crate) fn unique_columns(columns: &[ColumnDef], named: &[IndexColumn]) -> RsResult<Vec<usize>> {
    index_columns(columns, named, true, true)
}

/// The positions of an index's columns; a unique one's named once each;
/// `constraint`: the index of a constraint.
pub(crate) fn index_columns(
    columns: &[ColumnDef],
    named: &[IndexColumn],
    unique: bool,
    constraint: bool,
) -> RsResult<Vec<usize>> {
    let mut positions = Vec::with_capacity(named.len());
    for column in named {
        // An ordering (ASC, NULLS FIRST) changes no uniqueness nor which
        // rows a lookup finds; an operator class could, except the pattern
        // classes (which serve `LIKE 'x%'` and compare as the default
        // does): ORMs declare those for text columns.
        let pattern_class = column.operator_class.as_ref().is_some_and(|class| {
            matches!(
                class.to_string().to_ascii_lowercase().as_str(),
                "text_pattern_ops" | "varchar_pattern_ops" | "bpchar_pattern_ops"
            )
        });
        if column.operator_class.is_some() && !pattern_class {
            return Err(RsError::new(
                &codes::UNSUPPORTED_STATEMENT,
                format!("index column {column}: operator classes are not supported; name the column alone"),
            ));
        }
        let position = key_column(columns, column, constraint)?;
        if unique && positions.contains(&position) {
            return Err(RsError::new(
                &codes::DUPLICATE_COLUMN,
                format!(
                    "column \"{}\" appears twice in unique constraint",
                    columns[position].name
                ),
            ));
        }
        positions.push(position);
    }
    Ok(positions)
}

/// Refuses the parts of a `UNIQUE` declaration that are not built:
/// `NULLS NOT DISTINCT`, `DEFERRABLE`, index methods and options.
pub(crate) fn refuse_unique_options(constraint: &UniqueConstraint) -> RsResult<()> {
    let refused = if constraint.nulls_distinct == NullsDistinctOption::NotDistinct {
        Some("UNIQUE NULLS NOT DISTINCT is not supported: NULLs are distinct, as by default")
    } else if constraint
        .characteristics
        .as_ref()
        .is_some_and(|characteristics| {
            characteristics.deferrable == Some(true)
                || characteristics.initially == Some(DeferrableInitial::Deferred)
        })
    {
        Some("DEFERRABLE UNIQUE constraints are not supported: each statement is checked")
    } else if constraint.index_type.is_some() || !constraint.index_options.is_empty() {
        Some("UNIQUE ... USING and index options are not supported")
    } else {
        None
    };
    refused.map_or(Ok(()), |message| {
        Err(RsError::new(&codes::UNSUPPORTED_STATEMENT, message))
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests may unwrap: a panic is the failure report.
mod tests {
    //! Goal: declared column types get PostgreSQL's catalog spelling, and
    //! the character types whose semantics are not built are refused.
    use datafusion::sql::sqlparser::ast::Statement;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    use super::*;

    fn type_names(columns: &str) -> RsResult<Vec<String>> {
        let sql = format!("CREATE TABLE t ({columns})");
        let statements = Parser::parse_sql(&PostgreSqlDialect {}, &sql).unwrap();
        let Statement::CreateTable(create) = &statements[0] else {
            panic!("not a CREATE TABLE: {sql}");
        };
        Ok(table_columns(create)?
            .columns
            .into_iter()
            .map(|column| column.type_name)
            .collect())
    }

    #[test]
    fn column_types_get_postgres_spelling() {
        assert_eq!(
            type_names("a VARCHAR(20), b CHARACTER VARYING, c INT, d NUMERIC(9,3), e TEXT")
                .unwrap(),
            [
                "character varying(20)",
                "character varying",
                "integer",
                "numeric(9,3)",
                "text"
            ]
        );
        for refused in ["a CHAR(3)", "a CHARACTER(3)", "a CHAR", "a VARCHAR(0)"] {
            let error = type_names(refused).unwrap_err();
            assert_eq!(error.code, &codes::UNSUPPORTED_TYPE, "{refused}");
        }
    }

    fn definition(columns: &str) -> RsResult<TableDefinition> {
        let sql = format!("CREATE TABLE t ({columns})");
        let statements = Parser::parse_sql(&PostgreSqlDialect {}, &sql).unwrap();
        let Statement::CreateTable(create) = &statements[0] else {
            panic!("not a CREATE TABLE: {sql}");
        };
        table_columns(create)
    }

    #[test]
    fn serial_and_identity_columns_get_sequences() {
        let table = definition(
            "a SERIAL PRIMARY KEY, b BIGSERIAL, c SMALLINT GENERATED ALWAYS AS IDENTITY, \
             d BIGINT GENERATED BY DEFAULT AS IDENTITY, e TEXT DEFAULT 'x'",
        )
        .unwrap();
        let types: Vec<&str> = table.columns.iter().map(|c| c.type_name.as_str()).collect();
        assert_eq!(types, ["integer", "bigint", "smallint", "bigint", "text"]);
        let generated: Vec<(usize, Option<Identity>)> = table
            .generated
            .iter()
            .map(|g| (g.column, g.identity))
            .collect();
        assert_eq!(
            generated,
            [
                (0, None),
                (1, None),
                (2, Some(Identity::Always)),
                (3, Some(Identity::ByDefault))
            ]
        );
        assert_eq!(table.defaults.len(), 1);
        assert_eq!(table.defaults[0].0, 4);
        for refused in [
            "a SERIAL DEFAULT 1",
            "a INT DEFAULT 1 GENERATED ALWAYS AS IDENTITY",
            "a TEXT GENERATED ALWAYS AS IDENTITY",
            "a INT GENERATED ALWAYS AS IDENTITY (START WITH 10)",
            "a INT GENERATED ALWAYS AS (1) STORED",
        ] {
            assert!(definition(refused).is_err(), "{refused}");
        }
    }
}
