//! `CREATE TABLE`, `CREATE [MATERIALIZED] VIEW` and `DROP TABLE / VIEW /
//! MATERIALIZED VIEW`: at once outside a transaction block, in its catalog
//! inside one (RFC 0002).

use datafusion::sql::sqlparser::ast::{CreateTable, CreateView, ObjectName, ObjectType};
use rockstream_control::{DropObject, Dropped, NewTable, NewView, ObjectKind};
use rockstream_pgwire::{Notice, StatementResult};
use rockstream_planner::pg_column_names;
use rockstream_types::{codes, RsError, RsResult};

use crate::backend::{object_name, Gateway};
use crate::ddl::table_columns;
use crate::defaults;
use crate::session::GatewaySession;
use crate::streaming::Streaming;

impl Gateway {
    pub(crate) async fn create_table(
        &self,
        session: &mut GatewaySession,
        create: &CreateTable,
        clauses: &Streaming,
        in_explicit: bool,
    ) -> RsResult<StatementResult> {
        refuse_unsupported_table(create)?;
        let mut definition = table_columns(create)?;
        defaults::check_defaults(self, session, &mut definition).await?;
        let name = object_name(&create.name.to_string());
        let table = NewTable {
            name: &name,
            columns: definition.columns,
            primary_key: definition.primary_key,
            generated: definition.generated,
            unique: definition.unique,
            watermark: clauses.watermark.clone(),
            if_not_exists: create.if_not_exists,
        };
        let created = match session.transaction.as_mut() {
            Some(transaction) if in_explicit => {
                self.database()
                    .create_table_in(&mut transaction.catalog, &session.namespace, table)
                    .await?
            }
            _ => {
                self.database()
                    .create_table(&session.namespace, table)
                    .await?
            }
        };
        if !created {
            already_exists(session, &name);
        }
        Ok(StatementResult::command("CREATE TABLE"))
    }

    pub(crate) async fn create_view(
        &self,
        session: &mut GatewaySession,
        create: &CreateView,
        clauses: &Streaming,
        in_explicit: bool,
    ) -> RsResult<StatementResult> {
        if create.or_replace {
            return Err(RsError::new(
                &codes::UNSUPPORTED_STATEMENT,
                "CREATE OR REPLACE VIEW is not supported; DROP the view and create it again",
            ));
        }
        let name = object_name(&create.name.to_string());
        let query = create.query.to_string();
        let column_names = if create.columns.is_empty() {
            pg_column_names(&create.query)
        } else {
            Some(
                create
                    .columns
                    .iter()
                    .map(|column| object_name(&column.name.to_string()))
                    .collect(),
            )
        };
        let view = NewView {
            name: &name,
            query: &query,
            column_names,
            materialized: create.materialized,
            emit_on_window_close: clauses.emit_on_window_close,
            if_not_exists: create.if_not_exists,
        };
        let created = match session.transaction.as_mut() {
            Some(transaction) if in_explicit => {
                let created = self
                    .database()
                    .create_view_in(&mut transaction.catalog, &session.namespace, view)
                    .await?;
                if created && create.materialized {
                    self.populate(session, &name, &query).await?;
                }
                created
            }
            _ => {
                self.database()
                    .create_view(&session.namespace, view)
                    .await?
            }
        };
        if !created {
            already_exists(session, &name);
        }
        Ok(StatementResult::command(if create.materialized {
            "CREATE MATERIALIZED VIEW"
        } else {
            "CREATE VIEW"
        }))
    }

