//! Parameters a client binds in text format as PostgreSQL array literals (`{1,2,"a b",NULL}`),
//! which drivers send for an untyped `ANY($1)` (node-postgres, pgjdbc's `setArray`).
//!
//! `arrow-pg` decodes typed parameters; an array literal whose type neither the client nor the
//! plan names reaches its fallback, which splits the text on commas and keeps quotes and
//! escapes (`"1"` stays `"1"` and then fails to cast to an integer). [`fix_text_arrays`]
//! decodes such a value again from its bytes, as PostgreSQL reads an array literal; a value
//! that only looked like one (a JSON object bound as text) stays the text it is.
//!
//! # Invariant
//! An element is what PostgreSQL's array input gives: surrounding quotes and backslash escapes
//! removed, unquoted `NULL` (any case) a NULL, unquoted elements trimmed of white space. Only
//! one-dimensional literals are read as arrays.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::{ParamValues, ScalarValue};
use pgwire::api::portal::Portal;
use pgwire::api::results::FieldFormat;
use pgwire::error::PgWireResult;

use crate::frontend::protocol::error::user_error;
use crate::sqlstate::SqlState;

/// Re-decodes the text parameters of `portal` that `arrow-pg` read as a list of text, using
/// the array-literal rules above; the list keeps `arrow-pg`'s element type (text), which the
/// plan casts as it casts any text parameter.
pub fn fix_text_arrays<S>(portal: &Portal<S>, params: &mut ParamValues) -> PgWireResult<()> {
    let ParamValues::List(values) = params else {
        return Ok(());
    };
    for (i, value) in values.iter_mut().enumerate() {
        let ScalarValue::List(list) = &value.value else {
            continue;
        };
        let binary = portal.parameter_format.format_for(i) == FieldFormat::Binary;
        if list.value_type() != DataType::Utf8 || binary {
            continue;
        }
        let Some(Some(bytes)) = portal.parameters.get(i) else {
            continue;
        };
        let text = std::str::from_utf8(bytes).map_err(|_| {
            user_error(
                SqlState::INVALID_TEXT_REPRESENTATION,
                format!("parameter ${} is not valid UTF-8", i + 1),
            )
        })?;
        value.value = match array_literal(text) {
            Ok(elements) => {
                let scalars: Vec<ScalarValue> =
                    elements.into_iter().map(ScalarValue::Utf8).collect();
                ScalarValue::List(ScalarValue::new_list_nullable(&scalars, &DataType::Utf8))
            }
            // Braces alone made it look like an array (a JSON object does too): the text it is.
            Err(_) => ScalarValue::Utf8(Some(text.to_string())),
        };
    }
    Ok(())
}

/// The elements of a one-dimensional PostgreSQL array literal.
pub fn array_literal(text: &str) -> Result<Vec<Option<String>>, String> {
    let inner = text
        .trim()
        .strip_prefix('{')
        .and_then(|t| t.strip_suffix('}'))
        .ok_or("an array literal starts with \"{\" and ends with \"}\"")?;
    let mut elements = Vec::new();
    if inner.trim().is_empty() {
        return Ok(elements);
    }
    let mut chars = inner.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut element = String::new();
        let quoted = chars.next_if_eq(&'"').is_some();
        if quoted {
            loop {
                match chars.next() {
                    Some('"') => break,
                    Some('\\') => element.push(chars.next().ok_or("an escape at the end")?),
                    Some(c) => element.push(c),
                    None => return Err("an unterminated quoted element".into()),
                }
            }
            while chars.next_if(|c| c.is_whitespace()).is_some() {}
        } else {
            while let Some(c) = chars.next_if(|&c| c != ',') {
                match c {
                    '{' | '}' => return Err("nested arrays are not supported here".into()),
                    '"' => return Err("a quote inside an unquoted element".into()),
                    '\\' => element.push(chars.next().ok_or("an escape at the end")?),
                    c => element.push(c),
                }
            }
            let trimmed = element.trim_end().len();
            element.truncate(trimmed);
            if element.is_empty() {
                return Err("an empty element".into());
            }
        }
        let null = !quoted && element.eq_ignore_ascii_case("null");
        elements.push((!null).then_some(element));
        match chars.next() {
            None => return Ok(elements),
            Some(',') => {}
            Some(c) => return Err(format!("unexpected {c:?} after an element")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn some(items: &[&str]) -> Vec<Option<String>> {
        items.iter().map(|s| Some(s.to_string())).collect()
    }

    #[test]
    fn elements_are_read_as_postgresql_reads_them() {
        assert_eq!(array_literal("{1,3,5}").unwrap(), some(&["1", "3", "5"]));
        assert_eq!(
            array_literal(r#"{"1","3"}"#).unwrap(),
            some(&["1", "3"]),
            "node-postgres quotes every element"
        );
        assert_eq!(
            array_literal(r#"{"a, b", "say \"hi\"",back\\slash}"#).unwrap(),
            some(&["a, b", "say \"hi\"", "back\\slash"])
        );
        assert_eq!(
            array_literal(r#"{ x y , NULL,"NULL",null}"#).unwrap(),
            vec![Some("x y".into()), None, Some("NULL".into()), None]
        );
        assert_eq!(array_literal("{}").unwrap(), Vec::<Option<String>>::new());
        assert_eq!(
            array_literal(" { } ").unwrap(),
            Vec::<Option<String>>::new()
        );
        assert_eq!(array_literal(r#"{"",é}"#).unwrap(), some(&["", "é"]));
    }

    #[test]
    fn malformed_literals_are_refused() {
        for bad in [
            "1,2",
            "{1,2",
            "{{1,2},{3,4}}",
            r#"{"open}"#,
            "{1,,2}",
            "{1,}",
            r#"{"a"b}"#,
            r#"{a"b"}"#,
            "{a\\}",
        ] {
            assert!(array_literal(bad).is_err(), "{bad} was accepted");
        }
    }
}
