//! The catalog tables built from the relations: `pg_tables`, `pg_views`,
//! `pg_matviews`, `pg_class`, `pg_attribute`, `pg_attrdef`, `pg_index`,
//! `pg_constraint`
//! and `information_schema.tables` / `columns`.

use std::sync::Arc;

use datafusion::arrow::array::{
    BooleanArray, Int32Array, Int64Array, IntervalMonthDayNanoArray, RecordBatch,
    TimestampMicrosecondArray,
};
use datafusion::arrow::datatypes::IntervalMonthDayNano;
use datafusion::error::Result as DataFusionResult;

use super::types::{type_identity, type_length, type_storage};
use super::{
    all_indexes, batch, booleans, flags, int2vectors, number_lists, repeated, text, ColumnInfo,
    IndexInfo, RelationInfo, RelationKind, WatermarkInfo, BTREE_AM_OID, HASH_AM_OID, HEAP_AM_OID,
    OWNER, OWNER_OID, PUBLIC_OID, SCHEMA,
};

/// The oid and type modifier a relation's column reports. A view's numeric
/// column reports no precision: PostgreSQL drops the modifier of computed
/// numerics (`SUM`, `AVG`, arithmetic), which is what views mostly hold.
pub(crate) fn column_type(relation: &RelationInfo, column: &ColumnInfo) -> (i64, i64) {
    let (oid, modifier) = type_identity(&column.type_name);
    if relation.kind != RelationKind::Table && column.type_name.starts_with("numeric") {
        return (oid, -1);
    }
    (oid, modifier)
}

fn oids(values: impl IntoIterator<Item = i64>) -> Arc<Int64Array> {
    Arc::new(values.into_iter().map(Some).collect())
}

fn bools(values: impl IntoIterator<Item = bool>) -> Arc<BooleanArray> {
    Arc::new(values.into_iter().map(Some).collect())
}

/// One `pg_class` row: a relation, a table's primary-key index, or a
/// sequence a column owns.
struct ClassRow {
    oid: i64,
    name: String,
    /// `relkind`.
    kind: &'static str,
    /// `relnatts`.
    attributes: i64,
    /// `relhasindex`.
    indexed: bool,
    /// `relam`.
    access_method: i64,
}

/// `pg_class`: every relation, then every primary-key index, then every
/// sequence, with the columns psql's `\d` commands read.
pub(crate) fn pg_class(relations: &[RelationInfo]) -> DataFusionResult<RecordBatch> {
    let relation_rows = relations.iter().map(|relation| ClassRow {
        oid: relation.oid(),
        name: relation.name.clone(),
        kind: match relation.kind {
            RelationKind::Table => "r",
            RelationKind::View => "v",
            RelationKind::MaterializedView => "m",
        },
        attributes: relation.columns.len() as i64,
        indexed: relation.index_infos().next().is_some(),
        access_method: match relation.kind {
            RelationKind::View => 0,
            RelationKind::Table | RelationKind::MaterializedView => HEAP_AM_OID,
        },
    });
    let index_rows = all_indexes(relations).into_iter().map(|index| ClassRow {
        oid: index.index_oid,
        name: index.name.clone(),
        kind: "i",
        attributes: (index.columns.len() + index.include.len()) as i64,
        indexed: false,
        access_method: if index.hash {
            HASH_AM_OID
        } else {
            BTREE_AM_OID
        },
    });
    // PostgreSQL's sequences have three columns (last_value, log_cnt,
    // is_called).
    let sequence_rows = relations
        .iter()
        .flat_map(RelationInfo::sequences)
        .map(|sequence| ClassRow {
            oid: sequence.oid(),
            name: sequence.name.clone(),
            kind: "S",
            attributes: 3,
            indexed: false,
            access_method: 0,
        });
    let rows: Vec<ClassRow> = relation_rows
        .chain(index_rows)
        .chain(sequence_rows)
        .collect();
    let count = rows.len();
    batch(vec![
        ("oid", oids(rows.iter().map(|row| row.oid))),
        (
            "relname",
            text(rows.iter().map(|row| Some(row.name.clone()))),
        ),
        ("relnamespace", oids(vec![PUBLIC_OID; count])),
        ("reltype", oids(vec![0; count])),
        ("relowner", oids(vec![OWNER_OID; count])),
        ("relam", oids(rows.iter().map(|row| row.access_method))),
        ("reltablespace", oids(vec![0; count])),
        ("reltoastrelid", oids(vec![0; count])),
        ("relhasindex", bools(rows.iter().map(|row| row.indexed))),
        ("relpersistence", repeated("p", count)),
        (
            "relkind",
            text(rows.iter().map(|row| Some(row.kind.to_string()))),
        ),
        ("relnatts", oids(rows.iter().map(|row| row.attributes))),
        ("relchecks", oids(vec![0; count])),
        ("relhasrules", flags(false, count)),
        ("relhastriggers", flags(false, count)),
        ("relrowsecurity", flags(false, count)),
        ("relforcerowsecurity", flags(false, count)),
        ("relispartition", flags(false, count)),
        (
            "relreplident",
            text(rows.iter().map(|row| {
                Some(
                    if matches!(row.kind, "r" | "m") {
                        "d"
                    } else {
                        "n"
                    }
                    .to_string(),
                )
            })),
        ),
        ("reloftype", oids(vec![0; count])),
        ("relpartbound", text(vec![None; count])),
        ("reloptions", text(vec![None; count])),
        ("relacl", text(vec![None; count])),
    ])
}