    /// `DROP TABLE | VIEW | MATERIALIZED VIEW [IF EXISTS] names [CASCADE]`.
    pub(crate) async fn drop_relations(
        &self,
        session: &mut GatewaySession,
        object_type: &ObjectType,
        names: &[ObjectName],
        cascade: bool,
        if_exists: bool,
        in_explicit: bool,
    ) -> RsResult<StatementResult> {
        let (kind, tag) = match object_type {
            ObjectType::Table => (ObjectKind::Table, "DROP TABLE"),
            ObjectType::View => (ObjectKind::View, "DROP VIEW"),
            ObjectType::MaterializedView => {
                (ObjectKind::MaterializedView, "DROP MATERIALIZED VIEW")
            }
            other => {
                return Err(RsError::new(
                    &codes::UNSUPPORTED_STATEMENT,
                    format!("DROP {other} is not supported"),
                ))
            }
        };
        // Every name is looked up before any is dropped, as PostgreSQL does:
        // one that an earlier name's CASCADE dropped is done, not absent.
        let names: Vec<String> = names
            .iter()
            .map(|name| object_name(&name.to_string()))
            .collect();
        let present = |session: &GatewaySession, name: &str| {
            self.entries(session).iter().any(|entry| entry.name == name)
        };
        let at_start: Vec<bool> = names.iter().map(|name| present(session, name)).collect();
        // Each name checked before anything is dropped: there, unless
        // `IF EXISTS`, and of the kind named.
        if let Some((name, _)) = names
            .iter()
            .zip(&at_start)
            .find(|(_, present)| !**present && !if_exists)
        {
            return Err(RsError::new(
                &codes::UNDEFINED_OBJECT,
                format!("{} \"{name}\" does not exist", kind.describe()),
            ));
        }
        for entry in self.entries(session) {
            if names.contains(&entry.name) && entry.kind != kind {
                return Err(RsError::new(
                    &codes::WRONG_OBJECT_KIND,
                    format!(
                        "\"{}\" is a {}, not a {}",
                        entry.name,
                        entry.kind.describe(),
                        kind.describe()
                    ),
                ));
            }
        }
        for (name, was_present) in names.iter().zip(at_start) {
            if was_present && !present(session, name) {
                continue;
            }
            let drop = DropObject {
                name,
                kind,
                cascade,
                if_exists,
            };
            let dropped = match session.transaction.as_mut() {
                Some(transaction) if in_explicit => {
                    let dropped = self.database().drop_object_in(
                        &mut transaction.catalog,
                        &session.namespace,
                        drop,
                    )?;
                    // Its rows go with the table.
                    for object in dropped.iter().flatten() {
                        transaction.remove_table(object.id);
                    }
                    dropped
                }
                _ => {
                    self.database()
                        .drop_object(&session.namespace, drop)
                        .await?
                }
            };
            let notice = match dropped {
                // PostgreSQL's NOTICE for `DROP … IF EXISTS` of a name not
                // taken.
                None => Some(Notice {
                    sqlstate: "00000",
                    message: format!("{} \"{name}\" does not exist, skipping", kind.describe()),
                    detail: None,
                }),
                Some(dropped) => cascaded(&dropped, &names),
            };
            session.notices.extend(notice);
        }
        Ok(StatementResult::command(tag))
    }
}

/// PostgreSQL's NOTICE for a `DROP … CASCADE` that dropped dependents too
/// (`dropped` after the object named) other than those the statement names
/// itself (`named`): each named, in a detail when more than one.
fn cascaded(dropped: &[Dropped], named: &[String]) -> Option<Notice> {
    let line = |object: &Dropped| {
        format!(
            "drop cascades to {} {}",
            object.kind.describe(),
            object.name
        )
    };
    let dependents: Vec<&Dropped> = dropped
        .get(1..)?
        .iter()
        .filter(|object| !named.contains(&object.name))
        .collect();
    match dependents.as_slice() {
        [] => None,
        [one] => Some(Notice {
            sqlstate: "00000",
            message: line(one),
            detail: None,
        }),
        several => Some(Notice {
            sqlstate: "00000",
            message: format!("drop cascades to {} other objects", several.len()),
            detail: Some(
                several
                    .iter()
                    .map(|object| line(object))
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
        }),
    }
}

/// PostgreSQL's NOTICE for `CREATE … IF NOT EXISTS` of a name taken.
fn already_exists(session: &mut GatewaySession, name: &str) {
    session.notices.push(Notice {
        sqlstate: "42P07",
        message: format!("relation \"{name}\" already exists, skipping"),
        detail: None,
    });
}

/// Refuses the `CREATE TABLE` forms RockStream does not build, rather than
/// create something else: temporary tables (they would outlive the
/// session), `AS query` and `(LIKE other)`.
fn refuse_unsupported_table(create: &CreateTable) -> RsResult<()> {
    let refused = if create.temporary {
        Some("CREATE TEMPORARY TABLE is not supported: create a table and drop it when done")
    } else if create.query.is_some() {
        Some("CREATE TABLE ... AS is not supported yet: CREATE TABLE, then INSERT INTO ... SELECT")
    } else if create.like.is_some() {
        Some("CREATE TABLE ... (LIKE ...) is not supported: name the columns")
    } else if create.inherits.is_some() {
        Some("CREATE TABLE ... INHERITS is not supported")
    } else {
        None
    };
    refused.map_or(Ok(()), |message| {
        Err(RsError::new(&codes::UNSUPPORTED_STATEMENT, message))
    })
}
