//! The catalog functions clients call: `pg_get_userbyid`,
//! `pg_table_is_visible`, `format_type`, `pg_get_indexdef`,
//! `pg_get_constraintdef`, `pg_get_viewdef`, `pg_get_expr`,
//! `col_description`, `obj_description`, `shobj_description`,
//! `pg_size_pretty`, `pg_encoding_to_char`, `has_database_privilege` (and
//! for schemas and tables), the relation and database size functions, and
//! the `regclass`, `regtype` and `regnamespace` conversions that
//! [`crate::pg_compat`] plans casts to those types as (which also drops the
//! `pg_catalog.` of a qualified function name).

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, ArrayRef, Int64Array, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result as DataFusionResult};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use rockstream_types::{codes, RsError};

use super::types::{format_type, type_name, type_oid};
use super::{
    all_indexes, IndexInfo, RelationInfo, RelationKind, SequenceInfo, CATALOG_RELATION_OIDS, OWNER,
    PG_CATALOG_OID, PUBLIC_OID, SCHEMA, UTF8_ENCODING,
};
use crate::resolver::TableResolver;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Function {
    /// `pg_get_userbyid(oid)`: every object belongs to the one user.
    UserById,
    /// `pg_table_is_visible(oid)`: `public` is always on the search path;
    /// `pg_function_is_visible(oid)` likewise.
    TableIsVisible,
    ProcIsVisible,
    /// `pg_get_function_result(oid)` and `pg_get_function_arguments(oid)`
    /// of a SQL function (`CREATE FUNCTION`).
    ProcResult,
    ProcArguments,
    /// `has_database_privilege` and friends: the one user holds every
    /// privilege (authentication is off).
    Granted(&'static str),
    FormatType,
    /// `x::regclass`: a relation's name from its oid, or its oid from its
    /// name; `regtype` and `regnamespace` likewise for types and schemas.
    RegClass,
    RegType,
    RegNamespace,
    /// `to_regtype(name)`: the type's oid, NULL when there is no such type
    /// (where `'name'::regtype` fails).
    ToRegType,
    IndexDef,
    ConstraintDef,
    ViewDef,
    /// `pg_get_expr(adbin, relation)`: a default's text, which
    /// `pg_attrdef.adbin` holds as it is.
    Expression,
    /// `pg_get_serial_sequence(table, column)`: the sequence the column
    /// owns, schema-qualified; NULL when it owns none.
    SerialSequence,
    /// `pg_size_pretty(bytes)`, as PostgreSQL rounds and names units.
    SizePretty,
    /// `pg_encoding_to_char(encoding)`: an encoding's name from its number.
    EncodingToChar,
    /// What RockStream does not keep: comments for
    /// `col_description`, `obj_description` and `shobj_description`, and
    /// sizes (state is spread over a shard's LSM tree) for `pg_table_size`,
    /// `pg_database_size` and friends. Always NULL, which psql shows as
    /// blank.
    Nothing(&'static str),
}

impl Function {
    fn name(&self) -> &'static str {
        match self {
            Function::UserById => "pg_get_userbyid",
            Function::TableIsVisible => "pg_table_is_visible",
            Function::ProcIsVisible => "pg_function_is_visible",
            Function::ProcResult => "pg_get_function_result",
            Function::ProcArguments => "pg_get_function_arguments",
            Function::Granted(name) => name,
            Function::FormatType => "format_type",
            Function::RegClass => "regclass",
            Function::RegType => "regtype",
            Function::RegNamespace => "regnamespace",
            Function::ToRegType => "to_regtype",
            Function::IndexDef => "pg_get_indexdef",
            Function::ConstraintDef => "pg_get_constraintdef",
            Function::ViewDef => "pg_get_viewdef",
            Function::Expression => "pg_get_expr",
            Function::SerialSequence => "pg_get_serial_sequence",
            Function::SizePretty => "pg_size_pretty",
            Function::EncodingToChar => "pg_encoding_to_char",
            Function::Nothing(name) => name,
        }
    }

    /// As PostgreSQL declares it: only a pure computation is immutable (and
    /// so allowed in a materialized view); the others read the catalog.
    fn volatility(&self) -> Volatility {
        match self {
            Function::SizePretty => Volatility::Immutable,
            _ => Volatility::Stable,
        }
    }

    /// Whether it reads the relations (and so is built per query).
    fn reads_relations(&self) -> bool {
        matches!(
            self,
            Function::RegClass
                | Function::IndexDef
                | Function::ConstraintDef
                | Function::ViewDef
                | Function::SerialSequence
        )
    }
}

/// A catalog function; those reading relations hold the query's resolver.
#[derive(Debug)]
struct CatalogFunction {
    function: Function,
    signature: Signature,
    resolver: Option<Arc<dyn TableResolver>>,
}

impl PartialEq for CatalogFunction {
    fn eq(&self, other: &Self) -> bool {
        self.function == other.function
    }
}

impl Eq for CatalogFunction {}

impl std::hash::Hash for CatalogFunction {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.function.hash(state)
    }
}

