//! MySQL 8's partial JSON updates (`binlog_row_value_options = PARTIAL_JSON`): a
//! `PARTIAL_UPDATE_ROWS` event may log a JSON column of the after image as the list of
//! changes `JSON_SET`, `JSON_REPLACE` or `JSON_REMOVE` made to the before image, not as
//! the whole document. This module applies such a list to the before image's text.
//!
//! # Invariant
//! The text produced is the text [`binary_json_to_text`] gives for the document the
//! server holds after the changes, byte for byte: scalars keep the text the full decoder
//! printed for them (numbers are never re-formatted), and object members are printed in
//! the order MySQL's binary format keeps them, by key length and then key bytes, which is
//! also the order of every object [`binary_json_to_text`] prints. A change the document
//! cannot take (a path to nothing, an operation the format does not have) is an error
//! naming it, never a guess.
//!
//! Layout of the list (`Json_diff_vector::write_binary` in MySQL's `json_diff.cc`): for
//! each change, the operation (one byte: 0 replace, 1 insert, 2 remove), the path as a
//! length-prefixed string (`$.a[2]."b c"`), and unless it removes, the new value as a
//! length-prefixed binary JSON document. Lengths are MySQL's length-encoded integers, read
//! with mysql_common.

use mysql_common::io::ReadMysqlExt;

use super::{binary_json_to_text, write_quoted, JsonDecodeError};

const REPLACE: u8 = 0;
const INSERT: u8 = 1;
const REMOVE: u8 = 2;

/// A document no deeper than MySQL's own limit, so recursion is bounded.
const MAX_DEPTH: usize = 100;

/// Appends to `out` the text of the document `before` (text as [`binary_json_to_text`]
/// prints it) after the changes `diffs` (a partial update's value). On error `out` is left
/// as it was on entry.
pub fn apply_json_diffs(
    before: &str,
    diffs: &[u8],
    out: &mut String,
) -> Result<(), JsonDecodeError> {
    let mut doc = parse_document(before)?;
    let mut rest = diffs;
    let mut scratch = String::new();
    let truncated = |rest: &[u8], e: std::io::Error| {
        let at = diffs.len() - rest.len();
        err(format!("a truncated JSON diff list at byte {at}: {e}"))
    };
    while let Some((&op, tail)) = rest.split_first() {
        rest = tail;
        let path_bytes = rest.read_lenenc_str().map_err(|e| truncated(rest, e))?;
        let path = std::str::from_utf8(&path_bytes)
            .map_err(|_| err("a JSON diff path that is not UTF-8".into()))?;
        let legs = parse_path(path)?;
        let value = if op == REMOVE {
            None
        } else {
            let bytes = rest.read_lenenc_str().map_err(|e| truncated(rest, e))?;
            scratch.clear();
            binary_json_to_text(&bytes, &mut scratch)?;
            Some(parse_document(&scratch)?)
        };
        apply(&mut doc, op, &legs, value).map_err(|e| err(format!("{e} (path {path})")))?;
    }
    doc.print(out);
    Ok(())
}

fn err(message: String) -> JsonDecodeError {
    JsonDecodeError(message)
}

/// A JSON document as the text decoder printed it.
#[derive(Debug, Clone, PartialEq)]
enum Node {
    /// A number, literal or string, as printed (strings with their quotes and escapes).
    Scalar(String),
    Array(Vec<Node>),
    /// Members with their keys unescaped.
    Object(Vec<(String, Node)>),
}

impl Node {
    fn print(&self, out: &mut String) {
        match self {
            Node::Scalar(text) => out.push_str(text),
            Node::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    item.print(out);
                }
                out.push(']');
            }
            Node::Object(members) => {
                // The binary format's order (see the module docs).
                let mut sorted: Vec<&(String, Node)> = members.iter().collect();
                sorted
                    .sort_by(|a, b| (a.0.len(), a.0.as_bytes()).cmp(&(b.0.len(), b.0.as_bytes())));
                out.push('{');
                for (i, (key, value)) in sorted.into_iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    write_quoted(key, out);
                    out.push_str(": ");
                    value.print(out);
                }
                out.push('}');
            }
        }
    }
}

