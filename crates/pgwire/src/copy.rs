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

/// The most COPY data held unparsed for one `COPY ... FROM STDIN`: the
/// longest row (1 GiB, like PostgreSQL's `MaxAllocSize` for a single
/// value). Complete rows leave the buffer as they arrive.
pub const COPY_BUFFER_BYTES_MAX: usize = 1 << 30;

/// COPY data is parsed and handed to the backend in parts of about this
/// many bytes, so a stream is never held whole.
pub const COPY_PART_BYTES: usize = 256 << 10;

/// One row of COPY data: each field NULL or its text.
pub type CopyRow = Vec<Option<String>>;

/// The rows a [`CopyParser::parse`] call took, and the bytes they were.
pub type ParsedPart = (Vec<CopyRow>, usize);

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
    let (rows, _) = CopyParser::new(target)?.parse(data, true)?;
    Ok(rows)
}

/// Reads a COPY stream part by part as it arrives: each call takes the
/// complete rows at the front of the data not yet taken and says how many
/// bytes they were; the caller keeps the rest and calls again with more.
/// The same rows come out whatever the parts (`copy_tests` checks every
/// split).
pub struct CopyParser {
    target: CopyTarget,
    /// Rows (lines) read so far, header included: errors name the line.
    line: usize,
    /// The binary header has been read.
    header_read: bool,
    /// The end marker (`\.`) or the binary trailer has been read.
    ended: bool,
}

impl CopyParser {
    /// A parser for `target`'s stream; an error for impossible options.
    pub fn new(target: &CopyTarget) -> Result<CopyParser, RsError> {
        validate_options(target)?;
        Ok(CopyParser {
            target: target.clone(),
            line: 0,
            header_read: false,
            ended: false,
        })
    }

    /// The complete rows at the front of `data` and the bytes they took.
    /// `last`: nothing follows `data` (a row may end without its newline,
    /// and an incomplete one is an error rather than a wait for more).
    pub fn parse(&mut self, data: &[u8], last: bool) -> Result<ParsedPart, RsError> {
        if self.ended {
            return Ok((Vec::new(), self.after_end(data)?));
        }
        let (records, taken) = match self.target.format {
            CopyFormat::Text => self.text_records(data, last)?,
            CopyFormat::Csv => self.csv_records(data, last)?,
            CopyFormat::Binary => return self.binary_rows(data, last),
        };
        let rows = records
            .into_iter()
            .map(|record| finish_record(record, &self.target))
            .collect::<Result<_, _>>()?;
        Ok((rows, taken))
    }

    /// Data after the end: ignored after a text or CSV end marker (as
    /// before it was split into parts), an error after the binary trailer.
    fn after_end(&self, data: &[u8]) -> Result<usize, RsError> {
        if self.target.format == CopyFormat::Binary && !data.is_empty() {
            return Err(malformed(
                &self.target,
                self.line + 1,
                "extra data after the COPY trailer",
            ));
        }
        Ok(data.len())
    }

    fn text_records(&mut self, data: &[u8], last: bool) -> Result<(Vec<Record>, usize), RsError> {
        let mut records = Vec::new();
        let mut position = 0;
        while position < data.len() {
            let (raw_fields, next, terminated) =
                split_text_line(data, position, self.target.delimiter);
            if !last && !complete_line(data, next, terminated) {
                break;
            }
            self.line += 1;
            if is_end_marker(data, position) {
                self.ended = true;
                return Ok((records, data.len()));
            }
            let start = position;
            position = next;
            if self.line == 1 && self.target.header {
                continue;
            }
            let fields = raw_fields
                .into_iter()
                .map(|raw| text_field(raw, &self.target, self.line))
                .collect::<Result<_, _>>()?;
            debug_assert!(position > start);
            records.push(Record {
                line: self.line,
                fields,
            });
        }
        Ok((records, position))
    }

    fn csv_records(&mut self, data: &[u8], last: bool) -> Result<(Vec<Record>, usize), RsError> {
        let mut records = Vec::new();
        let mut position = 0;
        while position < data.len() {
            let mut reader = CsvRecordReader::new(&self.target);
            let read = reader.read(data, position);
            let complete = read
                .is_some_and(|(next, terminated)| last || complete_line(data, next, terminated));
            if !complete && !last {
                break;
            }
            self.line += 1;
            if is_end_marker(data, position) {
                self.ended = true;
                return Ok((records, data.len()));
            }
            let (next, _) = read.ok_or_else(|| {
                malformed(&self.target, self.line, "unterminated CSV quoted field")
            })?;
            position = next;
            if self.line == 1 && self.target.header {
                continue;
            }
            records.push(Record {
                line: self.line,
                fields: reader.fields,
            });
        }
        Ok((records, position))
    }

