//! Key layout of shard state (DESIGN §5.1 and the key-encoding appendix).
//!
//! ```text
//! 0x01 'J' 'L' op_id(16) join_key row         -> weight      left join arrangement
//! 0x01 'J' 'R' op_id(16) join_key row         -> weight      right join arrangement
//! 0x01 'A' 'G' op_id(16) group_key            -> state row   aggregate accumulators
//! 0x01 'M' 'M' op_id(16) agg(2) group value   -> count       MIN/MAX multiset (per argument)
//! 0x01 'M' 'M' op_id(16) agg(2) group order value delimiter len
//!                                              -> count       string_agg multiset
//! 0x01 'A' 'D' op_id(16) agg(2) group value   -> count       DISTINCT-aggregate multiset
//! 0x01 'D' 'S' op_id(16) row                  -> weight      DISTINCT
//! 0x01 'S' 'O' op_id(16) row                  -> (l, r)      EXCEPT / INTERSECT counts
//! 0x01 'T' 'K' op_id(16) partition order row len(row)
//!                                              -> count       top-K multiset
//! 0x01 'W' 'F' op_id(16) partition order row len(row)
//!                                              -> count       window-function multiset
//! 0x01 'T' 'F' op_id(16) time(8) row          -> count       temporal filter's schedule
//! 0x01 'T' 'C' op_id(16)                      -> clock(8)    temporal filter's last clock
//! 0x01 'C' 'S' op_id(16)                      -> next(8)     clock series' next value
//! 0x01 'S' 'W' op_id(16) partition bucket(8) time(8) row
//!                                              -> count       session window rows
//! 0x01 'R' 'V' op_id(16) row                  -> ()          a recursive UNION's rows
//! 0x01 'R' 'D' op_id(16) row                  -> count       a recursive UNION's derivations
//! 0x03 view_id(16) row                        -> weight      view output (counted)
//! 0x07 table_id(16) row_key                   -> row         table rows
//! 0x08 view_id(16) key                        -> row         view output (keyed)
//! 0x09 table_id(16) constraint(2) values      -> row_key     UNIQUE constraint entries
//! 0x0A table_id(16) index(2) values row_key    -> ()          plain index entries
//! 0x0B transaction(8) segment(4) row_key       -> change      a large transaction's staged rows
//! 0x06 'F' 'V'                                -> version     storage format version
//! 0x06 'E' 'P'                                -> epoch       last committed epoch
//! 0x06 'L' 'N'                                -> lsn         last commit-log record applied (RFC 0019)
//! 0x06 'P' 'D' view_id(16) row                -> weight      input pending while a view is failed
//! 0x06 'L' 'G' epoch(8) shard(2) part(4)      -> writes      coordinator's log record (shard 0)
//! 0x06 'S' 'C' transaction(8)                 -> progress    a staged commit under way (shard 0)
//! 0x06 'R' 'C' object_id(16)                  -> ()          a dropped object's keys not yet compacted away (RFC 0008)
//! ```
//! Every shard holds its own `0x01` operator state and `0x06` metadata;
//! table rows, view output, UNIQUE entries (RFC 0006) and index entries
//! (RFC 0014) live on the shard of their partition key ([`partition_key`]); installed markers, log records,
//! staged rows and staged-commit markers (RFC 0007) only on the coordinator, shard 0;
//! drop markers on every shard.
//! A view whose rows have a unique key (`PlanNode::unique_key`, recorded
//! in its catalog entry) stores each row under that key, so a changed row
//! overwrites its predecessor; other views count each distinct row.
//!
//! Keys marked `weight` or `count` hold an 8-byte big-endian count. Those
//! that storage updates with blind additions ([`holds_count`]) may hold a
//! zero count until compaction removes it; every read treats a zero count
//! as absent.
//!
//! Rows and keys use the order-preserving encoding of
//! `rockstream_types::encoding`, which is prefix-free for a fixed number of
//! columns, so a prefix scan on a key never matches a longer key.

