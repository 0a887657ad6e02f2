//! The `COPY ... FROM STDIN` data parser (text and CSV formats).
//!
//! Input is the whole buffered COPY stream; output is one `Vec<Option<String>>`
//! per data row (`None` = NULL), ready for `Backend::copy_in`. The rules are
//! PostgreSQL's (`copyfromparse.c`):
//!
//! Text format: one row per line (`\n`, `\r\n` or `\r`), fields separated by
//! the delimiter (tab by default). A field whose *raw* text equals the null
//! string (`\N`) is NULL. Backslash escapes: `\b \f \n \r \t \v`, `\\`,
//! one to three octal digits, `\x` with one or two hex digits; a backslash
//! before any other byte (the delimiter, a newline, ...) yields that byte. A
//! line holding only `\.` ends the data.
//!
//! CSV format: fields separated by the delimiter (`,`), optionally quoted
//! (`"`); inside quotes the delimiter and newlines are data and the escape
//! byte (`"` by default) before a quote or escape byte yields that byte. An
//! *unquoted* field equal to the null string (empty by default) is NULL; a
//! quoted empty field is the empty string. A line holding only `\.` ends the
//! data.
//!
//! Both: `header` skips the first line; when the target names its columns,
//! every row must have exactly that many fields; fields must be UTF-8. Every
//! failure is a `COPY_MALFORMED` error naming the line (rows count from 1,
//! header included, as in PostgreSQL's `COPY t, line N` context).

use rockstream_types::{codes, RsError};

use pgwire::api::Type;

use crate::params::{binary_text, BinaryProblem};
use crate::types::pg_type;
use crate::{CopyFormat, CopyTarget};

/// The most COPY data buffered for one `COPY ... FROM STDIN` (1 GiB, like
/// PostgreSQL's `MaxAllocSize` for a single value).
pub const COPY_BUFFER_BYTES_MAX: usize = 1 << 30;

/// One parsed row before UTF-8 validation.
struct Record {
    line: usize,
    fields: Vec<Option<Vec<u8>>>,
}

/// Parses a complete COPY stream into rows.
pub fn parse_copy_data(
    data: &[u8],
    target: &CopyTarget,
) -> Result<Vec<Vec<Option<String>>>, RsError> {
    validate_options(target)?;
    let records = match target.format {
        CopyFormat::Text => text_records(data, target)?,
        CopyFormat::Csv => csv_records(data, target)?,
        CopyFormat::Binary => return binary_rows(data, target),
    };
    records
        .into_iter()
        .map(|record| finish_record(record, target))
        .collect()
}

fn malformed(target: &CopyTarget, line: usize, problem: impl std::fmt::Display) -> RsError {
    RsError::new(
        &codes::COPY_MALFORMED,
        format!("COPY {}, line {line}: {problem}", target.table),
    )
}

fn validate_options(target: &CopyTarget) -> Result<(), RsError> {
    let invalid = |problem: &str| {
        RsError::new(
            &codes::COPY_MALFORMED,
            format!("COPY {}: {problem}", target.table),
        )
    };
    if matches!(target.delimiter, b'\\' | b'\n' | b'\r') {
        return Err(invalid(
            "COPY delimiter cannot be newline, carriage return or backslash",
        ));
    }
    if target.format == CopyFormat::Csv && target.quote == target.delimiter {
        return Err(invalid("COPY delimiter and quote must be different"));
    }
    Ok(())
}

/// Checks the field count against the target columns and decodes UTF-8.
fn finish_record(record: Record, target: &CopyTarget) -> Result<Vec<Option<String>>, RsError> {
    let expected = target.columns.len();
    let found = record.fields.len();
    if expected > 0 && found < expected {
        let column = &target.columns[found];
        return Err(malformed(
            target,
            record.line,
            format!("missing data for column \"{column}\""),
        ));
    }
    if expected > 0 && found > expected {
        return Err(malformed(
            target,
            record.line,
            "extra data after last expected column",
        ));
    }
    record
        .fields
        .into_iter()
        .map(|field| {
            field
                .map(|bytes| {
                    String::from_utf8(bytes).map_err(|_| {
                        malformed(
                            target,
                            record.line,
                            "invalid byte sequence for encoding \"UTF8\"",
                        )
                    })
                })
                .transpose()
        })
        .collect()
}

/// PostgreSQL's binary COPY signature, the first bytes of the data.
const BINARY_SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";
/// The flags bit saying each row starts with an oid (refused: no oids).
const BINARY_HAS_OIDS: u32 = 1 << 16;
/// Flags bits a reader must understand (16 to 31).
const BINARY_CRITICAL_FLAGS: u32 = 0xffff_0000;

