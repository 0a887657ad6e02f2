//! The slice of PostgreSQL's system catalog that clients read to list and
//! describe what a database holds: `pg_catalog.pg_tables`, `pg_views`,
//! `pg_matviews`, `pg_class` (relations and their primary-key indexes),
//! `pg_attribute`, `pg_index`, `pg_constraint`, `pg_type`, `pg_namespace`,
//! `pg_am`, `pg_roles`, `pg_database`, `pg_tablespace`, the always-empty tables of [`empty`], `information_schema.tables`
//! and `columns`, and the functions psql's `\d` family calls
//! ([`functions`]). Each table is built, when a query names it, from the
//! relations the caller's [`TableResolver`] describes; every relation lives
//! in schema `public`. As in PostgreSQL, the `pg_catalog` tables also
//! resolve without a schema name.

mod empty;
mod functions;
mod session_info;
mod tables;
mod types;

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Int16Builder, Int64Array, Int64Builder, ListBuilder, RecordBatch,
    StringArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::catalog::{MemTable, SchemaProvider, TableProvider};
use datafusion::error::Result as DataFusionResult;
use rockstream_types::ObjectId;

use crate::resolver::TableResolver;

pub(crate) use empty::is_empty_table;
pub(crate) use functions::{catalog_functions, CATALOG_FUNCTIONS};
pub use functions::{quote_ident, regclass_name};
pub(crate) use session_info::SESSION_INFO_FUNCTIONS;
pub use session_info::{current_setting, session_constant, set_config, USER_FUNCTION};

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
    /// The catalog's id, from which the relation's oids derive.
    pub object_id: ObjectId,
    pub name: String,
    pub kind: RelationKind,
    pub columns: Vec<ColumnInfo>,
    /// The defining query of a view.
    pub definition: Option<String>,
    /// A table's primary-key columns (positions in `columns`), which
    /// PostgreSQL reports as a unique index and a constraint named
    /// `<table>_pkey`.
    pub primary_key: Vec<usize>,
    /// A table's indexes besides its primary key's: UNIQUE constraints
    /// (each also a unique index), unique and plain indexes.
    pub indexes: Vec<TableIndexInfo>,
    /// False while a materialized view is being built (PostgreSQL's
    /// `pg_matviews.ispopulated`).
    pub populated: bool,
    /// A table's event-time watermark (RFC 0013), listed by
    /// `pg_catalog.rs_watermarks`.
    pub watermark: Option<WatermarkInfo>,
}

/// A watermarked table's watermark as `rs_watermarks` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatermarkInfo {
    pub column: String,
    pub delay_micros: i64,
    /// `max(column) - delay` over its admitted rows, microseconds since
    /// 1970 (UTC for a `timestamptz` column); `None` before any row.
    pub watermark: Option<i64>,
    /// Rows dropped as late.
    pub late_rows: u64,
}

/// An index of a table besides its primary key's.
#[derive(Debug, Clone)]
pub struct TableIndexInfo {
    /// Its number within the table, from which its oids derive.
    pub id: u16,
    pub name: String,
    /// Column positions.
    pub columns: Vec<usize>,
    /// A UNIQUE constraint or unique index.
    pub unique: bool,
    /// Made by `CREATE [UNIQUE] INDEX`: an index without a constraint.
    pub index_only: bool,
    /// `INCLUDE (…)` column positions.
    pub include: Vec<usize>,
    /// `USING hash` (else btree).
    pub hash: bool,
}

/// An index, with its constraint if it has one, as `pg_index`,
/// `pg_constraint` and `pg_class` list them: a table's primary key, a
/// UNIQUE constraint, a unique or a plain index.
#[derive(Debug, Clone)]
pub(crate) struct IndexInfo<'a> {
    pub table: &'a RelationInfo,
    pub name: String,
    pub columns: &'a [usize],
    /// `INCLUDE (…)` column positions.
    pub include: &'a [usize],
    pub unique: bool,
    pub hash: bool,
    pub primary: bool,
    /// A constraint goes with it (`pg_constraint` lists it).
    pub constraint: bool,
    pub index_oid: i64,
    pub constraint_oid: i64,
}

/// Indexes' oids: two each (index, constraint), from here, stable across
/// DDL as relations' are.
const FIRST_INDEX_OID: i64 = 1_000_000_000;
/// Numbers of indexes a table's oids leave room for.
pub const INDEX_IDS_PER_TABLE: u16 = 1024;

