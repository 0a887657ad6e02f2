//! The catalog follower: applies committed catalog changes to the runtime.
//!
//! The DDL path never calls the engine itself. It commits a catalog change,
//! hands it to this task, and waits for the task to report it applied. On
//! restart the same task replays the whole catalog, so an installed dataflow
//! is always an implication of a committed catalog entry.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::prelude::SessionContext;
use rockstream_common::Runtime;
use rockstream_ops::keys::RowStorage;
use rockstream_ops::Dataflow;
use rockstream_plan::partition::{place, Partitioning};
use rockstream_planner::{new_context, PlanOptions};

use crate::resolver::plan_materialized_view;
use rockstream_runtime::{Engine, InstallView};
use rockstream_types::{codes, ObjectId, RsError, RsResult};
use tokio::sync::{mpsc, oneshot};

use crate::catalog::{CatalogEntry, ObjectKind};
use crate::functions::Functions;
use crate::resolver::CatalogResolver;

// One message per DDL statement: its size does not matter.
#[allow(clippy::large_enum_variant)]
pub(crate) enum CatalogChange {
    /// An object was created; `catalog` is the catalog it was planned against.
    Created {
        entry: CatalogEntry,
        catalog: Vec<CatalogEntry>,
        /// Replayed from the catalog on start, rather than just created.
        replay: bool,
    },
    /// Objects dropped together (dependents first).
    Dropped { entries: Vec<CatalogEntry> },
}

pub(crate) type FollowerSender = mpsc::Sender<(CatalogChange, oneshot::Sender<RsResult<()>>)>;

/// Bound on catalog changes waiting for the follower.
const FOLLOWER_QUEUE_MAX: usize = 64;

pub(crate) fn start(
    runtime: &Runtime,
    engine: Engine,
    functions: Arc<Functions>,
) -> FollowerSender {
    let (sender, mut receiver) =
        mpsc::channel::<(CatalogChange, oneshot::Sender<RsResult<()>>)>(FOLLOWER_QUEUE_MAX);
    runtime.spawn(async move {
        let mut follower = Follower {
            engine,
            functions,
            not_maintainable: HashSet::new(),
        };
        while let Some((change, reply)) = receiver.recv().await {
            let _ = reply.send(follower.apply(change).await);
        }
    });
    sender
}

struct Follower {
    engine: Engine,
    /// What views are planned with.
    functions: Arc<Functions>,
    /// Stored views this binary could not plan on start (see
    /// [`Follower::not_maintainable`]).
    not_maintainable: HashSet<ObjectId>,
}

impl Follower {
    /// A stored view that no longer plans (a definition an older version
    /// accepted) does not stop the database from opening: it is left
    /// uninstalled and reports why on every read, until it is dropped.
    fn not_maintainable(&mut self, entry: &CatalogEntry, reason: &str) {
        tracing::error!(view = %entry.name, %reason, "materialized view cannot be maintained; drop it and create it again");
        self.not_maintainable.insert(entry.id);
        self.engine.mark_not_maintainable(
            entry.id,
            RsError::new(
                &codes::VIEW_NOT_MAINTAINABLE,
                format!(
                    "materialized view \"{}\" cannot be maintained: {reason}",
                    entry.name
                ),
            ),
        );
    }

