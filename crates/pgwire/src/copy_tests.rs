//! Goal: the COPY parser reads exactly what PostgreSQL's COPY FROM reads, for
//! the streams psql's `\copy` and CSV files produce, and rejects malformed
//! data with a COPY_MALFORMED error naming the line.
#![allow(clippy::unwrap_used)] // Tests may unwrap: a panic is the failure report.
use super::*;

fn columns(count: usize) -> Vec<String> {
    (1..=count).map(|index| format!("c{index}")).collect()
}

fn text(count: usize) -> CopyTarget {
    CopyTarget::text("t", columns(count))
}

fn csv(count: usize) -> CopyTarget {
    CopyTarget::csv("t", columns(count))
}

fn row(fields: &[Option<&str>]) -> Vec<Option<String>> {
    fields
        .iter()
        .map(|field| field.map(str::to_owned))
        .collect()
}

fn parse(data: &str, target: &CopyTarget) -> Vec<Vec<Option<String>>> {
    let whole = parse_copy_data(data.as_bytes(), target).unwrap();
    for (parts, rows) in split_parses(data.as_bytes(), target) {
        assert_eq!(rows.unwrap(), whole, "{data:?} in parts {parts:?}");
    }
    whole
}

fn parse_error(data: &[u8], target: &CopyTarget) -> RsError {
    let whole = parse_copy_data(data, target).unwrap_err();
    for (parts, rows) in split_parses(data, target) {
        let error = rows.unwrap_err();
        assert_eq!(
            error.code.sqlstate, whole.code.sqlstate,
            "in parts {parts:?}"
        );
        assert_eq!(error.message, whole.message, "in parts {parts:?}");
    }
    whole
}

/// The parts a stream was cut at, and what parsing it in them gave.
type SplitParse = (Vec<usize>, Result<Vec<CopyRow>, RsError>);

/// `data` parsed as it would arrive in parts: split once at every byte,
/// and one byte at a time; each with the parts it was cut into.
fn split_parses(data: &[u8], target: &CopyTarget) -> Vec<SplitParse> {
    let mut splits: Vec<Vec<usize>> = (0..=data.len()).map(|at| vec![at]).collect();
    splits.push((0..=data.len()).collect());
    splits
        .into_iter()
        .map(|cuts| {
            let rows = parse_in_parts(data, target, &cuts);
            (cuts, rows)
        })
        .collect()
}

/// Feeds `data` to a parser as the parts ending at `cuts` (then the rest,
/// last), keeping what each call leaves, as the connection does.
fn parse_in_parts(
    data: &[u8],
    target: &CopyTarget,
    cuts: &[usize],
) -> Result<Vec<CopyRow>, RsError> {
    let mut parser = CopyParser::new(target)?;
    let mut pending = Vec::new();
    let mut rows = Vec::new();
    let mut from = 0;
    for &cut in cuts {
        pending.extend_from_slice(&data[from..cut]);
        from = cut;
        let (more, taken) = parser.parse(&pending, false)?;
        rows.extend(more);
        pending.drain(..taken);
    }
    pending.extend_from_slice(&data[from..]);
    let (more, taken) = parser.parse(&pending, true)?;
    assert_eq!(taken, pending.len(), "the last part is taken whole");
    rows.extend(more);
    Ok(rows)
}

#[test]
fn text_rows_split_on_tabs_and_newlines() {
    let rows = parse("1\tAlice\n2\tBob\n", &text(2));
    assert_eq!(
        rows,
        vec![
            row(&[Some("1"), Some("Alice")]),
            row(&[Some("2"), Some("Bob")])
        ]
    );
}

#[test]
fn text_last_line_needs_no_newline_and_crlf_is_accepted() {
    let rows = parse("1\ta\r\n2\tb", &text(2));
    assert_eq!(
        rows,
        vec![row(&[Some("1"), Some("a")]), row(&[Some("2"), Some("b")])]
    );
}

#[test]
fn text_backslash_n_is_null_but_escaped_backslash_n_is_text() {
    let rows = parse("\\N\t\\\\N\t\n", &text(3));
    assert_eq!(rows, vec![row(&[None, Some("\\N"), Some("")])]);
}

#[test]
fn text_escapes_decode_like_postgres() {
    let rows = parse("a\\tb\\nc\\\\d\\re\\bf\\fg\\vh\\q\n", &text(1));
    assert_eq!(rows, vec![row(&[Some("a\tb\nc\\d\re\u{8}f\u{c}g\u{b}hq")])]);
}

