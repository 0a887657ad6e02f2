//! PostgreSQL's date and timestamp input forms that Arrow's parser lacks.
//!
//! Arrow reads `2026-01-31`, `2026-01-31 10:00:00[.ffffff]` (or with `T`)
//! and a trailing zone. PostgreSQL also reads a time without seconds
//! (`2026-01-31 10:00`), one-digit months, days and hours (`2026-1-2
//! 3:04:05`), `20260131`, and `epoch`. And it reads a zone differently for a
//! `timestamp` without time zone: the zone is ignored, where Arrow converts
//! the time to UTC. [`arrow_datetime_text`] rewrites such text into the form
//! Arrow reads with PostgreSQL's meaning; the write path (INSERT, UPDATE,
//! COPY) and the literals of queries and views both go through it.
//!
//! Text in a form this module does not know is left for Arrow to read or
//! refuse, so an error still quotes what the user wrote.

use std::borrow::Cow;

use datafusion::arrow::array::timezone::Tz;
use datafusion::arrow::array::{Array, StringArray};
use datafusion::arrow::datatypes::DataType;

/// The type a text is read as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DatetimeInput {
    Date,
    /// Without time zone: a zone in the text is ignored.
    Timestamp,
    /// With time zone: a zone in the text says how to convert to UTC.
    TimestampTz,
}

impl DatetimeInput {
    /// The input kind of an Arrow date or timestamp type.
    pub fn of(data_type: &DataType) -> Option<DatetimeInput> {
        match data_type {
            DataType::Date32 | DataType::Date64 => Some(DatetimeInput::Date),
            DataType::Timestamp(_, None) => Some(DatetimeInput::Timestamp),
            DataType::Timestamp(_, Some(_)) => Some(DatetimeInput::TimestampTz),
            _ => None,
        }
    }
}

/// `text` in a form Arrow reads as PostgreSQL reads it, or `None` when the
/// text needs no rewrite (or is not a form this module knows).
pub fn arrow_datetime_text(text: &str, input: DatetimeInput) -> Option<String> {
    if already_arrow_form(text.as_bytes(), input) {
        return None;
    }
    let trimmed = text.trim();
    if trimmed.eq_ignore_ascii_case("epoch") {
        return Some(
            match input {
                DatetimeInput::Date => "1970-01-01",
                DatetimeInput::Timestamp => "1970-01-01 00:00:00",
                DatetimeInput::TimestampTz => "1970-01-01 00:00:00Z",
            }
            .to_string(),
        );
    }
    let date_end = trimmed.find([' ', 'T', 't']).unwrap_or(trimmed.len());
    let date = Date::parse(&trimmed[..date_end])?;
    let rest = trimmed[date_end..]
        .strip_prefix(['T', 't'])
        .unwrap_or(&trimmed[date_end..])
        .trim_start();
    let (time, zone) = if rest.is_empty() {
        (None, Zone::None)
    } else if rest.starts_with(['+', '-']) {
        // A date with a zone and no time (pgjdbc's `setDate` sends
        // `2000-02-29 +00`): midnight there.
        (None, Zone::parse(rest)?)
    } else {
        let (mut time, after) = Time::parse(rest)?;
        let after = time.read_meridiem(after.trim_start())?;
        (Some(time), Zone::parse(after.trim())?)
    };
    let mut out = format!("{}-{:02}-{:02}", date.year, date.month, date.day);
    if input == DatetimeInput::Date {
        return Some(out);
    }
    if let Some(time) = time {
        out.push_str(&format!(
            " {:02}:{:02}:{:02}{}",
            time.hour, time.minute, time.second, time.fraction
        ));
    } else if input == DatetimeInput::TimestampTz && zone != Zone::None {
        out.push_str(" 00:00:00");
    }
    if input == DatetimeInput::TimestampTz {
        match zone {
            Zone::None => {}
            Zone::Utc => out.push('Z'),
            Zone::Offset { negative, minutes } => out.push_str(&format!(
                "{}{:02}:{:02}",
                if negative { '-' } else { '+' },
                minutes / 60,
                minutes % 60
            )),
            Zone::Named(name) => {
                out.push(' ');
                out.push_str(name);
            }
        }
    }
    (out != text).then_some(out)
}

