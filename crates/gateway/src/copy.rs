//! `COPY ... FROM STDIN` (the wire collects the data, then
//! [`crate::dml`] loads it) and `COPY ... TO STDOUT`.

use datafusion::arrow::datatypes::DataType;
use datafusion::sql::sqlparser::ast::{
    CopyLegacyOption, CopyOption, CopySource, CopyTarget as SqlCopyTarget, Statement,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use rockstream_control::{CatalogEntry, ObjectKind};
use rockstream_pgwire::{CopyFormat, StatementResult};
use rockstream_types::{codes, RsError, RsResult};

use crate::backend::{object_name, refuse_set_config, Gateway};
use crate::copy_options;
use crate::ddl::ident_name;
use crate::dml;
use crate::session::GatewaySession;

impl Gateway {
    /// `COPY table [(columns)] FROM STDIN` or `COPY ... TO STDOUT`.
    pub(crate) async fn copy_statement(
        &self,
        session: &GatewaySession,
        source: &CopySource,
        to: bool,
        target: &SqlCopyTarget,
        options: &[CopyOption],
        legacy_options: &[CopyLegacyOption],
    ) -> RsResult<StatementResult> {
        if to {
            if !matches!(target, SqlCopyTarget::Stdout) {
                return Err(RsError::new(
                    &codes::UNSUPPORTED_STATEMENT,
                    "only COPY ... TO STDOUT is supported (a file on the client: psql's \\copy ... TO 'file')",
                ));
            }
            return self
                .copy_out(session, source, options, legacy_options)
                .await;
        }
        let CopySource::Table {
            table_name,
            columns,
        } = source
        else {
            return Err(RsError::new(
                &codes::UNSUPPORTED_STATEMENT,
                "COPY (query) FROM is not valid: COPY FROM loads a table",
            ));
        };
        if !matches!(target, SqlCopyTarget::Stdin) {
            return Err(RsError::new(
                &codes::UNSUPPORTED_STATEMENT,
                "only COPY ... FROM STDIN is supported (a file on the client: psql's \\copy ... FROM 'file')",
            ));
        }
        let entry = self.entry(
            session,
            &object_name(&table_name.to_string()),
            Some(ObjectKind::Table),
        )?;
        // No list means every column, named: the wire's parser then checks
        // each row's width as it reads it (errors name the stream's line),
        // and the CopyInResponse gives the count.
        let columns: Vec<String> = if columns.is_empty() {
            entry
                .columns
                .iter()
                .map(|column| column.name.clone())
                .collect()
        } else {
            columns.iter().map(ident_name).collect()
        };
        let mut copy =
            copy_options::copy_target(entry.name.clone(), columns, options, legacy_options)?;
        if copy.format == CopyFormat::Binary {
            copy.column_types = copy_column_types(&entry, &copy.columns)?;
        }
        copy.table_id = Some(entry.id);
        Ok(StatementResult::CopyIn(copy))
    }

    /// `COPY table [(columns)] TO STDOUT` or `COPY (query) TO STDOUT`: the
    /// rows, for the wire to write in the options' format.
    async fn copy_out(
        &self,
        session: &GatewaySession,
        source: &CopySource,
        options: &[CopyOption],
        legacy_options: &[CopyLegacyOption],
    ) -> RsResult<StatementResult> {
        let format = copy_options::copy_target(String::new(), Vec::new(), options, legacy_options)?;
        if format.format == CopyFormat::Binary {
            return Err(RsError::new(
                &codes::UNSUPPORTED_STATEMENT,
                "COPY ... TO in the binary format is not supported; use the text or CSV format",
            ));
        }
        let query = match source {
            CopySource::Query(query) => query.as_ref().clone(),
            CopySource::Table {
                table_name,
                columns,
            } => {
                // A table, as in PostgreSQL (a view's rows: `COPY (SELECT
                // ...) TO`).
                let entry = self.entry(
                    session,
                    &object_name(&table_name.to_string()),
                    Some(ObjectKind::Table),
                )?;
                let names: Vec<String> = columns.iter().map(ident_name).collect();
                // Each listed column exists (42703 naming it otherwise).
                copy_column_types(&entry, &names)?;
                let list = if columns.is_empty() {
                    "*".to_string()
                } else {
                    columns
                        .iter()
                        .map(|column| format!("\"{}\"", ident_name(column).replace('"', "\"\"")))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let sql = format!("SELECT {list} FROM \"{}\"", entry.name.replace('"', "\"\""));
                match Parser::parse_sql(&PostgreSqlDialect {}, &sql)
                    .map_err(|error| RsError::internal(format!("{sql}: {error}")))?
                    .pop()
                {
                    Some(Statement::Query(query)) => *query,
                    _ => return Err(RsError::internal(format!("{sql} is not a query"))),
                }
            }
        };
        refuse_set_config(&query, "COPY")?;
        let StatementResult::Query { schema, batches } = self.query(session, &query).await? else {
            return Err(RsError::internal("COPY's query gave no rows"));
        };
        Ok(StatementResult::CopyOut {
            format,
            schema,
            batches,
        })
    }
}

/// The types of the columns a `COPY` lists (every column when it lists
/// none), by which binary data is read.
fn copy_column_types(entry: &CatalogEntry, columns: &[String]) -> RsResult<Vec<DataType>> {
    dml::copy_column_positions(entry, columns)?
        .into_iter()
        .map(|position| {
            let column = &entry.columns[position];
            Ok(rockstream_ops::arrow_rows::arrow_type(column.sql_type()?))
        })
        .collect()
}
