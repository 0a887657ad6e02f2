//! PostgreSQL's text output, byte for byte.
//!
//! Each function reproduces the matching PostgreSQL output function under the
//! session settings the server announces (`DateStyle=ISO`,
//! `IntervalStyle=postgres`, `TimeZone=UTC`, `extra_float_digits=1`):
//! - `float4out`/`float8out`: shortest round-trip digits (Ryu); fixed
//!   notation while the decimal exponent lies in `[-4, 6)` for float4 and
//!   `[-4, 15)` for float8, otherwise `d.ddde±XX` with at least two exponent
//!   digits; `NaN`, `Infinity`, `-Infinity`, `-0`;
//! - `numeric_out`: plain decimal with exactly `scale` fraction digits;
//! - `date_out`/`timestamp_out`: `YYYY-MM-DD[ HH:MM:SS[.ffffff]]`, fraction
//!   without trailing zeros, ` BC` suffix for years before 1;
//! - `interval_out`: `1 year 2 mons 3 days 04:05:06.5`.
//!
//! Rust's `{:e}` formatting already yields the shortest round-trip digits, so
//! the float functions only re-arrange them the way Ryu's `to_chars` does.

use chrono::{Datelike, NaiveDate};

/// Days from 0001-01-01 (chrono's day 1) to 1970-01-01 (Arrow's epoch).
const UNIX_EPOCH_DAYS_FROM_CE: i32 = 719_163;
const MICROS_PER_SECOND: i64 = 1_000_000;
const MICROS_PER_MINUTE: i64 = 60 * MICROS_PER_SECOND;
const MICROS_PER_HOUR: i64 = 60 * MICROS_PER_MINUTE;
pub const MICROS_PER_DAY: i64 = 24 * MICROS_PER_HOUR;

/// `float4out`.
pub fn float4(value: f32) -> String {
    if value.is_nan() || value.is_infinite() {
        return special_float(value.is_nan(), value.is_sign_negative());
    }
    shortest_float(&format!("{value:e}"), 6)
}

/// `float8out`.
pub fn float8(value: f64) -> String {
    if value.is_nan() || value.is_infinite() {
        return special_float(value.is_nan(), value.is_sign_negative());
    }
    shortest_float(&format!("{value:e}"), 15)
}

fn special_float(is_nan: bool, is_negative: bool) -> String {
    match (is_nan, is_negative) {
        (true, _) => "NaN".to_owned(),
        (false, false) => "Infinity".to_owned(),
        (false, true) => "-Infinity".to_owned(),
    }
}

/// Re-arranges Rust's shortest scientific form (`-1.25e-7`) the way
/// PostgreSQL prints it; fixed notation while `-4 <= exponent < limit`.
fn shortest_float(scientific: &str, fixed_exponent_limit: i32) -> String {
    let (sign, unsigned) = match scientific.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", scientific),
    };
    let (mantissa, exponent) = unsigned.split_once('e').unwrap_or((unsigned, "0"));
    let exponent: i32 = exponent
        .parse()
        .expect("Rust's {:e} output ends in an integer exponent");
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let body = if (-4..fixed_exponent_limit).contains(&exponent) {
        fixed_notation(&digits, exponent)
    } else {
        exponent_notation(&digits, exponent)
    };
    format!("{sign}{body}")
}

fn fixed_notation(digits: &str, exponent: i32) -> String {
    if exponent < 0 {
        let leading_zeros = "0".repeat((-exponent - 1) as usize);
        return format!("0.{leading_zeros}{digits}");
    }
    let integer_length = (exponent + 1) as usize;
    if digits.len() <= integer_length {
        format!("{digits}{}", "0".repeat(integer_length - digits.len()))
    } else {
        let (integer, fraction) = digits.split_at(integer_length);
        format!("{integer}.{fraction}")
    }
}

fn exponent_notation(digits: &str, exponent: i32) -> String {
    let (first, rest) = digits.split_at(1);
    let point = if rest.is_empty() { "" } else { "." };
    let exponent_sign = if exponent < 0 { '-' } else { '+' };
    format!("{first}{point}{rest}e{exponent_sign}{:02}", exponent.abs())
}

