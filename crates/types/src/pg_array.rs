//! PostgreSQL's text form of one-dimensional arrays (`array_in` /
//! `array_out`): `{1,2,NULL}`, `{"a b","x\"y",""}`.
//!
//! Clients send array parameters in it (node-postgres always; others for
//! text-format parameters), and the binary form is rendered into it.

/// Metadata of an Arrow list's element field marking the list as an
/// `int2vector` (a catalog column such as `pg_index.indkey`): it travels as
/// that type, whose text form is the numbers separated by spaces (clients
/// split it: SQLAlchemy's reflection reads `indoption` so), while SQL
/// still indexes and unnests it as an array, as PostgreSQL's.
pub const ELEMENT_INT2VECTOR: &str = "rockstream.int2vector";

/// An element as `array_out` writes it: quoted when it is empty, is `NULL`
/// spelled as text, or holds a delimiter, brace, quote, backslash or white
/// space; `None` is the NULL element.
pub fn element_text(element: Option<&str>) -> String {
    let Some(text) = element else {
        return "NULL".to_string();
    };
    let needs_quotes = text.is_empty()
        || text.eq_ignore_ascii_case("null")
        || text
            .chars()
            .any(|c| matches!(c, ',' | '{' | '}' | '"' | '\\') || c.is_whitespace());
    if !needs_quotes {
        return text.to_string();
    }
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for c in text.chars() {
        if c == '"' || c == '\\' {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted.push('"');
    quoted
}

/// The elements of a one-dimensional array's text form, `None` for each
/// NULL element; `None` when `text` is not such a form (arrays of arrays
/// included).
pub fn elements(text: &str) -> Option<Vec<Option<String>>> {
    let inner = text.trim().strip_prefix('{')?.strip_suffix('}')?;
    let mut elements = Vec::new();
    let mut chars = inner.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            // `{}`; a trailing delimiter (`{1,}`) is not an array.
            return elements.is_empty().then_some(elements);
        }
        let element = if chars.next_if_eq(&'"').is_some() {
            let mut element = String::new();
            loop {
                match chars.next()? {
                    '"' => break,
                    '\\' => element.push(chars.next()?),
                    c => element.push(c),
                }
            }
            while chars.next_if(|c| c.is_whitespace()).is_some() {}
            Some(element)
        } else {
            // Unquoted: trailing white space goes unless escaped, and only
            // the bare word NULL (no escape in it) is the NULL element.
            let mut element = String::new();
            let mut kept = 0;
            let mut escaped = false;
            while let Some(c) = chars.next_if(|c| *c != ',') {
                match c {
                    '{' | '}' | '"' => return None,
                    '\\' => {
                        element.push(chars.next()?);
                        kept = element.len();
                        escaped = true;
                    }
                    c => {
                        element.push(c);
                        if !c.is_whitespace() {
                            kept = element.len();
                        }
                    }
                }
            }
            element.truncate(kept);
            if element.is_empty() && !escaped {
                return None;
            }
            (escaped || !element.eq_ignore_ascii_case("null")).then_some(element)
        };
        elements.push(element);
        match chars.next() {
            None => return Some(elements),
            // A trailing delimiter (`{1,}`) is not an array.
            Some(',') => {
                chars.peek()?;
            }
            Some(_) => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    //! Goal: array texts read as PostgreSQL's `array_in` reads them, and
    //! elements are written as `array_out` writes them, so the two round-trip.
    use super::*;

    fn some(values: &[&str]) -> Vec<Option<String>> {
        values.iter().map(|value| Some(value.to_string())).collect()
    }

    #[test]
    fn array_texts_read_as_postgres_reads_them() {
        assert_eq!(elements("{}"), Some(Vec::new()));
        assert_eq!(elements(" { } "), Some(Vec::new()));
        assert_eq!(elements("{1,3}"), Some(some(&["1", "3"])));
        assert_eq!(elements("{ 1 , 3 }"), Some(some(&["1", "3"])));
        assert_eq!(
            elements(r#"{"a b","x\"y","",NULL,"NULL",null}"#),
            Some(vec![
                Some("a b".into()),
                Some("x\"y".into()),
                Some(String::new()),
                None,
                Some("NULL".into()),
                None
            ])
        );
        assert_eq!(elements(r"{a\,b}"), Some(some(&["a,b"])));
        assert_eq!(elements(r"{a\ ,\NULL}"), Some(some(&["a ", "NULL"])));
        for refused in [
            "", "1,2", "{1,}", "{,1}", "{{1,2}}", "{1", r#"{"a}"#, "{a\"b}",
        ] {
            assert_eq!(elements(refused), None, "{refused}");
        }
    }

    #[test]
    fn elements_round_trip_through_the_text_form() {
        let values = vec![
            Some("plain".to_string()),
            Some("with space".to_string()),
            Some("comma,brace}".to_string()),
            Some("quote\"back\\slash".to_string()),
            Some(String::new()),
            Some("null".to_string()),
            None,
        ];
        let text = format!(
            "{{{}}}",
            values
                .iter()
                .map(|value| element_text(value.as_deref()))
                .collect::<Vec<_>>()
                .join(",")
        );
        assert_eq!(elements(&text), Some(values));
    }
}