fn udf(function: Function, resolver: Option<Arc<dyn TableResolver>>) -> ScalarUDF {
    ScalarUDF::from(CatalogFunction {
        function,
        signature: Signature::variadic_any(function.volatility()),
        resolver,
    })
}

/// The functions that do not read relations: built once, registered in
/// every query's session.
pub(crate) static CATALOG_FUNCTIONS: LazyLock<Vec<ScalarUDF>> = LazyLock::new(|| {
    [
        Function::UserById,
        Function::TableIsVisible,
        Function::ProcIsVisible,
        Function::FormatType,
        Function::RegType,
        Function::RegNamespace,
        Function::ToRegType,
        Function::Expression,
        Function::Nothing("col_description"),
        Function::Nothing("obj_description"),
        Function::Nothing("pg_table_size"),
        Function::Nothing("pg_relation_size"),
        Function::Nothing("pg_total_relation_size"),
        Function::Nothing("pg_indexes_size"),
        Function::Nothing("pg_database_size"),
        Function::Nothing("shobj_description"),
        Function::Granted("has_database_privilege"),
        Function::Granted("has_schema_privilege"),
        Function::Granted("has_table_privilege"),
        Function::SizePretty,
        Function::EncodingToChar,
    ]
    .into_iter()
    .map(|function| udf(function, None))
    .collect()
});

/// The functions that read the relations `resolver` describes.
pub(crate) fn catalog_functions(resolver: Arc<dyn TableResolver>) -> Vec<ScalarUDF> {
    [
        Function::RegClass,
        Function::IndexDef,
        Function::ConstraintDef,
        Function::ViewDef,
        Function::SerialSequence,
        Function::ProcResult,
        Function::ProcArguments,
    ]
    .into_iter()
    .map(|function| udf(function, Some(resolver.clone())))
    .collect()
}

fn is_text(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    )
}