impl IndexInfo<'_> {
    /// Its column names, comma-separated.
    pub(crate) fn column_list(&self) -> String {
        self.names(self.columns)
    }

    /// The statement that creates it, as `pg_get_indexdef` prints it:
    /// its table qualified by the schema, unless pretty-printed.
    pub(crate) fn definition(&self, qualified: bool) -> String {
        format!(
            "CREATE {}INDEX {} ON {}{} USING {} ({}){}",
            if self.unique { "UNIQUE " } else { "" },
            functions::quote_ident(&self.name),
            if qualified {
                format!("{SCHEMA}.")
            } else {
                String::new()
            },
            functions::quote_ident(&self.table.name),
            if self.hash { "hash" } else { "btree" },
            self.column_list(),
            match self.include_list() {
                Some(include) => format!(" INCLUDE ({include})"),
                None => String::new(),
            }
        )
    }

    /// Its `INCLUDE` column names, comma-separated, if it has any.
    pub(crate) fn include_list(&self) -> Option<String> {
        (!self.include.is_empty()).then(|| self.names(self.include))
    }

    /// Column names as PostgreSQL prints them in a definition (quoted where
    /// needed), comma-separated.
    fn names(&self, columns: &[usize]) -> String {
        columns
            .iter()
            .filter_map(|index| self.table.columns.get(*index))
            .map(|column| functions::quote_ident(&column.name))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Its key column numbers (from 1).
    pub(crate) fn column_numbers(&self) -> Vec<i64> {
        self.columns.iter().map(|index| *index as i64 + 1).collect()
    }

    /// Its key column numbers, then its `INCLUDE` columns' (`indkey`).
    pub(crate) fn all_column_numbers(&self) -> Vec<i64> {
        self.columns
            .iter()
            .chain(self.include)
            .map(|index| *index as i64 + 1)
            .collect()
    }
}

#[derive(Debug, Clone)]
pub struct ColumnInfo {
    pub name: String,
    /// PostgreSQL's spelling ([`rockstream_types::SqlType::pg_name`]), e.g.
    /// `numeric(12,2)`.
    pub type_name: String,
    pub not_null: bool,
    /// The default expression's text (`pg_attrdef.adbin`, which
    /// `pg_get_expr` returns as it is).
    pub default: Option<String>,
    /// `pg_attribute.attidentity`: `a` (always), `d` (by default).
    pub identity: Option<&'static str>,
    /// The sequence a `SERIAL` or identity column owns.
    pub sequence: Option<SequenceInfo>,
}

impl ColumnInfo {
    /// A column without a default.
    pub fn plain(name: impl Into<String>, type_name: impl Into<String>, not_null: bool) -> Self {
        ColumnInfo {
            name: name.into(),
            type_name: type_name.into(),
            not_null,
            default: None,
            identity: None,
            sequence: None,
        }
    }
}

/// A sequence, as `pg_class` lists it (relkind `S`).
#[derive(Debug, Clone)]
pub struct SequenceInfo {
    /// The catalog's id, from which its oid derives as a relation's does.
    pub object_id: ObjectId,
    pub name: String,
}

impl SequenceInfo {
    pub(crate) fn oid(&self) -> i64 {
        relation_oid(self.object_id)
    }
}

/// The oid of the relation (or sequence) with catalog id `object_id`. Oids
/// are stable across DDL: each relation owns three, from PostgreSQL's
/// first user object id on.
pub fn relation_oid(object_id: ObjectId) -> i64 {
    FIRST_RELATION_OID + 3 * i64::try_from(object_id).unwrap_or(0)
}

impl RelationInfo {
    /// The relation's oid ([`relation_oid`]).
    pub(crate) fn oid(&self) -> i64 {
        relation_oid(self.object_id)
    }

    /// The sequences its columns own.
    pub(crate) fn sequences(&self) -> impl Iterator<Item = &SequenceInfo> {
        self.columns
            .iter()
            .filter_map(|column| column.sequence.as_ref())
    }

