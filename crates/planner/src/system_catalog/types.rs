//! PostgreSQL's type identities: the object id and type modifier of each
//! column type we support, `pg_catalog.pg_type`, and `format_type`, which
//! turns an (oid, modifier) pair back into the spelling `\d` prints.

use std::sync::Arc;

use datafusion::arrow::array::{BooleanArray, Int64Array, RecordBatch};
use datafusion::error::Result as DataFusionResult;

use super::{batch, text, PG_CATALOG_OID};

/// PostgreSQL's `text` collation oid (`default`), carried by string types.
const DEFAULT_COLLATION_OID: i64 = 100;

/// The built-in types RockStream reports, by PostgreSQL's fixed oids:
/// `(oid, typname, format_type's name, byte length or -1, collatable)`.
const TYPES: [(i64, &str, &str, i64, bool); 16] = [
    (16, "bool", "boolean", 1, false),
    (19, "name", "name", 64, true),
    (20, "int8", "bigint", 8, false),
    (21, "int2", "smallint", 2, false),
    (23, "int4", "integer", 4, false),
    (25, "text", "text", -1, true),
    (26, "oid", "oid", 4, false),
    (700, "float4", "real", 4, false),
    (701, "float8", "double precision", 8, false),
    (1043, "varchar", "character varying", -1, true),
    (1082, "date", "date", 4, false),
    (1083, "time", "time without time zone", 8, false),
    (1114, "timestamp", "timestamp without time zone", 8, false),
    (1184, "timestamptz", "timestamp with time zone", 8, false),
    (1186, "interval", "interval", 16, false),
    (1700, "numeric", "numeric", -1, false),
];

const NUMERIC_OID: i64 = 1700;
const VARCHAR_OID: i64 = 1043;
const TEXT_OID: i64 = 25;
/// PostgreSQL stores a type modifier with this offset (`VARHDRSZ`).
const TYPMOD_OFFSET: i64 = 4;

