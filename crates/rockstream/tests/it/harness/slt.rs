//! sqllogictest over pgwire: an [`AsyncDB`] on tokio-postgres' simple query protocol, so values
//! arrive as the server's own text (PostgreSQL's `t`/`f` booleans, its numeric and timestamp
//! formats). Rendering for the runner: NULL → `NULL`, the empty string → `(empty)`, anything else
//! verbatim. Column types are not visible over the simple protocol, so every column is reported
//! as [`DefaultColumnType::Any`] and the runner's default (lenient) column validator is kept.
//!
//! [`Dialect::PostgresOracle`] runs a file written for RockStream on plain PostgreSQL: materialized
//! views become plain views (which PostgreSQL keeps fresh, the semantics we promise for ours).
//! Records guarded by `onlyif <label>` / `skipif <label>` see the labels `postgresql` plus
//! `rockstream` or `postgres` by target.

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use sqllogictest::{AsyncDB, DBOutput, DefaultColumnType, Runner};
use tokio_postgres::{Client, Config, SimpleQueryMessage};

use super::oracle::{connect, describe_error};

/// Which server a file runs on, and so how its SQL is adapted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// RockStream: the SQL runs as written.
    RockStream,
    /// Plain PostgreSQL as the oracle: `MATERIALIZED VIEW` becomes `VIEW`.
    PostgresOracle,
}

impl Dialect {
    fn engine_name(self) -> &'static str {
        match self {
            Dialect::RockStream => "rockstream",
            Dialect::PostgresOracle => "postgres",
        }
    }
}

/// A server error, displayed with its message and SQLSTATE so `statement error <regex>` records
/// can match it (tokio-postgres' own `Display` says only "db error").
#[derive(Debug)]
pub struct SqlError {
    message: String,
    sqlstate: Option<String>,
}

impl std::fmt::Display for SqlError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.message)
    }
}

impl std::error::Error for SqlError {}

impl From<tokio_postgres::Error> for SqlError {
    fn from(error: tokio_postgres::Error) -> SqlError {
        SqlError {
            message: describe_error(&error),
            sqlstate: error.code().map(|code| code.code().to_owned()),
        }
    }
}

/// One pgwire session, as the sqllogictest runner sees it.
pub struct PgwireTextDatabase {
    client: Client,
    dialect: Dialect,
}

impl PgwireTextDatabase {
    pub async fn connect(
        config: &Config,
        dialect: Dialect,
    ) -> Result<PgwireTextDatabase, SqlError> {
        Ok(PgwireTextDatabase {
            client: connect(config).await?,
            dialect,
        })
    }
}

#[async_trait]
impl AsyncDB for PgwireTextDatabase {
    type Error = SqlError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, SqlError> {
        let sql = match self.dialect {
            Dialect::RockStream => sql.to_owned(),
            Dialect::PostgresOracle => materialized_views_as_plain_views(sql),
        };
        let messages = self.client.simple_query(&sql).await?;
        // With several statements in one record, the last one's result counts.
        let mut output = DBOutput::StatementComplete(0);
        let mut column_count = 0;
        let mut rows: Vec<Vec<String>> = Vec::new();
        let mut in_result_set = false;
        for message in messages {
            match message {
                SimpleQueryMessage::RowDescription(columns) => {
                    column_count = columns.len();
                    rows.clear();
                    in_result_set = true;
                }
                SimpleQueryMessage::Row(row) => {
                    column_count = row.len();
                    rows.push(
                        (0..row.len())
                            .map(|index| render_value(row.get(index)))
                            .collect(),
                    );
                    in_result_set = true;
                }
                SimpleQueryMessage::CommandComplete(count) => {
                    output = if in_result_set {
                        DBOutput::Rows {
                            types: vec![DefaultColumnType::Any; column_count],
                            rows: std::mem::take(&mut rows),
                        }
                    } else {
                        DBOutput::StatementComplete(count)
                    };
                    in_result_set = false;
                }
                _ => {}
            }
        }
        if in_result_set {
            // Rows without a closing CommandComplete: still a result set.
            output = DBOutput::Rows {
                types: vec![DefaultColumnType::Any; column_count],
                rows,
            };
        }
        Ok(output)
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        self.dialect.engine_name()
    }

    async fn sleep(duration: Duration) {
        crate::harness::sleep(duration).await
    }

    fn error_sql_state(error: &SqlError) -> Option<String> {
        error.sqlstate.clone()
    }
}

