//! Comparison of two query results as multisets of rows, values in PostgreSQL's text form.
//!
//! Rows are fetched with the simple query protocol, so both sides render values as text
//! themselves. Two values are equal when
//! 1. both are NULL, or their texts are identical; or
//! 2. both are plain decimals (`-12.50`, `175.0000000000000000`) with the same value: PostgreSQL
//!    prints `AVG` of a NUMERIC with 16 fractional digits where we may print fewer; or
//! 3. both parse as floating-point numbers within a relative tolerance of [`RELATIVE_TOLERANCE`],
//!    and they are not both integers: the last bits of a float sum depend on the order of
//!    additions, and PostgreSQL gives a NUMERIC `AVG` more digits than we may.
//!
//! Column types are not visible through the simple protocol, so rule 3 applies to any
//! non-integer numeric text; that is looser than needed for NUMERIC but never hides a difference
//! above 1e-9 relative. Integers (counts, sums of integers, keys) must match exactly.
//!
//! Matching: rows equal under rule 1–2 are matched exactly (through a canonical key); the few left
//! over are matched greedily under rule 3. What still remains is the diff.

use std::collections::BTreeMap;
use std::fmt::Write;

use tokio_postgres::{Client, SimpleQueryMessage};

use super::oracle::describe_error;

pub const RELATIVE_TOLERANCE: f64 = 1e-9;
/// Rows of each side shown in a diff; the rest is counted.
const DIFF_ROWS_SHOWN_MAX: usize = 40;

/// A row as text; `None` is SQL NULL.
pub type TextRow = Vec<Option<String>>;

/// The rows of the last result set of `sql`, values as the server's text.
pub async fn fetch_text_rows(client: &Client, sql: &str) -> Result<Vec<TextRow>, String> {
    let messages = client
        .simple_query(sql)
        .await
        .map_err(|error| format!("{sql}\nfailed: {}", describe_error(&error)))?;
    let mut rows = Vec::new();
    for message in messages {
        match message {
            SimpleQueryMessage::RowDescription(_) => rows.clear(),
            SimpleQueryMessage::Row(row) => rows.push(
                (0..row.len())
                    .map(|index| row.get(index).map(str::to_owned))
                    .collect(),
            ),
            _ => {}
        }
    }
    Ok(rows)
}

/// Runs `sql` on both sides and compares the results as multisets; `Err` holds a readable diff.
pub async fn compare_query(
    expected_label: &str,
    expected_client: &Client,
    actual_label: &str,
    actual_client: &Client,
    sql: &str,
) -> Result<(), String> {
    let expected = fetch_text_rows(expected_client, sql)
        .await
        .map_err(|error| format!("on {expected_label}: {error}"))?;
    let actual = fetch_text_rows(actual_client, sql)
        .await
        .map_err(|error| format!("on {actual_label}: {error}"))?;
    compare_row_multisets(expected_label, &expected, actual_label, &actual)
        .map_err(|diff| format!("{sql}\n{diff}"))
}

/// The view's rows equal its definition evaluated as an ad-hoc query: DataFusion computes that
/// over the tables without any view state, so it is an oracle for incremental maintenance.
pub async fn check_view(client: &Client, name: &str, definition: &str) -> Result<(), String> {
    let view = fetch_text_rows(client, &format!("SELECT * FROM {name}")).await?;
    let expected = fetch_text_rows(client, definition).await?;
    compare_row_multisets("its definition", &expected, name, &view)
        .map_err(|diff| format!("view {name}:\n{diff}"))
}

/// [`check_view`] for each `(name, definition)`; panics with the first difference.
pub async fn check_views(client: &Client, views: &[(&str, &str)]) {
    for (name, definition) in views {
        if let Err(diff) = check_view(client, name, definition).await {
            panic!("{diff}");
        }
    }
}

