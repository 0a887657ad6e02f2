//! `CREATE TABLE` column definitions → catalog columns.

use datafusion::sql::sqlparser::ast::{
    ColumnOption, CreateTable, DataType, Expr as SqlExpr, Ident, TableConstraint,
};
use rockstream_control::ColumnDef;
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

/// Columns and primary-key positions of a CREATE TABLE.
pub fn table_columns(create: &CreateTable) -> RsResult<(Vec<ColumnDef>, Vec<usize>)> {
    let mut columns = Vec::new();
    let mut primary_key = Vec::new();
    for (index, column) in create.columns.iter().enumerate() {
        let name = ident_name(&column.name);
        if columns
            .iter()
            .any(|existing: &ColumnDef| existing.name == name)
        {
            return Err(RsError::new(
                &codes::INVALID_TABLE_DEFINITION,
                format!("column \"{name}\" specified more than once"),
            ));
        }
        let mut not_null = false;
        for option in &column.options {
            match &option.option {
                ColumnOption::NotNull => not_null = true,
                ColumnOption::Null => {}
                ColumnOption::PrimaryKey(_) => {
                    not_null = true;
                    primary_key.push(index);
                }
                ColumnOption::Unique(_) => {
                    return Err(RsError::new(
                        &codes::UNSUPPORTED_STATEMENT,
                        "UNIQUE constraints other than the primary key are not supported",
                    ))
                }
                ColumnOption::Default(_) => {
                    return Err(RsError::new(
                        &codes::UNSUPPORTED_STATEMENT,
                        "column DEFAULT values are not supported yet",
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
        columns.push(ColumnDef {
            name,
            type_name: column_type_name(&column.data_type)?,
            not_null,
        });
    }
    for constraint in &create.constraints {
        match constraint {
            TableConstraint::PrimaryKey(key) => {
                if !primary_key.is_empty() {
                    return Err(RsError::new(
                        &codes::INVALID_TABLE_DEFINITION,
                        "multiple primary keys are not allowed",
                    ));
                }
                for column in &key.columns {
                    let name = match &column.column.expr {
                        SqlExpr::Identifier(ident) => ident_name(ident),
                        other => other.to_string(),
                    };
                    let position = columns
                        .iter()
                        .position(|existing| existing.name == name)
                        .ok_or_else(|| {
                            RsError::new(
                                &codes::UNDEFINED_COLUMN,
                                format!("column \"{name}\" named in key does not exist"),
                            )
                        })?;
                    columns[position].not_null = true;
                    primary_key.push(position);
                }
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
        return Err(RsError::new(
            &codes::INVALID_TABLE_DEFINITION,
            "a table needs at least one column",
        ));
    }
    Ok((columns, primary_key))
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
            .0
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
}