/// One step of a path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Leg {
    Member(String),
    /// An array index, counted from the end when `from_end` (`last`, `last-N`).
    Cell {
        index: usize,
        from_end: bool,
    },
}

impl Leg {
    fn describe(&self) -> String {
        match self {
            Leg::Member(key) => format!("member {key:?}"),
            Leg::Cell {
                index,
                from_end: false,
            } => format!("cell [{index}]"),
            Leg::Cell {
                index,
                from_end: true,
            } => format!("cell [last-{index}]"),
        }
    }

    /// The index this leg names in an array of `len` cells (`None` before the first).
    fn position(&self, len: usize) -> Option<usize> {
        match *self {
            Leg::Cell {
                index,
                from_end: false,
            } => Some(index),
            Leg::Cell {
                index,
                from_end: true,
            } => len.checked_sub(1)?.checked_sub(index),
            Leg::Member(_) => None,
        }
    }
}

/// The legs of a path such as `$.a[2]."b c"[last-1]`; wildcards have no place in a diff.
fn parse_path(path: &str) -> Result<Vec<Leg>, JsonDecodeError> {
    let bad = |why: &str| err(format!("JSON diff path {path:?}: {why}"));
    let rest = path
        .trim()
        .strip_prefix('$')
        .ok_or_else(|| bad("it does not start with $"))?;
    let chars: Vec<char> = rest.chars().collect();
    let mut legs = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            c if c.is_whitespace() => i += 1,
            '.' => {
                i += 1;
                if chars.get(i) == Some(&'"') {
                    let mut p = Parser {
                        chars: &chars,
                        at: i,
                    };
                    legs.push(Leg::Member(p.string_value()?));
                    i = p.at;
                } else {
                    let start = i;
                    while i < chars.len()
                        && !matches!(chars[i], '.' | '[')
                        && !chars[i].is_whitespace()
                    {
                        i += 1;
                    }
                    if i == start || chars[start..i].contains(&'*') {
                        return Err(bad("a member leg without a plain name"));
                    }
                    legs.push(Leg::Member(chars[start..i].iter().collect()));
                }
            }
            '[' => {
                let close = chars[i..]
                    .iter()
                    .position(|&c| c == ']')
                    .ok_or_else(|| bad("an unclosed ["))?;
                let inner: String = chars[i + 1..i + close].iter().collect();
                let inner = inner.trim();
                let number = |s: &str| {
                    s.trim()
                        .parse::<usize>()
                        .map_err(|_| bad("an index that is not a number"))
                };
                let leg = match inner.strip_prefix("last") {
                    Some("") => Leg::Cell {
                        index: 0,
                        from_end: true,
                    },
                    Some(back) => match back.trim_start().strip_prefix('-') {
                        Some(n) => Leg::Cell {
                            index: number(n)?,
                            from_end: true,
                        },
                        None => return Err(bad("an index after `last` without `-`")),
                    },
                    None => Leg::Cell {
                        index: number(inner)?,
                        from_end: false,
                    },
                };
                legs.push(leg);
                i += close + 1;
            }
            _ => return Err(bad("a leg that is neither .member nor [index]")),
        }
    }
    Ok(legs)
}

