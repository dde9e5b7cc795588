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
    /// For each line that is not ASCII, the byte offset (from the line's start) of each of its
    /// characters; an ASCII line's columns are its bytes. Built once, so that finding every
    /// token of a statement is linear in its length, not quadratic (a long one-line statement
    /// walked from its line's start for each token took minutes).
    char_starts: Vec<Option<Vec<u32>>>,
}

impl<'a> Offsets<'a> {
    pub(super) fn new(text: &'a str) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        let char_starts = line_starts
            .iter()
            .enumerate()
            .map(|(i, &start)| {
                let end = line_starts.get(i + 1).copied().unwrap_or(text.len());
                let line = &text[start..end];
                (!line.is_ascii()).then(|| line.char_indices().map(|(b, _)| b as u32).collect())
            })
            .collect();
        Self {
            text,
            line_starts,
            char_starts,
        }
    }

    pub(super) fn of(&self, line: u64, column: u64) -> usize {
        let line = line.saturating_sub(1) as usize;
        let Some(&start) = self.line_starts.get(line) else {
            return self.text.len();
        };
        let column = column.saturating_sub(1) as usize;
        let offset = match &self.char_starts[line] {
            None => Some(column),
            Some(chars) => chars.get(column).map(|&b| b as usize),
        };
        offset.map_or(self.text.len(), |o| (start + o).min(self.text.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_the_byte_of_each_line_and_character_column() {
        let text = "SELECT 'é', 1\n  FROM t -- ü\nWHERE x = 'ß'";
        let offsets = Offsets::new(text);
        // Every character's (line, column) maps back to its byte.
        let (mut line, mut column) = (1, 1);
        for (byte, c) in text.char_indices() {
            assert_eq!(
                offsets.of(line, column),
                byte,
                "line {line} column {column}"
            );
            if c == '\n' {
                (line, column) = (line + 1, 1);
            } else {
                column += 1;
            }
        }
        assert_eq!(offsets.of(line, column), text.len());
        assert_eq!(offsets.of(9, 1), text.len());
    }

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