/// Rows of PostgreSQL's binary COPY format: the signature, flags and a
/// header extension (skipped), then per row a field count and each field's
/// length (-1: NULL) and bytes, up to the trailer (a count of -1). Each
/// field is read as its column's type and becomes its text form.
fn binary_rows(data: &[u8], target: &CopyTarget) -> Result<Vec<Vec<Option<String>>>, RsError> {
    let mut reader = BinaryReader { data, position: 0 };
    let fail = |row: usize, problem: String| malformed(target, row, problem);
    if reader.take(BINARY_SIGNATURE.len()) != Some(&BINARY_SIGNATURE[..]) {
        return Err(fail(1, "COPY file signature not recognized".into()));
    }
    let flags = reader
        .u32()
        .ok_or_else(|| fail(1, "invalid COPY file header (missing flags)".into()))?;
    if flags & BINARY_HAS_OIDS != 0 || flags & BINARY_CRITICAL_FLAGS != 0 {
        return Err(fail(
            1,
            "unrecognized critical flags in COPY file header".into(),
        ));
    }
    // The header extension: nothing in it is meant for this reader.
    reader
        .u32()
        .and_then(|length| reader.take(length as usize))
        .ok_or_else(|| fail(1, "invalid COPY file header (missing length)".into()))?;
    let types: Vec<Type> = target.column_types.iter().map(pg_type).collect();
    let mut rows = Vec::new();
    loop {
        let row = rows.len() + 1;
        // The data may end where a row would start, without the trailer
        // (PostgreSQL accepts that too).
        if reader.position == data.len() {
            return Ok(rows);
        }
        let count = reader
            .u16()
            .ok_or_else(|| fail(row, "unexpected EOF in COPY data".into()))?
            as i16;
        if count == -1 {
            break;
        }
        if usize::try_from(count).ok() != Some(types.len()) {
            return Err(fail(
                row,
                format!("row field count is {count}, expected {}", types.len()),
            ));
        }
        let mut fields = Vec::with_capacity(types.len());
        for (column, pg_type) in types.iter().enumerate() {
            let length = reader
                .u32()
                .ok_or_else(|| fail(row, "unexpected EOF in COPY data".into()))?
                as i32;
            if length == -1 {
                fields.push(None);
                continue;
            }
            let bytes = usize::try_from(length)
                .ok()
                .and_then(|length| reader.take(length))
                .ok_or_else(|| fail(row, "unexpected EOF in COPY data".into()))?;
            let name = target.columns.get(column).map_or("?", String::as_str);
            let text = binary_text(bytes, pg_type).map_err(|problem| {
                let problem = match problem {
                    BinaryProblem::Unsupported => format!(
                        "column \"{name}\": binary format of type {} is not supported",
                        pg_type.name()
                    ),
                    BinaryProblem::NotUtf8 => {
                        format!("column \"{name}\": invalid byte sequence for encoding \"UTF8\"")
                    }
                    BinaryProblem::Malformed => {
                        format!("column \"{name}\": incorrect binary data format")
                    }
                };
                fail(row, problem)
            })?;
            fields.push(Some(text));
        }
        rows.push(fields);
    }
    if reader.position != data.len() {
        return Err(fail(
            rows.len() + 1,
            "extra data after the COPY trailer".into(),
        ));
    }
    Ok(rows)
}

/// Reads binary COPY data front to back.
struct BinaryReader<'a> {
    data: &'a [u8],
    position: usize,
}

impl<'a> BinaryReader<'a> {
    fn take(&mut self, length: usize) -> Option<&'a [u8]> {
        let end = self.position.checked_add(length)?;
        let bytes = self.data.get(self.position..end)?;
        self.position = end;
        Some(bytes)
    }

    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
}

/// The length of the line terminator at `position` (0 when there is none).
fn newline_length(data: &[u8], position: usize) -> usize {
    match (data.get(position), data.get(position + 1)) {
        (Some(b'\r'), Some(b'\n')) => 2,
        (Some(b'\n' | b'\r'), _) => 1,
        _ => 0,
    }
}

/// Whether a line starting at `position` is exactly the end marker `\.`.
fn is_end_marker(data: &[u8], position: usize) -> bool {
    data[position..].starts_with(b"\\.")
        && (position + 2 == data.len() || newline_length(data, position + 2) > 0)
}

fn text_records(data: &[u8], target: &CopyTarget) -> Result<Vec<Record>, RsError> {
    let mut records = Vec::new();
    let mut position = 0;
    let mut line = 0;
    while position < data.len() {
        line += 1;
        if is_end_marker(data, position) {
            break;
        }
        let (raw_fields, next) = split_text_line(data, position, target.delimiter);
        position = next;
        if line == 1 && target.header {
            continue;
        }
        let fields = raw_fields
            .into_iter()
            .map(|raw| text_field(raw, target, line))
            .collect::<Result<_, _>>()?;
        records.push(Record { line, fields });
    }
    Ok(records)
}

