//! PostgreSQL's type identities: the object id and type modifier of each
//! column type we support, `pg_catalog.pg_type`, and `format_type`, which
//! turns an (oid, modifier) pair back into the spelling `\d` prints.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, BooleanArray, Int64Array, RecordBatch};
use datafusion::error::Result as DataFusionResult;

use super::{batch, flags, text, OWNER_OID, PG_CATALOG_OID};

/// PostgreSQL's `text` collation oid (`default`), carried by string types.
const DEFAULT_COLLATION_OID: i64 = 100;

/// A built-in type RockStream reports, by PostgreSQL's fixed numbers.
struct BuiltinType {
    oid: i64,
    /// `typname`.
    name: &'static str,
    /// `format_type`'s spelling.
    formatted: &'static str,
    /// Bytes, or -1 when variable.
    length: i64,
    collatable: bool,
    /// The oid of its array type (`_name`).
    array_oid: i64,
    /// `typcategory`: PostgreSQL's grouping for implicit casts.
    category: &'static str,
    /// `typinput` (`typoutput`, `typreceive` and `typsend` follow its
    /// spelling: `int4in` / `int4out`, `date_in` / `date_out`).
    input: &'static str,
}

// One row of the table below, written as a call so that the table reads as rows.
#[allow(clippy::too_many_arguments)]
const fn builtin(
    oid: i64,
    name: &'static str,
    formatted: &'static str,
    length: i64,
    collatable: bool,
    array_oid: i64,
    category: &'static str,
    input: &'static str,
) -> BuiltinType {
    BuiltinType {
        oid,
        name,
        formatted,
        length,
        collatable,
        array_oid,
        category,
        input,
    }
}

const TYPES: [BuiltinType; 16] = [
    builtin(16, "bool", "boolean", 1, false, 1000, "B", "boolin"),
    builtin(19, "name", "name", 64, true, 1003, "S", "namein"),
    builtin(20, "int8", "bigint", 8, false, 1016, "N", "int8in"),
    builtin(21, "int2", "smallint", 2, false, 1005, "N", "int2in"),
    builtin(23, "int4", "integer", 4, false, 1007, "N", "int4in"),
    builtin(25, "text", "text", -1, true, 1009, "S", "textin"),
    builtin(26, "oid", "oid", 4, false, 1028, "N", "oidin"),
    builtin(700, "float4", "real", 4, false, 1021, "N", "float4in"),
    builtin(
        701,
        "float8",
        "double precision",
        8,
        false,
        1022,
        "N",
        "float8in",
    ),
    builtin(
        1043,
        "varchar",
        "character varying",
        -1,
        true,
        1015,
        "S",
        "varcharin",
    ),
    builtin(1082, "date", "date", 4, false, 1182, "D", "date_in"),
    builtin(
        1083,
        "time",
        "time without time zone",
        8,
        false,
        1183,
        "D",
        "time_in",
    ),
    builtin(
        1114,
        "timestamp",
        "timestamp without time zone",
        8,
        false,
        1115,
        "D",
        "timestamp_in",
    ),
    builtin(
        1184,
        "timestamptz",
        "timestamp with time zone",
        8,
        false,
        1185,
        "D",
        "timestamptz_in",
    ),
    builtin(
        1186,
        "interval",
        "interval",
        16,
        false,
        1187,
        "T",
        "interval_in",
    ),
    builtin(
        1700,
        "numeric",
        "numeric",
        -1,
        false,
        1231,
        "N",
        "numeric_in",
    ),
];

/// One row of `pg_type`: a built-in type, or the array type of one.
struct TypeRow<'a> {
    base: &'a BuiltinType,
    array: bool,
}

impl TypeRow<'_> {
    fn oid(&self) -> i64 {
        if self.array {
            self.base.array_oid
        } else {
            self.base.oid
        }
    }

    fn name(&self) -> String {
        if self.array {
            format!("_{}", self.base.name)
        } else {
            self.base.name.to_string()
        }
    }

    /// A function of the type's input/output family (`in`, `out`, `recv`,
    /// `send`), spelled as PostgreSQL names them.
    fn function(&self, suffix: &str) -> String {
        let input = if self.array {
            "array_in"
        } else {
            self.base.input
        };
        let stem = input.strip_suffix("in").unwrap_or(input);
        format!("{stem}{suffix}")
    }
}

fn type_rows() -> Vec<TypeRow<'static>> {
    let bases = TYPES.iter().map(|base| TypeRow { base, array: false });
    let arrays = TYPES.iter().map(|base| TypeRow { base, array: true });
    bases.chain(arrays).collect()
}

const NUMERIC_OID: i64 = 1700;
const VARCHAR_OID: i64 = 1043;
const TEXT_OID: i64 = 25;
/// PostgreSQL stores a type modifier with this offset (`VARHDRSZ`).
const TYPMOD_OFFSET: i64 = 4;