/// `numeric_out` for an unscaled integer and a scale (Arrow `Decimal128`).
pub fn decimal(unscaled: i128, scale: i8) -> String {
    let sign = if unscaled < 0 { "-" } else { "" };
    let digits = unscaled.unsigned_abs().to_string();
    if scale <= 0 {
        if unscaled == 0 {
            return "0".to_owned();
        }
        return format!(
            "{sign}{digits}{}",
            "0".repeat(scale.unsigned_abs() as usize)
        );
    }
    let scale = scale as usize;
    let padded = if digits.len() <= scale {
        format!("{}{digits}", "0".repeat(scale + 1 - digits.len()))
    } else {
        digits
    };
    let (integer, fraction) = padded.split_at(padded.len() - scale);
    format!("{sign}{integer}.{fraction}")
}

/// A calendar date as PostgreSQL prints it: year, month, day, BC flag.
struct CalendarDate {
    year: i32,
    month: u32,
    day: u32,
    before_christ: bool,
}

fn calendar_date(days_since_unix_epoch: i64) -> Option<CalendarDate> {
    let days = i32::try_from(days_since_unix_epoch).ok()?;
    let date = NaiveDate::from_num_days_from_ce_opt(days.checked_add(UNIX_EPOCH_DAYS_FROM_CE)?)?;
    let before_christ = date.year() <= 0;
    Some(CalendarDate {
        year: if before_christ {
            1 - date.year()
        } else {
            date.year()
        },
        month: date.month(),
        day: date.day(),
        before_christ,
    })
}

impl CalendarDate {
    fn iso(&self) -> String {
        format!("{:04}-{:02}-{:02}", self.year, self.month, self.day)
    }

    fn era_suffix(&self) -> &'static str {
        if self.before_christ {
            " BC"
        } else {
            ""
        }
    }
}

/// `date_out` for Arrow's days since 1970-01-01; `None` outside chrono's range.
pub fn date(days_since_unix_epoch: i32) -> Option<String> {
    let date = calendar_date(i64::from(days_since_unix_epoch))?;
    Some(format!("{}{}", date.iso(), date.era_suffix()))
}

/// `timestamp_out` for microseconds since 1970-01-01 00:00:00.
pub fn timestamp(micros_since_unix_epoch: i64) -> Option<String> {
    timestamp_with_suffix(micros_since_unix_epoch, "")
}

/// `timestamptz_out` with `TimeZone=UTC`.
pub fn timestamptz(micros_since_unix_epoch: i64) -> Option<String> {
    timestamp_with_suffix(micros_since_unix_epoch, "+00")
}

fn timestamp_with_suffix(micros_since_unix_epoch: i64, zone: &str) -> Option<String> {
    let days = micros_since_unix_epoch.div_euclid(MICROS_PER_DAY);
    let time_of_day = micros_since_unix_epoch.rem_euclid(MICROS_PER_DAY);
    let date = calendar_date(days)?;
    Some(format!(
        "{} {}{zone}{}",
        date.iso(),
        clock_time(time_of_day.unsigned_abs()),
        date.era_suffix()
    ))
}

/// `HH:MM:SS[.ffffff]` of a non-negative duration; hours may exceed 23.
fn clock_time(micros: u64) -> String {
    let hours = micros / MICROS_PER_HOUR as u64;
    let minutes = micros % MICROS_PER_HOUR as u64 / MICROS_PER_MINUTE as u64;
    let seconds = micros % MICROS_PER_MINUTE as u64 / MICROS_PER_SECOND as u64;
    let fraction = micros % MICROS_PER_SECOND as u64;
    let mut out = format!("{hours:02}:{minutes:02}:{seconds:02}");
    if fraction != 0 {
        let digits = format!("{fraction:06}");
        out.push('.');
        out.push_str(digits.trim_end_matches('0'));
    }
    out
}