use rockstream_plan::SortKey;
use rockstream_types::encoding::{datum_len, encode_datum};
use rockstream_types::{Datum, ObjectId};

pub const OP_STATE: u8 = 0x01;
pub const OUTPUT: u8 = 0x03;
pub const SHARD_META: u8 = 0x06;
pub const TABLE_ROWS: u8 = 0x07;
pub const KEYED_OUTPUT: u8 = 0x08;
pub const UNIQUE_ENTRIES: u8 = 0x09;
pub const INDEX_ENTRIES: u8 = 0x0A;
pub const STAGED_ROWS: u8 = 0x0B;

pub const JOIN_LEFT: [u8; 2] = *b"JL";
pub const JOIN_RIGHT: [u8; 2] = *b"JR";
pub const AGGREGATE: [u8; 2] = *b"AG";
pub const MIN_MAX: [u8; 2] = *b"MM";
pub const AGGREGATE_DISTINCT: [u8; 2] = *b"AD";
pub const DISTINCT: [u8; 2] = *b"DS";
pub const SET_OPERATION: [u8; 2] = *b"SO";
pub const TOP_K: [u8; 2] = *b"TK";
pub const WINDOW: [u8; 2] = *b"WF";
pub const TEMPORAL_FILTER: [u8; 2] = *b"TF";
pub const TEMPORAL_CLOCK: [u8; 2] = *b"TC";
pub const CLOCK_SERIES: [u8; 2] = *b"CS";
pub const SESSION_WINDOW: [u8; 2] = *b"SW";
pub const RECURSION_ROWS: [u8; 2] = *b"RV";
pub const RECURSION_DERIVATIONS: [u8; 2] = *b"RD";
/// An aggregate's groups by the value of the column a watermark bounds,
/// retired once the bound passes it (RFC 0013).
pub const RETIRE_SCHEDULE: [u8; 2] = *b"WS";
/// `EMIT ON WINDOW CLOSE`'s rows of windows still open (RFC 0013).
pub const WINDOW_CLOSE: [u8; 2] = *b"WC";

/// Every kind of operator state: a view's state is these kinds under its
/// operators' ids ([`view_op_prefixes`]). A new kind must be listed here,
/// or a dropped view or a restarted build would leave its keys behind.
pub const OPERATOR_STATE_KINDS: [[u8; 2]; 17] = [
    JOIN_LEFT,
    JOIN_RIGHT,
    AGGREGATE,
    MIN_MAX,
    AGGREGATE_DISTINCT,
    DISTINCT,
    SET_OPERATION,
    TOP_K,
    WINDOW,
    TEMPORAL_FILTER,
    TEMPORAL_CLOCK,
    CLOCK_SERIES,
    SESSION_WINDOW,
    RECURSION_ROWS,
    RECURSION_DERIVATIONS,
    RETIRE_SCHEDULE,
    WINDOW_CLOSE,
];

/// `0x01 kind op_id`: the prefix of all of one operator's state of one kind.
pub fn op_prefix(kind: [u8; 2], op_id: ObjectId) -> Vec<u8> {
    let mut key = Vec::with_capacity(19 + 32);
    key.push(OP_STATE);
    key.extend_from_slice(&kind);
    key.extend_from_slice(&op_id.to_be_bytes());
    key
}

/// The partition key of a stored row: the bytes after its object's prefix
/// (a table row's primary key or hidden row id, a keyed view row's key, a
/// counted view row's whole row, a UNIQUE entry's values), or an index
/// entry's leading value, whose bucket decides the shard that holds it.
/// `None` for other keys: operator state lives on the shard that computes
/// it, and metadata on the coordinator.
pub fn partition_key(key: &[u8]) -> Option<&[u8]> {
    match key.first() {
        Some(&(TABLE_ROWS | OUTPUT | KEYED_OUTPUT)) => key.get(17..),
        Some(&UNIQUE_ENTRIES) => key.get(19..),
        Some(&INDEX_ENTRIES) => {
            let values = key.get(19..)?;
            values.get(..datum_len(values)?)
        }
        _ => None,
    }
}

