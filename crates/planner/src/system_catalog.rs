//! The slice of PostgreSQL's system catalog that clients use to list what
//! a database holds: `pg_catalog.pg_tables`, `pg_views`, `pg_matviews`,
//! `information_schema.tables` and `columns`, and the parts of `pg_class`,
//! `pg_namespace` and `pg_am` (with `pg_get_userbyid` and
//! `pg_table_is_visible`) that psql's listing commands (`\d`, `\dt`, `\dv`,
//! `\dm`) read. Each table is built, when a query names it, from the
//! relations the caller's [`TableResolver`] describes; every relation lives
//! in schema `public`. As in PostgreSQL, the `pg_catalog` tables also
//! resolve without a schema name.

use std::sync::{Arc, LazyLock};

use async_trait::async_trait;
use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Int32Array, Int64Array, RecordBatch, StringArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::catalog::{MemTable, SchemaProvider, TableProvider};
use datafusion::common::ScalarValue;
use datafusion::error::Result as DataFusionResult;
use datafusion::logical_expr::{
    create_udf, ColumnarValue, ScalarFunctionImplementation, ScalarUDF, Volatility,
};

use crate::resolver::TableResolver;

/// What a user-visible relation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelationKind {
    Table,
    View,
    MaterializedView,
}

/// A relation as the system catalog describes it.
#[derive(Debug, Clone)]
pub struct RelationInfo {
    pub name: String,
    pub kind: RelationKind,
    pub columns: Vec<ColumnInfo>,
    /// The defining query of a view.
    pub definition: Option<String>,
    /// A table's primary key, which PostgreSQL counts as an index.
    pub has_primary_key: bool,
}

#[derive(Debug, Clone)]
pub struct ColumnInfo {
    pub name: String,
    /// PostgreSQL's spelling ([`rockstream_types::SqlType::pg_name`]), e.g.
    /// `numeric(12,2)`.
    pub type_name: String,
    pub not_null: bool,
}

pub(crate) const PG_CATALOG: &str = "pg_catalog";
pub(crate) const INFORMATION_SCHEMA: &str = "information_schema";
const SCHEMA: &str = "public";
/// The owner every relation reports: authentication is off.
const OWNER: &str = "rockstream";
const PG_CATALOG_TABLES: [&str; 6] = [
    "pg_tables",
    "pg_views",
    "pg_matviews",
    "pg_class",
    "pg_namespace",
    "pg_am",
];
/// PostgreSQL's fixed object ids of what we report.
const PUBLIC_OID: i64 = 2200;
const PG_CATALOG_OID: i64 = 11;
const OWNER_OID: i64 = 10;
const HEAP_AM_OID: i64 = 2;
/// Relations are numbered from PostgreSQL's first user object id.
const FIRST_RELATION_OID: i64 = 16384;
const INFORMATION_SCHEMA_TABLES: [&str; 2] = ["tables", "columns"];

/// One of the two system schemas, over the resolver's relations.
#[derive(Debug)]
pub(crate) struct SystemSchema {
    pub schema: &'static str,
    pub resolver: Arc<dyn TableResolver>,
}

#[async_trait]
impl SchemaProvider for SystemSchema {
    fn table_names(&self) -> Vec<String> {
        self.names().iter().map(|name| name.to_string()).collect()
    }

    async fn table(&self, name: &str) -> DataFusionResult<Option<Arc<dyn TableProvider>>> {
        let Some(relations) = self.resolver.relations() else {
            return Ok(None);
        };
        system_table(self.schema, name, &relations)
    }

    fn table_exist(&self, name: &str) -> bool {
        self.names().contains(&name)
    }
}

impl SystemSchema {
    fn names(&self) -> &'static [&'static str] {
        if self.schema == PG_CATALOG {
            &PG_CATALOG_TABLES
        } else {
            &INFORMATION_SCHEMA_TABLES
        }
    }
}