    /// Its indexes: the primary key's (`<table>_pkey`, with the
    /// relation's second and third oids), then the others.
    pub(crate) fn index_infos(&self) -> impl Iterator<Item = IndexInfo<'_>> {
        let primary = (!self.primary_key.is_empty()).then(|| IndexInfo {
            table: self,
            name: format!("{}_pkey", self.name),
            columns: &self.primary_key,
            include: &[],
            unique: true,
            hash: false,
            primary: true,
            constraint: true,
            index_oid: self.oid() + 1,
            constraint_oid: self.oid() + 2,
        });
        let first = FIRST_INDEX_OID
            + 2 * i64::from(INDEX_IDS_PER_TABLE) * i64::try_from(self.object_id).unwrap_or(0);
        primary
            .into_iter()
            .chain(self.indexes.iter().map(move |index| IndexInfo {
                table: self,
                name: index.name.clone(),
                columns: &index.columns,
                include: &index.include,
                unique: index.unique,
                hash: index.hash,
                primary: false,
                constraint: !index.index_only,
                index_oid: first + 2 * i64::from(index.id),
                constraint_oid: first + 2 * i64::from(index.id) + 1,
            }))
    }
}

/// Every index of `relations` ([`RelationInfo::index_infos`]).
pub(crate) fn all_indexes(relations: &[RelationInfo]) -> Vec<IndexInfo<'_>> {
    relations
        .iter()
        .flat_map(RelationInfo::index_infos)
        .collect()
}

pub(crate) const PG_CATALOG: &str = "pg_catalog";
pub(crate) const INFORMATION_SCHEMA: &str = "information_schema";
const SCHEMA: &str = "public";
/// The owner every relation reports: authentication is off.
const OWNER: &str = "rockstream";
const PG_CATALOG_TABLES: [&str; 17] = [
    "pg_tables",
    "pg_indexes",
    "pg_views",
    "pg_matviews",
    "pg_class",
    "pg_attribute",
    "pg_attrdef",
    "pg_index",
    "pg_constraint",
    "pg_type",
    "pg_namespace",
    "pg_am",
    "pg_roles",
    "pg_database",
    "pg_tablespace",
    "pg_proc",
    "rs_watermarks",
];
/// Catalog columns of an array type (options, access-control lists) that
/// RockStream always leaves NULL: it keeps no storage options and grants
/// every privilege to its one user. `crate::pg_compat` folds the array
/// functions psql applies to them.
pub(crate) const NULL_ARRAY_COLUMNS: [&str; 4] = ["reloptions", "relacl", "datacl", "attacl"];
/// PostgreSQL's number for the UTF8 encoding, the only one RockStream uses.
pub(crate) const UTF8_ENCODING: i64 = 6;
/// Databases are numbered from the oid of PostgreSQL's `postgres` database.
const FIRST_DATABASE_OID: i64 = 5;
/// PostgreSQL's fixed object ids of what we report.
const PUBLIC_OID: i64 = 2200;
const PG_CATALOG_OID: i64 = 11;
const OWNER_OID: i64 = 10;
/// Oids of the roles `CREATE ROLE` made, in name order from here (below
/// the first relation's oid).
const ROLE_OID_BASE: i64 = 12_000;
const HEAP_AM_OID: i64 = 2;
const BTREE_AM_OID: i64 = 403;
const HASH_AM_OID: i64 = 405;
const DEFAULT_TABLESPACE_OID: i64 = 1663;
const GLOBAL_TABLESPACE_OID: i64 = 1664;
/// PostgreSQL's fixed oids of the catalog tables clients name as
/// `'pg_class'::regclass` (comments are keyed by the catalog an object
/// lives in, `pg_description.classoid`).
pub(crate) const CATALOG_RELATION_OIDS: [(&str, i64); 20] = [
    ("pg_am", 2601),
    ("pg_attrdef", 2604),
    ("pg_attribute", 1249),
    ("pg_class", 1259),
    ("pg_collation", 3456),
    ("pg_constraint", 2606),
    ("pg_database", 1262),
    ("pg_description", 2609),
    ("pg_extension", 3079),
    ("pg_index", 2610),
    ("pg_inherits", 2611),
    ("pg_namespace", 2615),
    ("pg_opclass", 2616),
    ("pg_operator", 2617),
    ("pg_proc", 1255),
    ("pg_rewrite", 2618),
    ("pg_sequence", 2224),
    ("pg_tablespace", 1213),
    ("pg_trigger", 2620),
    ("pg_type", 1247),
];
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
        if self.schema == PG_CATALOG {
            PG_CATALOG_TABLES
                .into_iter()
                .chain(empty::table_names())
                .map(str::to_string)
                .collect()
        } else {
            INFORMATION_SCHEMA_TABLES.map(str::to_string).to_vec()
        }
    }

    async fn table(&self, name: &str) -> DataFusionResult<Option<Arc<dyn TableProvider>>> {
        system_table(self.schema, name, self.resolver.as_ref())
    }

    fn table_exist(&self, name: &str) -> bool {
        if self.schema == PG_CATALOG {
            is_pg_catalog_table(name)
        } else {
            INFORMATION_SCHEMA_TABLES.contains(&name)
        }
    }
}