/// Compares results as [`sqllogictest::default_validator`] does, but two decimal numbers are
/// equal when they are the same value printed at different precisions: equal once trailing zeros
/// of their fractions are dropped (RisingWave prints an `avg` as `6221.50` where PostgreSQL, and
/// RockStream, print `6221.5000000000000000`), or, where the shorter is a rounded quotient (16 or
/// more significant digits, as PostgreSQL's numeric division keeps at least), once the longer is
/// rounded to it (`263196.66666666666666666666667`, RisingWave's 28 digits, and
/// `263196.666666666667`).
pub fn decimals_by_value(
    normalizer: sqllogictest::Normalizer,
    actual: &[Vec<String>],
    expected: &[String],
) -> bool {
    if expected.iter().any(|line| line.contains("<slt:ignore>")) {
        return sqllogictest::default_validator(normalizer, actual, expected);
    }
    let actual: Vec<String> = actual
        .iter()
        .map(|row| row.iter().map(normalizer).collect::<Vec<_>>().join(" "))
        .collect();
    actual.len() == expected.len()
        && actual.iter().zip(expected).all(|(actual, expected)| {
            let expected = normalizer(expected);
            let (actual, expected): (Vec<&str>, Vec<&str>) = (
                actual.split_ascii_whitespace().collect(),
                expected.split_ascii_whitespace().collect(),
            );
            actual.len() == expected.len()
                && actual
                    .iter()
                    .zip(&expected)
                    .all(|(actual, expected)| same_decimal(actual, expected))
        })
}

/// Digits a rounded quotient keeps at least: PostgreSQL's numeric division
/// keeps 16 significant digits or more.
const QUOTIENT_DIGITS_MIN: usize = 16;

/// See [`decimals_by_value`].
fn same_decimal(left: &str, right: &str) -> bool {
    if left == right {
        return true;
    }
    let number = regex::Regex::new(r"^-?\d+(\.\d+)?$").expect("a valid pattern");
    if !number.is_match(left) || !number.is_match(right) {
        return false;
    }
    let trimmed = |text: &str| match text.contains('.') {
        true => text.trim_end_matches('0').trim_end_matches('.').to_owned(),
        false => text.to_owned(),
    };
    let (left, right) = (trimmed(left), trimmed(right));
    if left == right {
        return true;
    }
    let fraction = |text: &str| {
        text.split_once('.')
            .map_or(0, |(_, fraction)| fraction.len())
    };
    let significant = |text: &str| {
        text.bytes()
            .filter(u8::is_ascii_digit)
            .skip_while(|digit| *digit == b'0')
            .count()
    };
    let shorter = if fraction(&left) <= fraction(&right) {
        &left
    } else {
        &right
    };
    let digits = fraction(shorter);
    digits > 0
        && significant(shorter) >= QUOTIENT_DIGITS_MIN
        && rounded(&left, digits) == rounded(&right, digits)
}

/// A decimal's digits rounded half away from zero to `scale` digits of fraction, sign apart.
fn rounded(text: &str, scale: usize) -> (bool, Vec<u8>) {
    let (negative, text) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (integer, fraction) = text.split_once('.').unwrap_or((text, ""));
    let mut digits: Vec<u8> = integer
        .bytes()
        .chain(fraction.bytes().chain(std::iter::repeat(b'0')).take(scale))
        .map(|digit| digit - b'0')
        .collect();
    if fraction
        .as_bytes()
        .get(scale)
        .is_some_and(|next| *next >= b'5')
    {
        let mut position = digits.len();
        loop {
            if position == 0 {
                digits.insert(0, 1);
                break;
            }
            position -= 1;
            if digits[position] == 9 {
                digits[position] = 0;
            } else {
                digits[position] += 1;
                break;
            }
        }
    }
    (negative, digits)
}

fn render_value(value: Option<&str>) -> String {
    match value {
        None => "NULL".to_owned(),
        Some("") => "(empty)".to_owned(),
        Some(text) => text.to_owned(),
    }
}

/// `CREATE MATERIALIZED VIEW` → `CREATE VIEW`, `DROP MATERIALIZED VIEW` → `DROP VIEW`, in any case
/// and spacing. Other text is kept byte for byte.
pub fn materialized_views_as_plain_views(sql: &str) -> String {
    let lowercase = sql.to_ascii_lowercase();
    let mut out = String::with_capacity(sql.len());
    let mut position = 0;
    while let Some(offset) = lowercase[position..].find("materialized") {
        let start = position + offset;
        let end = start + "materialized".len();
        let preceded_by_verb = ["create", "drop"].iter().any(|verb| {
            lowercase[..start]
                .trim_end()
                .strip_suffix(verb)
                .is_some_and(|before| {
                    !before.ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
                })
        });
        let followed_by_view = lowercase[end..]
            .trim_start()
            .strip_prefix("view")
            .is_some_and(|after| {
                !after.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
            });
        if preceded_by_verb && followed_by_view && lowercase[end..].starts_with(char::is_whitespace)
        {
            out.push_str(&sql[position..start]);
            // Skip the keyword and the blanks after it; the blanks before it stay.
            position = end + (lowercase[end..].len() - lowercase[end..].trim_start().len());
        } else {
            out.push_str(&sql[position..end]);
            position = end;
        }
    }
    out.push_str(&sql[position..]);
    out
}