/// `schema.name` built over `relations`; `None` when there is no such table.
pub(crate) fn system_table(
    schema: &str,
    name: &str,
    relations: &[RelationInfo],
) -> DataFusionResult<Option<Arc<dyn TableProvider>>> {
    let batch = match (schema, name) {
        (PG_CATALOG, "pg_tables") => pg_tables(relations),
        (PG_CATALOG, "pg_views") => pg_views(relations, RelationKind::View),
        (PG_CATALOG, "pg_matviews") => pg_views(relations, RelationKind::MaterializedView),
        (PG_CATALOG, "pg_class") => pg_class(relations),
        (PG_CATALOG, "pg_namespace") => batch(vec![
            (
                "oid",
                Arc::new(Int64Array::from(vec![PG_CATALOG_OID, PUBLIC_OID])),
            ),
            (
                "nspname",
                text(["pg_catalog", SCHEMA].map(|name| Some(name.to_string()))),
            ),
            ("nspowner", Arc::new(Int64Array::from(vec![OWNER_OID; 2]))),
        ]),
        (PG_CATALOG, "pg_am") => batch(vec![
            ("oid", Arc::new(Int64Array::from(vec![HEAP_AM_OID]))),
            ("amname", text([Some("heap".to_string())])),
            ("amtype", text([Some("t".to_string())])),
        ]),
        (INFORMATION_SCHEMA, "tables") => information_schema_tables(relations),
        (INFORMATION_SCHEMA, "columns") => information_schema_columns(relations),
        _ => return Ok(None),
    }?;
    let table = MemTable::try_new(batch.schema(), vec![vec![batch]])?;
    Ok(Some(Arc::new(table)))
}

/// Whether an unqualified `name` is a `pg_catalog` table.
pub(crate) fn is_pg_catalog_table(name: &str) -> bool {
    PG_CATALOG_TABLES.contains(&name)
}

fn text(values: impl IntoIterator<Item = Option<String>>) -> ArrayRef {
    Arc::new(values.into_iter().collect::<StringArray>())
}

fn repeated(value: &str, count: usize) -> ArrayRef {
    text(std::iter::repeat_n(Some(value.to_string()), count))
}

fn flags(value: bool, count: usize) -> ArrayRef {
    Arc::new(BooleanArray::from(vec![value; count]))
}

fn batch(columns: Vec<(&str, ArrayRef)>) -> DataFusionResult<RecordBatch> {
    let fields: Vec<Field> = columns
        .iter()
        .map(|(name, array)| Field::new(*name, array.data_type().clone(), true))
        .collect();
    let arrays = columns.into_iter().map(|(_, array)| array).collect();
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?)
}

fn pg_tables(relations: &[RelationInfo]) -> DataFusionResult<RecordBatch> {
    let tables: Vec<&RelationInfo> = relations
        .iter()
        .filter(|relation| relation.kind == RelationKind::Table)
        .collect();
    let count = tables.len();
    let indexed: BooleanArray = tables
        .iter()
        .map(|table| Some(table.has_primary_key))
        .collect();
    batch(vec![
        ("schemaname", repeated(SCHEMA, count)),
        (
            "tablename",
            text(tables.iter().map(|table| Some(table.name.clone()))),
        ),
        ("tableowner", repeated(OWNER, count)),
        ("tablespace", text(vec![None; count])),
        ("hasindexes", Arc::new(indexed)),
        ("hasrules", flags(false, count)),
        ("hastriggers", flags(false, count)),
        ("rowsecurity", flags(false, count)),
    ])
}