/// Applies one change to `doc`; the error says what was wrong, without the path.
fn apply(doc: &mut Node, op: u8, legs: &[Leg], value: Option<Node>) -> Result<(), String> {
    let Some((last, parents)) = legs.split_last() else {
        // The whole document.
        return match (op, value) {
            (REPLACE, Some(v)) => {
                *doc = v;
                Ok(())
            }
            _ => Err(format!("operation {op} on the whole document")),
        };
    };
    let mut parent = doc;
    for leg in parents {
        parent =
            child(parent, leg).ok_or_else(|| format!("no {} to go through", leg.describe()))?;
    }
    match (op, value, parent) {
        (REPLACE, Some(v), parent) => {
            let slot =
                child(parent, last).ok_or_else(|| format!("no {} to replace", last.describe()))?;
            *slot = v;
        }
        (INSERT, Some(v), Node::Object(members)) => {
            let Leg::Member(key) = last else {
                return Err(format!("an insert of {} into an object", last.describe()));
            };
            match members.iter_mut().find(|(k, _)| k == key) {
                Some((_, slot)) => *slot = v,
                None => members.push((key.clone(), v)),
            }
        }
        (INSERT, Some(v), Node::Array(items)) => {
            let at = last
                .position(items.len())
                .ok_or_else(|| format!("an insert of {} into an array", last.describe()))?;
            items.insert(at.min(items.len()), v);
        }
        (REMOVE, None, Node::Object(members)) => {
            let Leg::Member(key) = last else {
                return Err(format!("a removal of {} from an object", last.describe()));
            };
            let at = members
                .iter()
                .position(|(k, _)| k == key)
                .ok_or_else(|| format!("no {} to remove", last.describe()))?;
            members.remove(at);
        }
        (REMOVE, None, Node::Array(items)) => {
            let at = last
                .position(items.len())
                .filter(|&at| at < items.len())
                .ok_or_else(|| format!("no {} to remove", last.describe()))?;
            items.remove(at);
        }
        (op @ (INSERT | REMOVE), _, Node::Scalar(_)) => {
            return Err(format!("operation {op} inside a scalar"));
        }
        (op, _, _) => return Err(format!("an unknown operation {op}")),
    }
    Ok(())
}

/// The value `leg` names in `node`, if there is one.
fn child<'a>(node: &'a mut Node, leg: &Leg) -> Option<&'a mut Node> {
    match (node, leg) {
        (Node::Object(members), Leg::Member(key)) => {
            members.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v)
        }
        (Node::Array(items), leg @ Leg::Cell { .. }) => {
            let at = leg.position(items.len())?;
            items.get_mut(at)
        }
        _ => None,
    }
}

/// Reads the text [`binary_json_to_text`] prints (any well-formed JSON text, in fact) back
/// into a [`Node`].
fn parse_document(text: &str) -> Result<Node, JsonDecodeError> {
    let chars: Vec<char> = text.chars().collect();
    let mut p = Parser {
        chars: &chars,
        at: 0,
    };
    let node = p.value(0)?;
    p.skip_space();
    if p.at != chars.len() {
        return Err(p.fail("text after the document"));
    }
    Ok(node)
}

/// A cursor over JSON text.
struct Parser<'c> {
    chars: &'c [char],
    at: usize,
}