    /// Rows of PostgreSQL's binary COPY format: the signature, flags and a
    /// header extension (skipped), then per row a field count and each
    /// field's length (-1: NULL) and bytes, up to the trailer (a count of
    /// -1). Each field is read as its column's type and becomes its text
    /// form.
    fn binary_rows(&mut self, data: &[u8], last: bool) -> Result<ParsedPart, RsError> {
        let mut reader = BinaryReader { data, position: 0 };
        let eof = |parser: &CopyParser| {
            malformed(
                &parser.target,
                parser.line + 1,
                "unexpected EOF in COPY data",
            )
        };
        if !self.header_read {
            match self.binary_header(&mut reader) {
                Ok(()) => self.header_read = true,
                Err(None) if !last => return Ok((Vec::new(), 0)),
                Err(None) => {
                    return Err(malformed(
                        &self.target,
                        1,
                        "COPY file signature not recognized",
                    ))
                }
                Err(Some(error)) => return Err(error),
            }
        }
        let types: Vec<Type> = self.target.column_types.iter().map(pg_type).collect();
        let mut rows = Vec::new();
        loop {
            let start = reader.position;
            // The data may end where a row would start, without the
            // trailer (PostgreSQL accepts that too).
            if start == data.len() {
                return Ok((rows, start));
            }
            match self.binary_row(&mut reader, &types) {
                Ok(Some(row)) => {
                    self.line += 1;
                    rows.push(row);
                }
                Ok(None) => {
                    self.ended = true;
                    self.after_end(&data[reader.position..])?;
                    return Ok((rows, data.len()));
                }
                Err(None) if !last => return Ok((rows, start)),
                Err(None) => return Err(eof(self)),
                Err(Some(error)) => return Err(error),
            }
        }
    }

    /// Reads the binary header; `Err(None)` when the data ends inside it.
    fn binary_header(&self, reader: &mut BinaryReader<'_>) -> Result<(), Option<RsError>> {
        let fail = |problem: &str| Some(malformed(&self.target, 1, problem));
        let signature = reader.take(BINARY_SIGNATURE.len()).ok_or(None)?;
        if signature != &BINARY_SIGNATURE[..] {
            return Err(fail("COPY file signature not recognized"));
        }
        let flags = reader.u32().ok_or(None)?;
        if flags & BINARY_HAS_OIDS != 0 || flags & BINARY_CRITICAL_FLAGS != 0 {
            return Err(fail("unrecognized critical flags in COPY file header"));
        }
        // The header extension: nothing in it is meant for this reader.
        let length = reader.u32().ok_or(None)?;
        reader.take(length as usize).ok_or(None)?;
        Ok(())
    }

    /// Reads one binary row: `Ok(None)` at the trailer, `Err(None)` when
    /// the data ends inside the row.
    fn binary_row(
        &self,
        reader: &mut BinaryReader<'_>,
        types: &[Type],
    ) -> Result<Option<Vec<Option<String>>>, Option<RsError>> {
        let row = self.line + 1;
        let fail = |problem: String| Some(malformed(&self.target, row, problem));
        let count = reader.u16().ok_or(None)? as i16;
        if count == -1 {
            return Ok(None);
        }
        if usize::try_from(count).ok() != Some(types.len()) {
            return Err(fail(format!(
                "row field count is {count}, expected {}",
                types.len()
            )));
        }
        let mut fields = Vec::with_capacity(types.len());
        for (column, pg_type) in types.iter().enumerate() {
            let length = reader.u32().ok_or(None)? as i32;
            if length == -1 {
                fields.push(None);
                continue;
            }
            let length = usize::try_from(length)
                .map_err(|_| fail(format!("invalid field length {length}")))?;
            let bytes = reader.take(length).ok_or(None)?;
            let name = self.target.columns.get(column).map_or("?", String::as_str);
            let text = binary_text(bytes, pg_type).map_err(|problem| {
                fail(match problem {
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
                })
            })?;
            fields.push(Some(text));
        }
        Ok(Some(fields))
    }
}

/// Whether a line or record read up to `next` is certainly whole when more
/// data may follow: it ended with its terminator, and that terminator is
/// not a `\r` at the very end (the `\r` of a `\r\n` whose `\n` is yet to
/// come). Any byte a line's reading looked ahead at lies before its
/// terminator, so a whole line reads the same whatever follows it.
fn complete_line(data: &[u8], next: usize, terminated: bool) -> bool {
    terminated && !(next == data.len() && data[next - 1] == b'\r')
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

/// Splits the line at `start` into raw fields (escapes kept); returns them,
/// the position after the line terminator and whether there was one (the
/// data may end first).
fn split_text_line(data: &[u8], start: usize, delimiter: u8) -> (Vec<&[u8]>, usize, bool) {
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
            return (fields, position + newline, true);
        }
        if byte == delimiter {
            fields.push(&data[field_start..position]);
            field_start = position + 1;
        }
        position += 1;
    }
    fields.push(&data[field_start..]);
    (fields, data.len(), false)
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

    /// Reads the record at `start`; returns the position after it and
    /// whether it ended with a line terminator (rather than with the data),
    /// or `None` when the data ends inside quotes.
    fn read(&mut self, data: &[u8], start: usize) -> Option<(usize, bool)> {
        let mut position = start;
        while position < data.len() {
            let byte = data[position];
            let newline = newline_length(data, position);
            if newline > 0 {
                self.end_field();
                return Some((position + newline, true));
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
        Some((data.len(), false))
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
