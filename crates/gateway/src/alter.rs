//! `ALTER TABLE`: renaming a table or a column (the catalog changes, the
//! stored rows do not). Other alterations are refused by name.

use datafusion::sql::sqlparser::ast::{AlterTable, AlterTableOperation, RenameTableNameKind};
use rockstream_control::Rename;
use rockstream_pgwire::StatementResult;
use rockstream_types::{codes, RsError, RsResult};

use crate::backend::{object_name, Gateway};
use crate::ddl::ident_name;
use crate::session::GatewaySession;

/// Runs `alter`. Inside a transaction block it is refused: renames are
/// not part of catalog transactions (RFC 0002) yet.
pub(crate) async fn alter_table(
    gateway: &Gateway,
    session: &GatewaySession,
    alter: &AlterTable,
    in_explicit: bool,
) -> RsResult<StatementResult> {
    let [operation] = alter.operations.as_slice() else {
        return Err(unsupported(
            "ALTER TABLE with several actions is not supported yet; run one ALTER TABLE per action",
        ));
    };
    let name = object_name(&alter.name.to_string());
    let new_name;
    let (from, to);
    let rename = match operation {
        AlterTableOperation::RenameTable {
            table_name: RenameTableNameKind::To(table_name) | RenameTableNameKind::As(table_name),
        } => {
            new_name = object_name(&table_name.to_string());
            Rename::Table { to: &new_name }
        }
        AlterTableOperation::RenameColumn {
            old_column_name,
            new_column_name,
        } => {
            (from, to) = (ident_name(old_column_name), ident_name(new_column_name));
            Rename::Column {
                from: &from,
                to: &to,
            }
        }
        other => {
            return Err(unsupported(&format!(
                "ALTER TABLE ... {} is not supported yet (only RENAME TO and RENAME COLUMN are)",
                action_name(other)
            )))
        }
    };
    if in_explicit {
        return Err(unsupported(
            "ALTER TABLE inside a transaction block is not supported yet; run it on its own",
        ));
    }
    gateway
        .database()
        .rename_table(&session.namespace, &name, rename, alter.if_exists)
        .await?;
    Ok(StatementResult::Command {
        tag: "ALTER TABLE".to_string(),
    })
}

fn unsupported(message: &str) -> RsError {
    RsError::new(&codes::UNSUPPORTED_STATEMENT, message)
}

/// The action's leading words (`ADD COLUMN`, `DROP COLUMN`, ...).
fn action_name(operation: &AlterTableOperation) -> String {
    operation
        .to_string()
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
}