/// `time_out` for microseconds since midnight.
pub fn time(micros_since_midnight: i64) -> String {
    clock_time(
        micros_since_midnight
            .rem_euclid(MICROS_PER_DAY)
            .unsigned_abs(),
    )
}

/// `interval_out` with `IntervalStyle=postgres`.
pub fn interval(months: i32, days: i32, micros: i64) -> String {
    let mut writer = IntervalWriter::default();
    writer.part(i64::from(months / 12), "year");
    writer.part(i64::from(months % 12), "mon");
    writer.part(i64::from(days), "day");
    if writer.is_zero || micros != 0 {
        let sign = if micros < 0 {
            "-"
        } else if writer.is_before {
            "+"
        } else {
            ""
        };
        if !writer.is_zero {
            writer.out.push(' ');
        }
        writer.out.push_str(sign);
        writer.out.push_str(&clock_time(micros.unsigned_abs()));
    }
    writer.out
}

/// PostgreSQL's `AddPostgresIntPart` state: a positive part that follows a
/// negative one gets an explicit `+`.
struct IntervalWriter {
    out: String,
    is_zero: bool,
    is_before: bool,
}

impl Default for IntervalWriter {
    fn default() -> Self {
        IntervalWriter {
            out: String::new(),
            is_zero: true,
            is_before: false,
        }
    }
}

impl IntervalWriter {
    fn part(&mut self, value: i64, unit: &str) {
        if value == 0 {
            return;
        }
        let separator = if self.is_zero { "" } else { " " };
        let plus = if self.is_before && value > 0 { "+" } else { "" };
        let plural = if value != 1 { "s" } else { "" };
        self.out
            .push_str(&format!("{separator}{plus}{value} {unit}{plural}"));
        self.is_before = value < 0;
        self.is_zero = false;
    }
}

#[cfg(test)]
mod tests {
    //! Goal: every formatter prints what PostgreSQL 16 prints; the expected
    //! strings are literal psql outputs for the commented SQL.
    use super::*;

    #[test]
    fn float8_matches_postgres() {
        let cases: &[(f64, &str)] = &[
            (0.0, "0"),          // SELECT 0::float8
            (-0.0, "-0"),        // SELECT '-0'::float8
            (1.0, "1"),          // SELECT 1::float8
            (1.5, "1.5"),        // SELECT 1.5::float8
            (-2.25, "-2.25"),    // SELECT -2.25::float8
            (0.1, "0.1"),        // SELECT 0.1::float8
            (0.0001, "0.0001"),  // SELECT 0.0001::float8
            (0.00001, "1e-05"),  // SELECT 0.00001::float8
            (1.5e-7, "1.5e-07"), // SELECT 1.5e-7::float8
            (100000.0, "100000"),
            (1e14, "100000000000000"),
            (1e15, "1e+15"),
            (1e20, "1e+20"),
            (123456789012345.0, "123456789012345"),
            (1234567890123456.0, "1.234567890123456e+15"),
            (1.0 / 3.0, "0.3333333333333333"),
            (f64::MAX, "1.7976931348623157e+308"),
            (f64::MIN_POSITIVE, "2.2250738585072014e-308"),
            (5e-324, "5e-324"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "Infinity"),
            (f64::NEG_INFINITY, "-Infinity"),
        ];
        for (value, expected) in cases {
            assert_eq!(float8(*value), *expected, "float8 {value:?}");
        }
    }

    #[test]
    fn float4_matches_postgres() {
        let cases: &[(f32, &str)] = &[
            (0.0, "0"),
            (1.5, "1.5"),
            (0.1, "0.1"),         // SELECT 0.1::float4
            (100000.0, "100000"), // SELECT 100000::float4
            (1000000.0, "1e+06"), // SELECT 1000000::float4
            (1234567.0, "1.234567e+06"),
            (0.00001, "1e-05"),
            (3.4028235e38, "3.4028235e+38"),
            (-1.25, "-1.25"),
            (f32::NAN, "NaN"),
            (f32::NEG_INFINITY, "-Infinity"),
        ];
        for (value, expected) in cases {
            assert_eq!(float4(*value), *expected, "float4 {value:?}");
        }
    }