impl ScalarUDFImpl for CatalogFunction {
    fn name(&self) -> &str {
        self.function.name()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arguments: &[DataType]) -> DataFusionResult<DataType> {
        Ok(match self.function {
            Function::TableIsVisible | Function::ProcIsVisible | Function::Granted(_) => {
                DataType::Boolean
            }
            // A name converts to an oid.
            Function::RegClass | Function::RegType | Function::RegNamespace
                if arguments.first().is_some_and(is_text) =>
            {
                DataType::Int64
            }
            Function::ToRegType => DataType::Int64,
            _ => DataType::Utf8,
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DataFusionResult<ColumnarValue> {
        // Constant arguments give one answer, whatever the batch's size (an
        // empty batch included: a filter that kept no rows still evaluates
        // its constant sides).
        let constant = args
            .args
            .iter()
            .all(|arg| matches!(arg, ColumnarValue::Scalar(_)));
        let rows = if constant { 1 } else { args.number_rows };
        let relations = match (&self.resolver, self.function.reads_relations()) {
            (Some(resolver), true) => resolver.relations().unwrap_or_default(),
            _ => Vec::new(),
        };
        let Some(first) = args.args.first() else {
            return Err(DataFusionError::Plan(format!(
                "function {}() needs an argument",
                self.function.name()
            )));
        };
        let first = first.to_array(rows)?;
        let result: ArrayRef = match self.function {
            Function::TableIsVisible | Function::ProcIsVisible | Function::Granted(_) => {
                let visible = ScalarValue::Boolean(Some(true));
                return Ok(ColumnarValue::Scalar(visible));
            }
            Function::UserById => {
                return Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(
                    OWNER.to_string(),
                ))))
            }
            Function::Nothing(_) => return Ok(ColumnarValue::Scalar(ScalarValue::Utf8(None))),
            Function::Expression => cast(&first, &DataType::Utf8)?,
            Function::ProcResult | Function::ProcArguments => {
                let functions = self
                    .resolver
                    .as_ref()
                    .map(|resolver| resolver.functions())
                    .unwrap_or_default();
                let oids = cast(&first, &DataType::Int64)?;
                let oids = oids
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .ok_or_else(|| DataFusionError::Internal("oids are numbers".into()))?;
                let text: StringArray = oids
                    .iter()
                    .map(|oid| {
                        let function = functions
                            .iter()
                            .find(|function| Some(crate::relation_oid(function.id)) == oid)?;
                        Some(match self.function {
                            Function::ProcResult => function.returns_name.clone(),
                            _ => function.arguments_text(),
                        })
                    })
                    .collect();
                Arc::new(text)
            }
            Function::SerialSequence => {
                let columns = match args.args.get(1) {
                    Some(columns) => cast(&columns.to_array(rows)?, &DataType::Utf8)?,
                    None => {
                        return Err(DataFusionError::Plan(
                            "pg_get_serial_sequence() needs a table and a column".into(),
                        ))
                    }
                };
                let tables = cast(&first, &DataType::Utf8)?;
                let as_text = |array: &ArrayRef| -> DataFusionResult<StringArray> {
                    array
                        .as_any()
                        .downcast_ref::<StringArray>()
                        .cloned()
                        .ok_or_else(|| DataFusionError::Internal("names are text".into()))
                };
                let (tables, columns) = (as_text(&tables)?, as_text(&columns)?);
                let mut names = Vec::with_capacity(rows);
                for (table, column) in tables.iter().zip(columns.iter()) {
                    names.push(match (table, column) {
                        (Some(table), Some(column)) => serial_sequence(table, column, &relations)?,
                        _ => None,
                    });
                }
                Arc::new(StringArray::from(names))
            }
            Function::RegClass
            | Function::RegType
            | Function::RegNamespace
            | Function::ToRegType
                if is_text(first.data_type()) =>
            {
                let names = cast(&first, &DataType::Utf8)?;
                let names = names
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .ok_or_else(|| DataFusionError::Internal("names are text".into()))?;
                let mut oids = Vec::with_capacity(rows);
                for name in names.iter() {
                    oids.push(match name {
                        Some(name) if self.function == Function::ToRegType => {
                            self.find_oid(name, &relations)
                        }
                        Some(name) => Some(self.oid_of(name, &relations)?),
                        None => None,
                    });
                }
                Arc::new(Int64Array::from(oids))
            }
            _ => {
                let oids = cast(&first, &DataType::Int64)?;
                let oids = oids
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .ok_or_else(|| DataFusionError::Internal("oids are numbers".into()))?;
                let modifiers = match args.args.get(1) {
                    // `format_type`'s type modifier, `pg_get_indexdef`'s
                    // column number.
                    Some(modifiers)
                        if matches!(self.function, Function::FormatType | Function::IndexDef) =>
                    {
                        Some(cast(&modifiers.to_array(rows)?, &DataType::Int64)?)
                    }
                    _ => None,
                };
                let modifiers = modifiers
                    .as_ref()
                    .and_then(|array| array.as_any().downcast_ref::<Int64Array>());
                // `pg_get_indexdef(oid, column, pretty)`: pretty-printed,
                // a relation on the search path is not qualified.
                let pretty = args.args.len() >= 3;
                let text: StringArray = (0..rows)
                    .map(|row| {
                        if oids.is_null(row) {
                            return None;
                        }
                        let modifier = modifiers
                            .filter(|array| !array.is_null(row))
                            .map(|array| array.value(row));
                        self.describe(oids.value(row), modifier, pretty, &relations)
                    })
                    .collect();
                Arc::new(text)
            }
        };
        if constant {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(
                &result, 0,
            )?));
        }
        Ok(ColumnarValue::Array(result))
    }
}