/// `schema.name` built over what `resolver` describes; `None` when there is
/// no such table, or no system catalog.
pub(crate) fn system_table(
    schema: &str,
    name: &str,
    resolver: &dyn TableResolver,
) -> DataFusionResult<Option<Arc<dyn TableProvider>>> {
    let Some(relations) = resolver.relations() else {
        return Ok(None);
    };
    let relations = relations.as_slice();
    let batch = match (schema, name) {
        (PG_CATALOG, "pg_tables") => tables::pg_tables(relations),
        (PG_CATALOG, "pg_indexes") => tables::pg_indexes(relations),
        (PG_CATALOG, "pg_views") => tables::pg_views(relations, RelationKind::View),
        (PG_CATALOG, "pg_matviews") => tables::pg_views(relations, RelationKind::MaterializedView),
        (PG_CATALOG, "pg_class") => tables::pg_class(relations),
        (PG_CATALOG, "rs_watermarks") => tables::rs_watermarks(relations),
        (PG_CATALOG, "pg_attribute") => tables::pg_attribute(relations),
        (PG_CATALOG, "pg_attrdef") => tables::pg_attrdef(relations),
        (PG_CATALOG, "pg_index") => tables::pg_index(relations),
        (PG_CATALOG, "pg_constraint") => tables::pg_constraint(relations),
        (PG_CATALOG, "pg_type") => types::pg_type(),
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
            (
                "oid",
                Arc::new(Int64Array::from(vec![
                    HEAP_AM_OID,
                    BTREE_AM_OID,
                    HASH_AM_OID,
                ])),
            ),
            (
                "amname",
                text(["heap", "btree", "hash"].map(|name| Some(name.to_string()))),
            ),
            (
                "amtype",
                text(["t", "i", "i"].map(|kind| Some(kind.to_string()))),
            ),
        ]),
        (PG_CATALOG, "pg_roles") => pg_roles(&resolver.roles()),
        (PG_CATALOG, "pg_proc") => pg_proc(&resolver.functions()),
        (PG_CATALOG, "pg_database") => pg_database(&resolver.databases()),
        (PG_CATALOG, "pg_tablespace") => batch(vec![
            (
                "oid",
                Arc::new(Int64Array::from(vec![
                    DEFAULT_TABLESPACE_OID,
                    GLOBAL_TABLESPACE_OID,
                ])),
            ),
            (
                "spcname",
                text(["pg_default", "pg_global"].map(|name| Some(name.to_string()))),
            ),
            ("spcowner", Arc::new(Int64Array::from(vec![OWNER_OID; 2]))),
            ("spcacl", text([None, None])),
            ("spcoptions", text([None, None])),
        ]),
        (PG_CATALOG, name) if is_empty_table(name) => empty::empty_table(name).ok_or_else(|| {
            datafusion::error::DataFusionError::Internal(format!("no table {name}"))
        }),
        (INFORMATION_SCHEMA, "tables") => {
            tables::information_schema_tables(relations, &catalog_name(resolver))
        }
        (INFORMATION_SCHEMA, "columns") => {
            tables::information_schema_columns(relations, &catalog_name(resolver))
        }
        _ => return Ok(None),
    }?;
    let table = MemTable::try_new(batch.schema(), vec![vec![batch]])?;
    Ok(Some(Arc::new(table)))
}

/// `pg_database`: each database (a RockStream namespace), UTF8 with the C
/// collation, owned by the one user.
fn pg_database(databases: &[String]) -> DataFusionResult<RecordBatch> {
    let count = databases.len();
    let numbers = |value: i64| -> ArrayRef { Arc::new(Int64Array::from(vec![value; count])) };
    batch(vec![
        (
            "oid",
            Arc::new(Int64Array::from_iter_values(
                (FIRST_DATABASE_OID..).take(count),
            )),
        ),
        ("datname", text(databases.iter().cloned().map(Some))),
        ("datdba", numbers(OWNER_OID)),
        ("encoding", numbers(UTF8_ENCODING)),
        ("datlocprovider", repeated("c", count)),
        ("datistemplate", flags(false, count)),
        ("datallowconn", flags(true, count)),
        ("datconnlimit", numbers(-1)),
        ("dattablespace", numbers(DEFAULT_TABLESPACE_OID)),
        ("datcollate", repeated("C", count)),
        ("datctype", repeated("C", count)),
        ("daticulocale", text(vec![None; count])),
        ("datcollversion", text(vec![None; count])),
        ("datacl", text(vec![None; count])),
    ])
}