impl Parser<'_> {
    fn fail(&self, what: &str) -> JsonDecodeError {
        err(format!("JSON text {what} at character {}", self.at))
    }

    fn skip_space(&mut self) {
        while self.chars.get(self.at).is_some_and(|c| c.is_whitespace()) {
            self.at += 1;
        }
    }

    fn value(&mut self, depth: usize) -> Result<Node, JsonDecodeError> {
        if depth > MAX_DEPTH {
            return Err(self.fail("nested too deep"));
        }
        self.skip_space();
        match self.chars.get(self.at) {
            Some('[') => {
                self.at += 1;
                let mut items = Vec::new();
                self.skip_space();
                if self.chars.get(self.at) == Some(&']') {
                    self.at += 1;
                    return Ok(Node::Array(items));
                }
                loop {
                    items.push(self.value(depth + 1)?);
                    self.skip_space();
                    match self.chars.get(self.at) {
                        Some(',') => self.at += 1,
                        Some(']') => {
                            self.at += 1;
                            return Ok(Node::Array(items));
                        }
                        _ => return Err(self.fail("an array without , or ]")),
                    }
                }
            }
            Some('{') => {
                self.at += 1;
                let mut members = Vec::new();
                self.skip_space();
                if self.chars.get(self.at) == Some(&'}') {
                    self.at += 1;
                    return Ok(Node::Object(members));
                }
                loop {
                    self.skip_space();
                    let key = self.string_value()?;
                    self.skip_space();
                    if self.chars.get(self.at) != Some(&':') {
                        return Err(self.fail("a member without :"));
                    }
                    self.at += 1;
                    members.push((key, self.value(depth + 1)?));
                    self.skip_space();
                    match self.chars.get(self.at) {
                        Some(',') => self.at += 1,
                        Some('}') => {
                            self.at += 1;
                            return Ok(Node::Object(members));
                        }
                        _ => return Err(self.fail("an object without , or }")),
                    }
                }
            }
            Some('"') => {
                let start = self.at;
                self.string_value()?;
                Ok(Node::Scalar(self.chars[start..self.at].iter().collect()))
            }
            Some(_) => {
                let start = self.at;
                while self
                    .chars
                    .get(self.at)
                    .is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '+' | '.'))
                {
                    self.at += 1;
                }
                if start == self.at {
                    return Err(self.fail("an unexpected character"));
                }
                Ok(Node::Scalar(self.chars[start..self.at].iter().collect()))
            }
            None => Err(self.fail("that ends early")),
        }
    }

    /// A quoted string at the cursor, unescaped.
    fn string_value(&mut self) -> Result<String, JsonDecodeError> {
        if self.chars.get(self.at) != Some(&'"') {
            return Err(self.fail("a string without its opening quote"));
        }
        self.at += 1;
        let mut out = String::new();
        loop {
            let Some(&c) = self.chars.get(self.at) else {
                return Err(self.fail("a string without its closing quote"));
            };
            self.at += 1;
            match c {
                '"' => return Ok(out),
                '\\' => {
                    let Some(&e) = self.chars.get(self.at) else {
                        return Err(self.fail("an escape that ends early"));
                    };
                    self.at += 1;
                    match e {
                        '"' | '\\' | '/' => out.push(e),
                        'b' => out.push('\u{8}'),
                        'f' => out.push('\u{c}'),
                        'n' => out.push('\n'),
                        'r' => out.push('\r'),
                        't' => out.push('\t'),
                        'u' => {
                            let unit = self.hex4()?;
                            let code = if (0xd800..0xdc00).contains(&unit)
                                && self.chars.get(self.at) == Some(&'\\')
                                && self.chars.get(self.at + 1) == Some(&'u')
                            {
                                self.at += 2;
                                let low = self.hex4()?;
                                0x10000
                                    + ((unit - 0xd800) << 10)
                                    + (low.wrapping_sub(0xdc00) & 0x3ff)
                            } else {
                                unit
                            };
                            out.push(
                                char::from_u32(code)
                                    .ok_or_else(|| self.fail("an escape of no character"))?,
                            );
                        }
                        _ => return Err(self.fail("an unknown escape")),
                    }
                }
                c => out.push(c),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, JsonDecodeError> {
        let digits: String = self
            .chars
            .get(self.at..self.at + 4)
            .unwrap_or(&[])
            .iter()
            .collect();
        self.at += 4;
        u32::from_str_radix(&digits, 16)
            .map_err(|_| self.fail("a \\u escape without four hex digits"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A diff list of (operation, path, value as JSON text) changes, the values written as
    /// binary JSON strings, literals or small integers.
    fn diffs(changes: &[(u8, &str, Option<&[u8]>)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (op, path, value) in changes {
            out.push(*op);
            out.push(path.len() as u8);
            out.extend_from_slice(path.as_bytes());
            if let Some(v) = value {
                out.push(v.len() as u8);
                out.extend_from_slice(v);
            }
        }
        out
    }

    fn applied(
        before: &str,
        changes: &[(u8, &str, Option<&[u8]>)],
    ) -> Result<String, JsonDecodeError> {
        let mut out = String::new();
        apply_json_diffs(before, &diffs(changes), &mut out).map(|()| out)
    }

    // Binary JSON: an int16 (type 0x05), a string (0x0c, length, bytes), true (0x04 0x01).
    const SEVEN: &[u8] = &[0x05, 7, 0];
    const TRUE: &[u8] = &[0x04, 0x01];
    const ABC: &[u8] = &[0x0c, 3, b'a', b'b', b'c'];

    #[test]
    fn replace_insert_and_remove_keep_the_printed_form() {
        let before = r#"{"a": 1.50, "bb": [1, 2, 3], "ccc": {"x": "y\n"}}"#;
        assert_eq!(
            applied(before, &[(REPLACE, "$.a", Some(SEVEN))]).unwrap(),
            r#"{"a": 7, "bb": [1, 2, 3], "ccc": {"x": "y\n"}}"#
        );
        // A new member takes its place by key length, then bytes.
        assert_eq!(
            applied(
                before,
                &[
                    (INSERT, "$.b", Some(TRUE)),
                    (INSERT, "$.ccc.aaaa", Some(ABC))
                ]
            )
            .unwrap(),
            r#"{"a": 1.50, "b": true, "bb": [1, 2, 3], "ccc": {"x": "y\n", "aaaa": "abc"}}"#
        );
        assert_eq!(
            applied(
                before,
                &[
                    (INSERT, "$.bb[1]", Some(SEVEN)),
                    (REMOVE, "$.bb[last]", None)
                ]
            )
            .unwrap(),
            r#"{"a": 1.50, "bb": [1, 7, 2], "ccc": {"x": "y\n"}}"#
        );
        assert_eq!(
            applied(
                before,
                &[(REMOVE, "$.ccc", None), (REPLACE, "$.bb[0]", Some(ABC))]
            )
            .unwrap(),
            r#"{"a": 1.50, "bb": ["abc", 2, 3]}"#
        );
        assert_eq!(
            applied("[1]", &[(REPLACE, "$", Some(TRUE))]).unwrap(),
            "true"
        );
    }

    #[test]
    fn quoted_members_and_escapes_round_trip() {
        // `é` is two bytes, `a b` three: MySQL keeps `é` first.
        let before = r#"{"a b": "\u0001\"", "é": [true]}"#;
        assert_eq!(
            applied(before, &[(REPLACE, "$.\"a b\"", Some(SEVEN))]).unwrap(),
            r#"{"é": [true], "a b": 7}"#
        );
        assert_eq!(
            applied(before, &[(INSERT, "$.\"é\"[5]", Some(SEVEN))]).unwrap(),
            r#"{"é": [true, 7], "a b": "\u0001\""}"#
        );
    }

    #[test]
    fn a_change_the_document_cannot_take_is_an_error_naming_it() {
        let before = r#"{"a": [1]}"#;
        for (changes, expected) in [
            (
                vec![(REPLACE, "$.b", Some(SEVEN))],
                "no member \"b\" to replace (path $.b)",
            ),
            (vec![(REMOVE, "$.a[3]", None)], "no cell [3] to remove"),
            (
                vec![(INSERT, "$.a.b", Some(SEVEN))],
                "an insert of member \"b\" into an array",
            ),
            (vec![(7, "$.a", Some(SEVEN))], "an unknown operation 7"),
            (vec![(REPLACE, "a", Some(SEVEN))], "does not start with $"),
        ] {
            let e = applied(before, &changes).unwrap_err();
            assert!(e.0.contains(expected), "{e}");
        }
        let mut cut = diffs(&[(REPLACE, "$.a", Some(SEVEN))]);
        cut.pop();
        let mut out = String::from("kept");
        let e = apply_json_diffs(before, &cut, &mut out).unwrap_err();
        assert!(e.0.contains("truncated"), "{e}");
        assert_eq!(out, "kept");
    }
}
