//! Catalog entries and their storage in the control SlateDB.
//!
//! ```text
//! 0x01 kind(1) namespace_id(16) object_id(16) -> entry (JSON)
//! 0x01 0x00                                   -> next object id
//! ```
//!
//! `namespace_id` comes from the namespace's name (`namespaces.rs`).

use serde::{Deserialize, Serialize};

use rockstream_ops::keys::RowStorage;
use rockstream_plan::partition::Partitioning;
use rockstream_planner::quote_ident;
use rockstream_types::{codes, ObjectId, RsError, RsResult, SqlType};

use crate::namespaces::namespace_id;

/// The namespace every server has (`dbname=default`).
pub const DEFAULT_NAMESPACE: &str = "default";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ObjectKind {
    Table,
    MaterializedView,
    View,
}

impl ObjectKind {
    pub fn describe(&self) -> &'static str {
        match self {
            ObjectKind::Table => "table",
            ObjectKind::MaterializedView => "materialized view",
            ObjectKind::View => "view",
        }
    }

    fn key_byte(&self) -> u8 {
        match self {
            ObjectKind::Table => 0x01,
            ObjectKind::MaterializedView => 0x02,
            ObjectKind::View => 0x03,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ColumnDef {
    pub name: String,
    /// PostgreSQL spelling, parsed by [`parse_type`].
    pub type_name: String,
    pub not_null: bool,
    /// The column's default expression, as PostgreSQL's `pg_get_expr`
    /// prints it (`nextval('t_id_seq'::regclass)` for a serial column);
    /// `None` for an identity column, whose values come from `sequence`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    /// The sequence a `SERIAL` or identity column owns (RFC 0003).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence: Option<OwnedSequence>,
}

/// A sequence that belongs to a column: created and dropped with its table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OwnedSequence {
    pub id: ObjectId,
    /// Unique among the namespace's relations and sequences.
    pub name: String,
    /// `GENERATED {ALWAYS | BY DEFAULT} AS IDENTITY`; `None` for `SERIAL`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<Identity>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Identity {
    /// An `INSERT` may not give the column a value (428C9).
    Always,
    ByDefault,
}

impl Identity {
    /// `pg_attribute.attidentity`.
    pub fn code(&self) -> &'static str {
        match self {
            Identity::Always => "a",
            Identity::ByDefault => "d",
        }
    }
}

impl ColumnDef {
    /// A column without a default.
    pub fn new(name: impl Into<String>, type_name: impl Into<String>, not_null: bool) -> ColumnDef {
        ColumnDef {
            name: name.into(),
            type_name: type_name.into(),
            not_null,
            default: None,
            sequence: None,
        }
    }

    /// Whether an `INSERT` that omits the column stores something other
    /// than NULL.
    pub fn has_default(&self) -> bool {
        self.default.is_some() || self.identity_sequence().is_some()
    }

    /// The expression an omitted value is computed by: the default, or an
    /// identity column's sequence's next value. (A serial column's default
    /// calls its sequence; once the default is dropped it is not used.)
    pub fn default_expression(&self) -> Option<String> {
        self.default.clone().or_else(|| {
            self.identity_sequence()
                .map(|sequence| nextval_expression(&sequence.name))
        })
    }

    fn identity_sequence(&self) -> Option<&OwnedSequence> {
        self.sequence
            .as_ref()
            .filter(|sequence| sequence.identity.is_some())
    }

    pub fn sql_type(&self) -> RsResult<SqlType> {
        parse_type(&self.type_name)
    }