    async fn apply(&mut self, change: CatalogChange) -> RsResult<()> {
        match change {
            CatalogChange::Created {
                entry,
                catalog,
                replay,
            } => {
                if entry.kind != ObjectKind::MaterializedView {
                    return Ok(());
                }
                let resolver =
                    CatalogResolver::new(catalog.clone(), self.functions.planned(&entry.namespace));
                let context = new_context(resolver);
                let sql = entry.definition.clone().unwrap_or_default();
                let planned = plan_as_created(&context, &catalog, &entry, &sql);
                let plan = match planned.await {
                    Ok(plan) => plan,
                    Err(error) if replay && !error.is_storage_failure() => {
                        self.not_maintainable(&entry, &error.message);
                        return Ok(());
                    }
                    Err(error) => return Err(error),
                };
                if let Some(reason) = changed_layout(&entry, &plan) {
                    if !replay {
                        // Planned twice for one CREATE, and differently.
                        return Err(RsError::internal(format!(
                            "materialized view \"{}\" planned differently at CREATE: {reason}",
                            entry.name
                        )));
                    }
                    // The stored state and output hold what the earlier
                    // plan computed (a numeric's scale is not stored with
                    // each value): reading them with this plan would give
                    // wrong results.
                    self.not_maintainable(&entry, &reason);
                    return Ok(());
                }
                let sources = plan.sources();
                if let Some(broken) = catalog.iter().find(|other| {
                    sources.contains(&other.id) && self.not_maintainable.contains(&other.id)
                }) {
                    let reason =
                        format!("it reads \"{}\", which cannot be maintained", broken.name);
                    if !replay {
                        return Err(RsError::new(
                            &codes::VIEW_NOT_MAINTAINABLE,
                            format!(
                                "materialized view \"{}\" cannot be created: {reason}",
                                entry.name
                            ),
                        ));
                    }
                    self.not_maintainable(&entry, &reason);
                    return Ok(());
                }
                let source_storage = sources
                    .iter()
                    .map(|source| {
                        catalog
                            .iter()
                            .find(|other| other.id == *source)
                            .map(CatalogEntry::row_storage)
                            .ok_or_else(|| {
                                RsError::internal(format!(
                                    "view \"{}\" reads an object missing from its catalog",
                                    entry.name
                                ))
                            })
                    })
                    .collect::<RsResult<Vec<_>>>()?;
                // Exchanges for the engine's shards: each source as its
                // rows are placed, the output by its storage key.
                let placement = |object_id: ObjectId| {
                    catalog
                        .iter()
                        .find(|other| other.id == object_id)
                        .map_or(Partitioning::Arbitrary, CatalogEntry::partitioning)
                };
                let output_key = match entry.row_storage() {
                    RowStorage::Keyed(columns) => columns,
                    RowStorage::Counted | RowStorage::Table => (0..plan.schema().len()).collect(),
                };
                let plan = place(plan, &output_key, self.engine.shard_count(), &placement);
                let dataflow = match Dataflow::compile(&plan) {
                    Ok(dataflow) => std::sync::Arc::new(dataflow),
                    Err(error) if replay => {
                        self.not_maintainable(&entry, &error.message);
                        return Ok(());
                    }
                    Err(error) => return Err(error),
                };
                let build = self
                    .engine
                    .install(InstallView {
                        view_id: entry.id,
                        name: entry.name.clone(),
                        dataflow,
                        sources,
                        source_storage,
                        output: entry.row_storage(),
                    })
                    .await?;
                // A CREATE returns once its view is complete. On start the
                // database opens at once: a view whose build a crash cut
                // short is built again in the background, reporting that it
                // is building (or why its build failed) to readers.
                if !replay {
                    build.finished().await?;
                }
                Ok(())
            }
            CatalogChange::Dropped { entries } => {
                let mut stored = Vec::new();
                for entry in entries {
                    self.not_maintainable.remove(&entry.id);
                    // A plain view has nothing in the engine.
                    if entry.kind != ObjectKind::View {
                        stored.push(entry.id);
                    }
                }
                if stored.is_empty() {
                    return Ok(());
                }
                self.engine.drop_objects(stored).await
            }
        }
    }
}

