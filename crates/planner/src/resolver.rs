//! Name resolution: DataFusion asks our catalog for tables by name.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{MemoryCatalogProvider, SchemaProvider, Session, TableProvider};
use datafusion::datasource::TableType;
use datafusion::error::{DataFusionError, Result as DataFusionResult};
use datafusion::execution::context::{SessionConfig, SessionContext};
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use rockstream_types::{ObjectId, RsError};

use crate::sql_functions::{InlineSqlFunctions, SqlFunction};
use crate::system_catalog::{
    catalog_functions, is_pg_catalog_table, system_table, RelationInfo, SystemSchema,
    CATALOG_FUNCTIONS, INFORMATION_SCHEMA, PG_CATALOG,
};

/// Resolves a (lower-cased) relation name to a table provider.
#[async_trait]
pub trait TableResolver: Send + Sync + std::fmt::Debug {
    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>, RsError>;
    fn table_names(&self) -> Vec<String>;

    /// Every relation, for the system catalog tables (`pg_catalog.pg_tables`,
    /// `information_schema.columns`, ...). `None`: no system catalog (a
    /// materialized view cannot read one).
    fn relations(&self) -> Option<Vec<RelationInfo>> {
        None
    }

    /// The databases a client may connect to, for `pg_catalog.pg_database`.
    fn databases(&self) -> Vec<String> {
        Vec::new()
    }

    /// The database the reader is connected to
    /// (`information_schema.*.table_catalog`).
    fn current_database(&self) -> Option<String> {
        None
    }

    /// The roles `CREATE ROLE` made, each with whether it may log in.
    fn roles(&self) -> Vec<(String, bool)> {
        Vec::new()
    }

    /// The SQL functions queries may call (`CREATE FUNCTION … LANGUAGE
    /// SQL`), inlined where they are called.
    fn functions(&self) -> Vec<Arc<SqlFunction>> {
        Vec::new()
    }
}

/// A DataFusion session whose `public` schema is the given resolver.
pub fn new_context(resolver: Arc<dyn TableResolver>) -> SessionContext {
    new_context_in(resolver, Arc::new(RuntimeEnv::default()))
}

/// [`new_context`] whose execution reserves memory (and spills) in
/// `runtime`.
pub fn new_context_in(
    resolver: Arc<dyn TableResolver>,
    runtime: Arc<RuntimeEnv>,
) -> SessionContext {
    let mut config = SessionConfig::new()
        .with_information_schema(false)
        .with_default_catalog_and_schema("rockstream", "public")
        .with_create_default_catalog_and_schema(false)
        .with_target_partitions(1);
    {
        let options = config.options_mut();
        // PostgreSQL's grammar: `^` is exponentiation (the generic dialect
        // reads it as XOR), `#` is XOR.
        options.sql_parser.dialect = datafusion::common::config::Dialect::PostgreSQL;
        options.sql_parser.parse_float_as_decimal = true;
        options.sql_parser.map_string_types_to_utf8view = false;
        options.sql_parser.enable_ident_normalization = true;
        options.execution.time_zone = Some("+00:00".to_string());
    }
    // SQL functions are inlined before any rule gives their bodies
    // PostgreSQL's semantics. Integer literals, SUM and AVG get
    // PostgreSQL's types before DataFusion's own rules coerce anything
    // around them.
    let functions = resolver.functions();
    let inlining = (!functions.is_empty()).then(|| Arc::new(InlineSqlFunctions::new(&functions)));
    let mut analyzer_rules: Vec<Arc<dyn datafusion::optimizer::AnalyzerRule + Send + Sync>> =
        Vec::new();
    if let Some(inlining) = &inlining {
        analyzer_rules.push(inlining.clone());
    }
    analyzer_rules.push(Arc::new(
        crate::pg_integer_literals::PostgresIntegerLiterals,
    ));
    analyzer_rules.push(Arc::new(crate::pg_aggregates::PostgresAggregateTypes));
    analyzer_rules.extend(datafusion::optimizer::Analyzer::new().rules);
    let state = datafusion::execution::SessionStateBuilder::new()
        .with_config(config)
        .with_runtime_env(runtime)
        .with_default_features()
        .with_analyzer_rules(analyzer_rules)
        .build();
    let mut context = SessionContext::new_with_state(state);
    context.add_analyzer_rule(Arc::new(crate::pg_intervals::PostgresIntervals));
    context.add_analyzer_rule(Arc::new(crate::pg_casts::PostgresRounding));
    context.add_analyzer_rule(Arc::new(
        crate::pg_integer_arithmetic::PostgresIntegerArithmetic,
    ));
    context.add_analyzer_rule(Arc::new(crate::pg_numeric::PostgresArithmetic));
    context.add_analyzer_rule(Arc::new(crate::pg_text_casts::PostgresTextCasts));
    context.add_analyzer_rule(Arc::new(crate::pg_similar_to::PostgresSimilarTo));
    context.add_analyzer_rule(Arc::new(crate::pg_to_char::PostgresToChar));
    context.add_analyzer_rule(Arc::new(
        crate::pg_datetime_literals::PostgresDatetimeLiterals,
    ));
    context.add_analyzer_rule(Arc::new(crate::lateral_top_k::LateralTopK));
    context.add_analyzer_rule(Arc::new(crate::lateral_unnest::LateralUnnest));
    context.add_analyzer_rule(Arc::new(crate::exists_left_joins::ExistsLeftJoins));
    context.add_analyzer_rule(Arc::new(crate::theta_subqueries::ThetaSubqueries));
    // The rules above change some result types (a quotient's scale) after
    // DataFusion coerced the expressions around them to the old ones:
    // coerce once more.
    context.add_analyzer_rule(Arc::new(
        datafusion::optimizer::analyzer::type_coercion::TypeCoercion::new(),
    ));
    // Registered after DataFusion's own planners, which leave these
    // operators alone.
    let _ = datafusion::execution::FunctionRegistry::register_expr_planner(
        &mut context,
        Arc::new(crate::pg_intervals::PostgresIntervalArithmetic),
    );
    let _ = datafusion::execution::FunctionRegistry::register_expr_planner(
        &mut context,
        Arc::new(crate::aggregate_casts::NamedAggregateCasts),
    );
    for function in CATALOG_FUNCTIONS.iter() {
        context.register_udf(function.clone());
    }
    for function in crate::system_catalog::SESSION_INFO_FUNCTIONS.iter() {
        context.register_udf(function.clone());
    }
    for function in crate::pg_functions::FUNCTIONS.iter() {
        context.register_udf(function.as_ref().clone());
    }
    context.register_udf(crate::pg_functions::sign());
    for function in crate::pg_functions::range_checked() {
        context.register_udf(function);
    }
    for function in crate::pg_functions::length_bounded() {
        context.register_udf(function);
    }
    context.register_udf(crate::pg_number_format::to_char());
    context.register_udaf(crate::pg_functions::variance());
    for function in crate::pg_clock::CLOCK_FUNCTIONS.iter() {
        context.register_udf(function.as_ref().clone());
    }
    context.register_udaf(crate::scalar_subquery::SUBQUERY_ROWS.clone());
    for function in crate::session_windows::session_functions() {
        context.register_udwf(function);
    }
    for aggregate in crate::ordered_set_aggregates::ordered_set_aggregates() {
        context.register_udaf(aggregate);
    }
    context.register_udf(crate::scalar_subquery::SUBQUERY_VALUE.clone());
    for function in catalog_functions(resolver.clone()) {
        context.register_udf(function);
    }
    let catalog = MemoryCatalogProvider::new();
    for system in [PG_CATALOG, INFORMATION_SCHEMA] {
        let schema: Arc<dyn SchemaProvider> = Arc::new(SystemSchema {
            schema: system,
            resolver: resolver.clone(),
        });
        let _ = datafusion::catalog::CatalogProvider::register_schema(&catalog, system, schema);
    }
    let schema: Arc<dyn SchemaProvider> = Arc::new(ResolverSchema { resolver });
    let _ = datafusion::catalog::CatalogProvider::register_schema(&catalog, "public", schema);
    context.register_catalog("rockstream", Arc::new(catalog));
    if let Some(inlining) = &inlining {
        crate::sql_functions::register(&context, &functions, inlining);
    }
    context
}