/// What `information_schema` calls the catalog: the reader's database.
fn catalog_name(resolver: &dyn TableResolver) -> String {
    resolver
        .current_database()
        .unwrap_or_else(|| OWNER.to_string())
}

/// Whether an unqualified `name` is a `pg_catalog` table.
pub(crate) fn is_pg_catalog_table(name: &str) -> bool {
    PG_CATALOG_TABLES.contains(&name) || is_empty_table(name)
}

pub(crate) fn text(values: impl IntoIterator<Item = Option<String>>) -> ArrayRef {
    Arc::new(values.into_iter().collect::<StringArray>())
}

pub(crate) fn repeated(value: &str, count: usize) -> ArrayRef {
    text(std::iter::repeat_n(Some(value.to_string()), count))
}

/// A column of integer arrays (`int2vector` and `int2[]` columns).
pub(crate) fn number_lists(values: impl Iterator<Item = Vec<i64>>) -> ArrayRef {
    let mut lists = ListBuilder::new(Int64Builder::new());
    for list in values {
        lists.values().append_slice(&list);
        lists.append(true);
    }
    Arc::new(lists.finish())
}

/// An `int2vector` column ([`rockstream_types::pg_array::ELEMENT_INT2VECTOR`]):
/// lists of small numbers that travel as PostgreSQL's space-separated text.
pub(crate) fn int2vectors(values: impl Iterator<Item = Vec<i64>>) -> ArrayRef {
    let element = Field::new("item", DataType::Int16, true).with_metadata(
        [(
            rockstream_types::pg_array::ELEMENT_INT2VECTOR.to_string(),
            String::new(),
        )]
        .into(),
    );
    let mut lists = ListBuilder::new(Int16Builder::new()).with_field(Arc::new(element));
    for list in values {
        for value in list {
            lists
                .values()
                .append_value(i16::try_from(value).unwrap_or(i16::MAX));
        }
        lists.append(true);
    }
    Arc::new(lists.finish())
}

/// `pg_language.oid` of `sql`.
const SQL_LANGUAGE_OID: i64 = 14;

/// `pg_proc`: the SQL functions `CREATE FUNCTION` made (the built-in
/// functions are not listed).
fn pg_proc(functions: &[Arc<crate::SqlFunction>]) -> DataFusionResult<RecordBatch> {
    let count = functions.len();
    let numbers = |value: i64| -> ArrayRef { Arc::new(Int64Array::from(vec![value; count])) };
    let each = |value: &dyn Fn(&crate::SqlFunction) -> Option<String>| {
        text(functions.iter().map(|function| value(function)))
    };
    batch(vec![
        (
            "oid",
            Arc::new(Int64Array::from_iter_values(
                functions.iter().map(|function| relation_oid(function.id)),
            )),
        ),
        ("proname", each(&|function| Some(function.name.clone()))),
        ("pronamespace", numbers(PUBLIC_OID)),
        ("proowner", numbers(OWNER_OID)),
        ("prolang", numbers(SQL_LANGUAGE_OID)),
        ("prokind", repeated("f", count)),
        (
            "proisstrict",
            Arc::new(datafusion::arrow::array::BooleanArray::from_iter(
                functions.iter().map(|function| Some(function.strict)),
            )),
        ),
        ("proretset", flags(false, count)),
        (
            "provolatile",
            each(&|function| Some(function.volatility.to_string())),
        ),
        (
            "pronargs",
            Arc::new(Int64Array::from_iter_values(
                functions
                    .iter()
                    .map(|function| function.arguments.len() as i64),
            )),
        ),
        (
            "prorettype",
            Arc::new(Int64Array::from_iter(functions.iter().map(|function| {
                types::type_oid(function.returns_name.split('(').next().unwrap_or_default())
            }))),
        ),
        (
            "proargtypes",
            each(&|function| {
                let oids: Vec<String> = function
                    .arguments
                    .iter()
                    .map(|argument| {
                        let base = argument.type_name.split('(').next().unwrap_or_default();
                        types::type_oid(base).unwrap_or(0).to_string()
                    })
                    .collect();
                Some(oids.join(" "))
            }),
        ),
        (
            "proargnames",
            each(&|function| {
                let names: Vec<String> = function
                    .arguments
                    .iter()
                    .map(|argument| argument.name.clone().unwrap_or_else(|| "\"\"".to_string()))
                    .collect();
                function
                    .arguments
                    .iter()
                    .any(|argument| argument.name.is_some())
                    .then(|| format!("{{{}}}", names.join(",")))
            }),
        ),
        ("prosrc", each(&|function| Some(function.body.clone()))),
    ])
}