/// `texts` with each value [`arrow_datetime_text`] rewrites replaced, or
/// `None` when no value needs it (the common case, which copies nothing).
pub fn arrow_datetime_texts(texts: &StringArray, input: DatetimeInput) -> Option<StringArray> {
    let mut rewritten: Option<Vec<Option<Cow<'_, str>>>> = None;
    for (index, text) in texts.iter().enumerate() {
        let new = text.and_then(|text| arrow_datetime_text(text, input));
        match (&mut rewritten, new) {
            (Some(values), new) => values.push(new.map(Cow::Owned).or(text.map(Cow::Borrowed))),
            (None, Some(new)) => {
                let mut values = Vec::with_capacity(texts.len());
                values.extend(texts.iter().take(index).map(|text| text.map(Cow::Borrowed)));
                values.push(Some(Cow::Owned(new)));
                rewritten = Some(values);
            }
            (None, None) => {}
        }
    }
    debug_assert!(rewritten
        .as_ref()
        .is_none_or(|values| values.len() == texts.len()));
    rewritten.map(|values| values.into_iter().collect())
}

/// `YYYY-MM-DD` or `YYYY-MM-DD HH:MM:SS[.f]`, with `T` or a space, and a
/// zone only where one converts: the common case, checked without
/// allocating.
fn already_arrow_form(bytes: &[u8], input: DatetimeInput) -> bool {
    let digits = |range: std::ops::Range<usize>| {
        bytes
            .get(range)
            .is_some_and(|part| part.iter().all(u8::is_ascii_digit))
    };
    let date = digits(0..4)
        && bytes.get(4) == Some(&b'-')
        && digits(5..7)
        && bytes.get(7) == Some(&b'-')
        && digits(8..10);
    if !date {
        return false;
    }
    if bytes.len() == 10 {
        return true;
    }
    if input == DatetimeInput::Date {
        return false;
    }
    let time = matches!(bytes[10], b' ' | b'T')
        && digits(11..13)
        && bytes.get(13) == Some(&b':')
        && digits(14..16)
        && bytes.get(16) == Some(&b':')
        && digits(17..19);
    if !time {
        return false;
    }
    let rest = &bytes[19..];
    let fraction = match rest.first() {
        Some(b'.') => rest[1..].iter().take_while(|b| b.is_ascii_digit()).count() + 1,
        _ => 0,
    };
    let zone = &rest[fraction..];
    zone.is_empty() || (input == DatetimeInput::TimestampTz && zone == b"Z")
}

struct Date<'a> {
    year: &'a str,
    month: u32,
    day: u32,
}

impl Date<'_> {
    /// `Y-M-D` with a four-digit year, or `YYYYMMDD`.
    fn parse(text: &str) -> Option<Date<'_>> {
        let all_digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
        let (year, month, day) = if text.len() == 8 && all_digits(text) {
            (&text[..4], &text[4..6], &text[6..])
        } else {
            let mut parts = text.split('-');
            let parts = (parts.next()?, parts.next()?, parts.next()?, parts.next());
            match parts {
                (year, month, day, None) if year.len() == 4 => (year, month, day),
                _ => return None,
            }
        };
        let small = |part: &str| {
            (all_digits(part) && part.len() <= 2)
                .then(|| part.parse().ok())
                .flatten()
        };
        if !all_digits(year) {
            return None;
        }
        Some(Date {
            year,
            month: small(month)?,
            day: small(day)?,
        })
    }
}

struct Time<'a> {
    hour: u32,
    minute: u32,
    second: u32,
    /// `.` and the fraction's digits as written, or empty.
    fraction: &'a str,
}

impl Time<'_> {
    /// `H:MM[:SS[.f]]` at the start of `text`, and what follows it.
    fn parse(text: &str) -> Option<(Time<'_>, &str)> {
        let number = |text: &str, max_digits: usize, exact: bool| -> Option<(u32, usize)> {
            let length = text.bytes().take_while(u8::is_ascii_digit).count();
            let valid = length >= 1 && length <= max_digits && (!exact || length == max_digits);
            if !valid {
                return None;
            }
            Some((text[..length].parse().ok()?, length))
        };
        let (hour, length) = number(text, 2, false)?;
        let rest = text[length..].strip_prefix(':')?;
        let (minute, length) = number(rest, 2, true)?;
        let mut rest = &rest[length..];
        let mut second = 0;
        let mut fraction = "";
        if let Some(after) = rest.strip_prefix(':') {
            let (value, length) = number(after, 2, true)?;
            second = value;
            rest = &after[length..];
            if rest.starts_with('.') {
                let digits = rest[1..].bytes().take_while(u8::is_ascii_digit).count();
                fraction = &rest[..=digits];
                rest = &rest[1 + digits..];
            }
        }
        Some((
            Time {
                hour,
                minute,
                second,
                fraction,
            },
            rest,
        ))
    }
}