/// Compares two row multisets; `Err` lists the rows found on only one side (with multiplicity).
pub fn compare_row_multisets(
    expected_label: &str,
    expected: &[TextRow],
    actual_label: &str,
    actual: &[TextRow],
) -> Result<(), String> {
    let mut expected_only = count_by_key(expected);
    let mut actual_only = count_by_key(actual);
    for (key, expected_entry) in expected_only.iter_mut() {
        if let Some(actual_entry) = actual_only.get_mut(key) {
            let matched = expected_entry.count.min(actual_entry.count);
            expected_entry.count -= matched;
            actual_entry.count -= matched;
        }
    }
    let mut expected_left = expand(expected_only);
    let mut actual_left = expand(actual_only);
    // Greedy matching under the float tolerance for whatever exact matching left over.
    expected_left.retain(|expected_row| {
        match actual_left
            .iter()
            .position(|actual_row| rows_equal(expected_row, actual_row))
        {
            Some(position) => {
                actual_left.swap_remove(position);
                false
            }
            None => true,
        }
    });
    if expected_left.is_empty() && actual_left.is_empty() {
        return Ok(());
    }
    let mut diff = format!(
        "results differ: {} has {} rows, {} has {} rows\n",
        expected_label,
        expected.len(),
        actual_label,
        actual.len()
    );
    describe_rows(
        &mut diff,
        &format!("only in {expected_label}"),
        &expected_left,
    );
    describe_rows(&mut diff, &format!("only in {actual_label}"), &actual_left);
    Err(diff)
}

/// Whether two values are equal under the rules of the module documentation.
pub fn values_equal(left: &Option<String>, right: &Option<String>) -> bool {
    match (left, right) {
        (None, None) => true,
        (Some(left), Some(right)) => {
            left == right
                || matches!(
                    (canonical_decimal(left), canonical_decimal(right)),
                    (Some(left), Some(right)) if left == right
                )
                || floats_close(left, right)
        }
        _ => false,
    }
}

pub fn rows_equal(left: &TextRow, right: &TextRow) -> bool {
    left.len() == right.len()
        && left
            .iter()
            .zip(right)
            .all(|(left, right)| values_equal(left, right))
}

