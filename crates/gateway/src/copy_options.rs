//! `COPY`'s options, in both spellings PostgreSQL accepts: the list
//! `WITH (FORMAT csv, HEADER, DELIMITER ';')` and the older keywords
//! `WITH CSV HEADER DELIMITER ';'` (psql's `\copy` and many scripts write
//! these). The format is settled first, then every option applies over its
//! defaults, whatever the order they were written in: `(DELIMITER ';',
//! FORMAT csv)` keeps the `;`.

use datafusion::sql::sqlparser::ast::{CopyLegacyCsvOption, CopyLegacyOption, CopyOption};
use rockstream_pgwire::{CopyFormat, CopyTarget};
use rockstream_types::{codes, RsError, RsResult};

/// The load `COPY table (columns) FROM STDIN` with these options describes.
pub(crate) fn copy_target(
    table: String,
    columns: Vec<String>,
    options: &[CopyOption],
    legacy: &[CopyLegacyOption],
) -> RsResult<CopyTarget> {
    let mut target = match format(options, legacy)? {
        CopyFormat::Csv => CopyTarget::csv(table, columns),
        CopyFormat::Text => CopyTarget::text(table, columns),
        CopyFormat::Binary => CopyTarget {
            format: CopyFormat::Binary,
            ..CopyTarget::text(table, columns)
        },
    };
    // QUOTE and ESCAPE as given (CSV only); ESCAPE defaults to QUOTE.
    let mut quote = None;
    let mut escape = None;
    for option in options {
        match option {
            CopyOption::Format(_) | CopyOption::Freeze(_) => {}
            CopyOption::Delimiter(delimiter) => {
                target.delimiter = one_byte("DELIMITER", *delimiter)?
            }
            CopyOption::Null(null) => target.null_string = null.clone(),
            CopyOption::Header(header) => target.header = *header,
            CopyOption::Quote(character) => quote = Some(one_byte("QUOTE", *character)?),
            CopyOption::Escape(character) => escape = Some(one_byte("ESCAPE", *character)?),
            CopyOption::Encoding(encoding) if is_utf8(encoding) => {}
            other => return Err(unsupported(&other.to_string())),
        }
    }
    for option in legacy {
        match option {
            CopyLegacyOption::Csv(csv_options) => {
                for csv_option in csv_options {
                    match csv_option {
                        CopyLegacyCsvOption::Header => target.header = true,
                        CopyLegacyCsvOption::Quote(character) => {
                            quote = Some(one_byte("QUOTE", *character)?)
                        }
                        CopyLegacyCsvOption::Escape(character) => {
                            escape = Some(one_byte("ESCAPE", *character)?)
                        }
                        other => return Err(unsupported(&other.to_string())),
                    }
                }
            }
            CopyLegacyOption::Delimiter(delimiter) => {
                target.delimiter = one_byte("DELIMITER", *delimiter)?
            }
            CopyLegacyOption::Null(null) => target.null_string = null.clone(),
            CopyLegacyOption::Header => target.header = true,
            other => return Err(unsupported(&other.to_string())),
        }
    }
    let binary = target.format == CopyFormat::Binary;
    if binary
        && (options.iter().any(|option| {
            !matches!(
                option,
                CopyOption::Format(_) | CopyOption::Freeze(_) | CopyOption::Encoding(_)
            )
        }) || legacy
            .iter()
            .any(|option| !matches!(option, CopyLegacyOption::Binary)))
    {
        return Err(RsError::new(
            &codes::UNSUPPORTED_STATEMENT,
            "COPY options DELIMITER, NULL, HEADER, QUOTE and ESCAPE are not allowed in binary mode",
        ));
    }
    if target.format != CopyFormat::Csv && (quote.is_some() || escape.is_some()) {
        return Err(RsError::new(
            &codes::UNSUPPORTED_STATEMENT,
            "COPY QUOTE and ESCAPE are available only in CSV mode",
        ));
    }
    if let Some(quote) = quote {
        target.quote = quote;
    }
    target.escape = escape.unwrap_or(target.quote);
    check(&target)?;
    Ok(target)
}

/// The data format the options name: text unless CSV is asked for.
fn format(options: &[CopyOption], legacy: &[CopyLegacyOption]) -> RsResult<CopyFormat> {
    let mut format = CopyFormat::Text;
    for option in options {
        if let CopyOption::Format(name) = option {
            format = match name.value.to_lowercase().as_str() {
                "text" => CopyFormat::Text,
                "csv" => CopyFormat::Csv,
                "binary" => CopyFormat::Binary,
                other => {
                    return Err(RsError::new(
                        &codes::INVALID_PARAMETER_VALUE,
                        format!("COPY format \"{other}\" not recognized"),
                    ))
                }
            };
        }
    }
    for option in legacy {
        match option {
            CopyLegacyOption::Csv(_) => format = CopyFormat::Csv,
            CopyLegacyOption::Binary => format = CopyFormat::Binary,
            _ => {}
        }
    }
    Ok(format)
}

