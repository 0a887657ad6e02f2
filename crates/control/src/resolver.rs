//! Name resolution over the catalog for planning materialized views.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::datatypes::{Field, Schema as ArrowSchema};
use datafusion::catalog::TableProvider;
use datafusion::datasource::ViewTable;
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder};
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::Statement;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use rockstream_plan::arrow_types::{arrow_type, datafusion_error};
use rockstream_plan::PlanNode;
use rockstream_planner::{
    bind_watermarks, new_context, plan_view_with, rewrite_using_joins, PlanOptions,
    SchemaOnlyTable, SqlFunction, TableResolver,
};
use rockstream_types::{ObjectId, RsError, RsResult};

use crate::catalog::{CatalogEntry, ObjectKind};

/// Plans materialized view `view_id`, defined by `query`, over `context`
/// (resolving names in `catalog`) with `options`, with the watermarks of
/// the tables it reads bound in (RFC 0013) and, with
/// `emit_on_window_close`, its windows emitted as they close.
pub async fn plan_materialized_view(
    context: &SessionContext,
    catalog: &[CatalogEntry],
    (view_id, query): (ObjectId, &str),
    (emit_on_window_close, options): (bool, PlanOptions),
) -> RsResult<PlanNode> {
    let plan = plan_view_with(context, view_id, query, options).await?;
    let event_time = |table: ObjectId| {
        catalog
            .iter()
            .find(|entry| entry.id == table && entry.kind == ObjectKind::Table)
            .and_then(CatalogEntry::event_time)
            .map(|(column, _)| column)
    };
    bind_watermarks(plan, view_id, &event_time, emit_on_window_close)
}

/// Bound on inline views nested inside each other.
pub const INLINE_VIEW_DEPTH_MAX: usize = 32;

/// Resolves names to change streams (tables, materialized views) and
/// expands inline views, recording every object it resolved.
#[derive(Debug)]
pub struct CatalogResolver {
    entries: Vec<CatalogEntry>,
    functions: Vec<Arc<SqlFunction>>,
    resolved: Mutex<Vec<ObjectId>>,
    depth: usize,
}

impl CatalogResolver {
    pub fn new(
        entries: Vec<CatalogEntry>,
        functions: Vec<Arc<SqlFunction>>,
    ) -> Arc<CatalogResolver> {
        Arc::new(CatalogResolver {
            entries,
            functions,
            resolved: Mutex::new(Vec::new()),
            depth: 0,
        })
    }

    /// Every object resolved so far (the dependencies of what was planned).
    pub fn resolved(&self) -> Vec<ObjectId> {
        self.resolved
            .lock()
            .map(|resolved| resolved.clone())
            .unwrap_or_default()
    }

    fn record(&self, id: ObjectId) {
        if let Ok(mut resolved) = self.resolved.lock() {
            if !resolved.contains(&id) {
                resolved.push(id);
            }
        }
    }
}

pub fn arrow_schema(entry: &CatalogEntry) -> RsResult<Arc<ArrowSchema>> {
    let fields = entry
        .columns
        .iter()
        .map(|column| {
            Ok(Field::new(
                &column.name,
                arrow_type(column.sql_type()?),
                true,
            ))
        })
        .collect::<RsResult<Vec<_>>>()?;
    Ok(Arc::new(ArrowSchema::new(fields)))
}

/// Plans an inline view's SELECT with names resolved by `resolver`.
pub async fn plan_inline_view(
    resolver: Arc<dyn TableResolver>,
    sql: &str,
) -> RsResult<LogicalPlan> {
    let context = new_context(resolver);
    let mut sql = sql.to_string();
    if let Ok(mut statements) = Parser::parse_sql(&PostgreSqlDialect {}, &sql) {
        if let [Statement::Query(query)] = statements.as_mut_slice() {
            rockstream_planner::rewrite_time_windows(query)?;
            rewrite_using_joins(&context, query)
                .await
                .map_err(datafusion_error)?;
            sql = query.to_string();
        }
    }
    context
        .state()
        .create_logical_plan(&sql)
        .await
        .map_err(datafusion_error)
}

/// The plan a query reads view `entry` with (a plain view, or a
/// materialized one read through its definition), its columns named as the
/// catalog names them (PostgreSQL's names for expressions, or the view's
/// column list).
pub async fn inline_view(
    resolver: Arc<dyn TableResolver>,
    entry: &CatalogEntry,
) -> RsResult<LogicalPlan> {
    let sql = entry.definition.as_deref().unwrap_or_default();
    let plan = plan_inline_view(resolver, sql).await?;
    let planned = plan.schema().columns();
    if planned.len() != entry.columns.len()
        || planned
            .iter()
            .zip(&entry.columns)
            .all(|(column, named)| column.name == named.name)
    {
        return Ok(plan);
    }
    let renamed: Vec<Expr> = planned
        .into_iter()
        .zip(&entry.columns)
        .map(|(column, named)| Expr::Column(column).alias(named.name.clone()))
        .collect();
    LogicalPlanBuilder::from(plan)
        .project(renamed)
        .and_then(LogicalPlanBuilder::build)
        .map_err(datafusion_error)
}

#[async_trait]
impl TableResolver for CatalogResolver {
    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>, RsError> {
        let Some(entry) = self.entries.iter().find(|entry| entry.name == name) else {
            return Ok(None);
        };
        self.record(entry.id);
        match entry.kind {
            ObjectKind::Table | ObjectKind::MaterializedView => {
                let unique_key = match entry.kind {
                    ObjectKind::Table => {
                        (!entry.primary_key.is_empty()).then(|| entry.primary_key.clone())
                    }
                    _ => entry.output_key.clone(),
                };
                Ok(Some(Arc::new(SchemaOnlyTable {
                    object_id: entry.id,
                    name: entry.name.clone(),
                    schema: arrow_schema(entry)?,
                    unique_key,
                })))
            }
            ObjectKind::View => {
                if self.depth >= INLINE_VIEW_DEPTH_MAX {
                    return Err(RsError::unsupported(
                        "inline views nested deeper than 32 levels",
                    ));
                }
                let nested = Arc::new(CatalogResolver {
                    entries: self.entries.clone(),
                    functions: self.functions.clone(),
                    resolved: Mutex::new(Vec::new()),
                    depth: self.depth + 1,
                });
                // Not renamed as `inline_view` does: a projection would
                // change the operator ids of views already stored.
                let sql = entry.definition.clone().unwrap_or_default();
                let plan = plan_inline_view(nested.clone(), &sql).await?;
                for id in nested.resolved() {
                    self.record(id);
                }
                Ok(Some(Arc::new(ViewTable::new(plan, Some(sql)))))
            }
        }
    }

    fn table_names(&self) -> Vec<String> {
        self.entries
            .iter()
            .map(|entry| entry.name.clone())
            .collect()
    }

    fn functions(&self) -> Vec<Arc<SqlFunction>> {
        self.functions.clone()
    }
}