/// Runs one `.slt` file on the server `config` points at, opening connections as the file asks.
/// `Err` holds the runner's report (record location, SQL, expected and actual output).
pub async fn run_slt_file(config: &Config, path: &Path, dialect: Dialect) -> Result<(), String> {
    let script = std::fs::read_to_string(path)
        .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    run_slt_script(config, &path.display().to_string(), &script, dialect).await
}

/// [`run_slt_file`] on text in memory; `name` is used in error locations.
pub async fn run_slt_script(
    config: &Config,
    name: &str,
    script: &str,
    dialect: Dialect,
) -> Result<(), String> {
    run_slt_script_with(
        config,
        (name, script),
        dialect,
        sqllogictest::default_validator,
    )
    .await
}

/// [`run_slt_script`] comparing results with `validator`.
pub async fn run_slt_script_with(
    config: &Config,
    (name, script): (&str, &str),
    dialect: Dialect,
    validator: sqllogictest::Validator,
) -> Result<(), String> {
    let mut runner = new_runner(config, dialect);
    runner.with_validator(validator);
    let result = runner.run_script_with_name_async(script, name).await;
    runner.shutdown_async().await;
    result.map_err(|error| error.display(false).to_string())
}

/// Rewrites the expected results of `path` with what the server answers (like DataFusion's
/// `--complete`). Used with the oracle to produce expectations instead of guessing them.
pub async fn complete_slt_file(
    config: &Config,
    path: &Path,
    dialect: Dialect,
) -> Result<(), String> {
    let mut runner = new_runner(config, dialect);
    let result = runner
        .update_test_file(
            path,
            " ",
            sqllogictest::default_validator,
            sqllogictest::default_normalizer,
            sqllogictest::default_column_validator,
        )
        .await
        .map_err(|error| format!("cannot complete {}: {error}", path.display()));
    runner.shutdown_async().await;
    result
}

fn new_runner(
    config: &Config,
    dialect: Dialect,
) -> Runner<PgwireTextDatabase, impl sqllogictest::MakeConnection<Conn = PgwireTextDatabase>> {
    let config = config.clone();
    let mut runner = Runner::new(move || {
        let config = config.clone();
        async move { PgwireTextDatabase::connect(&config, dialect).await }
    });
    runner.add_label("postgresql");
    runner
}

#[cfg(test)]
mod tests {
    //! Goal: the materialized-view rewrite touches exactly the DDL keywords.

    use super::materialized_views_as_plain_views as rewrite;
    use super::same_decimal;

    #[test]
    fn decimals_compare_by_value_at_the_shorter_precision() {
        assert!(same_decimal("6221.50", "6221.5000000000000000"));
        assert!(same_decimal(
            "263196.66666666666666666666667",
            "263196.666666666667"
        ));
        assert!(same_decimal("190", "190.0000"));
        // A print shorter than a rounded quotient's is exact.
        assert!(!same_decimal("0.1", "0.14"));
        assert!(!same_decimal("1.3", "1.2999996"));
        assert!(!same_decimal("6221.50", "6221.51"));
        assert!(!same_decimal("6221.50", "6221.504"));
        assert!(!same_decimal(
            "263196.66666666666666666666667",
            "263196.666666666666"
        ));
        assert!(!same_decimal("190", "190.4"));
        assert!(!same_decimal("-1.5", "1.5"));
    }

    #[test]
    fn materialized_view_ddl_becomes_plain_view_ddl() {
        assert_eq!(
            rewrite("create materialized view mv as select 1"),
            "create view mv as select 1"
        );
        assert_eq!(
            rewrite("CREATE MATERIALIZED VIEW v AS x"),
            "CREATE VIEW v AS x"
        );
        assert_eq!(rewrite("drop  Materialized\n view mv;"), "drop  view mv;");
        assert_eq!(
            rewrite("select materialized from t"),
            "select materialized from t"
        );
        assert_eq!(
            rewrite("create table materialized_views (a int)"),
            "create table materialized_views (a int)"
        );
        assert_eq!(
            rewrite("undrop materialized view x"),
            "undrop materialized view x"
        );
        assert_eq!(
            rewrite("create materialized viewers"),
            "create materialized viewers"
        );
    }
}