/// Every relation's columns, each with its relation and position.
fn all_columns(relations: &[RelationInfo]) -> Vec<(&RelationInfo, usize, &ColumnInfo)> {
    relations
        .iter()
        .flat_map(|relation| {
            relation
                .columns
                .iter()
                .enumerate()
                .map(move |(index, column)| (relation, index, column))
        })
        .collect()
}

/// `pg_attribute`: the columns of every relation, numbered from 1.
pub(crate) fn pg_attribute(relations: &[RelationInfo]) -> DataFusionResult<RecordBatch> {
    let columns = all_columns(relations);
    let count = columns.len();
    let types: Vec<(i64, i64)> = columns
        .iter()
        .map(|(relation, _, column)| column_type(relation, column))
        .collect();
    batch(vec![
        (
            "attrelid",
            oids(columns.iter().map(|(relation, _, _)| relation.oid())),
        ),
        (
            "attname",
            text(
                columns
                    .iter()
                    .map(|(_, _, column)| Some(column.name.clone())),
            ),
        ),
        ("atttypid", oids(types.iter().map(|(oid, _)| *oid))),
        (
            "attlen",
            oids(types.iter().map(|(oid, _)| type_length(*oid))),
        ),
        (
            "attnum",
            oids(columns.iter().map(|(_, index, _)| *index as i64 + 1)),
        ),
        (
            "atttypmod",
            oids(types.iter().map(|(_, modifier)| *modifier)),
        ),
        (
            "attnotnull",
            bools(columns.iter().map(|(_, _, column)| column.not_null)),
        ),
        (
            "atthasdef",
            bools(
                columns
                    .iter()
                    .map(|(_, _, column)| column.default.is_some()),
            ),
        ),
        ("attisdropped", flags(false, count)),
        (
            "attidentity",
            text(
                columns
                    .iter()
                    .map(|(_, _, column)| Some(column.identity.unwrap_or("").to_string())),
            ),
        ),
        ("attgenerated", repeated("", count)),
        ("attcollation", oids(vec![0; count])),
        (
            "attstorage",
            text(
                types
                    .iter()
                    .map(|(oid, _)| Some(type_storage(*oid).to_string())),
            ),
        ),
        ("attcompression", repeated("", count)),
        ("attstattarget", oids(vec![-1; count])),
        ("attacl", text(vec![None; count])),
    ])
}

/// `pg_attrdef`: each column default, its expression kept as text (which
/// `pg_get_expr` returns as it is).
pub(crate) fn pg_attrdef(relations: &[RelationInfo]) -> DataFusionResult<RecordBatch> {
    let defaults: Vec<(&RelationInfo, usize, &String)> = all_columns(relations)
        .into_iter()
        .filter_map(|(relation, index, column)| {
            column
                .default
                .as_ref()
                .map(|default| (relation, index, default))
        })
        .collect();
    batch(vec![
        (
            "oid",
            // Unique among defaults: a relation has fewer than 1600 columns.
            oids(
                defaults
                    .iter()
                    .map(|(relation, index, _)| relation.oid() * 1600 + *index as i64),
            ),
        ),
        (
            "adrelid",
            oids(defaults.iter().map(|(relation, _, _)| relation.oid())),
        ),
        (
            "adnum",
            oids(defaults.iter().map(|(_, index, _)| *index as i64 + 1)),
        ),
        (
            "adbin",
            text(
                defaults
                    .iter()
                    .map(|(_, _, default)| Some((*default).clone())),
            ),
        ),
    ])
}