/// `0x03 view_id`: the prefix of a view's output.
pub fn output_prefix(view_id: ObjectId) -> Vec<u8> {
    object_prefix(OUTPUT, view_id)
}

/// `0x08 view_id`: the prefix of a keyed view's output.
pub fn keyed_output_prefix(view_id: ObjectId) -> Vec<u8> {
    object_prefix(KEYED_OUTPUT, view_id)
}

/// How a collection's rows are stored, which decides how to read them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowStorage {
    /// Table rows under their row key, each once.
    Table,
    /// View output: each distinct row with its multiplicity.
    Counted,
    /// View output: each row under its unique key (these output columns).
    Keyed(Vec<usize>),
}

impl RowStorage {
    /// The layout of a view's output, given its unique key if it has one.
    pub fn of_view(unique_key: Option<&[usize]>) -> RowStorage {
        match unique_key {
            Some(columns) => RowStorage::Keyed(columns.to_vec()),
            None => RowStorage::Counted,
        }
    }

    /// The prefix all of `object_id`'s rows are stored under.
    pub fn prefix(&self, object_id: ObjectId) -> Vec<u8> {
        match self {
            RowStorage::Table => table_prefix(object_id),
            RowStorage::Counted => output_prefix(object_id),
            RowStorage::Keyed(_) => keyed_output_prefix(object_id),
        }
    }

    /// The output column that the storage key starts with, if any: a scan
    /// for one value of it reads only that key range.
    pub fn leading_column(&self, primary_key: &[usize]) -> Option<usize> {
        match self {
            RowStorage::Table => primary_key.first().copied(),
            RowStorage::Counted => Some(0),
            RowStorage::Keyed(columns) => columns.first().copied(),
        }
    }
}

/// `0x07 table_id`: the prefix of a table's rows.
pub fn table_prefix(table_id: ObjectId) -> Vec<u8> {
    object_prefix(TABLE_ROWS, table_id)
}

/// A table row's key among its table's rows, in a transaction's pending
/// changes as in storage: its primary-key values, encoded so that keys
/// sort as the values do.
pub fn table_row_key(primary_key: &[usize], row: &[Datum]) -> Vec<u8> {
    let mut key = Vec::with_capacity(primary_key.len() * 9);
    for column in primary_key {
        encode_datum(&row[*column], &mut key);
    }
    key
}

/// The key of a row of a table without a primary key: a random number,
/// so that equal rows are distinct rows.
pub fn keyless_row_key(random: u128) -> Vec<u8> {
    random.to_be_bytes().to_vec()
}

/// The storage key of table `table_id`'s row keyed `row_key`.
pub fn table_row_storage_key(table_id: ObjectId, row_key: &[u8]) -> Vec<u8> {
    let mut key = table_prefix(table_id);
    key.extend_from_slice(row_key);
    key
}

/// `0x09 table_id`: the prefix of all UNIQUE entries of a table.
pub fn unique_prefix(table_id: ObjectId) -> Vec<u8> {
    object_prefix(UNIQUE_ENTRIES, table_id)
}

/// The key of the entry of UNIQUE constraint `constraint` of table
/// `table_id` for `row` (its `columns`), whose value is the owning row's
/// key; `None` when one of them is NULL: such a row is not constrained.
pub fn unique_entry_key(
    table_id: ObjectId,
    constraint: u16,
    columns: &[usize],
    row: &[Datum],
) -> Option<Vec<u8>> {
    let mut key = unique_prefix(table_id);
    key.extend_from_slice(&constraint.to_be_bytes());
    for column in columns {
        let value = &row[*column];
        if value.is_null() {
            return None;
        }
        encode_datum(value, &mut key);
    }
    Some(key)
}