/// PostgreSQL's checks of the options against each other.
fn check(target: &CopyTarget) -> RsResult<()> {
    let csv = target.format == CopyFormat::Csv;
    let delimiter = target.delimiter;
    if matches!(delimiter, b'\n' | b'\r') {
        return Err(RsError::new(
            &codes::INVALID_PARAMETER_VALUE,
            "COPY delimiter cannot be newline or carriage return",
        ));
    }
    // The text format's escapes (`\N`, `\.`, `\t`, ...) would read as
    // delimiters.
    if !csv
        && (matches!(delimiter, b'\\' | b'.')
            || delimiter.is_ascii_lowercase()
            || delimiter.is_ascii_digit())
    {
        return Err(RsError::new(
            &codes::INVALID_PARAMETER_VALUE,
            format!("COPY delimiter cannot be \"{}\"", delimiter as char),
        ));
    }
    if csv && delimiter == target.quote {
        return Err(RsError::new(
            &codes::INVALID_PARAMETER_VALUE,
            "COPY delimiter and quote must be different",
        ));
    }
    if target.null_string.contains(['\n', '\r']) {
        return Err(RsError::new(
            &codes::INVALID_PARAMETER_VALUE,
            "COPY null representation cannot use newline or carriage return",
        ));
    }
    if csv && target.null_string.as_bytes().contains(&target.quote) {
        return Err(RsError::new(
            &codes::INVALID_PARAMETER_VALUE,
            "CSV quote character must not appear in the NULL specification",
        ));
    }
    if target.null_string.as_bytes().contains(&delimiter) {
        return Err(RsError::new(
            &codes::INVALID_PARAMETER_VALUE,
            "COPY delimiter character must not appear in the NULL specification",
        ));
    }
    Ok(())
}

/// A delimiter, quote or escape: one single-byte character.
fn one_byte(option: &str, character: char) -> RsResult<u8> {
    u8::try_from(character)
        .ok()
        .filter(u8::is_ascii)
        .ok_or_else(|| {
            RsError::new(
                &codes::INVALID_PARAMETER_VALUE,
                format!("COPY {option} must be a single one-byte character"),
            )
        })
}

fn is_utf8(encoding: &str) -> bool {
    let name = encoding.to_lowercase().replace(['-', '_'], "");
    name == "utf8" || name == "unicode"
}

fn unsupported(option: &str) -> RsError {
    RsError::new(
        &codes::UNSUPPORTED_STATEMENT,
        format!("COPY option {option} is not supported"),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::ast::Statement;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn target(sql: &str) -> RsResult<CopyTarget> {
        let statement = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .unwrap()
            .pop()
            .unwrap();
        let Statement::Copy {
            options,
            legacy_options,
            ..
        } = statement
        else {
            panic!("not a COPY: {sql}");
        };
        copy_target("t".into(), vec![], &options, &legacy_options)
    }

    #[test]
    fn both_spellings_give_the_same_load() {
        let expected =
            target("COPY t FROM STDIN WITH (FORMAT csv, HEADER true, DELIMITER ';')").unwrap();
        assert_eq!(expected.delimiter, b';');
        assert!(expected.header);
        assert_eq!(expected.format, CopyFormat::Csv);
        for sql in [
            "COPY t FROM STDIN WITH (DELIMITER ';', HEADER, FORMAT csv)",
            "COPY t FROM STDIN WITH CSV HEADER DELIMITER ';'",
            "COPY t FROM STDIN DELIMITER ';' CSV HEADER",
        ] {
            assert_eq!(target(sql).unwrap(), expected, "{sql}");
        }
        // PostgreSQL 15 reads a header line in the text format too.
        assert!(target("COPY t FROM STDIN WITH (HEADER)").unwrap().header);
        // ESCAPE follows QUOTE unless given.
        let quoted = target("COPY t FROM STDIN WITH (FORMAT csv, QUOTE '''')").unwrap();
        assert_eq!((quoted.quote, quoted.escape), (b'\'', b'\''));
        // FORMAT csv alone: a comma, not the text format's tab.
        assert_eq!(
            target("COPY t FROM STDIN (FORMAT csv)").unwrap().delimiter,
            b','
        );
        assert_eq!(target("COPY t FROM STDIN").unwrap().delimiter, b'\t');
    }

    #[test]
    fn options_postgresql_refuses_are_refused() {
        for sql in [
            "COPY t FROM STDIN WITH (QUOTE '\"')",
            "COPY t FROM STDIN WITH (DELIMITER '.')",
            "COPY t FROM STDIN WITH (FORMAT csv, DELIMITER '\"')",
            "COPY t FROM STDIN WITH (FORMAT json)",
            "COPY t FROM STDIN WITH (FORMAT binary, HEADER)",
            "COPY t FROM STDIN WITH (DELIMITER '\\')",
            "COPY t FROM STDIN WITH (FORMAT csv, NULL 'a,b')",
        ] {
            assert!(target(sql).is_err(), "{sql}");
        }
    }
}