/// `pg_index`: one index per primary key, UNIQUE constraint and index.
/// `indkey` (PostgreSQL's `int2vector`), `indclass` and `indoption` are
/// arrays here, so that clients can `unnest` them as they do in
/// PostgreSQL.
pub(crate) fn pg_index(relations: &[RelationInfo]) -> DataFusionResult<RecordBatch> {
    let indexes = all_indexes(relations);
    let count = indexes.len();
    let zeros = |index: &IndexInfo| vec![0; index.columns.len() + index.include.len()];
    let widths = |include: bool| {
        oids(indexes.iter().map(|index| {
            (index.columns.len() + if include { index.include.len() } else { 0 }) as i64
        }))
    };
    batch(vec![
        (
            "indexrelid",
            oids(indexes.iter().map(|index| index.index_oid)),
        ),
        (
            "indrelid",
            oids(indexes.iter().map(|index| index.table.oid())),
        ),
        ("indnatts", widths(true)),
        ("indnkeyatts", widths(false)),
        (
            "indisunique",
            bools(indexes.iter().map(|index| index.unique)),
        ),
        ("indnullsnotdistinct", flags(false, count)),
        (
            "indisprimary",
            bools(indexes.iter().map(|index| index.primary)),
        ),
        ("indisexclusion", flags(false, count)),
        ("indimmediate", flags(true, count)),
        ("indisclustered", flags(false, count)),
        ("indisvalid", flags(true, count)),
        ("indcheckxmin", flags(false, count)),
        ("indisready", flags(true, count)),
        ("indislive", flags(true, count)),
        ("indisreplident", flags(false, count)),
        (
            "indkey",
            int2vectors(indexes.iter().map(IndexInfo::all_column_numbers)),
        ),
        // Operator classes and per-column options are not kept: the
        // default class, no options.
        ("indclass", number_lists(indexes.iter().map(zeros))),
        ("indoption", int2vectors(indexes.iter().map(zeros))),
        ("indexprs", text(vec![None; count])),
        ("indpred", text(vec![None; count])),
    ])
}

/// `pg_constraint`: the primary keys and UNIQUE constraints, not the
/// indexes `CREATE UNIQUE INDEX` made (NOT NULL is a
/// column property, as in PostgreSQL 15). No foreign keys exist, so
/// `confrelid` is always 0.
pub(crate) fn pg_constraint(relations: &[RelationInfo]) -> DataFusionResult<RecordBatch> {
    let mut indexes = all_indexes(relations);
    indexes.retain(|index| index.constraint);
    let count = indexes.len();
    batch(vec![
        (
            "oid",
            oids(indexes.iter().map(|index| index.constraint_oid)),
        ),
        (
            "conname",
            text(indexes.iter().map(|index| Some(index.name.clone()))),
        ),
        ("connamespace", oids(vec![PUBLIC_OID; count])),
        (
            "contype",
            text(
                indexes
                    .iter()
                    .map(|index| Some(if index.primary { "p" } else { "u" }.to_string())),
            ),
        ),
        ("condeferrable", flags(false, count)),
        ("condeferred", flags(false, count)),
        ("convalidated", flags(true, count)),
        (
            "conrelid",
            oids(indexes.iter().map(|index| index.table.oid())),
        ),
        ("contypid", oids(vec![0; count])),
        (
            "conindid",
            oids(indexes.iter().map(|index| index.index_oid)),
        ),
        ("conparentid", oids(vec![0; count])),
        ("confrelid", oids(vec![0; count])),
        ("confupdtype", repeated(" ", count)),
        ("confdeltype", repeated(" ", count)),
        ("confmatchtype", repeated(" ", count)),
        ("conislocal", flags(true, count)),
        ("coninhcount", oids(vec![0; count])),
        ("connoinherit", flags(true, count)),
        (
            "conkey",
            number_lists(indexes.iter().map(IndexInfo::column_numbers)),
        ),
        ("confkey", number_lists(indexes.iter().map(|_| Vec::new()))),
        ("conbin", text(vec![None; count])),
    ])
}