/// `0x0A table_id`: the prefix of all plain index entries of a table.
pub fn index_prefix(table_id: ObjectId) -> Vec<u8> {
    object_prefix(INDEX_ENTRIES, table_id)
}

/// The prefix of index `index`'s entries whose leading column holds the
/// value encoded as `leading` ([`leading_value_prefix`]): they all live on
/// the shard of `leading`.
pub fn index_value_prefix(table_id: ObjectId, index: u16, leading: &[u8]) -> Vec<u8> {
    let mut key = index_prefix(table_id);
    key.extend_from_slice(&index.to_be_bytes());
    key.extend_from_slice(leading);
    key
}

/// The key of the entry of plain index `index` of table `table_id` for
/// `row` (its `columns`, NULLs included), whose row key is `row_key`.
pub fn index_entry_key(
    table_id: ObjectId,
    index: u16,
    columns: &[usize],
    row: &[Datum],
    row_key: &[u8],
) -> Vec<u8> {
    let mut key = index_prefix(table_id);
    key.extend_from_slice(&index.to_be_bytes());
    for column in columns {
        encode_datum(&row[*column], &mut key);
    }
    key.extend_from_slice(row_key);
    key
}

/// The row key an index entry's key ([`index_entry_key`]) ends with,
/// given the number of the index's columns; `None` if the key is not
/// such an entry.
pub fn index_entry_row_key(entry: &[u8], columns: usize) -> Option<&[u8]> {
    let mut rest = entry.get(19..)?;
    for _ in 0..columns {
        rest = rest.get(datum_len(rest)?..)?;
    }
    Some(rest)
}

/// The prefix of the row keys (within their relation) whose leading key
/// column holds `value` ([`RowStorage::leading_column`]).
pub fn leading_value_prefix(value: &Datum) -> Vec<u8> {
    let mut prefix = Vec::with_capacity(9);
    encode_datum(value, &mut prefix);
    prefix
}

fn object_prefix(space: u8, object_id: ObjectId) -> Vec<u8> {
    let mut key = Vec::with_capacity(17 + 32);
    key.push(space);
    key.extend_from_slice(&object_id.to_be_bytes());
    key
}

/// True for keys whose count is maintained by blind additions (join
/// arrangements, MIN/MAX, top-K and window multisets, view output): their stored value may
/// sum to zero, which means absent.
pub fn holds_count(key: &[u8]) -> bool {
    match key.first() {
        Some(&OUTPUT) => true,
        Some(&OP_STATE) => {
            matches!(key.get(1..3), Some(kind) if kind == JOIN_LEFT || kind == JOIN_RIGHT || kind == MIN_MAX || kind == TOP_K || kind == WINDOW || kind == TEMPORAL_FILTER || kind == WINDOW_CLOSE)
        }
        _ => false,
    }
}

/// Both prefixes a view's output may live under (its layout is fixed when
/// it is created; clearing both needs no catalog).
pub fn view_output_prefixes(view_id: ObjectId) -> [Vec<u8>; 2] {
    [output_prefix(view_id), keyed_output_prefix(view_id)]
}

/// Every prefix under which any operator of the view `view_id` may hold
/// state (for DROP and for restarting a backfill): the view's operator ids
/// share their first 12 bytes ([`rockstream_plan::op_id`]).
pub fn view_op_prefixes(view_id: ObjectId) -> Vec<Vec<u8>> {
    let shared = rockstream_plan::op_id(view_id, 0).to_be_bytes();
    OPERATOR_STATE_KINDS
        .into_iter()
        .map(|kind| {
            let mut prefix = vec![OP_STATE];
            prefix.extend_from_slice(&kind);
            prefix.extend_from_slice(&shared[..12]);
            prefix
        })
        .collect()
}