impl Time<'_> {
    /// Applies an `AM` / `PM` at the start of `text`; what follows it.
    fn read_meridiem<'t>(&mut self, text: &'t str) -> Option<&'t str> {
        let word = text.get(..2).filter(|word| {
            let ends = text[2..]
                .chars()
                .next()
                .is_none_or(|c| c.is_whitespace() || c == '+' || c == '-');
            ends && (word.eq_ignore_ascii_case("am") || word.eq_ignore_ascii_case("pm"))
        });
        let Some(word) = word else {
            return Some(text);
        };
        if !(1..=12).contains(&self.hour) {
            return None;
        }
        let afternoon = word.eq_ignore_ascii_case("pm");
        self.hour = match (self.hour, afternoon) {
            (12, false) => 0,
            (12, true) => 12,
            (hour, false) => hour,
            (hour, true) => hour + 12,
        };
        Some(&text[2..])
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Zone<'a> {
    None,
    Utc,
    Offset { negative: bool, minutes: u32 },
    Named(&'a str),
}

impl Zone<'_> {
    /// `Z`, `±H[H][[:]MM]`, or a zone name.
    fn parse(text: &str) -> Option<Zone<'_>> {
        if text.is_empty() {
            return Some(Zone::None);
        }
        if ["z", "utc", "gmt"]
            .iter()
            .any(|name| text.eq_ignore_ascii_case(name))
        {
            return Some(Zone::Utc);
        }
        if let Some(sign) = text.chars().next().filter(|c| *c == '+' || *c == '-') {
            let digits: String = text[1..].chars().filter(|c| *c != ':').collect();
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let (hours, minutes) = match digits.len() {
                1 | 2 => (digits.parse::<u32>().ok()?, 0),
                3 | 4 => {
                    let split = digits.len() - 2;
                    (digits[..split].parse().ok()?, digits[split..].parse().ok()?)
                }
                _ => return None,
            };
            return Some(Zone::Offset {
                negative: sign == '-',
                minutes: hours * 60 + minutes,
            });
        }
        // Only a zone Arrow knows: other words (`BC`, a typo) are left for
        // Arrow to refuse rather than dropped with the zone.
        text.parse::<Tz>().ok().map(|_| Zone::Named(text))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::compute::cast;
    use datafusion::arrow::datatypes::TimeUnit;
    use datafusion::arrow::util::display::array_value_to_string;

    use super::*;

    /// What PostgreSQL 15 (TimeZone UTC) prints for `'text'::type`.
    fn read(text: &str, data_type: DataType) -> String {
        let input = DatetimeInput::of(&data_type).expect("a datetime type");
        let rewritten = arrow_datetime_text(text, input).unwrap_or_else(|| text.to_string());
        let array = Arc::new(StringArray::from(vec![rewritten.as_str()])) as Arc<dyn Array>;
        let parsed = cast(&array, &data_type).expect("Arrow reads the rewrite");
        assert!(!parsed.is_null(0), "{text} read as NULL");
        array_value_to_string(&parsed, 0).expect("printable")
    }

    fn timestamp() -> DataType {
        DataType::Timestamp(TimeUnit::Microsecond, None)
    }

    fn timestamptz() -> DataType {
        DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()))
    }

    #[test]
    fn postgres_forms_read_as_postgres_reads_them() {
        let cases = [
            ("2026-01-01 10:00", timestamp(), "2026-01-01T10:00:00"),
            ("2026-1-2 3:04:05", timestamp(), "2026-01-02T03:04:05"),
            ("20260101", timestamp(), "2026-01-01T00:00:00"),
            (
                "  2026-01-01 10:00:00  ",
                timestamp(),
                "2026-01-01T10:00:00",
            ),
            ("2026-01-01T10:00", timestamp(), "2026-01-01T10:00:00"),
            (
                "2026-01-01 10:00:00.25",
                timestamp(),
                "2026-01-01T10:00:00.250",
            ),
            // A zone is ignored without time zone, and converts with one.
            ("2026-01-01 10:00:00+02", timestamp(), "2026-01-01T10:00:00"),
            ("2026-01-01 10:00:00Z", timestamp(), "2026-01-01T10:00:00"),
            (
                "2026-01-01 10:00:00 UTC",
                timestamp(),
                "2026-01-01T10:00:00",
            ),
            ("2026-01-01 10:00+02", timestamptz(), "2026-01-01T08:00:00Z"),
            (
                "2026-01-01 10:00:00-0530",
                timestamptz(),
                "2026-01-01T15:30:00Z",
            ),
            (
                "2026-01-01 10:00:00+5",
                timestamptz(),
                "2026-01-01T05:00:00Z",
            ),
            (
                "2026-01-01 10:00:00 UTC",
                timestamptz(),
                "2026-01-01T10:00:00Z",
            ),
            (
                "2026-01-01 10:00:00Z",
                timestamptz(),
                "2026-01-01T10:00:00Z",
            ),
            ("2026-01-01 10:00 PM", timestamp(), "2026-01-01T22:00:00"),
            ("2026-01-01 12:30:00 am", timestamp(), "2026-01-01T00:30:00"),
            ("2026-01-01 12:30pm", timestamp(), "2026-01-01T12:30:00"),
            (
                "2026-01-01 1:00 pm+02",
                timestamptz(),
                "2026-01-01T11:00:00Z",
            ),
            (
                "2026-01-01 10:00:00 utc",
                timestamptz(),
                "2026-01-01T10:00:00Z",
            ),
            (
                "2026-01-01 10:00:00 Europe/Paris",
                timestamptz(),
                "2026-01-01T09:00:00Z",
            ),
            (
                "2026-07-01 10:00:00 Europe/Paris",
                timestamp(),
                "2026-07-01T10:00:00",
            ),
            ("epoch", timestamp(), "1970-01-01T00:00:00"),
            ("EPOCH", timestamptz(), "1970-01-01T00:00:00Z"),
            ("2026-1-2", DataType::Date32, "2026-01-02"),
            ("20260102", DataType::Date32, "2026-01-02"),
            ("2026-01-02 10:00:00", DataType::Date32, "2026-01-02"),
            ("epoch", DataType::Date32, "1970-01-01"),
            ("2000-02-29 +00", DataType::Date32, "2000-02-29"),
            ("2000-02-29 -05", DataType::Date32, "2000-02-29"),
            ("2000-02-29 +02", timestamptz(), "2000-02-28T22:00:00Z"),
            ("2000-02-29 +02", timestamp(), "2000-02-29T00:00:00"),
        ];
        for (text, data_type, expected) in cases {
            assert_eq!(
                read(text, data_type.clone()),
                expected,
                "{text} as {data_type}"
            );
        }
    }

    #[test]
    fn canonical_text_is_not_rewritten() {
        for text in [
            "2026-01-01",
            "2026-01-01 10:00:00",
            "2026-01-01T10:00:00.123456",
        ] {
            assert_eq!(arrow_datetime_text(text, DatetimeInput::Timestamp), None);
        }
        assert_eq!(
            arrow_datetime_text("2026-01-01 10:00:00Z", DatetimeInput::TimestampTz),
            None
        );
        assert_eq!(arrow_datetime_text("2026-01-01", DatetimeInput::Date), None);
    }

    #[test]
    fn arrays_are_copied_only_when_a_value_changes() {
        let canonical = StringArray::from(vec![Some("2026-01-01 10:00:00"), None]);
        assert!(arrow_datetime_texts(&canonical, DatetimeInput::Timestamp).is_none());
        let mixed = StringArray::from(vec![
            Some("2026-01-01 10:00:00"),
            None,
            Some("2026-01-01 10:00"),
            Some("2026-01-01"),
        ]);
        let rewritten = arrow_datetime_texts(&mixed, DatetimeInput::Timestamp).expect("a rewrite");
        let values: Vec<Option<&str>> = rewritten.iter().collect();
        assert_eq!(
            values,
            [
                Some("2026-01-01 10:00:00"),
                None,
                Some("2026-01-01 10:00:00"),
                Some("2026-01-01")
            ]
        );
    }

    #[test]
    fn unknown_forms_are_left_for_arrow_to_refuse() {
        for text in [
            "2026-01-01 10",
            "Jan 1 2026",
            "1/2/2026",
            "2026-01-01 10:00:00 +",
            "26-01-01",
            "",
            "2026-001-01",
            "2026-01-01 10:00:00 BC",
            "2026-01-01 10:00:00 foo",
            "2026-01-01 13:00 PM",
        ] {
            assert_eq!(
                arrow_datetime_text(text, DatetimeInput::Timestamp),
                None,
                "{text}"
            );
        }
    }
}