    /// The most characters a value may have (`character varying(n)`).
    pub fn max_chars(&self) -> Option<usize> {
        rockstream_types::datum::varchar_length(&self.type_name)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CatalogEntry {
    pub id: ObjectId,
    pub namespace: String,
    pub name: String,
    pub kind: ObjectKind,
    pub columns: Vec<ColumnDef>,
    /// Column positions of the primary key (empty: hidden row id).
    pub primary_key: Vec<usize>,
    /// The defining SELECT of a view.
    pub definition: Option<String>,
    /// Objects this one reads (directly, or through inline views).
    pub dependencies: Vec<ObjectId>,
    /// A materialized view's unique key (output columns), if the planner
    /// derived one when it was created: its output is then stored keyed by
    /// it (`RowStorage::Keyed`). Fixed at creation, so re-planning never
    /// changes how stored output is read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_key: Option<Vec<usize>>,
    /// A materialized view's [`rockstream_plan::PlanNode::state_layout`]
    /// when it was created (absent for views created before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_layout: Option<String>,
    /// Set, durably, before a DROP starts removing the object's state; a
    /// restart finishes the drop of every entry so marked.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dropping: bool,
    /// Set while the catalog transaction that created (or, with
    /// `dropping`, dropped) this entry is in doubt: written durably before
    /// its commit point and cleared after it. A start resolves it by the
    /// transaction's commit record (RFC 0002).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transaction: Option<u64>,
    /// A table's row layout: the catalog transaction that last rewrote its
    /// rows for new columns (`ALTER TABLE … ADD/DROP COLUMN`), 0 if none
    /// has. Rows written for another layout never commit, and a snapshot
    /// older than the rewrite cannot read the table (RFC 0004).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rewritten: u64,
    /// With `transaction`, for an entry that catalog transaction altered:
    /// the version it replaces, which stands if the transaction did not
    /// commit (RFC 0004).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<Box<CatalogEntry>>,
    /// A table's indexes besides its primary key's: its UNIQUE
    /// constraints (RFC 0006), unique indexes and plain indexes (RFC 0014).
    /// Stored under the name it had when only UNIQUE constraints existed.
    #[serde(default, rename = "unique", skip_serializing_if = "Vec::is_empty")]
    pub indexes: Vec<TableIndex>,
    /// The number the table's next index gets: numbers are never reused,
    /// so a new index never meets a dropped one's entries.
    #[serde(
        default,
        rename = "next_unique_id",
        skip_serializing_if = "is_zero_u16"
    )]
    pub next_index_id: u16,
    /// The SQL functions a view's definition calls, directly or through
    /// other functions' bodies (RFC 0012): they are neither dropped nor
    /// replaced while it exists.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub functions: Vec<ObjectId>,
    /// A table's `WATERMARK FOR column AS column - delay` (RFC 0013): its
    /// late rows are dropped and counted, and it is append-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermark: Option<WatermarkDef>,
    /// A materialized view's `EMIT ON WINDOW CLOSE` (RFC 0013): it shows
    /// each window once the watermark closes it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub emit_on_window_close: bool,
}

/// A table's event-time watermark as declared (RFC 0013).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatermarkDef {
    /// The time column, by name (positions move as columns are added).
    pub column: String,
    /// How late a row may be, in microseconds (`column - INTERVAL …`).
    pub delay_micros: i64,
}

impl CatalogEntry {
    /// A new object's entry: `columns`, and nothing else yet (no key, no
    /// definition, no dependencies, indexes or watermark).
    pub fn new(
        id: ObjectId,
        (namespace, name): (&str, &str),
        kind: ObjectKind,
        columns: Vec<ColumnDef>,
    ) -> CatalogEntry {
        CatalogEntry {
            id,
            namespace: namespace.to_string(),
            name: name.to_string(),
            kind,
            columns,
            primary_key: Vec::new(),
            definition: None,
            dependencies: Vec::new(),
            output_key: None,
            state_layout: None,
            dropping: false,
            transaction: None,
            rewritten: 0,
            previous: None,
            indexes: Vec::new(),
            next_index_id: 0,
            functions: Vec::new(),
            watermark: None,
            emit_on_window_close: false,
        }
    }

    /// The watermark's column position and delay, as a commit applies it.
    pub fn event_time(&self) -> Option<(usize, i64)> {
        let watermark = self.watermark.as_ref()?;
        let column = self
            .columns
            .iter()
            .position(|column| column.name == watermark.column)?;
        Some((column, watermark.delay_micros))
    }
}