/// `pg_roles`: the owner of everything (`rockstream`), then the roles
/// `CREATE ROLE` made, each `(name, may log in)`. Every role has every
/// privilege.
fn pg_roles(roles: &[(String, bool)]) -> DataFusionResult<RecordBatch> {
    // The owner may log in unless its role (with passwords on) says not.
    let owner_login = roles
        .iter()
        .find(|(name, _)| name == OWNER)
        .is_none_or(|(_, login)| *login);
    let mut rows: Vec<(String, bool)> = vec![(OWNER.to_string(), owner_login)];
    rows.extend(roles.iter().filter(|(name, _)| name != OWNER).cloned());
    let count = rows.len();
    let oids: Vec<i64> = std::iter::once(OWNER_OID)
        .chain((0..).map(|index| ROLE_OID_BASE + index))
        .take(count)
        .collect();
    batch(vec![
        ("oid", Arc::new(Int64Array::from(oids))),
        (
            "rolname",
            text(rows.iter().map(|(name, _)| Some(name.clone()))),
        ),
        ("rolsuper", flags(true, count)),
        ("rolinherit", flags(true, count)),
        ("rolcreaterole", flags(true, count)),
        ("rolcreatedb", flags(true, count)),
        (
            "rolcanlogin",
            Arc::new(BooleanArray::from(
                rows.iter().map(|(_, login)| *login).collect::<Vec<_>>(),
            )),
        ),
        ("rolreplication", flags(false, count)),
        ("rolbypassrls", flags(false, count)),
        ("rolconnlimit", Arc::new(Int64Array::from(vec![-1; count]))),
        ("rolvaliduntil", text(rows.iter().map(|_| None))),
    ])
}

pub(crate) fn flags(value: bool, count: usize) -> ArrayRef {
    Arc::new(BooleanArray::from(vec![value; count]))
}

pub(crate) fn booleans(values: impl Iterator<Item = bool>) -> ArrayRef {
    Arc::new(BooleanArray::from(values.collect::<Vec<_>>()))
}

pub(crate) fn batch(columns: Vec<(&str, ArrayRef)>) -> DataFusionResult<RecordBatch> {
    let fields: Vec<Field> = columns
        .iter()
        .map(|(name, array)| Field::new(*name, array.data_type().clone(), true))
        .collect();
    let arrays = columns.into_iter().map(|(_, array)| array).collect();
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests may unwrap: a panic is the failure report.
mod tests {
    use super::tables::*;
    use super::*;
    use datafusion::arrow::datatypes::DataType;

    fn relations() -> Vec<RelationInfo> {
        let column =
            |name: &str, type_name: &str, not_null| ColumnInfo::plain(name, type_name, not_null);
        vec![
            RelationInfo {
                object_id: 1,
                name: "orders".into(),
                kind: RelationKind::Table,
                columns: vec![
                    column("id", "bigint", true),
                    column("amount", "numeric(12,2)", false),
                ],
                definition: None,
                primary_key: vec![0],
                indexes: vec![TableIndexInfo {
                    id: 0,
                    name: "orders_amount_key".into(),
                    columns: vec![1],
                    unique: true,
                    index_only: false,
                    include: Vec::new(),
                    hash: false,
                }],
                populated: true,
                watermark: None,
            },
            RelationInfo {
                object_id: 2,
                name: "totals".into(),
                kind: RelationKind::MaterializedView,
                columns: vec![column("total", "numeric(38,2)", false)],
                definition: Some("SELECT SUM(amount) AS total FROM orders".into()),
                primary_key: Vec::new(),
                indexes: Vec::new(),
                populated: false,
                watermark: None,
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
        assert_eq!(
            information_schema_tables(&relations, "default")
                .unwrap()
                .num_rows(),
            1
        );
        let columns = information_schema_columns(&relations, "default").unwrap();
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