    #[test]
    fn decimal_prints_exactly_scale_digits() {
        assert_eq!(decimal(12345, 2), "123.45"); // SELECT 123.45::numeric(10,2)
        assert_eq!(decimal(1250, 2), "12.50"); // SELECT 12.5::numeric(10,2)
        assert_eq!(decimal(-5, 3), "-0.005"); // SELECT -0.005::numeric(10,3)
        assert_eq!(decimal(0, 2), "0.00"); // SELECT 0::numeric(10,2)
        assert_eq!(decimal(7, 0), "7");
        assert_eq!(decimal(-7, 0), "-7");
        assert_eq!(decimal(12, -2), "1200");
        assert_eq!(decimal(0, -2), "0");
        assert_eq!(
            decimal(i128::MAX, 38),
            "1.70141183460469231731687303715884105727"
        );
    }

    #[test]
    fn date_matches_postgres() {
        assert_eq!(date(0).as_deref(), Some("1970-01-01"));
        assert_eq!(date(19_753).as_deref(), Some("2024-01-31")); // SELECT '2024-01-31'::date
        assert_eq!(date(-719_162).as_deref(), Some("0001-01-01"));
        assert_eq!(date(-719_163).as_deref(), Some("0001-12-31 BC")); // day before 0001-01-01
        assert_eq!(date(2_932_896).as_deref(), Some("9999-12-31"));
        assert_eq!(date(2_932_897).as_deref(), Some("10000-01-01"));
        assert_eq!(date(i32::MAX), None);
    }

    #[test]
    fn timestamp_matches_postgres() {
        let noon = 19_753 * MICROS_PER_DAY + 12 * MICROS_PER_HOUR;
        assert_eq!(timestamp(noon).as_deref(), Some("2024-01-31 12:00:00"));
        assert_eq!(
            timestamp(noon + 500_000).as_deref(),
            Some("2024-01-31 12:00:00.5")
        );
        assert_eq!(
            timestamp(noon + 123_456).as_deref(),
            Some("2024-01-31 12:00:00.123456")
        );
        assert_eq!(timestamp(-1).as_deref(), Some("1969-12-31 23:59:59.999999"));
        assert_eq!(
            timestamptz(noon + 10_000).as_deref(),
            Some("2024-01-31 12:00:00.01+00")
        );
        let bc = -719_163 * MICROS_PER_DAY + MICROS_PER_HOUR;
        assert_eq!(timestamp(bc).as_deref(), Some("0001-12-31 01:00:00 BC"));
        assert_eq!(
            timestamptz(bc).as_deref(),
            Some("0001-12-31 01:00:00+00 BC")
        );
    }

    #[test]
    fn interval_matches_postgres() {
        let time = 4 * MICROS_PER_HOUR + 5 * MICROS_PER_MINUTE + 6_500_000;
        // SELECT '1 year 2 mons 3 days 04:05:06.5'::interval
        assert_eq!(interval(14, 3, time), "1 year 2 mons 3 days 04:05:06.5");
        assert_eq!(interval(0, 0, 0), "00:00:00");
        assert_eq!(interval(1, 0, 0), "1 mon");
        assert_eq!(interval(24, 1, 0), "2 years 1 day");
        assert_eq!(interval(0, -1, 0), "-1 days");
        // SELECT '-1 days +02:00'::interval
        assert_eq!(interval(0, -1, 2 * MICROS_PER_HOUR), "-1 days +02:00:00");
        assert_eq!(interval(0, 1, -2 * MICROS_PER_HOUR), "1 day -02:00:00");
        // SELECT '-1 year 2 mons'::interval
        assert_eq!(interval(-10, 0, 0), "-10 mons");
        assert_eq!(interval(-14, 0, 0), "-1 years -2 mons");
        assert_eq!(interval(0, 0, 25 * MICROS_PER_HOUR), "25:00:00");
        assert_eq!(interval(0, 0, -1_500_000), "-00:00:01.5");
        assert_eq!(interval(-12, 2, 0), "-1 years +2 days");
    }
}
