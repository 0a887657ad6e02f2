//! `CREATE DATABASE` / `DROP DATABASE`: the namespaces a client connects
//! to (`dbname=`). Like PostgreSQL's, they run outside transaction blocks,
//! a database in use cannot be dropped, and dropping one drops everything
//! in it.

use std::time::Duration;

use datafusion::sql::sqlparser::ast::Statement;
use rockstream_common::Runtime;
use rockstream_control::Database;
use rockstream_pgwire::StatementResult;
use rockstream_types::{codes, RsError, RsResult};

use crate::ddl::unqualified_name;
use crate::session::GatewaySession;

/// `CREATE DATABASE name`; its PostgreSQL options (`OWNER`, `TEMPLATE`,
/// `ENCODING`, …) are not part of the grammar here, so they fail to parse,
/// and MySQL's that are (`CHARACTER SET`, `COLLATE`) are refused.
pub(crate) async fn create_database(
    database: &Database,
    statement: &Statement,
) -> RsResult<StatementResult> {
    let Statement::CreateDatabase {
        db_name,
        if_not_exists,
        location,
        managed_location,
        clone,
        default_charset,
        default_collation,
        ..
    } = statement
    else {
        return Err(RsError::internal("CREATE DATABASE expected"));
    };
    if location.is_some() || managed_location.is_some() || clone.is_some() {
        return Err(RsError::new(
            &codes::UNSUPPORTED_STATEMENT,
            "CREATE DATABASE takes no LOCATION or CLONE: every database lives in the server's storage",
        ));
    }
    if default_charset.is_some() || default_collation.is_some() {
        return Err(RsError::new(
            &codes::UNSUPPORTED_STATEMENT,
            "CREATE DATABASE takes no CHARACTER SET or COLLATE: every database is UTF8 with the C collation",
        ));
    }
    let name = unqualified_name(db_name, "database")?;
    match database.create_namespace(&name).await {
        Err(error) if *if_not_exists && error.code.number == codes::DUPLICATE_DATABASE.number => {}
        other => other?,
    }
    Ok(StatementResult::command("CREATE DATABASE"))
}

/// How long `DROP DATABASE` waits for the sessions connected to the
/// database to end (as PostgreSQL waits for their backends to exit: a
/// client that just disconnected may not have been noticed yet).
const SESSIONS_ENDING: Duration = Duration::from_secs(5);

/// `DROP DATABASE [IF EXISTS] name`.
pub(crate) async fn drop_database(
    database: &Database,
    runtime: &Runtime,
    session: &GatewaySession,
    statement: &Statement,
) -> RsResult<StatementResult> {
    let Statement::Drop {
        if_exists,
        names,
        cascade,
        restrict,
        ..
    } = statement
    else {
        return Err(RsError::internal("DROP DATABASE expected"));
    };
    // PostgreSQL's grammar: one name, no CASCADE or RESTRICT.
    let ([name], false, false) = (names.as_slice(), *cascade, *restrict) else {
        return Err(RsError::new(
            &codes::SYNTAX_ERROR,
            "DROP DATABASE takes one database name and no CASCADE or RESTRICT",
        ));
    };
    let name = unqualified_name(name, "database")?;
    if name == session.namespace {
        return Err(RsError::new(
            &codes::DATABASE_IN_USE,
            format!("cannot drop the currently open database \"{name}\""),
        ));
    }
    if !drop_when_unused(database, runtime, &name).await? && !if_exists {
        return Err(RsError::new(
            &codes::UNKNOWN_DATABASE,
            format!("database \"{name}\" does not exist"),
        ));
    }
    Ok(StatementResult::command("DROP DATABASE"))
}

async fn drop_when_unused(database: &Database, runtime: &Runtime, name: &str) -> RsResult<bool> {
    let deadline = runtime.now_micros() + SESSIONS_ENDING.as_micros() as i64;
    loop {
        match database.drop_namespace(name).await {
            Err(error)
                if error.code.number == codes::DATABASE_IN_USE.number
                    && runtime.now_micros() < deadline =>
            {
                runtime.sleep(Duration::from_millis(50)).await;
            }
            other => return other,
        }
    }
}