/// The columns of `pg_class` that psql's listings read.
fn pg_class(relations: &[RelationInfo]) -> DataFusionResult<RecordBatch> {
    let count = relations.len();
    let oids: Int64Array = (0..count as i64)
        .map(|index| Some(FIRST_RELATION_OID + index))
        .collect();
    let kinds = text(relations.iter().map(|relation| {
        Some(
            match relation.kind {
                RelationKind::Table => "r",
                RelationKind::View => "v",
                RelationKind::MaterializedView => "m",
            }
            .to_string(),
        )
    }));
    let access_methods: Int64Array = relations
        .iter()
        .map(|relation| {
            Some(if relation.kind == RelationKind::View {
                0
            } else {
                HEAP_AM_OID
            })
        })
        .collect();
    batch(vec![
        ("oid", Arc::new(oids)),
        (
            "relname",
            text(relations.iter().map(|relation| Some(relation.name.clone()))),
        ),
        (
            "relnamespace",
            Arc::new(Int64Array::from(vec![PUBLIC_OID; count])),
        ),
        ("relkind", kinds),
        (
            "relowner",
            Arc::new(Int64Array::from(vec![OWNER_OID; count])),
        ),
        ("relam", Arc::new(access_methods)),
        (
            "relhasindex",
            Arc::new(
                relations
                    .iter()
                    .map(|relation| Some(relation.has_primary_key))
                    .collect::<BooleanArray>(),
            ),
        ),
    ])
}

/// `pg_get_userbyid` and `pg_table_is_visible`, also under their
/// `pg_catalog.` names (DataFusion looks a qualified function name up as
/// written): every object belongs to the one user and lives in `public`,
/// which is always on the search path.
/// Built once: every query's session registers them.
pub(crate) static CATALOG_FUNCTIONS: LazyLock<Vec<ScalarUDF>> = LazyLock::new(catalog_functions);

fn catalog_functions() -> Vec<ScalarUDF> {
    let owner: ScalarFunctionImplementation = Arc::new(|_| {
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(
            OWNER.to_string(),
        ))))
    });
    let visible: ScalarFunctionImplementation =
        Arc::new(|_| Ok(ColumnarValue::Scalar(ScalarValue::Boolean(Some(true)))));
    vec![
        create_udf(
            "pg_get_userbyid",
            vec![DataType::Int64],
            DataType::Utf8,
            Volatility::Stable,
            owner,
        )
        .with_aliases(["pg_catalog.pg_get_userbyid"]),
        create_udf(
            "pg_table_is_visible",
            vec![DataType::Int64],
            DataType::Boolean,
            Volatility::Stable,
            visible,
        )
        .with_aliases(["pg_catalog.pg_table_is_visible"]),
    ]
}

/// `pg_views` (plain views) or `pg_matviews` (materialized views).
fn pg_views(relations: &[RelationInfo], kind: RelationKind) -> DataFusionResult<RecordBatch> {
    let views: Vec<&RelationInfo> = relations
        .iter()
        .filter(|relation| relation.kind == kind)
        .collect();
    let count = views.len();
    let names = text(views.iter().map(|view| Some(view.name.clone())));
    let definitions = text(views.iter().map(|view| view.definition.clone()));
    if kind == RelationKind::View {
        return batch(vec![
            ("schemaname", repeated(SCHEMA, count)),
            ("viewname", names),
            ("viewowner", repeated(OWNER, count)),
            ("definition", definitions),
        ]);
    }
    batch(vec![
        ("schemaname", repeated(SCHEMA, count)),
        ("matviewname", names),
        ("matviewowner", repeated(OWNER, count)),
        ("tablespace", text(vec![None; count])),
        ("hasindexes", flags(false, count)),
        ("ispopulated", flags(true, count)),
        ("definition", definitions),
    ])
}

fn information_schema_tables(relations: &[RelationInfo]) -> DataFusionResult<RecordBatch> {
    // The SQL standard has no materialized views; PostgreSQL leaves them out
    // of this view, and so do we.
    let listed: Vec<&RelationInfo> = relations
        .iter()
        .filter(|relation| relation.kind != RelationKind::MaterializedView)
        .collect();
    let count = listed.len();
    batch(vec![
        ("table_catalog", repeated(OWNER, count)),
        ("table_schema", repeated(SCHEMA, count)),
        (
            "table_name",
            text(listed.iter().map(|relation| Some(relation.name.clone()))),
        ),
        (
            "table_type",
            text(listed.iter().map(|relation| {
                let kind = match relation.kind {
                    RelationKind::Table => "BASE TABLE",
                    _ => "VIEW",
                };
                Some(kind.to_string())
            })),
        ),
    ])
}