/// Renders a row for humans: `1 | 'Ada' | NULL`.
pub fn format_row(row: &TextRow) -> String {
    row.iter()
        .map(|value| match value {
            None => "NULL".to_owned(),
            Some(text) => format!("'{}'", text.replace('\'', "''")),
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

/// `-007.500` → `-7.5`, `0.00` → `0`; `None` unless the text is a plain decimal.
fn canonical_decimal(text: &str) -> Option<String> {
    let text = text.trim();
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (integer_digits, fraction_digits) = match unsigned.split_once('.') {
        Some((integer, fraction)) => (integer, fraction),
        None => (unsigned, ""),
    };
    let all_digits = |digits: &str| digits.bytes().all(|byte| byte.is_ascii_digit());
    if integer_digits.is_empty() && fraction_digits.is_empty()
        || !all_digits(integer_digits)
        || !all_digits(fraction_digits)
    {
        return None;
    }
    let integer_digits = integer_digits.trim_start_matches('0');
    let fraction_digits = fraction_digits.trim_end_matches('0');
    let mut canonical = String::new();
    if negative && !(integer_digits.is_empty() && fraction_digits.is_empty()) {
        canonical.push('-');
    }
    canonical.push_str(if integer_digits.is_empty() {
        "0"
    } else {
        integer_digits
    });
    if !fraction_digits.is_empty() {
        canonical.push('.');
        canonical.push_str(fraction_digits);
    }
    Some(canonical)
}

fn floats_close(left: &str, right: &str) -> bool {
    if is_integer(left) && is_integer(right) {
        return false;
    }
    let (Ok(left), Ok(right)) = (left.trim().parse::<f64>(), right.trim().parse::<f64>()) else {
        return false;
    };
    if !left.is_finite() || !right.is_finite() {
        return left == right || (left.is_nan() && right.is_nan());
    }
    let scale = left.abs().max(right.abs());
    (left - right).abs() <= RELATIVE_TOLERANCE * scale
}

fn is_integer(text: &str) -> bool {
    let text = text.trim();
    let digits = text
        .strip_prefix('-')
        .or_else(|| text.strip_prefix('+'))
        .unwrap_or(text);
    !digits.is_empty() && digits.bytes().all(|byte| byte.is_ascii_digit())
}

struct KeyedRows {
    row: TextRow,
    count: usize,
}

/// Groups rows by a key under which rule 1–2 equal rows coincide.
fn count_by_key(rows: &[TextRow]) -> BTreeMap<Vec<String>, KeyedRows> {
    let mut counts: BTreeMap<Vec<String>, KeyedRows> = BTreeMap::new();
    for row in rows {
        let key = row
            .iter()
            .map(|value| match value {
                None => "N".to_owned(),
                Some(text) => match canonical_decimal(text) {
                    Some(decimal) => format!("D{decimal}"),
                    None => format!("S{text}"),
                },
            })
            .collect();
        counts
            .entry(key)
            .or_insert_with(|| KeyedRows {
                row: row.clone(),
                count: 0,
            })
            .count += 1;
    }
    counts
}

fn expand(counts: BTreeMap<Vec<String>, KeyedRows>) -> Vec<TextRow> {
    counts
        .into_values()
        .flat_map(|entry| std::iter::repeat_n(entry.row, entry.count))
        .collect()
}

fn describe_rows(out: &mut String, title: &str, rows: &[TextRow]) {
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(out, "  {title} ({} rows):", rows.len());
    for row in rows.iter().take(DIFF_ROWS_SHOWN_MAX) {
        let _ = writeln!(out, "    {}", format_row(row));
    }
    if rows.len() > DIFF_ROWS_SHOWN_MAX {
        let _ = writeln!(out, "    … {} more", rows.len() - DIFF_ROWS_SHOWN_MAX);
    }
}

#[cfg(test)]
mod tests {
    //! Goal: the comparison rules, checked on hand-picked values.

    use super::*;

    fn row(values: &[Option<&str>]) -> TextRow {
        values
            .iter()
            .map(|value| value.map(str::to_owned))
            .collect()
    }

    #[test]
    fn decimals_compare_by_value() {
        assert_eq!(
            canonical_decimal("175.0000000000000000").as_deref(),
            Some("175")
        );
        assert_eq!(canonical_decimal("-007.50").as_deref(), Some("-7.5"));
        assert_eq!(canonical_decimal("-0.000").as_deref(), Some("0"));
        assert_eq!(canonical_decimal(".5").as_deref(), Some("0.5"));
        assert_eq!(canonical_decimal("1e5"), None);
        assert_eq!(canonical_decimal("abc"), None);
        assert_eq!(canonical_decimal("-"), None);
        assert!(values_equal(
            &Some("175.0000000000000000".into()),
            &Some("175.0000000000".into())
        ));
        assert!(!values_equal(
            &Some("175.01".into()),
            &Some("175.02".into())
        ));
        assert!(!values_equal(&Some("1".into()), &None));
    }

    #[test]
    fn floats_compare_with_relative_tolerance() {
        assert!(values_equal(
            &Some("0.30000000000000004".into()),
            &Some("0.3".into())
        ));
        assert!(values_equal(
            &Some("1e+20".into()),
            &Some("100000000000000000000".into())
        ));
        assert!(!values_equal(
            &Some("1.0001".into()),
            &Some("1.0002".into())
        ));
        assert!(values_equal(&Some("NaN".into()), &Some("NaN".into())));
        assert!(values_equal(
            &Some("276.8333333333333333".into()),
            &Some("276.83333333333333".into())
        ));
        // Integers match exactly, however large.
        assert!(!values_equal(
            &Some("1000000000000000001".into()),
            &Some("1000000000000000000".into())
        ));
        assert!(!values_equal(&Some("t".into()), &Some("true".into())));
    }

    #[test]
    fn multisets_ignore_order_but_count_duplicates() {
        let left = vec![
            row(&[Some("1"), None]),
            row(&[Some("1"), None]),
            row(&[Some("2.50"), Some("x")]),
        ];
        let right = vec![
            row(&[Some("2.5"), Some("x")]),
            row(&[Some("1"), None]),
            row(&[Some("1.0"), None]),
        ];
        assert!(compare_row_multisets("left", &left, "right", &right).is_ok());

        let right_missing_duplicate = vec![row(&[Some("2.5"), Some("x")]), row(&[Some("1"), None])];
        let diff = compare_row_multisets("left", &left, "right", &right_missing_duplicate)
            .expect_err("a lost duplicate is a difference");
        assert!(diff.contains("only in left (1 rows)"), "{diff}");
        assert!(diff.contains("'1' | NULL"), "{diff}");
    }
}