/// The oid and type modifier (-1: none) of a column type as the catalog
/// spells it (`numeric(12,2)`, `character varying(20)`, `bigint`, ...).
/// Types we do not know report as `text`.
pub(crate) fn type_identity(type_name: &str) -> (i64, i64) {
    let (base, modifiers) = match type_name.split_once('(') {
        Some((base, rest)) => (base.trim(), rest.strip_suffix(')')),
        None => (type_name.trim(), None),
    };
    let Some(&(oid, ..)) = TYPES.iter().find(|(_, _, name, ..)| *name == base) else {
        return (TEXT_OID, -1);
    };
    let numbers: Vec<i64> = modifiers
        .map(|list| {
            list.split(',')
                .filter_map(|n| n.trim().parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let modifier = match (oid, numbers.as_slice()) {
        (NUMERIC_OID, [precision, scale]) => ((precision << 16) | scale) + TYPMOD_OFFSET,
        (NUMERIC_OID, [precision]) => (precision << 16) + TYPMOD_OFFSET,
        (VARCHAR_OID, [length]) => length + TYPMOD_OFFSET,
        _ => -1,
    };
    (oid, modifier)
}

/// `format_type(oid, typmod)`: PostgreSQL's spelling of a type; `???` for
/// an oid we do not know, as PostgreSQL answers.
pub(crate) fn format_type(oid: i64, modifier: Option<i64>) -> String {
    let Some(&(_, _, name, ..)) = TYPES.iter().find(|(known, ..)| *known == oid) else {
        return "???".to_string();
    };
    let modifier = modifier.unwrap_or(-1) - TYPMOD_OFFSET;
    match oid {
        NUMERIC_OID if modifier >= 0 => {
            format!("numeric({},{})", modifier >> 16, modifier & 0xffff)
        }
        VARCHAR_OID if modifier >= 0 => format!("character varying({modifier})"),
        _ => name.to_string(),
    }
}

/// A type's byte length, -1 when variable (0 for an oid we do not know).
pub(crate) fn type_length(oid: i64) -> i64 {
    TYPES
        .iter()
        .find(|(known, ..)| *known == oid)
        .map_or(0, |(_, _, _, length, _)| *length)
}

/// A type's storage strategy as PostgreSQL names it: `p` (plain) for
/// fixed-length types, `m` (main: compressed, kept inline) for `numeric`,
/// `x` (extended) for the other variable-length ones.
pub(crate) fn type_storage(oid: i64) -> &'static str {
    match (oid, type_length(oid)) {
        (NUMERIC_OID, _) => "m",
        (_, length) if length > 0 => "p",
        _ => "x",
    }
}

/// The `typname` of a type oid (what `oid::regtype` shows), if known.
pub(crate) fn type_name(oid: i64) -> Option<&'static str> {
    TYPES
        .iter()
        .find(|(known, ..)| *known == oid)
        .map(|(_, _, name, ..)| *name)
}

/// The oid of a type named as `'name'::regtype` accepts it.
pub(crate) fn type_oid(name: &str) -> Option<i64> {
    let name = name.trim().to_lowercase();
    let name = name.strip_prefix("pg_catalog.").unwrap_or(&name);
    TYPES
        .iter()
        .find(|(_, typname, formatted, ..)| *typname == name || *formatted == name)
        .map(|(oid, ..)| *oid)
}

/// `pg_catalog.pg_type`, for the types above.
pub(crate) fn pg_type() -> DataFusionResult<RecordBatch> {
    let count = TYPES.len();
    let column = |value: fn(&(i64, &str, &str, i64, bool)) -> i64| -> Int64Array {
        TYPES.iter().map(|entry| Some(value(entry))).collect()
    };
    batch(vec![
        ("oid", Arc::new(column(|entry| entry.0))),
        (
            "typname",
            text(TYPES.iter().map(|entry| Some(entry.1.to_string()))),
        ),
        (
            "typnamespace",
            Arc::new(Int64Array::from(vec![PG_CATALOG_OID; count])),
        ),
        ("typlen", Arc::new(column(|entry| entry.3))),
        (
            "typbyval",
            Arc::new(
                TYPES
                    .iter()
                    .map(|entry| Some((1..=8).contains(&entry.3)))
                    .collect::<BooleanArray>(),
            ),
        ),
        ("typtype", text(TYPES.iter().map(|_| Some("b".to_string())))),
        (
            "typstorage",
            text(
                TYPES
                    .iter()
                    .map(|entry| Some(type_storage(entry.0).to_string())),
            ),
        ),
        ("typrelid", Arc::new(Int64Array::from(vec![0; count]))),
        ("typelem", Arc::new(Int64Array::from(vec![0; count]))),
        ("typbasetype", Arc::new(Int64Array::from(vec![0; count]))),
        ("typtypmod", Arc::new(Int64Array::from(vec![-1; count]))),
        (
            "typcollation",
            Arc::new(column(
                |entry| {
                    if entry.4 {
                        DEFAULT_COLLATION_OID
                    } else {
                        0
                    }
                },
            )),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_identities_format_back_to_their_spelling() {
        for spelling in [
            "boolean",
            "smallint",
            "integer",
            "bigint",
            "real",
            "double precision",
            "numeric",
            "numeric(12,2)",
            "numeric(38,0)",
            "text",
            "character varying",
            "character varying(20)",
            "date",
            "time without time zone",
            "timestamp without time zone",
            "timestamp with time zone",
            "interval",
        ] {
            let (oid, modifier) = type_identity(spelling);
            assert_eq!(format_type(oid, Some(modifier)), spelling);
        }
        // PostgreSQL's own numbers: numeric(12,2) is 1700 / 786438.
        assert_eq!(type_identity("numeric(12,2)"), (1700, 786438));
        assert_eq!(type_identity("character varying(20)"), (1043, 24));
        assert_eq!(format_type(4242, None), "???");
        assert_eq!(type_oid("int8"), Some(20));
        assert_eq!(type_oid("pg_catalog.bigint"), Some(20));
        assert_eq!(type_name(1184), Some("timestamp with time zone"));
    }
}