#[test]
fn text_octal_and_hex_escapes() {
    let rows = parse("\\101\\x42\\x4a\\7\\0101\\xg\n", &text(1));
    // \101 = 'A', \x42 = 'B', \x4a = 'J', \7 = BEL, \010 then '1', \x not followed by hex = 'x'
    assert_eq!(rows, vec![row(&[Some("ABJ\u{7}\u{8}1xg")])]);
}

#[test]
fn text_escaped_delimiter_and_newline_are_data() {
    let rows = parse("a\\\tb\tc\\\nd\n", &text(2));
    assert_eq!(rows, vec![row(&[Some("a\tb"), Some("c\nd")])]);
}

#[test]
fn text_end_marker_stops_reading() {
    let rows = parse("1\n\\.\n2\n", &text(1));
    assert_eq!(rows, vec![row(&[Some("1")])]);
    assert_eq!(parse("1\n\\.", &text(1)), vec![row(&[Some("1")])]);
    // `\.x` is not the end marker: it is the text ".x".
    assert_eq!(parse("\\.x\n", &text(1)), vec![row(&[Some(".x")])]);
}

#[test]
fn text_header_skips_first_line_and_custom_options_apply() {
    let mut target = text(2);
    target.header = true;
    target.delimiter = b'|';
    target.null_string = "NULL".to_owned();
    let rows = parse("id|name\n1|NULL\n2|\\\\N\n", &target);
    assert_eq!(
        rows,
        vec![row(&[Some("1"), None]), row(&[Some("2"), Some("\\N")])]
    );
}

#[test]
fn text_multibyte_utf8_survives() {
    let rows = parse("héllo\t日本\n", &text(2));
    assert_eq!(rows, vec![row(&[Some("héllo"), Some("日本")])]);
}

#[test]
fn empty_data_is_zero_rows() {
    assert!(parse("", &text(2)).is_empty());
    assert!(parse("", &csv(2)).is_empty());
    assert!(parse("\\.\n", &text(2)).is_empty());
}

#[test]
fn wrong_field_counts_name_the_line() {
    let missing = parse_error(b"1\ta\n2\n", &text(2));
    assert_eq!(missing.code.number, codes::COPY_MALFORMED.number);
    assert_eq!(
        missing.message,
        "COPY t, line 2: missing data for column \"c2\""
    );
    let extra = parse_error(b"1\ta\tb\n", &text(2));
    assert_eq!(
        extra.message,
        "COPY t, line 1: extra data after last expected column"
    );
    let csv_extra = parse_error(b"a,b\nc,d,e\n", &csv(2));
    assert!(csv_extra.message.contains("line 2"));
}

#[test]
fn no_target_columns_means_no_count_check() {
    let target = CopyTarget::text("t", Vec::new());
    assert_eq!(parse("1\t2\t3\n4\n", &target).len(), 2);
}

#[test]
fn invalid_utf8_and_trailing_backslash_are_errors() {
    let invalid = parse_error(b"ok\n\xff\xfe\n", &text(1));
    assert!(invalid.message.contains("line 2"), "{}", invalid.message);
    assert!(invalid.message.contains("UTF8"));
    let trailing = parse_error(b"abc\\", &text(1));
    assert!(trailing.message.contains("line 1"));
    let octal_invalid = parse_error(b"\\377\n", &text(1));
    assert!(octal_invalid.message.contains("UTF8"));
}

#[test]
fn csv_quotes_delimiters_newlines_and_doubled_quotes() {
    let rows = parse(
        "1,\"a,b\"\n2,\"line\nbreak\"\n3,\"say \"\"hi\"\"\"\n",
        &csv(2),
    );
    assert_eq!(
        rows,
        vec![
            row(&[Some("1"), Some("a,b")]),
            row(&[Some("2"), Some("line\nbreak")]),
            row(&[Some("3"), Some("say \"hi\"")]),
        ]
    );
}

#[test]
fn csv_empty_unquoted_is_null_and_quoted_empty_is_text() {
    let rows = parse("1,,\"\"\n,x,\n", &csv(3));
    assert_eq!(
        rows,
        vec![
            row(&[Some("1"), None, Some("")]),
            row(&[None, Some("x"), None])
        ]
    );
}

#[test]
fn csv_backslashes_are_plain_data() {
    let rows = parse("a\\tb,\\N\n", &csv(2));
    assert_eq!(rows, vec![row(&[Some("a\\tb"), Some("\\N")])]);
}

#[test]
fn csv_header_crlf_and_end_marker() {
    let mut target = csv(2);
    target.header = true;
    let rows = parse("id,name\r\n1,\"x\"\r\n2,y\r\n\\.\r\n", &target);
    assert_eq!(
        rows,
        vec![row(&[Some("1"), Some("x")]), row(&[Some("2"), Some("y")])]
    );
}