/// Appends the encoding of `row`'s `order_by` keys, under which entries
/// sort as `ORDER BY` sorts their rows: per key a marker (`0x00` for a
/// NULL sorting first, `0x02` for one sorting last, `0x01` before a value)
/// and the value's encoding, complemented when descending. The encoding
/// is prefix-free, so its complement sorts in the opposite order, and so
/// is the whole: a key of entries that sort equally ends where a longer
/// key would go on.
pub fn push_order_key(row: &[Datum], order_by: &[SortKey], out: &mut Vec<u8>) {
    for sort in order_by {
        let datum = &row[sort.column];
        if datum.is_null() {
            out.push(if sort.nulls_first { 0x00 } else { 0x02 });
            continue;
        }
        out.push(0x01);
        let at = out.len();
        encode_datum(datum, out);
        if sort.descending {
            for byte in &mut out[at..] {
                *byte = !*byte;
            }
        }
    }
}

/// Length of the key's *leading-column prefix*: its key space's fixed
/// header plus the first datum after it (a table's first primary-key
/// column, a view row's first column or first key column, a join key's
/// first column, a group's first column). Storage keeps bloom filters over these prefixes, so a
/// scan for one leading value skips the SSTs that hold none. `None` when
/// the key (or scan prefix) does not reach a whole first datum.
///
/// Depends only on the bytes it returns the length of, as prefix filters
/// require: every key extending a scan prefix has the same leading prefix.
pub fn leading_prefix_len(key: &[u8]) -> Option<usize> {
    let header = match *key.first()? {
        OUTPUT | TABLE_ROWS | KEYED_OUTPUT => 17,
        INDEX_ENTRIES => 19,
        OP_STATE => match key.get(1..3)? {
            kind if kind == MIN_MAX || kind == AGGREGATE_DISTINCT => 21,
            _ => 19,
        },
        _ => return None,
    };
    Some(header + datum_len(key.get(header..)?)?)
}

pub fn format_version_key() -> Vec<u8> {
    vec![SHARD_META, b'F', b'V']
}

pub fn epoch_key() -> Vec<u8> {
    vec![SHARD_META, b'E', b'P']
}

/// The LSN of the last commit-log record applied to the shard (RFC 0019):
/// written in the same batch as the record's writes, so the shard's tables
/// tell which records a replay must apply.
pub fn log_lsn_key() -> Vec<u8> {
    vec![SHARD_META, b'L', b'N']
}

/// The coordinator's record of the last catalog transaction that
/// committed: its id (RFC 0002).
pub fn ddl_transaction_key() -> Vec<u8> {
    vec![SHARD_META, b'D', b'T']
}

/// `0x06 'W' 'M'`: the coordinator's records of watermarked tables'
/// watermarks and late rows (RFC 0013).
pub fn watermarks_prefix() -> Vec<u8> {
    vec![SHARD_META, b'W', b'M']
}

/// `0x06 'W' 'M' table_id`: one table's watermark record.
pub fn watermark_key(table_id: ObjectId) -> Vec<u8> {
    let mut key = watermarks_prefix();
    key.extend_from_slice(&table_id.to_be_bytes());
    key
}

/// Prefix of the input pending for a failed view.
pub fn pending_prefix(view_id: ObjectId) -> Vec<u8> {
    let mut key = vec![SHARD_META, b'P', b'D'];
    key.extend_from_slice(&view_id.to_be_bytes());
    key
}

/// `0x0B transaction`: every row a large transaction staged (RFC 0007).
pub fn staged_prefix(transaction: u64) -> Vec<u8> {
    let mut key = vec![STAGED_ROWS];
    key.extend_from_slice(&transaction.to_be_bytes());
    key
}

/// `0x0B transaction segment`: the rows of one of a transaction's staged
/// segments, by row key.
pub fn staged_segment_prefix(transaction: u64, segment: u32) -> Vec<u8> {
    let mut key = staged_prefix(transaction);
    key.extend_from_slice(&segment.to_be_bytes());
    key
}