#[derive(Debug)]
struct ResolverSchema {
    resolver: Arc<dyn TableResolver>,
}

#[async_trait]
impl SchemaProvider for ResolverSchema {
    fn table_names(&self) -> Vec<String> {
        self.resolver.table_names()
    }

    async fn table(&self, name: &str) -> DataFusionResult<Option<Arc<dyn TableProvider>>> {
        let table = self
            .resolver
            .table(name)
            .await
            .map_err(|error| DataFusionError::External(Box::new(error)))?;
        if table.is_some() || !is_pg_catalog_table(name) {
            return Ok(table);
        }
        // PostgreSQL searches pg_catalog before any schema of the path.
        system_table(PG_CATALOG, name, self.resolver.as_ref())
    }

    fn table_exist(&self, name: &str) -> bool {
        self.resolver
            .table_names()
            .iter()
            .any(|known| known == name)
    }
}

/// A relation known only by its schema: what a materialized view's plan
/// reads as a stream of changes.
#[derive(Debug)]
pub struct SchemaOnlyTable {
    pub object_id: ObjectId,
    pub name: String,
    pub schema: SchemaRef,
    /// Columns no two rows agree on (a table's primary key, a view's
    /// stored unique key), rows each once; `None` if unknown.
    pub unique_key: Option<Vec<usize>>,
}

#[async_trait]
impl TableProvider for SchemaOnlyTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        _projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DataFusionResult<Arc<dyn ExecutionPlan>> {
        Err(DataFusionError::Internal(format!(
            "{} is planned as a change stream and is never scanned here",
            self.name
        )))
    }
}

/// A resolver knowing one table, `t`, keyed by its first column: what
/// planner tests plan views over.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct OneTable(pub datafusion::arrow::datatypes::Schema);

#[cfg(test)]
#[async_trait::async_trait]
impl TableResolver for OneTable {
    async fn table(
        &self,
        name: &str,
    ) -> Result<Option<Arc<dyn datafusion::catalog::TableProvider>>, rockstream_types::RsError>
    {
        Ok((name == "t").then(|| {
            Arc::new(SchemaOnlyTable {
                object_id: 1,
                name: "t".to_string(),
                schema: Arc::new(self.0.clone()),
                unique_key: Some(vec![0]),
            }) as Arc<dyn datafusion::catalog::TableProvider>
        }))
    }

    fn table_names(&self) -> Vec<String> {
        vec!["t".to_string()]
    }
}