#[test]
fn csv_header_with_quoted_newline_is_one_line() {
    let mut target = csv(1);
    target.header = true;
    let rows = parse("\"multi\nline header\"\nvalue\n", &target);
    assert_eq!(rows, vec![row(&[Some("value")])]);
}

#[test]
fn csv_custom_quote_escape_delimiter_and_null() {
    let mut target = csv(3);
    target.delimiter = b';';
    target.quote = b'\'';
    target.escape = b'\\';
    target.null_string = "NULL".to_owned();
    let rows = parse("'it\\'s';NULL;'NULL'\n'a\\\\b';'x\\y';\n", &target);
    assert_eq!(
        rows,
        vec![
            row(&[Some("it's"), None, Some("NULL")]),
            row(&[Some("a\\b"), Some("x\\y"), Some("")]),
        ]
    );
}

#[test]
fn csv_quotes_may_start_mid_field_like_postgres() {
    let rows = parse("ab\"c,d\"e,f\n", &csv(2));
    assert_eq!(rows, vec![row(&[Some("abc,de"), Some("f")])]);
}

#[test]
fn csv_unterminated_quote_names_the_line() {
    let error = parse_error(b"1,ok\n2,\"never closed\n3,x\n", &csv(2));
    assert_eq!(error.code.sqlstate, "22P04");
    assert_eq!(
        error.message,
        "COPY t, line 2: unterminated CSV quoted field"
    );
}

#[test]
fn invalid_options_are_rejected() {
    let mut target = text(1);
    target.delimiter = b'\\';
    assert!(parse_copy_data(b"x", &target).is_err());
    let mut target = csv(1);
    target.quote = b',';
    assert!(parse_copy_data(b"x", &target).is_err());
}

/// Binary COPY data: the header, `rows` (each field's bytes or NULL), the trailer.
fn binary_data(rows: &[Vec<Option<Vec<u8>>>]) -> Vec<u8> {
    let mut data = b"PGCOPY\n\xff\r\n\0".to_vec();
    data.extend_from_slice(&0_u32.to_be_bytes());
    data.extend_from_slice(&4_u32.to_be_bytes());
    data.extend_from_slice(b"skip");
    for row in rows {
        data.extend_from_slice(&(row.len() as i16).to_be_bytes());
        for field in row {
            match field {
                None => data.extend_from_slice(&(-1_i32).to_be_bytes()),
                Some(bytes) => {
                    data.extend_from_slice(&(bytes.len() as i32).to_be_bytes());
                    data.extend_from_slice(bytes);
                }
            }
        }
    }
    data.extend_from_slice(&(-1_i16).to_be_bytes());
    data
}

#[test]
fn binary_copy_reads_each_field_by_its_columns_type() {
    use datafusion::arrow::datatypes::DataType;
    let mut target = CopyTarget::text("t", vec!["id".into(), "name".into()]);
    target.format = CopyFormat::Binary;
    target.column_types = vec![DataType::Int32, DataType::Utf8];
    let rows = vec![
        vec![Some(7_i32.to_be_bytes().to_vec()), Some(b"seven".to_vec())],
        vec![None, None],
    ];
    let parsed = parse_copy_data(&binary_data(&rows), &target).unwrap();
    for (parts, split) in split_parses(&binary_data(&rows), &target) {
        assert_eq!(split.unwrap(), parsed, "in parts {parts:?}");
    }
    assert_eq!(
        parsed,
        vec![
            vec![Some("7".to_string()), Some("seven".to_string())],
            vec![None, None]
        ]
    );
    // Without the trailer the data ends where a row would start: the same.
    let mut no_trailer = binary_data(&rows);
    no_trailer.truncate(no_trailer.len() - 2);
    assert_eq!(parse_copy_data(&no_trailer, &target).unwrap(), parsed);
    // A row of the wrong width, a field cut short, an int4 of three bytes, a
    // wrong signature: each a COPY error.
    let wrong_width = binary_data(&[vec![None]]);
    let mut cut = binary_data(&rows);
    cut.truncate(cut.len() - 4);
    let short_int = binary_data(&[vec![Some(vec![0, 0, 7]), None]]);
    let mut signature = binary_data(&rows);
    signature[0] = b'X';
    let mut after_trailer = binary_data(&rows);
    after_trailer.push(0);
    for data in [wrong_width, cut, short_int, signature, after_trailer] {
        let error = parse_copy_data(&data, &target).unwrap_err();
        assert_eq!(error.code.sqlstate, "22P04", "{}", error.message);
        for (parts, split) in split_parses(&data, &target) {
            let split = split.unwrap_err();
            assert_eq!(split.message, error.message, "in parts {parts:?}");
        }
    }
}
