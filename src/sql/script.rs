//! Splitting a script (an `--init` file) into statements with sqlparser's tokenizer, so that
//! semicolons inside strings, quoted names and comments never split a statement.

use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::tokenizer::{Token, Tokenizer};

use super::error::SqlError;

/// The statements of `text`, trimmed, without their terminating semicolons; empty statements
/// (and comment-only ones) are dropped.
pub fn split_statements(text: &str) -> Result<Vec<String>, SqlError> {
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, text)
        .tokenize_with_location()
        .map_err(|e| SqlError::Tokenize {
            message: e.message.clone(),
            location: Some(e.location),
        })?;
    let offsets = Offsets::new(text);
    let mut out = Vec::new();
    let mut start = 0;
    let mut has_code = false;
    for t in &tokens {
        match &t.token {
            Token::SemiColon => {
                let end = offsets.of(t.span.start.line, t.span.start.column);
                if has_code {
                    out.push(text[start..end].trim().to_string());
                }
                start = end + 1;
                has_code = false;
            }
            Token::Whitespace(_) => {}
            _ => has_code = true,
        }
    }
    if has_code {
        out.push(text[start..].trim().to_string());
    }
    Ok(out)
}

/// Byte offsets of token locations (lines and columns count from 1, columns in characters),
/// to turn tokens into slices of their text.
pub(super) struct Offsets<'a> {
    text: &'a str,
    line_starts: Vec<usize>,
}

impl<'a> Offsets<'a> {
    pub(super) fn new(text: &'a str) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Self { text, line_starts }
    }

    pub(super) fn of(&self, line: u64, column: u64) -> usize {
        let start = self
            .line_starts
            .get(line.saturating_sub(1) as usize)
            .copied()
            .unwrap_or(self.text.len());
        self.text[start..]
            .char_indices()
            .nth(column.saturating_sub(1) as usize)
            .map_or(self.text.len(), |(i, _)| start + i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn semicolons_in_strings_names_and_comments_do_not_split() {
        let script = "-- setup; not a split\nCREATE SOURCE s FROM MYSQL 'mysql://u:p;w@h:1' WITH (tables = 'a.*');\n\
                      SELECT \"x;y\" FROM t; /* ; */ ;\n  SELECT 'é;' ";
        assert_eq!(
            split_statements(script).unwrap(),
            vec![
                "-- setup; not a split\nCREATE SOURCE s FROM MYSQL 'mysql://u:p;w@h:1' WITH (tables = 'a.*')",
                "SELECT \"x;y\" FROM t",
                "SELECT 'é;'",
            ]
        );
        assert!(split_statements("SELECT 'open").is_err());
        assert!(split_statements(" ; -- nothing\n").unwrap().is_empty());
    }
}