/// An index of a table besides its primary key's: a UNIQUE constraint
/// (no two rows hold equal values in its columns, NULLs apart; RFC 0006),
/// a unique index, or a plain index (RFC 0014).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableIndex {
    /// Its number within the table, part of its entries' storage keys.
    pub id: u16,
    /// Unique among the namespace's relations, sequences and indexes
    /// (PostgreSQL names the index that backs a constraint so).
    pub name: String,
    /// Column positions, in declaration order.
    pub columns: Vec<usize>,
    /// Whether no two rows may hold equal non-NULL values in `columns`.
    /// Entries written before plain indexes existed are all unique.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub unique: bool,
    /// Made by `CREATE [UNIQUE] INDEX`: an index without a constraint, as
    /// PostgreSQL keeps it (`DROP INDEX` removes it, `pg_constraint` does
    /// not list it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub index_only: bool,
    /// `INCLUDE (…)` columns: listed by the catalog, not stored (a lookup
    /// reads the row).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub include: Vec<usize>,
    /// `USING hash` rather than the default `btree` (both are kept as the
    /// same ordered entries).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hash: bool,
}

fn yes() -> bool {
    true
}

fn is_true(value: &bool) -> bool {
    *value
}

fn is_zero_u16(value: &u16) -> bool {
    *value == 0
}

/// The `rewritten` of a table a transaction altered, in its own catalog
/// until it commits (the transaction's number is known only then).
pub const REWRITTEN_BY_PENDING: u64 = u64::MAX;

fn is_zero(value: &u64) -> bool {
    *value == 0
}

impl CatalogEntry {
    /// How this object's rows are stored (inline views store none).
    pub fn row_storage(&self) -> RowStorage {
        match self.kind {
            ObjectKind::Table => RowStorage::Table,
            _ => RowStorage::of_view(self.output_key.as_deref()),
        }
    }

    /// How its rows are placed on shards: a table's by its primary key (by
    /// its hidden row id, which no column holds, when it has none), a
    /// view's by its storage key.
    pub fn partitioning(&self) -> Partitioning {
        match self.row_storage() {
            RowStorage::Table if self.primary_key.is_empty() => Partitioning::Arbitrary,
            RowStorage::Table => Partitioning::Hash(self.primary_key.clone()),
            RowStorage::Keyed(columns) => Partitioning::Hash(columns),
            RowStorage::Counted => Partitioning::Hash((0..self.columns.len()).collect()),
        }
    }

    pub fn sql_types(&self) -> RsResult<Vec<SqlType>> {
        self.columns.iter().map(ColumnDef::sql_type).collect()
    }

    pub fn key(&self) -> Vec<u8> {
        entry_key(self.kind, &self.namespace, self.id)
    }

    /// The position of column `column`; 42703 naming it when there is none.
    pub fn column_position(&self, column: &str) -> RsResult<usize> {
        self.columns
            .iter()
            .position(|existing| existing.name == column)
            .ok_or_else(|| {
                RsError::new(
                    &codes::UNDEFINED_COLUMN,
                    format!(
                        "column \"{column}\" of relation \"{}\" does not exist",
                        self.name
                    ),
                )
            })
    }

    /// The name PostgreSQL gives its primary key's index and constraint,
    /// if it has one (`<table>_pkey`).
    pub fn key_name(&self) -> Option<String> {
        (!self.primary_key.is_empty()).then(|| format!("{}_pkey", self.name))
    }

    /// Its UNIQUE constraints and unique indexes, which commits check.
    pub fn unique_indexes(&self) -> impl Iterator<Item = &TableIndex> {
        self.indexes.iter().filter(|index| index.unique)
    }

    /// The names of the sequences its columns own and of its indexes,
    /// which share the namespace of relations.
    pub fn owned_names(&self) -> impl Iterator<Item = &str> {
        self.columns
            .iter()
            .filter_map(|column| {
                column
                    .sequence
                    .as_ref()
                    .map(|sequence| sequence.name.as_str())
            })
            .chain(self.indexes.iter().map(|index| index.name.as_str()))
    }
}