/// `0x06 'S' 'C' transaction`: a staged commit under way.
pub fn staged_commit_marker(transaction: u64) -> Vec<u8> {
    let mut key = staged_commit_marker_prefix();
    key.extend_from_slice(&transaction.to_be_bytes());
    key
}

/// The prefix of every staged-commit marker.
pub fn staged_commit_marker_prefix() -> Vec<u8> {
    vec![SHARD_META, b'S', b'C']
}

pub fn encode_weight(weight: i64) -> Vec<u8> {
    weight.to_be_bytes().to_vec()
}

pub fn decode_weight(bytes: &[u8]) -> i64 {
    let mut array = [0u8; 8];
    let length = bytes.len().min(8);
    array[..length].copy_from_slice(&bytes[..length]);
    i64::from_be_bytes(array)
}

#[cfg(test)]
mod tests {
    //! Goal: the leading-column prefix is the header plus the first datum,
    //! and scan prefixes short of a whole datum have none.
    use super::*;
    use rockstream_types::encoding::encode_row_into;
    use rockstream_types::Datum;

    #[test]
    fn leading_prefix_is_header_and_first_datum() {
        let id: ObjectId = 7;
        let mut key = table_prefix(id);
        assert_eq!(leading_prefix_len(&key), None, "whole-table scan");
        encode_row_into(&[Datum::Text("ab".into()), Datum::Int64(3)], &mut key);
        assert_eq!(leading_prefix_len(&key), Some(17 + 1 + 2 + 2));
        assert_eq!(leading_prefix_len(&key[..17 + 3]), None, "cut text");

        let mut multiset = op_prefix(MIN_MAX, id);
        multiset.extend_from_slice(&[0, 1]);
        encode_row_into(&[Datum::Int32(5), Datum::Null], &mut multiset);
        assert_eq!(leading_prefix_len(&multiset), Some(21 + 5));

        let global_group = op_prefix(AGGREGATE, id);
        assert_eq!(leading_prefix_len(&global_group), None);
        assert_eq!(leading_prefix_len(&epoch_key()), None);
        assert!(holds_count(&output_prefix(id)));
        assert!(!holds_count(&keyed_output_prefix(id)));
        assert!(!holds_count(&table_prefix(id)));
        assert!(!holds_count(&global_group));
    }

    #[test]
    fn an_index_entry_is_placed_by_its_leading_value_and_ends_with_its_row_key() {
        let row = [Datum::Text("x".into()), Datum::Null, Datum::Int64(9)];
        let row_key = table_row_key(&[2], &row);
        let entry = index_entry_key(5, 3, &[0, 1], &row, &row_key);
        let leading = leading_value_prefix(&row[0]);
        assert!(entry.starts_with(&index_value_prefix(5, 3, &leading)));
        assert_eq!(partition_key(&entry), Some(leading.as_slice()));
        assert_eq!(index_entry_row_key(&entry, 2), Some(row_key.as_slice()));
        assert_eq!(leading_prefix_len(&entry), Some(19 + leading.len()));
        // Another row with the same values has another entry.
        let other = index_entry_key(5, 3, &[0, 1], &row, &[1]);
        assert_ne!(other, entry);
        assert_eq!(partition_key(&other), partition_key(&entry));
    }

    #[test]
    fn a_views_op_prefixes_cover_its_operators_and_no_other_views() {
        let view = 41;
        let prefixes = view_op_prefixes(view);
        for n in [1, 2, 7, u32::MAX] {
            for kind in OPERATOR_STATE_KINDS {
                let own = op_prefix(kind, rockstream_plan::op_id(view, n));
                assert!(prefixes.iter().any(|prefix| own.starts_with(prefix)));
                let other = op_prefix(kind, rockstream_plan::op_id(view + 1, n));
                assert!(!prefixes.iter().any(|prefix| other.starts_with(prefix)));
            }
        }
    }
}
