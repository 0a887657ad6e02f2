//! SQL values and their types.
//!
//! A [`Datum`] is one SQL value; a [`Row`] is a vector of them. Numeric values
//! are exact: an `i128` mantissa whose scale is fixed by the column's
//! [`SqlType::Numeric`] (the same contract as Arrow's `Decimal128`). Time
//! values are integers: days since 1970-01-01 for `DATE`, microseconds since
//! the epoch for `TIMESTAMP[TZ]` (UTC for `TIMESTAMPTZ`).

use std::fmt;
use std::sync::Mutex;

/// Largest precision a NUMERIC column may declare (Arrow `Decimal128`).
pub const NUMERIC_PRECISION_MAX: u8 = 38;
/// Scale given to `NUMERIC` declared without one.
pub const NUMERIC_DEFAULT_SCALE: i8 = 6;

/// The SQL types a column may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SqlType {
    Bool,
    Int16,
    Int32,
    Int64,
    Float32,
    Float64,
    /// Exact decimal with `precision` total digits and `scale` fraction digits.
    Numeric {
        precision: u8,
        scale: i8,
    },
    Text,
    Date,
    Timestamp,
    TimestampTz,
    Interval,
    /// A one-dimensional array of the element type (never itself an array:
    /// multidimensional arrays are refused). Interned by [`SqlType::array_of`],
    /// so that the type stays `Copy`.
    Array(&'static SqlType),
}

/// The declared length of a column type spelled `character varying(n)`
/// (a `VARCHAR(n)` column is stored as text, its type name keeping `n`).
pub fn varchar_length(type_name: &str) -> Option<usize> {
    type_name
        .strip_prefix("character varying(")?
        .strip_suffix(')')?
        .parse()
        .ok()
}

impl SqlType {
    /// The array type of `element`: one interned value per element type (a
    /// bounded set: the scalar types and their numeric precisions), so that
    /// `SqlType` stays `Copy`. `None` for an array element, since arrays of
    /// arrays are not a type of their own.
    pub fn array_of(element: SqlType) -> Option<SqlType> {
        static INTERNED: Mutex<Vec<&'static SqlType>> = Mutex::new(Vec::new());
        if matches!(element, SqlType::Array(_)) {
            return None;
        }
        let mut interned = INTERNED
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let element = match interned.iter().find(|known| ***known == element) {
            Some(known) => *known,
            None => {
                let leaked: &'static SqlType = Box::leak(Box::new(element));
                interned.push(leaked);
                leaked
            }
        };
        Some(SqlType::Array(element))
    }

    /// The PostgreSQL spelling, as `\d` shows it.
    pub fn pg_name(&self) -> String {
        match self {
            SqlType::Bool => "boolean".into(),
            SqlType::Int16 => "smallint".into(),
            SqlType::Int32 => "integer".into(),
            SqlType::Int64 => "bigint".into(),
            SqlType::Float32 => "real".into(),
            SqlType::Float64 => "double precision".into(),
            SqlType::Numeric { precision, scale } => format!("numeric({precision},{scale})"),
            SqlType::Text => "text".into(),
            SqlType::Date => "date".into(),
            SqlType::Timestamp => "timestamp without time zone".into(),
            SqlType::TimestampTz => "timestamp with time zone".into(),
            SqlType::Interval => "interval".into(),
            SqlType::Array(element) => format!("{}[]", element.pg_name()),
        }
    }
}

/// One SQL value.
#[derive(Debug, Clone, PartialEq)]
pub enum Datum {
    Null,
    Bool(bool),
    Int16(i16),
    Int32(i32),
    Int64(i64),
    Float32(f32),
    Float64(f64),
    /// Mantissa; the scale comes from the column type.
    Numeric(i128),
    Text(String),
    /// Days since 1970-01-01.
    Date(i32),
    /// Microseconds since 1970-01-01 00:00:00 (no zone).
    Timestamp(i64),
    /// Microseconds since 1970-01-01 00:00:00 UTC.
    TimestampTz(i64),
    Interval(Interval),
    /// A one-dimensional array (lower bound 1) of values of one type, any of
    /// them NULL; never an array of arrays.
    Array(Vec<Datum>),
}

/// PostgreSQL's interval: months, days and nanoseconds kept apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Interval {
    pub months: i32,
    pub days: i32,
    pub nanoseconds: i64,
}

impl Interval {
    /// The ordering PostgreSQL uses: a month is 30 days, a day 24 hours.
    pub fn normalized_nanoseconds(&self) -> i128 {
        const DAY: i128 = 86_400_000_000_000;
        (self.months as i128) * 30 * DAY + (self.days as i128) * DAY + self.nanoseconds as i128
    }
}

/// A row of a table, view or intermediate collection.
pub type Row = Vec<Datum>;

impl Datum {
    pub fn is_null(&self) -> bool {
        matches!(self, Datum::Null)
    }

    /// Bytes the value holds outside itself (text and array elements), with
    /// an allocator's overhead per allocation.
    pub fn heap_bytes(&self) -> usize {
        const ALLOCATION_OVERHEAD: usize = 16;
        match self {
            Datum::Text(text) => text.capacity() + ALLOCATION_OVERHEAD,
            Datum::Array(elements) => {
                elements.capacity() * std::mem::size_of::<Datum>()
                    + ALLOCATION_OVERHEAD
                    + elements.iter().map(Datum::heap_bytes).sum::<usize>()
            }
            _ => 0,
        }
    }
}

impl fmt::Display for Datum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Datum::Null => write!(f, "NULL"),
            Datum::Bool(value) => write!(f, "{}", if *value { "t" } else { "f" }),
            Datum::Int16(value) => write!(f, "{value}"),
            Datum::Int32(value) => write!(f, "{value}"),
            Datum::Int64(value) => write!(f, "{value}"),
            Datum::Float32(value) => write!(f, "{value}"),
            Datum::Float64(value) => write!(f, "{value}"),
            Datum::Numeric(value) => write!(f, "{value}e?"),
            Datum::Text(value) => write!(f, "{value}"),
            Datum::Date(value) => write!(f, "date({value})"),
            Datum::Timestamp(value) => write!(f, "timestamp({value})"),
            Datum::TimestampTz(value) => write!(f, "timestamptz({value})"),
            Datum::Interval(value) => write!(f, "{value:?}"),
            Datum::Array(elements) => {
                write!(f, "{{")?;
                for (index, element) in elements.iter().enumerate() {
                    if index > 0 {
                        write!(f, ",")?;
                    }
                    write!(f, "{element}")?;
                }
                write!(f, "}}")
            }
        }
    }
}