pub(crate) fn entry_key(kind: ObjectKind, namespace: &str, id: ObjectId) -> Vec<u8> {
    let mut key = vec![0x01, kind.key_byte()];
    key.extend_from_slice(&namespace_id(namespace).to_be_bytes());
    key.extend_from_slice(&id.to_be_bytes());
    key
}

pub(crate) const NEXT_ID_KEY: [u8; 2] = [0x01, 0x00];

/// A serial column's default, as PostgreSQL prints it.
pub fn nextval_expression(sequence: &str) -> String {
    format!(
        "nextval('{}'::regclass)",
        quote_ident(sequence).replace('\'', "''")
    )
}

/// Parses a type name as [`SqlType::pg_name`] writes it.
pub fn parse_type(name: &str) -> RsResult<SqlType> {
    Ok(match name {
        array if array.ends_with("[]") => {
            let element = parse_type(&array[..array.len() - 2])?;
            SqlType::array_of(element).ok_or_else(|| {
                RsError::new(
                    &codes::UNSUPPORTED_TYPE,
                    format!("type {array} (a multidimensional array) is not supported"),
                )
            })?
        }
        "boolean" => SqlType::Bool,
        "smallint" => SqlType::Int16,
        "integer" => SqlType::Int32,
        "bigint" => SqlType::Int64,
        "real" => SqlType::Float32,
        "double precision" => SqlType::Float64,
        "text" | "character varying" => SqlType::Text,
        varchar if varchar.starts_with("character varying(") => SqlType::Text,
        "date" => SqlType::Date,
        "timestamp without time zone" => SqlType::Timestamp,
        "timestamp with time zone" => SqlType::TimestampTz,
        "interval" => SqlType::Interval,
        other => {
            let inner = other
                .strip_prefix("numeric(")
                .and_then(|rest| rest.strip_suffix(')'))
                .ok_or_else(|| {
                    RsError::new(
                        &codes::UNSUPPORTED_TYPE,
                        format!("type {other} is not supported"),
                    )
                })?;
            let (precision, scale) = inner.split_once(',').ok_or_else(|| {
                RsError::new(
                    &codes::UNSUPPORTED_TYPE,
                    format!("type {other} is not supported"),
                )
            })?;
            let parse_error = || {
                RsError::new(
                    &codes::UNSUPPORTED_TYPE,
                    format!("type {other} is not supported"),
                )
            };
            SqlType::Numeric {
                precision: precision.trim().parse().map_err(|_| parse_error())?,
                scale: scale.trim().parse().map_err(|_| parse_error())?,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    //! Goal: every SQL type's catalog spelling parses back to itself, and a
    //! varchar's spelling carries its length.
    use super::*;

    #[test]
    fn type_names_round_trip() {
        for sql_type in [
            SqlType::Bool,
            SqlType::Int16,
            SqlType::Int32,
            SqlType::Int64,
            SqlType::Float32,
            SqlType::Float64,
            SqlType::Numeric {
                precision: 12,
                scale: 2,
            },
            SqlType::Text,
            SqlType::Date,
            SqlType::Timestamp,
            SqlType::TimestampTz,
            SqlType::Interval,
            SqlType::array_of(SqlType::Text).expect("an element type"),
            SqlType::array_of(SqlType::Numeric {
                precision: 12,
                scale: 2,
            })
            .expect("an element type"),
        ] {
            assert_eq!(parse_type(&sql_type.pg_name()).expect("parses"), sql_type);
        }
        assert!(parse_type("money").is_err());
        let varchar = ColumnDef::new("name", "character varying(12)", false);
        assert_eq!(varchar.sql_type().expect("parses"), SqlType::Text);
        assert_eq!(varchar.max_chars(), Some(12));
        let unbounded = ColumnDef {
            type_name: "character varying".into(),
            ..varchar
        };
        assert_eq!(unbounded.sql_type().expect("parses"), SqlType::Text);
        assert_eq!(unbounded.max_chars(), None);
    }
}