fn information_schema_columns(relations: &[RelationInfo]) -> DataFusionResult<RecordBatch> {
    let columns: Vec<(&RelationInfo, usize, &ColumnInfo)> = relations
        .iter()
        .flat_map(|relation| {
            relation
                .columns
                .iter()
                .enumerate()
                .map(move |(index, column)| (relation, index, column))
        })
        .collect();
    let count = columns.len();
    let positions: Int32Array = columns
        .iter()
        .map(|(_, index, _)| Some(*index as i32 + 1))
        .collect();
    batch(vec![
        ("table_catalog", repeated(OWNER, count)),
        ("table_schema", repeated(SCHEMA, count)),
        (
            "table_name",
            text(
                columns
                    .iter()
                    .map(|(relation, _, _)| Some(relation.name.clone())),
            ),
        ),
        (
            "column_name",
            text(
                columns
                    .iter()
                    .map(|(_, _, column)| Some(column.name.clone())),
            ),
        ),
        ("ordinal_position", Arc::new(positions)),
        (
            "is_nullable",
            text(columns.iter().map(|(_, _, column)| {
                Some(if column.not_null { "NO" } else { "YES" }.to_string())
            })),
        ),
        (
            "data_type",
            text(
                columns
                    .iter()
                    .map(|(_, _, column)| Some(standard_type_name(&column.type_name))),
            ),
        ),
        (
            "character_maximum_length",
            Arc::new(
                columns
                    .iter()
                    .map(|(_, _, column)| {
                        rockstream_types::datum::varchar_length(&column.type_name)
                            .map(|length| length as i32)
                    })
                    .collect::<Int32Array>(),
            ),
        ),
    ])
}

/// `information_schema.columns.data_type` spells a type without its
/// modifiers: `numeric(12,2)` is `numeric`.
fn standard_type_name(type_name: &str) -> String {
    type_name
        .split('(')
        .next()
        .unwrap_or(type_name)
        .trim()
        .to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests may unwrap: a panic is the failure report.
mod tests {
    use super::*;

    fn relations() -> Vec<RelationInfo> {
        let column = |name: &str, type_name: &str, not_null| ColumnInfo {
            name: name.to_string(),
            type_name: type_name.to_string(),
            not_null,
        };
        vec![
            RelationInfo {
                name: "orders".into(),
                kind: RelationKind::Table,
                columns: vec![
                    column("id", "bigint", true),
                    column("amount", "numeric(12,2)", false),
                ],
                definition: None,
                has_primary_key: true,
            },
            RelationInfo {
                name: "totals".into(),
                kind: RelationKind::MaterializedView,
                columns: vec![column("total", "numeric(38,2)", false)],
                definition: Some("SELECT SUM(amount) AS total FROM orders".into()),
                has_primary_key: false,
            },
        ]
    }

    #[test]
    fn each_table_lists_the_relations_of_its_kind() {
        let relations = relations();
        assert_eq!(pg_tables(&relations).unwrap().num_rows(), 1);
        assert_eq!(
            pg_views(&relations, RelationKind::View).unwrap().num_rows(),
            0
        );
        assert_eq!(
            pg_views(&relations, RelationKind::MaterializedView)
                .unwrap()
                .num_rows(),
            1
        );
        // information_schema.tables leaves materialized views out.
        assert_eq!(information_schema_tables(&relations).unwrap().num_rows(), 1);
        let columns = information_schema_columns(&relations).unwrap();
        assert_eq!(columns.num_rows(), 3);
        let data_types = columns
            .column_by_name("data_type")
            .unwrap()
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!(data_types.value(1), "numeric");
        assert_eq!(columns.schema().field(4).data_type(), &DataType::Int32);
    }
}
