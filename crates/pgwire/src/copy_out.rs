//! `COPY ... TO STDOUT`: rows written as PostgreSQL writes them in its text
//! and CSV formats, one line per row.
//!
//! Text: values separated by the delimiter, NULL as the NULL string (`\N`),
//! backslash, newline, carriage return, tab and the delimiter escaped with
//! a backslash (PostgreSQL's `CopyAttributeOutText`). CSV: NULL as the NULL
//! string (empty), a value quoted when it holds the delimiter, the quote, a
//! newline or a carriage return, or would read as NULL, with quote and
//! escape characters inside doubled by the escape (`CopyAttributeOutCSV`).

use bytes::Bytes;
use datafusion::arrow::datatypes::Schema;
use datafusion::arrow::record_batch::RecordBatch;
use rockstream_types::{codes, RsError};

use crate::encode::for_each_text_row;
use crate::{CopyFormat, CopyTarget};

/// The lines `COPY ... TO` sends for these rows, each ending in a newline
/// and each its own CopyData message, as in PostgreSQL: first the column
/// names when a header is asked for. (`pgwire` tags the result `COPY n`
/// with one row per message, so a header counts as a row there.)
pub(crate) fn copy_out_lines(
    target: &CopyTarget,
    schema: &Schema,
    batches: &[RecordBatch],
) -> Result<Vec<Bytes>, RsError> {
    if target.format == CopyFormat::Binary {
        return Err(RsError::new(
            &codes::UNSUPPORTED_STATEMENT,
            "COPY ... TO in the binary format is not supported; use the text or CSV format",
        ));
    }
    let single = schema.fields().len() == 1;
    let mut lines: Vec<Vec<u8>> = Vec::new();
    for_each_text_row(batches, |values| {
        let mut line = Vec::new();
        write_line(
            target,
            values.iter().map(Option::as_deref),
            single,
            &mut line,
        );
        lines.push(line);
        Ok(())
    })?;
    if target.header {
        let names = schema
            .fields()
            .iter()
            .map(|field| Some(field.name().as_str()));
        let mut header = Vec::new();
        write_line(target, names, single, &mut header);
        lines.insert(0, header);
    }
    Ok(lines.into_iter().map(Bytes::from).collect())
}

/// One line; `single`: the rows have one column.
fn write_line<'a>(
    target: &CopyTarget,
    values: impl Iterator<Item = Option<&'a str>>,
    single: bool,
    out: &mut Vec<u8>,
) {
    for (index, value) in values.enumerate() {
        if index > 0 {
            out.push(target.delimiter);
        }
        match (value, target.format) {
            (None, _) => out.extend_from_slice(target.null_string.as_bytes()),
            (Some(value), CopyFormat::Text | CopyFormat::Binary) => {
                write_text_value(target, value, out)
            }
            (Some(value), CopyFormat::Csv) => write_csv_value(target, value, single, out),
        }
    }
    out.push(b'\n');
}

fn write_text_value(target: &CopyTarget, value: &str, out: &mut Vec<u8>) {
    for &byte in value.as_bytes() {
        let escaped = match byte {
            b'\\' => Some(b'\\'),
            b'\n' => Some(b'n'),
            b'\r' => Some(b'r'),
            b'\t' => Some(b't'),
            0x08 => Some(b'b'),
            0x0c => Some(b'f'),
            0x0b => Some(b'v'),
            byte if byte == target.delimiter => Some(byte),
            _ => None,
        };
        match escaped {
            Some(escaped) => out.extend_from_slice(&[b'\\', escaped]),
            None => out.push(byte),
        }
    }
}

fn write_csv_value(target: &CopyTarget, value: &str, single: bool, out: &mut Vec<u8>) {
    let bytes = value.as_bytes();
    let quote = value == target.null_string
        || bytes.iter().any(|&byte| {
            byte == target.delimiter || byte == target.quote || byte == b'\n' || byte == b'\r'
        })
        // A line of just `\.` would read as the end of the data.
        || (single && value == "\\.");
    if !quote {
        out.extend_from_slice(bytes);
        return;
    }
    out.push(target.quote);
    for &byte in bytes {
        if byte == target.quote || byte == target.escape {
            out.push(target.escape);
        }
        out.push(byte);
    }
    out.push(target.quote);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    //! Goal: lines as PostgreSQL 15's `COPY ... TO STDOUT` writes them.
    use super::*;
    use datafusion::arrow::array::{ArrayRef, Int32Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field};
    use std::sync::Arc;

    fn rows() -> (Arc<Schema>, RecordBatch) {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int32, true),
            Field::new("note", DataType::Utf8, true),
        ]));
        let ids: ArrayRef = Arc::new(Int32Array::from(vec![Some(1), Some(2), None, Some(4)]));
        let notes: ArrayRef = Arc::new(StringArray::from(vec![
            Some("tab\there, back\\slash"),
            None,
            Some(""),
            Some("say \"hi\", ok\nnext"),
        ]));
        let batch = RecordBatch::try_new(schema.clone(), vec![ids, notes]).unwrap();
        (schema, batch)
    }

    fn lines(target: &CopyTarget) -> String {
        let (schema, batch) = rows();
        let lines = copy_out_lines(target, &schema, &[batch]).unwrap();
        lines
            .iter()
            .map(|line| String::from_utf8(line.to_vec()).unwrap())
            .collect()
    }

    #[test]
    fn text_format_escapes_as_postgresql() {
        let target = CopyTarget::text("t", vec![]);
        assert_eq!(
            lines(&target),
            "1\ttab\\there, back\\\\slash\n2\t\\N\n\\N\t\n4\tsay \"hi\", ok\\nnext\n"
        );
    }

    #[test]
    fn csv_format_quotes_as_postgresql() {
        let mut target = CopyTarget::csv("t", vec![]);
        target.header = true;
        assert_eq!(
            lines(&target),
            "id,note\n1,\"tab\there, back\\slash\"\n2,\n,\"\"\n4,\"say \"\"hi\"\", ok\nnext\"\n"
        );
    }

    #[test]
    fn each_line_is_its_own_message_the_header_first() {
        let mut target = CopyTarget::csv("t", vec![]);
        target.header = true;
        let (schema, batch) = rows();
        let lines = copy_out_lines(&target, &schema, &[batch]).unwrap();
        assert_eq!(lines.len(), 5);
        assert_eq!(lines[0], Bytes::from("id,note\n"));
        assert_eq!(lines[2], Bytes::from("2,\n"));
        let empty = copy_out_lines(&target, &schema, &[]).unwrap();
        assert_eq!(empty, vec![Bytes::from("id,note\n")]);
    }
}