/// The oid and type modifier (-1: none) of a column type as the catalog
/// spells it (`numeric(12,2)`, `character varying(20)`, `bigint`, ...).
/// Types we do not know report as `text`.
pub(crate) fn type_identity(type_name: &str) -> (i64, i64) {
    if let Some(element) = type_name.trim().strip_suffix("[]") {
        // An array keeps its element's modifier, as PostgreSQL's
        // `numeric(12,2)[]` column does.
        let (element_oid, modifier) = type_identity(element);
        return match TYPES.iter().find(|known| known.oid == element_oid) {
            Some(known) => (known.array_oid, modifier),
            None => (TEXT_OID, -1),
        };
    }
    let (base, modifiers) = match type_name.split_once('(') {
        Some((base, rest)) => (base.trim(), rest.strip_suffix(')')),
        None => (type_name.trim(), None),
    };
    let Some(oid) = TYPES
        .iter()
        .find(|known| known.formatted == base)
        .map(|known| known.oid)
    else {
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
    let Some(name) = type_name(oid) else {
        return "???".to_string();
    };
    if let Some(element) = TYPES.iter().find(|known| known.array_oid == oid) {
        return format!("{}[]", format_type(element.oid, modifier));
    }
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
    if TYPES.iter().any(|known| known.array_oid == oid) {
        return -1;
    }
    TYPES
        .iter()
        .find(|known| known.oid == oid)
        .map_or(0, |known| known.length)
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

/// The name of a type oid as `oid::regtype` shows it (`integer`,
/// `integer[]`), if known.
pub(crate) fn type_name(oid: i64) -> Option<String> {
    TYPES.iter().find_map(|known| {
        if known.oid == oid {
            Some(known.formatted.to_string())
        } else if known.array_oid == oid {
            Some(format!("{}[]", known.formatted))
        } else {
            None
        }
    })
}

/// The oid of a type named as `'name'::regtype` accepts it (`int4`,
/// `integer`, `_int4`, `integer[]`).
pub(crate) fn type_oid(name: &str) -> Option<i64> {
    let name = name.trim().to_lowercase();
    let name = name.strip_prefix("pg_catalog.").unwrap_or(&name);
    let (element, array) = match (name.strip_suffix("[]"), name.strip_prefix('_')) {
        (Some(element), _) | (None, Some(element)) => (element.trim(), true),
        (None, None) => (name, false),
    };
    let known = TYPES
        .iter()
        .find(|known| known.name == element || known.formatted == element)?;
    Some(if array { known.array_oid } else { known.oid })
}

/// `pg_catalog.pg_type`: the types above and their array types.
pub(crate) fn pg_type() -> DataFusionResult<RecordBatch> {
    let rows = type_rows();
    let count = rows.len();
    let numbers = |value: fn(&TypeRow) -> i64| -> ArrayRef {
        Arc::new(
            rows.iter()
                .map(|row| Some(value(row)))
                .collect::<Int64Array>(),
        )
    };
    let texts = |value: &dyn Fn(&TypeRow) -> String| -> ArrayRef {
        text(rows.iter().map(|row| Some(value(row))))
    };
    let repeated_number =
        |value: i64| -> ArrayRef { Arc::new(Int64Array::from(vec![value; count])) };
    batch(vec![
        ("oid", numbers(|row| row.oid())),
        ("typname", texts(&|row| row.name())),
        ("typnamespace", repeated_number(PG_CATALOG_OID)),
        ("typowner", repeated_number(OWNER_OID)),
        (
            "typlen",
            numbers(|row| if row.array { -1 } else { row.base.length }),
        ),
        (
            "typbyval",
            Arc::new(
                rows.iter()
                    .map(|row| Some(!row.array && (1..=8).contains(&row.base.length)))
                    .collect::<BooleanArray>(),
            ),
        ),
        ("typtype", texts(&|_| "b".to_string())),
        (
            "typcategory",
            texts(&|row| if row.array { "A" } else { row.base.category }.to_string()),
        ),
        ("typispreferred", flags(false, count)),
        ("typisdefined", flags(true, count)),
        ("typdelim", texts(&|_| ",".to_string())),
        ("typrelid", repeated_number(0)),
        (
            "typelem",
            numbers(|row| if row.array { row.base.oid } else { 0 }),
        ),
        (
            "typarray",
            numbers(|row| if row.array { 0 } else { row.base.array_oid }),
        ),
        ("typinput", texts(&|row| row.function("in"))),
        ("typoutput", texts(&|row| row.function("out"))),
        ("typreceive", texts(&|row| row.function("recv"))),
        ("typsend", texts(&|row| row.function("send"))),
        (
            "typalign",
            texts(&|row| {
                // Variable-length values align on 4 bytes, as does an
                // array of one-byte elements.
                match (row.array, row.base.length) {
                    (false, 1 | 64) => "c",
                    (_, 2) => "s",
                    (_, 1 | 4 | 64 | -1) => "i",
                    _ => "d",
                }
                .to_string()
            }),
        ),
        (
            "typstorage",
            texts(&|row| type_storage(row.oid()).to_string()),
        ),
        ("typnotnull", flags(false, count)),
        ("typbasetype", repeated_number(0)),
        ("typtypmod", repeated_number(-1)),
        ("typndims", repeated_number(0)),
        (
            "typcollation",
            numbers(|row| {
                if row.base.collatable {
                    DEFAULT_COLLATION_OID
                } else {
                    0
                }
            }),
        ),
        ("typdefault", text(vec![None; count])),
        ("typacl", text(vec![None; count])),
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
            "text[]",
            "numeric(12,2)[]",
            "timestamp with time zone[]",
        ] {
            let (oid, modifier) = type_identity(spelling);
            assert_eq!(format_type(oid, Some(modifier)), spelling);
        }
        // PostgreSQL's own numbers: numeric(12,2) is 1700 / 786438.
        assert_eq!(type_identity("numeric(12,2)"), (1700, 786438));
        assert_eq!(type_identity("character varying(20)"), (1043, 24));
        assert_eq!(type_identity("integer[]"), (1007, -1));
        assert_eq!(format_type(4242, None), "???");
        assert_eq!(type_oid("int8"), Some(20));
        assert_eq!(type_oid("pg_catalog.bigint"), Some(20));
        assert_eq!(type_name(1184).as_deref(), Some("timestamp with time zone"));
        assert_eq!(type_name(1007).as_deref(), Some("integer[]"));
        assert_eq!(type_oid("_int4"), Some(1007));
        assert_eq!(type_oid("integer[]"), Some(1007));
        assert_eq!(type_length(1007), -1);
    }
}
