//! SQL → DataFusion `LogicalPlan` → PlanIR.
//!
//! Names resolve through a [`TableResolver`] supplied by the caller (the
//! catalog), so this crate never touches storage. [`new_context`] builds a
//! DataFusion session configured for PostgreSQL-like behaviour (decimal
//! literals, lower-cased identifiers, plain `Utf8` strings). [`plan_view`]
//! plans a materialized view's query and translates the optimized logical
//! plan into a [`PlanNode`] tree, rejecting anything without an incremental
//! form with `RS-2001`.

mod aggregate_casts;
mod ast_walk;
mod clock_series;
mod column_names;
mod columnar;
mod exists_left_joins;
mod interval_literals;
mod lateral_top_k;
mod lateral_unnest;
mod number_literals;
mod ordered_set_aggregates;
mod pg_aggregates;
mod pg_casts;
mod pg_clock;
mod pg_compat;
mod pg_datetime_literals;
mod pg_float_arithmetic;
mod pg_functions;
mod pg_integer_arithmetic;
mod pg_integer_literals;
mod pg_intervals;
mod pg_number_format;
mod pg_numeric;
mod pg_similar_to;
mod pg_text_casts;
mod pg_to_char;
mod plan_rewrite;
mod resolver;
mod scalar_subquery;
mod session_windows;
mod set_operations;
mod sql_functions;
mod system_catalog;
mod temporal_filters;
mod theta_subqueries;
mod time_windows;
mod translate;
mod type_spellings;
mod using_joins;
mod watermarks;

pub use column_names::{alias_select_items, pg_column_names};
pub use interval_literals::{normalize_interval_literals, readable_interval};
pub use number_literals::normalize_number_literals;
pub use pg_compat::normalize_query;
pub use resolver::{new_context, new_context_in, SchemaOnlyTable, TableResolver};
pub use set_operations::uses_bag_set_operation;
pub use sql_functions::{
    called_functions, check_function, is_builtin_function, sql_function_parameter_types,
    DeclaredType, SqlArgument, SqlFunction, SQL_FUNCTION_DEPTH_MAX,
};
pub use system_catalog::{
    current_setting, quote_ident, regclass_name, relation_oid, session_constant, set_config,
    ColumnInfo, RelationInfo, RelationKind, SequenceInfo, TableIndexInfo, WatermarkInfo,
    INDEX_IDS_PER_TABLE, USER_FUNCTION,
};
pub use time_windows::{fixed_interval_micros, rewrite_time_windows};
pub use translate::{plan_view, plan_view_with, schema_of, undefined_relation, PlanOptions};
pub use type_spellings::normalize_type_spellings;
pub use using_joins::{rewrite_using_joins, uses_using_joins};
pub use watermarks::bind_watermarks;
