//! Arrow types as PostgreSQL types.
//!
//! One mapping, used for result columns (RowDescription) and for parameter
//! types (ParameterDescription) alike. Types without a PostgreSQL
//! counterpart travel as `text`, rendered with Arrow's display; `Null`
//! travels as `text` and is always NULL. The encoder (`encode`) matches on
//! the same Arrow types, so a column is always encoded the way its
//! RowDescription announced.

use datafusion::arrow::datatypes::{DataType, Schema};
use pgwire::api::portal::Format;
use pgwire::api::results::{FieldFormat, FieldInfo};
use pgwire::api::Type;
use rockstream_types::pg_array::ELEMENT_INT2VECTOR;

/// Field metadata naming, for a result column that is a table's column, its
/// table's oid (`RowDescription`'s table OID; clients such as pgjdbc read
/// `ResultSetMetaData.getTableName` from it).
pub const FIELD_TABLE_OID: &str = "rockstream.table_oid";
/// Field metadata: the column's number in its table (from 1).
pub const FIELD_COLUMN_NUMBER: &str = "rockstream.attnum";
/// Field metadata of a `varchar` column: its declared length (empty when
/// unbounded). The column then travels as `varchar` (1043), not `text`.
pub const FIELD_VARCHAR_LENGTH: &str = "rockstream.varchar_length";

/// Whether a list type is an `int2vector` ([`ELEMENT_INT2VECTOR`]).
pub fn is_int2vector(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::List(element) if element.metadata().contains_key(ELEMENT_INT2VECTOR)
    )
}

/// The PostgreSQL type an Arrow type travels as.
pub fn pg_type(data_type: &DataType) -> Type {
    if is_int2vector(data_type) {
        return Type::INT2_VECTOR;
    }
    match data_type {
        DataType::Boolean => Type::BOOL,
        DataType::Int16 => Type::INT2,
        DataType::Int32 => Type::INT4,
        DataType::Int64 => Type::INT8,
        // Object identifiers: only parameters cast to `oid` have this type
        // (oid columns are bigint).
        DataType::UInt32 => Type::OID,
        DataType::Float32 => Type::FLOAT4,
        DataType::Float64 => Type::FLOAT8,
        DataType::Decimal128(_, _) => Type::NUMERIC,
        DataType::Date32 => Type::DATE,
        DataType::Timestamp(_, None) => Type::TIMESTAMP,
        DataType::Timestamp(_, Some(_)) => Type::TIMESTAMPTZ,
        DataType::Interval(_) => Type::INTERVAL,
        DataType::Time32(_) | DataType::Time64(_) => Type::TIME,
        DataType::List(element) | DataType::LargeList(element) => {
            array_type(&pg_type(element.data_type())).unwrap_or(Type::TEXT)
        }
        _ => Type::TEXT,
    }
}

/// The one-dimensional array type of an element type; `None` for what has
/// none here (arrays of arrays, which are sent as text).
pub(crate) fn array_type(element: &Type) -> Option<Type> {
    Some(match *element {
        Type::BOOL => Type::BOOL_ARRAY,
        Type::INT2 => Type::INT2_ARRAY,
        Type::INT4 => Type::INT4_ARRAY,
        Type::INT8 => Type::INT8_ARRAY,
        Type::FLOAT4 => Type::FLOAT4_ARRAY,
        Type::FLOAT8 => Type::FLOAT8_ARRAY,
        Type::NUMERIC => Type::NUMERIC_ARRAY,
        Type::DATE => Type::DATE_ARRAY,
        Type::TIMESTAMP => Type::TIMESTAMP_ARRAY,
        Type::TIMESTAMPTZ => Type::TIMESTAMPTZ_ARRAY,
        Type::INTERVAL => Type::INTERVAL_ARRAY,
        Type::TIME => Type::TIME_ARRAY,
        Type::TEXT => Type::TEXT_ARRAY,
        Type::OID => Type::OID_ARRAY,
        _ => return None,
    })
}

/// The element type of a one-dimensional array type ([`array_type`]'s
/// inverse).
pub(crate) fn element_type(array: &Type) -> Option<Type> {
    [
        Type::BOOL,
        Type::INT2,
        Type::INT4,
        Type::INT8,
        Type::FLOAT4,
        Type::FLOAT8,
        Type::NUMERIC,
        Type::DATE,
        Type::TIMESTAMP,
        Type::TIMESTAMPTZ,
        Type::INTERVAL,
        Type::TIME,
        Type::TEXT,
        Type::OID,
    ]
    .into_iter()
    .find(|element| array_type(element).as_ref() == Some(array))
}