/// View `entry`'s plan, defined by `sql`, as this build plans it or, when
/// that plan would keep its state in another layout than the one the view
/// was created with, as earlier builds planned it (a view keeps the plan its
/// state is laid out for; [`PlanOptions`]).
async fn plan_as_created(
    context: &SessionContext,
    catalog: &[CatalogEntry],
    entry: &CatalogEntry,
    sql: &str,
) -> RsResult<rockstream_plan::PlanNode> {
    let clauses = entry.emit_on_window_close;
    let current = (clauses, PlanOptions::default());
    let plan = plan_materialized_view(context, catalog, (entry.id, sql), current).await?;
    if changed_layout(entry, &plan).is_none() {
        return Ok(plan);
    }
    let earlier = PlanOptions {
        lift_subquery_expressions: false,
    };
    match plan_materialized_view(context, catalog, (entry.id, sql), (clauses, earlier)).await {
        Ok(earlier) if changed_layout(entry, &earlier).is_none() => Ok(earlier),
        _ => Ok(plan),
    }
}

/// Why `plan`, this build's plan of view `entry`, cannot maintain the view's
/// stored state: its operators keep their state in another layout, or a
/// column's type differs from the type it was created with (a later build
/// computing the expression with PostgreSQL's type).
fn changed_layout(entry: &CatalogEntry, plan: &rockstream_plan::PlanNode) -> Option<String> {
    match &entry.state_layout {
        Some(stored) if *stored != plan.state_layout() => {
            return Some(
                "this version computes it or keeps its state otherwise than the version that \
                 created it"
                    .to_string(),
            );
        }
        Some(_) => {}
        // Its state may hold values an earlier computation gave (a group
        // key of another type, a timestamp printed otherwise): retracting
        // rows computed anew would not find them.
        None => {
            return Some(
                "it was created by an earlier version, which did not record how it computes \
                 and keeps its state"
                    .to_string(),
            );
        }
    }
    let planned = &plan.schema().columns;
    if planned.len() != entry.columns.len() {
        return Some(format!(
            "this version plans {} columns for it, where it was created with {}",
            planned.len(),
            entry.columns.len()
        ));
    }
    entry
        .columns
        .iter()
        .zip(planned)
        .find(|(stored, planned)| stored.type_name != planned.sql_type.pg_name())
        .map(|(stored, planned)| {
            format!(
                "this version computes its column \"{}\" as {}, where it was created as {}",
                stored.name,
                planned.sql_type.pg_name(),
                stored.type_name
            )
        })
}

#[cfg(test)]
mod tests {
    //! Goal: a view keeps the plan its stored state is laid out for — this
    //! build's, or, when its layout is an earlier build's, the plan that
    //! build made (here: a scalar subquery's expressions below its join).
    use super::*;
    use crate::catalog::ColumnDef;

    fn entry(id: ObjectId, name: &str, kind: ObjectKind) -> CatalogEntry {
        let columns = vec![
            ColumnDef::new("g", "bigint", false),
            ColumnDef::new("v", "bigint", false),
        ];
        CatalogEntry::new(id, ("default", name), kind, columns)
    }

    #[tokio::test]
    async fn a_view_keeps_the_plan_its_state_is_laid_out_for() {
        let sql = "SELECT g, count(*) AS n FROM t GROUP BY g \
                   HAVING count(*) >= (SELECT count(*) / count(DISTINCT g) FROM t)";
        let catalog = vec![entry(1, "t", ObjectKind::Table)];
        let context = new_context(CatalogResolver::new(catalog.clone(), Vec::new()));
        let mut view = entry(2, "v", ObjectKind::MaterializedView);
        for lift in [true, false] {
            let options = PlanOptions {
                lift_subquery_expressions: lift,
            };
            let created = plan_materialized_view(&context, &catalog, (2, sql), (false, options))
                .await
                .expect("plans");
            view.state_layout = Some(created.state_layout());
            let planned = plan_as_created(&context, &catalog, &view, sql)
                .await
                .expect("plans");
            assert_eq!(
                planned.state_layout(),
                created.state_layout(),
                "lift: {lift}"
            );
            assert!(changed_layout(&view, &planned).is_none());
        }
    }
}