/// Splits the line at `start` into raw fields (escapes kept); returns them and
/// the position after the line terminator.
fn split_text_line(data: &[u8], start: usize, delimiter: u8) -> (Vec<&[u8]>, usize) {
    let mut fields = Vec::new();
    let mut field_start = start;
    let mut position = start;
    while position < data.len() {
        let byte = data[position];
        if byte == b'\\' {
            position = (position + 2).min(data.len());
            continue;
        }
        let newline = newline_length(data, position);
        if newline > 0 {
            fields.push(&data[field_start..position]);
            return (fields, position + newline);
        }
        if byte == delimiter {
            fields.push(&data[field_start..position]);
            field_start = position + 1;
        }
        position += 1;
    }
    fields.push(&data[field_start..]);
    (fields, data.len())
}

fn text_field(raw: &[u8], target: &CopyTarget, line: usize) -> Result<Option<Vec<u8>>, RsError> {
    if raw == target.null_string.as_bytes() {
        return Ok(None);
    }
    unescape_text(raw)
        .map(Some)
        .ok_or_else(|| malformed(target, line, "unterminated backslash escape at end of line"))
}

/// Resolves text-format backslash escapes; `None` for a trailing lone backslash.
fn unescape_text(raw: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(raw.len());
    let mut position = 0;
    while position < raw.len() {
        let byte = raw[position];
        position += 1;
        if byte != b'\\' {
            out.push(byte);
            continue;
        }
        let escaped = *raw.get(position)?;
        position += 1;
        let value = match escaped {
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'v' => 0x0b,
            b'0'..=b'7' => radix_escape(raw, &mut position, escaped, 8, 2),
            b'x' if raw.get(position).is_some_and(u8::is_ascii_hexdigit) => {
                let first = raw[position];
                position += 1;
                radix_escape(raw, &mut position, first, 16, 1)
            }
            other => other,
        };
        out.push(value);
    }
    Some(out)
}

/// An octal or hex escape: `first` plus up to `more` digits of `radix`; the
/// byte keeps the low eight bits, as PostgreSQL does.
fn radix_escape(raw: &[u8], position: &mut usize, first: u8, radix: u32, more: usize) -> u8 {
    let digit = |byte: u8| char::from(byte).to_digit(radix);
    let mut value = digit(first).unwrap_or(0);
    for _ in 0..more {
        match raw.get(*position).and_then(|byte| digit(*byte)) {
            Some(next) => {
                value = value * radix + next;
                *position += 1;
            }
            None => break,
        }
    }
    (value & 0xff) as u8
}

fn csv_records(data: &[u8], target: &CopyTarget) -> Result<Vec<Record>, RsError> {
    let mut records = Vec::new();
    let mut position = 0;
    let mut line = 0;
    while position < data.len() {
        line += 1;
        if is_end_marker(data, position) {
            break;
        }
        let mut reader = CsvRecordReader::new(target);
        position = reader
            .read(data, position)
            .ok_or_else(|| malformed(target, line, "unterminated CSV quoted field"))?;
        if line == 1 && target.header {
            continue;
        }
        records.push(Record {
            line,
            fields: reader.fields,
        });
    }
    Ok(records)
}

/// Reads one CSV record, field by field.
struct CsvRecordReader<'a> {
    target: &'a CopyTarget,
    fields: Vec<Option<Vec<u8>>>,
    field: Vec<u8>,
    saw_quote: bool,
}

impl<'a> CsvRecordReader<'a> {
    fn new(target: &'a CopyTarget) -> Self {
        CsvRecordReader {
            target,
            fields: Vec::new(),
            field: Vec::new(),
            saw_quote: false,
        }
    }

    /// Reads the record at `start`; returns the position after it, or `None`
    /// when the data ends inside quotes.
    fn read(&mut self, data: &[u8], start: usize) -> Option<usize> {
        let mut position = start;
        while position < data.len() {
            let byte = data[position];
            let newline = newline_length(data, position);
            if newline > 0 {
                self.end_field();
                return Some(position + newline);
            }
            if byte == self.target.delimiter {
                self.end_field();
            } else if byte == self.target.quote {
                self.saw_quote = true;
                position = self.read_quoted(data, position + 1)?;
                continue;
            } else {
                self.field.push(byte);
            }
            position += 1;
        }
        self.end_field();
        Some(data.len())
    }

    /// Reads quoted content starting after the opening quote; returns the
    /// position after the closing quote.
    fn read_quoted(&mut self, data: &[u8], start: usize) -> Option<usize> {
        let (quote, escape) = (self.target.quote, self.target.escape);
        let mut position = start;
        while position < data.len() {
            let byte = data[position];
            let next = data.get(position + 1).copied();
            if byte == escape && (next == Some(quote) || next == Some(escape)) {
                self.field.extend(next);
                position += 2;
            } else if byte == quote {
                return Some(position + 1);
            } else {
                self.field.push(byte);
                position += 1;
            }
        }
        None
    }

    fn end_field(&mut self) {
        let field = std::mem::take(&mut self.field);
        let is_null = !self.saw_quote && field == self.target.null_string.as_bytes();
        self.fields.push(if is_null { None } else { Some(field) });
        self.saw_quote = false;
    }
}

#[cfg(test)]
#[path = "copy_tests.rs"]
mod tests;