impl CatalogFunction {
    /// What the function says about the object with this oid; `None` when
    /// there is no such object (PostgreSQL's NULL, or the bare number for
    /// the reg types).
    fn describe(
        &self,
        oid: i64,
        modifier: Option<i64>,
        pretty: bool,
        relations: &[RelationInfo],
    ) -> Option<String> {
        let relation = |oid: i64| relations.iter().find(|relation| relation.oid() == oid);
        let indexes = all_indexes(relations);
        let index =
            |matches: fn(&IndexInfo) -> i64| indexes.iter().find(|index| matches(index) == oid);
        match self.function {
            // The invalid oid, as the reg types print it.
            Function::RegClass | Function::RegType | Function::RegNamespace if oid == 0 => {
                Some("-".to_string())
            }
            Function::FormatType => Some(format_type(oid, modifier)),
            Function::SizePretty => Some(size_pretty(oid)),
            // PostgreSQL answers an unknown number with the empty string.
            Function::EncodingToChar => Some(
                match oid {
                    UTF8_ENCODING => "UTF8",
                    _ => "",
                }
                .to_string(),
            ),
            Function::RegClass => Some(
                relation(oid)
                    .map(|relation| relation.name.clone())
                    .or_else(|| index(|index| index.index_oid).map(|index| index.name.clone()))
                    .or_else(|| {
                        relations
                            .iter()
                            .flat_map(RelationInfo::sequences)
                            .find(|sequence| sequence.oid() == oid)
                            .map(|sequence| sequence.name.clone())
                    })
                    .or_else(|| {
                        CATALOG_RELATION_OIDS
                            .iter()
                            .find(|(_, known)| *known == oid)
                            .map(|(name, _)| name.to_string())
                    })
                    .unwrap_or_else(|| oid.to_string()),
            ),
            Function::RegType => Some(type_name(oid).unwrap_or_else(|| oid.to_string())),
            Function::RegNamespace => Some(match oid {
                PG_CATALOG_OID => "pg_catalog".to_string(),
                PUBLIC_OID => SCHEMA.to_string(),
                other => other.to_string(),
            }),
            // With a column number, that column's name (psql's `\d index`).
            Function::IndexDef => index(|index| index.index_oid).map(|index| match modifier {
                Some(column) if column > 0 => index
                    .all_column_numbers()
                    .get(usize::try_from(column - 1).unwrap_or(usize::MAX))
                    .and_then(|number| index.table.columns.get(usize::try_from(number - 1).ok()?))
                    .map(|column| quote_ident(&column.name))
                    .unwrap_or_default(),
                _ => index.definition(!pretty),
            }),
            Function::ConstraintDef => indexes
                .iter()
                .find(|index| index.constraint && index.constraint_oid == oid)
                .map(|index| {
                    let kind = if index.primary {
                        "PRIMARY KEY"
                    } else {
                        "UNIQUE"
                    };
                    format!("{kind} ({})", index.column_list())
                }),
            Function::ViewDef => relation(oid)
                .filter(|relation| relation.kind != RelationKind::Table)
                .and_then(|relation| relation.definition.clone()),
            Function::UserById
            | Function::TableIsVisible
            | Function::ProcIsVisible
            | Function::ProcResult
            | Function::ProcArguments
            | Function::Granted(_)
            | Function::ToRegType
            | Function::Expression
            | Function::SerialSequence
            | Function::Nothing(_) => None,
        }
    }

    /// `'name'::regclass` (or `regtype`, `regnamespace`): the oid of the
    /// named object; an error naming it when there is none.
    fn oid_of(&self, name: &str, relations: &[RelationInfo]) -> DataFusionResult<i64> {
        let unquoted = name.trim().trim_matches('"');
        let kind = match self.function {
            Function::RegClass => "relation",
            Function::RegType => "type",
            _ => "schema",
        };
        self.find_oid(name, relations).ok_or_else(|| {
            DataFusionError::External(Box::new(RsError::new(
                &codes::UNDEFINED_OBJECT,
                format!("{kind} \"{unquoted}\" does not exist"),
            )))
        })
    }

    /// The oid of the object `name` names, if there is one.
    fn find_oid(&self, name: &str, relations: &[RelationInfo]) -> Option<i64> {
        let unquoted = name.trim().trim_matches('"');
        match self.function {
            Function::RegClass => {
                // pg_catalog comes first on the search path.
                let catalog = unquoted.strip_prefix("pg_catalog.").unwrap_or(unquoted);
                let known = CATALOG_RELATION_OIDS
                    .iter()
                    .find(|(name, _)| *name == catalog);
                if let Some((_, oid)) = known {
                    return Some(*oid);
                }
                let bare = regclass_name(name);
                relations
                    .iter()
                    .find(|relation| relation.name == bare)
                    .map(RelationInfo::oid)
                    .or_else(|| {
                        all_indexes(relations)
                            .iter()
                            .find(|index| index.name == bare)
                            .map(|index| index.index_oid)
                    })
                    .or_else(|| {
                        relations
                            .iter()
                            .flat_map(RelationInfo::sequences)
                            .find(|sequence| sequence.name == bare)
                            .map(SequenceInfo::oid)
                    })
            }
            Function::RegType | Function::ToRegType => type_oid(unquoted),
            _ => match unquoted {
                "pg_catalog" => Some(PG_CATALOG_OID),
                SCHEMA => Some(PUBLIC_OID),
                _ => None,
            },
        }
    }
}