/// `pg_type.typlen`: the fixed width in bytes, -1 for variable width.
fn type_size(pg_type: &Type) -> i16 {
    match *pg_type {
        Type::BOOL => 1,
        Type::INT2 => 2,
        Type::INT4 | Type::FLOAT4 | Type::DATE => 4,
        Type::INT8 | Type::FLOAT8 | Type::TIME | Type::TIMESTAMP | Type::TIMESTAMPTZ => 8,
        Type::INTERVAL => 16,
        _ => -1,
    }
}

/// `pg_attribute.atttypmod`: `numeric(p, s)` packs as `((p << 16) | s) + 4`.
fn type_modifier(data_type: &DataType) -> i32 {
    match data_type {
        DataType::Decimal128(precision, scale) if *scale >= 0 => {
            ((i32::from(*precision) << 16) | i32::from(*scale)) + 4
        }
        _ => -1,
    }
}

/// The format of column (or parameter) `index`, text when the client sent
/// fewer format codes than columns (PostgreSQL rejects that; we are lenient
/// rather than panic).
pub(crate) fn format_at(format: &Format, index: usize) -> FieldFormat {
    match format {
        Format::UnifiedText => FieldFormat::Text,
        Format::UnifiedBinary => FieldFormat::Binary,
        Format::Individual(codes) => codes
            .get(index)
            .map_or(FieldFormat::Text, |code| FieldFormat::from(*code)),
    }
}

/// RowDescription fields for a schema, each in the format the client asked for.
pub(crate) fn field_infos(schema: &Schema, format: &Format) -> Vec<FieldInfo> {
    schema
        .fields()
        .iter()
        .enumerate()
        .map(|(index, field)| {
            let metadata = field.metadata();
            let table_oid = metadata
                .get(FIELD_TABLE_OID)
                .and_then(|value| value.parse::<i32>().ok());
            let column_number = metadata
                .get(FIELD_COLUMN_NUMBER)
                .and_then(|value| value.parse::<i16>().ok());
            let varchar = metadata
                .get(FIELD_VARCHAR_LENGTH)
                .filter(|_| field.data_type() == &DataType::Utf8);
            let (pg_type, modifier) = match varchar {
                // `atttypmod` of `varchar(n)` is n + 4.
                Some(length) => (
                    Type::VARCHAR,
                    length.parse::<i32>().map_or(-1, |length| length + 4),
                ),
                None => (pg_type(field.data_type()), type_modifier(field.data_type())),
            };
            let size = type_size(&pg_type);
            FieldInfo::new(
                field.name().clone(),
                table_oid,
                column_number,
                pg_type,
                format_at(format, index),
            )
            .with_type_size(size)
            .with_type_modifier(modifier)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    //! Goal: each Arrow type maps to the OID PostgreSQL would report, and
    //! format codes are read without panicking on short lists.
    use super::*;
    use datafusion::arrow::datatypes::{Field, IntervalUnit, TimeUnit};

    #[test]
    fn arrow_types_map_to_postgres_oids() {
        let cases = [
            (DataType::Boolean, 16),
            (DataType::Int16, 21),
            (DataType::Int32, 23),
            (DataType::Int64, 20),
            (DataType::Float32, 700),
            (DataType::Float64, 701),
            (DataType::Decimal128(10, 2), 1700),
            (DataType::Utf8, 25),
            (DataType::LargeUtf8, 25),
            (DataType::Utf8View, 25),
            (DataType::Date32, 1082),
            (DataType::Timestamp(TimeUnit::Microsecond, None), 1114),
            (
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                1184,
            ),
            (DataType::Interval(IntervalUnit::MonthDayNano), 1186),
            (DataType::Null, 25),
            (DataType::UInt64, 25),
        ];
        for (data_type, oid) in cases {
            assert_eq!(pg_type(&data_type).oid(), oid, "{data_type}");
        }
        for unit in [IntervalUnit::YearMonth, IntervalUnit::DayTime] {
            assert_eq!(pg_type(&DataType::Interval(unit)), Type::INTERVAL);
        }
    }

    #[test]
    fn field_infos_carry_format_size_and_numeric_modifier() {
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int32, false),
            Field::new("price", DataType::Decimal128(18, 4), true),
        ]);
        let fields = field_infos(&schema, &Format::Individual(vec![1]));
        assert_eq!(fields[0].format(), FieldFormat::Binary);
        assert_eq!(fields[0].type_size(), 4);
        assert_eq!(fields[1].format(), FieldFormat::Text);
        assert_eq!(fields[1].type_modifier(), ((18 << 16) | 4) + 4);
        assert_eq!(fields[1].type_size(), -1);
    }
}