pub(crate) fn pg_tables(relations: &[RelationInfo]) -> DataFusionResult<RecordBatch> {
    let tables: Vec<&RelationInfo> = relations
        .iter()
        .filter(|relation| relation.kind == RelationKind::Table)
        .collect();
    let count = tables.len();
    let indexed: BooleanArray = tables
        .iter()
        .map(|table| Some(table.index_infos().next().is_some()))
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

/// `pg_indexes`: every index, with the statement that creates it.
pub(crate) fn pg_indexes(relations: &[RelationInfo]) -> DataFusionResult<RecordBatch> {
    let indexes = all_indexes(relations);
    let count = indexes.len();
    batch(vec![
        ("schemaname", repeated(SCHEMA, count)),
        (
            "tablename",
            text(indexes.iter().map(|index| Some(index.table.name.clone()))),
        ),
        (
            "indexname",
            text(indexes.iter().map(|index| Some(index.name.clone()))),
        ),
        ("tablespace", text(vec![None; count])),
        (
            "indexdef",
            text(indexes.iter().map(|index| Some(index.definition(true)))),
        ),
    ])
}

/// `rs_watermarks`: each watermarked table's watermark and the rows it
/// dropped as late (RFC 0013).
pub(crate) fn rs_watermarks(relations: &[RelationInfo]) -> DataFusionResult<RecordBatch> {
    let watermarked: Vec<(&RelationInfo, &WatermarkInfo)> = relations
        .iter()
        .filter_map(|relation| Some((relation, relation.watermark.as_ref()?)))
        .collect();
    let delays: IntervalMonthDayNanoArray = watermarked
        .iter()
        .map(|(_, watermark)| {
            // Whole days as days, as PostgreSQL prints `INTERVAL '1 day'`.
            const MICROS_PER_DAY: i64 = 86_400_000_000;
            let days = watermark.delay_micros.div_euclid(MICROS_PER_DAY);
            let rest = watermark.delay_micros.rem_euclid(MICROS_PER_DAY);
            Some(IntervalMonthDayNano::new(
                0,
                i32::try_from(days).unwrap_or(i32::MAX),
                rest * 1000,
            ))
        })
        .collect();
    let watermarks: TimestampMicrosecondArray = watermarked
        .iter()
        .map(|(_, watermark)| watermark.watermark)
        .collect();
    let late: Int64Array = watermarked
        .iter()
        .map(|(_, watermark)| Some(i64::try_from(watermark.late_rows).unwrap_or(i64::MAX)))
        .collect();
    batch(vec![
        (
            "table_name",
            text(
                watermarked
                    .iter()
                    .map(|(table, _)| Some(table.name.clone())),
            ),
        ),
        (
            "column_name",
            text(
                watermarked
                    .iter()
                    .map(|(_, watermark)| Some(watermark.column.clone())),
            ),
        ),
        ("delay", Arc::new(delays)),
        ("watermark", Arc::new(watermarks)),
        ("late_rows", Arc::new(late)),
    ])
}

/// `pg_views` (plain views) or `pg_matviews` (materialized views).
pub(crate) fn pg_views(
    relations: &[RelationInfo],
    kind: RelationKind,
) -> DataFusionResult<RecordBatch> {
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
        (
            "ispopulated",
            booleans(views.iter().map(|view| view.populated)),
        ),
        ("definition", definitions),
    ])
}

pub(crate) fn information_schema_tables(
    relations: &[RelationInfo],
    catalog: &str,
) -> DataFusionResult<RecordBatch> {
    // The SQL standard has no materialized views; PostgreSQL leaves them out
    // of this view, and so do we.
    let listed: Vec<&RelationInfo> = relations
        .iter()
        .filter(|relation| relation.kind != RelationKind::MaterializedView)
        .collect();
    let count = listed.len();
    batch(vec![
        ("table_catalog", repeated(catalog, count)),
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

pub(crate) fn information_schema_columns(
    relations: &[RelationInfo],
    catalog: &str,
) -> DataFusionResult<RecordBatch> {
    let columns = all_columns(relations);
    let count = columns.len();
    let positions: Int32Array = columns
        .iter()
        .map(|(_, index, _)| Some(*index as i32 + 1))
        .collect();
    batch(vec![
        ("table_catalog", repeated(catalog, count)),
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
            "column_default",
            text(columns.iter().map(|(_, _, column)| column.default.clone())),
        ),
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
            "is_identity",
            text(columns.iter().map(|(_, _, column)| {
                Some(
                    if column.identity.is_some() {
                        "YES"
                    } else {
                        "NO"
                    }
                    .to_string(),
                )
            })),
        ),
        (
            "identity_generation",
            text(columns.iter().map(|(_, _, column)| {
                column.identity.map(|identity| {
                    if identity == "a" {
                        "ALWAYS"
                    } else {
                        "BY DEFAULT"
                    }
                    .to_string()
                })
            })),
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
    if type_name.ends_with("[]") {
        return "ARRAY".to_string();
    }
    type_name
        .split('(')
        .next()
        .unwrap_or(type_name)
        .trim()
        .to_string()
}