/// `name` as PostgreSQL's `quote_ident` writes it: bare when it is lower
/// case letters, digits and underscores (not starting with a digit),
/// double-quoted otherwise.
pub fn quote_ident(name: &str) -> String {
    let bare = name
        .chars()
        .next()
        .is_some_and(|first| first.is_ascii_lowercase() || first == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if bare {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

/// A relation's name as `regclass` reads it: optionally qualified by
/// `public.`, folded to lower case unless double-quoted (`""` inside quotes
/// is one `"`).
pub fn regclass_name(text: &str) -> String {
    let text = text.trim();
    let bare = text.strip_prefix("public.").unwrap_or(text);
    match bare
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
    {
        Some(quoted) => quoted.replace("\"\"", "\""),
        None => bare.to_lowercase(),
    }
}

/// `pg_get_serial_sequence(table, column)`: `public.<sequence>` of the
/// column's sequence, NULL when it owns none; 42P01 / 42703 for a table or
/// column that does not exist. The table name is read as `regclass` reads
/// it (optionally qualified, quoted to keep case); the column as it is.
fn serial_sequence(
    table: &str,
    column: &str,
    relations: &[RelationInfo],
) -> DataFusionResult<Option<String>> {
    let name = regclass_name(table);
    let error =
        |code, message: String| DataFusionError::External(Box::new(RsError::new(code, message)));
    let relation = relations
        .iter()
        .find(|relation| relation.name == name)
        .ok_or_else(|| {
            error(
                &codes::UNDEFINED_OBJECT,
                format!("relation \"{name}\" does not exist"),
            )
        })?;
    let owned = relation
        .columns
        .iter()
        .find(|candidate| candidate.name == column)
        .ok_or_else(|| {
            error(
                &codes::UNDEFINED_COLUMN,
                format!("column \"{column}\" of relation \"{name}\" does not exist"),
            )
        })?;
    Ok(owned
        .sequence
        .as_ref()
        .map(|sequence| format!("{SCHEMA}.{}", quote_ident(&sequence.name))))
}

/// PostgreSQL's `pg_size_pretty`: bytes below 10 kB, then the largest unit
/// that keeps the number below 20480 halves, rounded half away from zero.
fn size_pretty(bytes: i64) -> String {
    const LIMIT: i64 = 10 * 1024;
    if bytes.abs() < LIMIT {
        return format!("{bytes} bytes");
    }
    let half_rounded = |value: i64| (value + value.signum()) / 2;
    // One extra bit of precision, for the rounding.
    let mut size = bytes >> 9;
    for unit in ["kB", "MB", "GB", "TB"] {
        if size.abs() < 2 * LIMIT - 1 {
            return format!("{} {unit}", half_rounded(size));
        }
        size >>= 10;
    }
    format!("{} PB", half_rounded(size))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::Field;
    use datafusion::config::ConfigOptions;

    /// Constant arguments over a batch of no rows (a filter that kept
    /// nothing) give one value; this used to read row 0 of an empty array
    /// and panic the connection.
    #[test]
    fn constant_arguments_over_an_empty_batch_give_one_value() {
        let format_type = udf(Function::FormatType, None);
        let argument = |value: i64| ColumnarValue::Scalar(ScalarValue::Int64(Some(value)));
        let field = Arc::new(Field::new("x", DataType::Int64, true));
        let args = ScalarFunctionArgs {
            args: vec![argument(23), argument(-1)],
            arg_fields: vec![field.clone(), field],
            number_rows: 0,
            return_field: Arc::new(Field::new("format_type", DataType::Utf8, true)),
            config_options: Arc::new(ConfigOptions::default()),
        };
        let Ok(ColumnarValue::Scalar(value)) = format_type.invoke_with_args(args) else {
            panic!("a constant call gives a scalar");
        };
        assert_eq!(value, ScalarValue::Utf8(Some("integer".into())));
    }

    #[test]
    fn sizes_print_as_postgresql_prints_them() {
        // Values from PostgreSQL 15.
        for (bytes, pretty) in [
            (0, "0 bytes"),
            (10239, "10239 bytes"),
            (10240, "10 kB"),
            (8192 * 1000, "8000 kB"),
            (20 * 1024 * 1024, "20 MB"),
            (1536 * 1024 * 1024, "1536 MB"),
            (3 * 1024 * 1024 * 1024, "3072 MB"),
            (30 * 1024 * 1024 * 1024, "30 GB"),
        ] {
            assert_eq!(size_pretty(bytes), pretty, "{bytes}");
        }
    }
}
