//! Decoder for MySQL's binary JSON format (the bytes MySQL 5.7+/8.x stores for a
//! `JSON` column and writes into row-based binlog events) straight to JSON text.
//!
//! This module owns one thing: turning such a document into the text MySQL itself
//! prints for the same value, i.e. what `SELECT json_col` returns on MySQL 8. The
//! output must equal MySQL's own text byte for byte, so that a value read from the
//! binlog compares equal to the same value read with `SELECT`. Every formatting rule
//! below mirrors a rule in MySQL's server source; the file each one comes from is
//! named where it is used:
//!
//! * layout of the binary format: `sql-common/json_binary.{h,cc}`;
//! * printing (`Json_wrapper::to_string`, `wrapper_to_string`, `double_quote`):
//!   `sql-common/json_dom.cc` — `{"a": 1, "b": [1, 2]}` with `": "` and `", "`,
//!   object members in stored order (MySQL stores them sorted by key length, then
//!   bytes, and prints them in that order);
//! * doubles: `my_gcvt(d, MY_GCVT_ARG_DOUBLE, MY_GCVT_MAX_FIELD_WIDTH)` from
//!   `strings/dtoa.cc`, plus `.0` when that text has neither `.` nor `e`;
//! * DECIMAL: `bin2decimal` + `decimal2string` from `strings/decimal.cc`;
//! * DATE/TIME/DATETIME/TIMESTAMP: `TIME_from_longlong_*_packed` and
//!   `my_TIME_to_str(t, 6)` from `mysys/my_time.cc` (always six fractional digits,
//!   except DATE which has none);
//! * other opaque values: `"base64:type<N>:<data>"` with `base64_encode` from
//!   `mysys/base64.cc` (which breaks lines every 76 characters; the newline is
//!   then escaped as `\n` like any other control character).
//!
//! Malformed or truncated input never panics: it yields a [`JsonDecodeError`] that
//! names the problem and its byte offset within the document. Where MySQL would
//! print bytes that are not UTF-8 (it never stores such JSON strings or keys), this
//! decoder reports an error instead, since the result must be a Rust `String`.

pub mod diff;
mod scalars;

use std::fmt;

use scalars::{
    base64_mysql, decimal_text, push_display, write_double, write_temporal, FIELD_DATE,
    FIELD_DATETIME, FIELD_NEWDECIMAL, FIELD_TIME, FIELD_TIMESTAMP, FIELD_VAR_STRING,
};

/// Errors while decoding MySQL binary JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonDecodeError(pub String);

/// Shows the bare message (e.g. `truncated string: needs 5 bytes, 1 available at
/// byte offset 2`); callers add their own context such as "binary JSON: ".
impl fmt::Display for JsonDecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for JsonDecodeError {}

/// Appends the JSON text of the binary JSON document `bytes` to `out`.
///
/// An empty `bytes` is JSON `null`: MySQL stores an empty value when `NULL` is put
/// into a `NOT NULL` JSON column by `INSERT IGNORE` or in non-strict SQL mode, and
/// `json_binary::parse_binary` reads it as the null literal.
///
/// Bytes after the end of the top-level value are ignored, as MySQL does. On error
/// `out` is left as it was on entry.
pub fn binary_json_to_text(bytes: &[u8], out: &mut String) -> Result<(), JsonDecodeError> {
    let start_len = out.len();
    let result = match bytes.first() {
        None => {
            out.push_str("null");
            Ok(())
        }
        Some(&ty) => {
            let mut decoder = Decoder {
                doc: bytes,
                out,
                start_len,
                // See `Decoder::max_len`.
                max_len: bytes.len().saturating_mul(8).saturating_add(64),
            };
            decoder.value(ty, 0, 1, bytes.len(), 0)
        }
    };
    if result.is_err() {
        out.truncate(start_len);
    }
    result
}

// Type bytes (`json_binary.cc`).
const TYPE_SMALL_OBJECT: u8 = 0x00;
const TYPE_LARGE_OBJECT: u8 = 0x01;
const TYPE_SMALL_ARRAY: u8 = 0x02;
const TYPE_LARGE_ARRAY: u8 = 0x03;
const TYPE_LITERAL: u8 = 0x04;
const TYPE_INT16: u8 = 0x05;
const TYPE_UINT16: u8 = 0x06;
const TYPE_INT32: u8 = 0x07;
const TYPE_UINT32: u8 = 0x08;
const TYPE_INT64: u8 = 0x09;
const TYPE_UINT64: u8 = 0x0a;
const TYPE_DOUBLE: u8 = 0x0b;
const TYPE_STRING: u8 = 0x0c;
const TYPE_OPAQUE: u8 = 0x0f;

const LITERAL_NULL: u8 = 0x00;
const LITERAL_TRUE: u8 = 0x01;
const LITERAL_FALSE: u8 = 0x02;

/// MySQL's `JSON_DOCUMENT_MAX_DEPTH` (`json_syntax_check.cc`): printing fails once
/// arrays/objects nest deeper than this, and the limit also bounds our recursion.
const MAX_DEPTH: usize = 100;

struct Decoder<'a, 'o> {
    doc: &'a [u8],
    out: &'o mut String,
    start_len: usize,
    /// Cap on the text produced. A well-formed document prints to at most about six
    /// times its size (a string of control characters, each escaped as `\u00XX`);
    /// only a forged document whose value offsets share one sub-value many times over
    /// can exceed 8x + 64, and without a cap it could expand exponentially.
    max_len: usize,
}

type Res = Result<(), JsonDecodeError>;

impl<'a> Decoder<'a, '_> {
    fn err(&self, at: usize, what: impl fmt::Display) -> JsonDecodeError {
        JsonDecodeError(format!("{what} at byte offset {at}"))
    }

    /// `n` bytes at `pos`, which must end at or before `end`.
    fn take(
        &self,
        pos: usize,
        n: usize,
        end: usize,
        what: &str,
    ) -> Result<&'a [u8], JsonDecodeError> {
        match pos.checked_add(n) {
            Some(stop) if stop <= end && stop <= self.doc.len() => Ok(&self.doc[pos..stop]),
            _ => Err(self.err(
                pos,
                format_args!(
                    "truncated {what}: needs {n} bytes, {} available",
                    end.min(self.doc.len()).saturating_sub(pos)
                ),
            )),
        }
    }

    /// `N` bytes at `pos` as an array, bounded like [`Self::take`].
    fn take_array<const N: usize>(
        &self,
        pos: usize,
        end: usize,
        what: &str,
    ) -> Result<[u8; N], JsonDecodeError> {
        let mut out = [0u8; N];
        for (o, b) in out.iter_mut().zip(self.take(pos, N, end, what)?) {
            *o = *b;
        }
        Ok(out)
    }

    fn uint(&self, pos: usize, n: usize, end: usize, what: &str) -> Result<u64, JsonDecodeError> {
        let b = self.take(pos, n, end, what)?;
        Ok(b.iter()
            .rev()
            .fold(0u64, |acc, &x| (acc << 8) | u64::from(x)))
    }

    fn check_len(&self, at: usize) -> Res {
        if self.out.len() - self.start_len > self.max_len {
            return Err(self.err(
                at,
                "decoded text exceeds 8x the document size (value offsets reuse data)",
            ));
        }
        Ok(())
    }

    /// Decodes the value of type `ty` whose type byte is at `type_at` and whose data
    /// starts at `pos`; it may use bytes up to `end` (exclusive), like MySQL's
    /// `parse_value(type, data, len)`.
    fn value(&mut self, ty: u8, type_at: usize, pos: usize, end: usize, depth: usize) -> Res {
        match ty {
            TYPE_SMALL_OBJECT => self.container(pos, end, false, true, depth),
            TYPE_LARGE_OBJECT => self.container(pos, end, true, true, depth),
            TYPE_SMALL_ARRAY => self.container(pos, end, false, false, depth),
            TYPE_LARGE_ARRAY => self.container(pos, end, true, false, depth),
            _ => self.scalar(ty, type_at, pos, end),
        }
    }

    /// Object or array:
    /// `count size [key-entry]* value-entry* [key]* value*`, where count, size and
    /// every offset are 2 bytes (small) or 4 bytes (large), offsets are relative to
    /// `pos`, key lengths are always 2 bytes.
    fn container(
        &mut self,
        pos: usize,
        end: usize,
        large: bool,
        object: bool,
        depth: usize,
    ) -> Res {
        let depth = depth + 1;
        if depth > MAX_DEPTH {
            return Err(self.err(
                pos,
                format_args!("document nested deeper than {MAX_DEPTH} levels"),
            ));
        }
        let what = if object {
            "object header"
        } else {
            "array header"
        };
        let os: usize = if large { 4 } else { 2 };
        let count = self.uint(pos, os, end, what)?;
        let size = self.uint(pos + os, os, end, what)?;
        let avail = end.min(self.doc.len()) - pos;
        if size > avail as u64 {
            return Err(self.err(
                pos,
                format_args!("container size {size} exceeds the {avail} bytes available"),
            ));
        }
        let size = size as usize;
        let key_entry = if object { os + 2 } else { 0 };
        let value_entry = 1 + os;
        // u64: count can be up to 2^32 and must not overflow before the check.
        let header = 2 * os as u64 + count * (key_entry + value_entry) as u64;
        if header > size as u64 {
            return Err(self.err(
                pos,
                format_args!(
                    "{count} entries need a {header}-byte header but the container has {size} bytes"
                ),
            ));
        }
        let count = count as usize;
        let header = header as usize;
        let cend = pos + size;
        let values_at = pos + 2 * os + count * key_entry;

        self.out.push(if object { '{' } else { '[' });
        for i in 0..count {
            if i > 0 {
                self.out.push_str(", ");
            }
            if object {
                let entry = pos + 2 * os + i * key_entry;
                let key_off = self.uint(entry, os, cend, "key entry")?;
                let key_len = self.uint(entry + os, 2, cend, "key entry")?;
                // Keys live after the header and inside the object (`Value::key`).
                if key_off < header as u64 || key_off + key_len > size as u64 {
                    return Err(self.err(
                        entry,
                        format_args!("key {i} offset {key_off} length {key_len} outside the object's key area"),
                    ));
                }
                let (key_off, key_len) = (key_off as usize, key_len as usize);
                let key = &self.doc[pos + key_off..pos + key_off + key_len];
                let key = std::str::from_utf8(key)
                    .map_err(|_| self.err(pos + key_off, "object key is not valid UTF-8"))?;
                write_quoted(key, self.out);
                self.out.push_str(": ");
            }
            let entry = values_at + i * value_entry;
            let ty = self.take(entry, 1, cend, "value entry")?[0];
            if is_inlined(ty, large) {
                // The scalar sits in the offset field itself (`Value::element`).
                self.scalar(ty, entry, entry + 1, entry + value_entry)?;
            } else {
                let off = self.uint(entry + 1, os, cend, "value entry")?;
                if off > size as u64 || off < (entry - pos + value_entry) as u64 {
                    return Err(self.err(
                        entry,
                        format_args!("value {i} offset {off} outside the container's value area"),
                    ));
                }
                self.value(ty, entry, pos + off as usize, cend, depth)?;
            }
            self.check_len(entry)?;
        }
        self.out.push(if object { '}' } else { ']' });
        Ok(())
    }

    fn scalar(&mut self, ty: u8, type_at: usize, pos: usize, end: usize) -> Res {
        match ty {
            TYPE_LITERAL => match self.take(pos, 1, end, "literal")?[0] {
                LITERAL_NULL => self.out.push_str("null"),
                LITERAL_TRUE => self.out.push_str("true"),
                LITERAL_FALSE => self.out.push_str("false"),
                other => return Err(self.err(pos, format_args!("unknown literal 0x{other:02x}"))),
            },
            TYPE_INT16 => {
                push_display(
                    self.out,
                    i16::from_le_bytes(self.take_array(pos, end, "int16")?),
                );
            }
            TYPE_UINT16 => {
                push_display(
                    self.out,
                    u16::from_le_bytes(self.take_array(pos, end, "uint16")?),
                );
            }
            TYPE_INT32 => {
                let b = self.take_array(pos, end, "int32")?;
                push_display(self.out, i32::from_le_bytes(b));
            }
            TYPE_UINT32 => {
                let b = self.take_array(pos, end, "uint32")?;
                push_display(self.out, u32::from_le_bytes(b));
            }
            TYPE_INT64 => {
                let b = self.take_array(pos, end, "int64")?;
                push_display(self.out, i64::from_le_bytes(b));
            }
            TYPE_UINT64 => {
                let b = self.take_array(pos, end, "uint64")?;
                push_display(self.out, u64::from_le_bytes(b));
            }
            TYPE_DOUBLE => {
                // float8store: IEEE 754 little-endian on every platform.
                let d = f64::from_le_bytes(self.take_array(pos, end, "double")?);
                if !d.is_finite() {
                    // MySQL never stores NaN or infinities (its printer asserts on them).
                    return Err(self.err(pos, "double is NaN or infinite"));
                }
                write_double(d, self.out);
            }
            TYPE_STRING => {
                let (len, n) = self.var_len(pos, end, "string length")?;
                let data = self.take(pos + n, len, end, "string")?;
                let s = std::str::from_utf8(data)
                    .map_err(|_| self.err(pos + n, "string is not valid UTF-8"))?;
                write_quoted(s, self.out);
            }
            TYPE_OPAQUE => {
                let field_type = self.take(pos, 1, end, "opaque type")?[0];
                let (len, n) = self.var_len(pos + 1, end, "opaque length")?;
                let data_at = pos + 1 + n;
                let data = self.take(data_at, len, end, "opaque data")?;
                self.opaque(field_type, data, data_at)?;
            }
            other => {
                return Err(self.err(type_at, format_args!("unknown value type 0x{other:02x}")));
            }
        }
        Ok(())
    }

    /// Length prefix of strings and opaque data: 7 bits per byte, least significant
    /// group first, high bit set on every byte but the last; at most 5 bytes and the
    /// value must fit in 32 bits (`read_variable_length`).
    fn var_len(
        &self,
        pos: usize,
        end: usize,
        what: &str,
    ) -> Result<(usize, usize), JsonDecodeError> {
        let mut len: u64 = 0;
        for i in 0..5 {
            let b = self.take(pos + i, 1, end, what)?[0];
            len |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                if len > u64::from(u32::MAX) {
                    return Err(self.err(pos, format_args!("{what} {len} exceeds 32 bits")));
                }
                return Ok((len as usize, i + 1));
            }
        }
        Err(self.err(pos, format_args!("{what} runs past 5 bytes")))
    }

    /// Opaque values print by their MySQL field type (`Json_wrapper::type()` and
    /// `wrapper_to_string` in `json_dom.cc`).
    fn opaque(&mut self, field_type: u8, data: &[u8], at: usize) -> Res {
        match field_type {
            FIELD_NEWDECIMAL => {
                let text = decimal_text(data).map_err(|e| self.err(at, e))?;
                self.out.push_str(&text);
            }
            FIELD_DATE | FIELD_TIME | FIELD_DATETIME | FIELD_TIMESTAMP => {
                // `Json_datetime::from_packed` reads exactly one 8-byte packed value.
                let packed: [u8; 8] = data.try_into().map_err(|_| {
                    self.err(
                        at,
                        format_args!(
                            "temporal value of field type {field_type} has {} bytes, not 8",
                            data.len()
                        ),
                    )
                })?;
                self.out.push('"');
                write_temporal(field_type, i64::from_le_bytes(packed), self.out);
                self.out.push('"');
            }
            FIELD_VAR_STRING => {
                // wrapper_to_string treats VAR_STRING opaques (made from strings in
                // subqueries) as plain JSON strings.
                let s = std::str::from_utf8(data)
                    .map_err(|_| self.err(at, "VAR_STRING opaque value is not valid UTF-8"))?;
                write_quoted(s, self.out);
            }
            _ => {
                // The whole text goes through double_quote, so base64_encode's line
                // breaks print as `\n` (MySQL 8.0.2x on; early 8.0 releases appended
                // the base64 text unescaped).
                let mut text = format!("base64:type{field_type}:");
                base64_mysql(data, &mut text);
                write_quoted(&text, self.out);
            }
        }
        Ok(())
    }
}

/// Scalars small enough to live in a value entry's offset field (`inlined_type`):
/// literals and 16-bit integers always, 32-bit integers in the large format.
fn is_inlined(ty: u8, large: bool) -> bool {
    match ty {
        TYPE_LITERAL | TYPE_INT16 | TYPE_UINT16 => true,
        TYPE_INT32 | TYPE_UINT32 => large,
        _ => false,
    }
}

/// `double_quote` in `json_dom.cc`: `"` and `\` are backslash-escaped, \b \t \n \f \r
/// get their short escapes, every other byte <= 0x1f becomes `\u00XX` (lower-case
/// hex); everything else, including DEL, `/` and non-ASCII UTF-8, is copied as is.
pub(super) fn write_quoted(s: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(s.len() + 2);
    out.push('"');
    let bytes = s.as_bytes();
    let mut plain_from = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if b > 0x1f && b != b'"' && b != b'\\' {
            continue;
        }
        // Special bytes are ASCII, so these slice bounds are char boundaries.
        out.push_str(&s[plain_from..i]);
        plain_from = i + 1;
        out.push('\\');
        match b {
            b'"' => out.push('"'),
            b'\\' => out.push('\\'),
            0x08 => out.push('b'),
            b'\t' => out.push('t'),
            b'\n' => out.push('n'),
            0x0c => out.push('f'),
            b'\r' => out.push('r'),
            _ => {
                out.push_str("u00");
                out.push(HEX[usize::from(b >> 4)] as char);
                out.push(HEX[usize::from(b & 0x0f)] as char);
            }
        }
    }
    out.push_str(&s[plain_from..]);
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(doc: &[u8]) -> String {
        let mut s = String::new();
        binary_json_to_text(doc, &mut s).unwrap_or_else(|e| panic!("{e} for {doc:02x?}"));
        s
    }

    fn error(doc: &[u8]) -> String {
        let mut s = String::from("keep");
        let e = binary_json_to_text(doc, &mut s).expect_err("should fail");
        assert_eq!(s, "keep", "output must be restored on error");
        e.0
    }

    fn dbl(d: f64) -> String {
        let mut doc = vec![TYPE_DOUBLE];
        doc.extend_from_slice(&d.to_le_bytes());
        text(&doc)
    }

    /// Hand-assembles an array/object body (without its type byte) the way MySQL
    /// lays it out. `values` are (type byte, payload): payloads of inlinable types go
    /// into the value entry, the rest after the keys, linked by offset.
    fn container(object: bool, large: bool, keys: &[&str], values: &[(u8, Vec<u8>)]) -> Vec<u8> {
        let os = if large { 4 } else { 2 };
        let put = |v: &mut Vec<u8>, x: usize| {
            v.extend_from_slice(&(x as u32).to_le_bytes()[..os]);
        };
        let n = values.len();
        let key_entry = if object { os + 2 } else { 0 };
        let header = 2 * os + n * (key_entry + 1 + os);
        let mut key_area = Vec::new();
        let mut key_entries = Vec::new();
        for k in keys {
            put(&mut key_entries, header + key_area.len());
            key_entries.extend_from_slice(&(k.len() as u16).to_le_bytes());
            key_area.extend_from_slice(k.as_bytes());
        }
        let mut value_entries = Vec::new();
        let mut value_area = Vec::new();
        for (ty, payload) in values {
            value_entries.push(*ty);
            if is_inlined(*ty, large) {
                let mut p = payload.clone();
                p.resize(os, 0);
                value_entries.extend_from_slice(&p);
            } else {
                put(
                    &mut value_entries,
                    header + key_area.len() + value_area.len(),
                );
                value_area.extend_from_slice(payload);
            }
        }
        let size = header + key_area.len() + value_area.len();
        let mut body = Vec::new();
        put(&mut body, n);
        put(&mut body, size);
        body.extend(key_entries);
        body.extend(value_entries);
        body.extend(key_area);
        body.extend(value_area);
        body
    }

    fn doc(ty: u8, body: Vec<u8>) -> Vec<u8> {
        let mut d = vec![ty];
        d.extend(body);
        d
    }

    #[test]
    fn empty_document_is_null() {
        assert_eq!(text(&[]), "null");
    }

    #[test]
    fn literals_and_integers() {
        assert_eq!(text(&[TYPE_LITERAL, 0]), "null");
        assert_eq!(text(&[TYPE_LITERAL, 1]), "true");
        assert_eq!(text(&[TYPE_LITERAL, 2]), "false");
        assert_eq!(text(&[TYPE_INT16, 0x00, 0x80]), "-32768");
        assert_eq!(text(&[TYPE_UINT16, 0xff, 0xff]), "65535");
        assert_eq!(text(&[TYPE_INT32, 0xff, 0xff, 0xff, 0xff]), "-1");
        assert_eq!(text(&[TYPE_UINT32, 0xff, 0xff, 0xff, 0xff]), "4294967295");
        let mut d = vec![TYPE_INT64];
        d.extend_from_slice(&i64::MIN.to_le_bytes());
        assert_eq!(text(&d), "-9223372036854775808");
        let mut d = vec![TYPE_UINT64];
        d.extend_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(text(&d), "18446744073709551615");
        // Bytes after the top-level value are ignored, like MySQL does.
        assert_eq!(text(&[TYPE_LITERAL, 1, 0xee]), "true");
    }

    #[test]
    fn strings_and_escaping() {
        assert_eq!(text(&[TYPE_STRING, 3, b'a', b'b', b'c']), "\"abc\"");
        assert_eq!(text(&[TYPE_STRING, 0]), "\"\"");
        let raw = b"q\"b\\/\x08\x0c\n\r\t\x00\x01\x1f\x7f";
        let mut d = vec![TYPE_STRING, raw.len() as u8];
        d.extend_from_slice(raw);
        // DEL (0x7f) and '/' are not escaped.
        assert_eq!(
            text(&d),
            "\"q\\\"b\\\\/\\b\\f\\n\\r\\t\\u0000\\u0001\\u001f\u{7f}\""
        );
        let utf8 = "héllo ☃ 😀";
        let mut d = vec![TYPE_STRING, utf8.len() as u8];
        d.extend_from_slice(utf8.as_bytes());
        assert_eq!(text(&d), format!("\"{utf8}\""));
        // Two-byte length prefix: 200 = 0xc8 -> [0xc8, 0x01].
        let mut d = vec![TYPE_STRING, 0xc8, 0x01];
        d.extend(std::iter::repeat_n(b'x', 200));
        assert_eq!(text(&d), format!("\"{}\"", "x".repeat(200)));
        assert!(error(&[TYPE_STRING, 2, 0xc3, 0x28]).contains("not valid UTF-8"));
    }

    #[test]
    fn escapes_next_to_quotes() {
        let mut d = vec![TYPE_STRING, 2, 0x1e, b'"'];
        assert_eq!(text(&d), "\"\\u001e\\\"\"");
        d[2] = 0x0b;
        assert_eq!(text(&d), "\"\\u000b\\\"\"");
    }

    #[test]
    fn doubles_match_my_gcvt() {
        let cases: &[(f64, &str)] = &[
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (3.0, "3.0"),
            (-2.0, "-2.0"),
            (100.0, "100.0"),
            (0.5, "0.5"),
            (0.1, "0.1"),
            (-1.25, "-1.25"),
            (1.0 / 3.0, "0.3333333333333333"),
            (123456.789, "123456.789"),
            (1e14, "100000000000000.0"),
            (123456789012345.0, "123456789012345.0"),
            (1e15, "1e15"),
            (1e16, "1e16"),
            (1234567890123456.7, "1234567890123456.8"),
            // 1608882928643910.25 is exactly halfway between ...10.2 and ...10.3,
            // both of which read back as it: dtoa keeps the even digit.
            (1608882928643910.0 + 0.25, "1608882928643910.2"),
            (-1608882928643910.0 - 0.25, "-1608882928643910.2"),
            (1608882928643910.0 + 0.75, "1608882928643910.8"),
            (12345678901234567.0, "1.2345678901234568e16"),
            (123456789012345680.0, "1.2345678901234568e17"),
            (1e100, "1e100"),
            (1.5e300, "1.5e300"),
            (f64::MAX, "1.7976931348623157e308"),
            (0.001, "0.001"),
            (0.0001, "0.0001"),
            (1e-14, "0.00000000000001"),
            (1.5e-14, "0.000000000000015"),
            (1e-15, "0.000000000000001"),
            (1.2345e-15, "0.0000000000000012345"),
            (1e-16, "1e-16"),
            (9.99e-16, "9.99e-16"),
            (-1e-7, "-0.0000001"),
            (5e-324, "5e-324"),
            (2.2250738585072014e-308, "2.2250738585072014e-308"),
            (-123.0e-20, "-1.23e-18"),
        ];
        for (d, want) in cases {
            assert_eq!(dbl(*d), *want, "double {d:e}");
        }
        let mut d = vec![TYPE_DOUBLE];
        d.extend_from_slice(&f64::NAN.to_le_bytes());
        assert!(error(&d).contains("NaN"));
    }

    #[test]
    fn small_and_large_arrays_with_inlining() {
        // [1, true, null, -2, "ab", 70000] as a small array: 16-bit ints and literals
        // inlined, int32 70000 stored after the entries.
        let small = container(
            false,
            false,
            &[],
            &[
                (TYPE_INT16, vec![1, 0]),
                (TYPE_LITERAL, vec![1]),
                (TYPE_LITERAL, vec![0]),
                (TYPE_INT16, vec![0xfe, 0xff]),
                (TYPE_STRING, vec![2, b'a', b'b']),
                (TYPE_INT32, 70000i32.to_le_bytes().to_vec()),
            ],
        );
        assert_eq!(
            text(&doc(TYPE_SMALL_ARRAY, small)),
            "[1, true, null, -2, \"ab\", 70000]"
        );

        // Large format: int32/uint32 are inlined too.
        let large = container(
            false,
            true,
            &[],
            &[
                (TYPE_INT32, (-70000i32).to_le_bytes().to_vec()),
                (TYPE_UINT32, 4_000_000_000u32.to_le_bytes().to_vec()),
                (TYPE_UINT16, vec![0xff, 0xff]),
                (TYPE_LITERAL, vec![2]),
                (TYPE_DOUBLE, 2.5f64.to_le_bytes().to_vec()),
            ],
        );
        assert_eq!(
            text(&doc(TYPE_LARGE_ARRAY, large)),
            "[-70000, 4000000000, 65535, false, 2.5]"
        );
        assert_eq!(text(&[TYPE_SMALL_ARRAY, 0, 0, 4, 0]), "[]");
        assert_eq!(text(&[TYPE_LARGE_ARRAY, 0, 0, 0, 0, 8, 0, 0, 0]), "[]");
    }

    #[test]
    fn hand_encoded_small_array_bytes() {
        // ["abc", "def"] exactly as the json_binary.cc partial-update comment lays it out.
        let d = [
            0x02, 0x02, 0x00, 0x12, 0x00, 0x0c, 0x0a, 0x00, 0x0c, 0x0e, 0x00, 0x03, b'a', b'b',
            b'c', 0x03, b'd', b'e', b'f',
        ];
        assert_eq!(text(&d), r#"["abc", "def"]"#);
        // Same array after `JSON_SET(j, '$[1]', 456)`: inlined int16 with free space left.
        let mut d2 = d;
        d2[8] = 0x05;
        d2[9] = 0xc8;
        d2[10] = 0x01;
        assert_eq!(text(&d2), r#"["abc", 456]"#);
    }

    #[test]
    fn objects_small_large_and_nested() {
        // {"a": 1, "b": [1, 2]}
        let inner = container(
            false,
            false,
            &[],
            &[(TYPE_INT16, vec![1, 0]), (TYPE_INT16, vec![2, 0])],
        );
        let obj = container(
            true,
            false,
            &["a", "b"],
            &[(TYPE_INT16, vec![1, 0]), (TYPE_SMALL_ARRAY, inner)],
        );
        assert_eq!(
            text(&doc(TYPE_SMALL_OBJECT, obj.clone())),
            r#"{"a": 1, "b": [1, 2]}"#
        );

        // The same hand-written: count 2, size, key entries, value entries, keys, value.
        let raw = [
            0x00, 0x02, 0x00, 0x1e, 0x00, // small object, 2 members, 30 bytes
            0x12, 0x00, 0x01, 0x00, // key "a" at 18, length 1
            0x13, 0x00, 0x01, 0x00, // key "b" at 19, length 1
            0x05, 0x01, 0x00, // int16 1 inlined
            0x02, 0x14, 0x00, // small array at 20
            b'a', b'b', // keys
            0x02, 0x00, 0x0a, 0x00, 0x05, 0x01, 0x00, 0x05, 0x02, 0x00, // [1, 2]
        ];
        assert_eq!(text(&raw), r#"{"a": 1, "b": [1, 2]}"#);

        // Large object with an inlined uint32, escaped key, nested object value.
        let nested = container(true, false, &[], &[]);
        let large = container(
            true,
            true,
            &["k", "q\"", "obj"],
            &[
                (TYPE_UINT32, 123456u32.to_le_bytes().to_vec()),
                (TYPE_STRING, vec![1, b'v']),
                (TYPE_SMALL_OBJECT, nested),
            ],
        );
        assert_eq!(
            text(&doc(TYPE_LARGE_OBJECT, large)),
            r#"{"k": 123456, "q\"": "v", "obj": {}}"#
        );
        assert_eq!(text(&[TYPE_SMALL_OBJECT, 0, 0, 4, 0]), "{}");
    }

    fn opaque(field_type: u8, data: &[u8]) -> Vec<u8> {
        assert!(data.len() < 128);
        let mut d = vec![TYPE_OPAQUE, field_type, data.len() as u8];
        d.extend_from_slice(data);
        d
    }

    #[test]
    fn opaque_decimal() {
        // DECIMAL(14,4) 1234567890.1234 -> 81 0D FB 38 D2 04 D2 (decimal.cc's example).
        let pos = [14, 4, 0x81, 0x0d, 0xfb, 0x38, 0xd2, 0x04, 0xd2];
        assert_eq!(text(&opaque(FIELD_NEWDECIMAL, &pos)), "1234567890.1234");
        let neg = [14, 4, 0x7e, 0xf2, 0x04, 0xc7, 0x2d, 0xfb, 0x2d];
        assert_eq!(text(&opaque(FIELD_NEWDECIMAL, &neg)), "-1234567890.1234");
        // DECIMAL(3,2) 1.50: intg 1 digit in 1 byte, 2 frac digits in 1 byte.
        assert_eq!(text(&opaque(FIELD_NEWDECIMAL, &[3, 2, 0x81, 50])), "1.50");
        // DECIMAL(2,2) 0.05 -> integer part prints as 0.
        assert_eq!(text(&opaque(FIELD_NEWDECIMAL, &[2, 2, 0x85])), "0.05");
        // DECIMAL(5,0) 0 and 42.
        assert_eq!(text(&opaque(FIELD_NEWDECIMAL, &[5, 0, 0x80, 0, 0])), "0");
        assert_eq!(text(&opaque(FIELD_NEWDECIMAL, &[5, 0, 0x80, 0, 42])), "42");
        // DECIMAL(20,10) -1.5: 10 int digits = 1 byte (1 digit) + 4 bytes; 10 frac = 4 + 1.
        let mut bytes = vec![0, 0, 0, 0, 1, 0x1d, 0xcd, 0x65, 0x00, 0];
        bytes.iter_mut().for_each(|b| *b = !*b);
        bytes[0] ^= 0x80;
        let mut data = vec![20, 10];
        data.extend(bytes);
        assert_eq!(text(&opaque(FIELD_NEWDECIMAL, &data)), "-1.5000000000");
        // Wrong length and bad digits are errors.
        assert!(error(&opaque(FIELD_NEWDECIMAL, &[3, 2, 0x81])).contains("needs 2 bytes"));
        assert!(error(&opaque(FIELD_NEWDECIMAL, &[3, 2, 0x81, 200])).contains("digit group"));
        assert!(error(&opaque(FIELD_NEWDECIMAL, &[2, 3, 0x80, 0])).contains("scale"));
        assert!(error(&opaque(FIELD_NEWDECIMAL, &[1])).contains("header"));
    }

    fn packed_datetime(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64, us: i64) -> [u8; 8] {
        let ymd = ((y * 13 + mo) << 5) | d;
        let hms = (h << 12) | (mi << 6) | s;
        (((ymd << 17) | hms) << 24 | us).to_le_bytes()
    }

    fn packed_time(neg: bool, h: i64, mi: i64, s: i64, us: i64) -> [u8; 8] {
        let v = (((h << 12) | (mi << 6) | s) << 24) + us;
        (if neg { -v } else { v }).to_le_bytes()
    }

    #[test]
    fn opaque_temporals() {
        let dt = packed_datetime(2015, 1, 15, 23, 24, 25, 0);
        assert_eq!(
            text(&opaque(FIELD_DATETIME, &dt)),
            "\"2015-01-15 23:24:25.000000\""
        );
        assert_eq!(
            text(&opaque(FIELD_TIMESTAMP, &dt)),
            "\"2015-01-15 23:24:25.000000\""
        );
        let dt = packed_datetime(1, 2, 3, 4, 5, 6, 7);
        assert_eq!(
            text(&opaque(FIELD_DATETIME, &dt)),
            "\"0001-02-03 04:05:06.000007\""
        );
        let d = packed_datetime(2024, 2, 29, 0, 0, 0, 0);
        assert_eq!(text(&opaque(FIELD_DATE, &d)), "\"2024-02-29\"");
        assert_eq!(text(&opaque(FIELD_DATE, &[0; 8])), "\"0000-00-00\"");
        let t = packed_time(false, 12, 34, 56, 789);
        assert_eq!(text(&opaque(FIELD_TIME, &t)), "\"12:34:56.000789\"");
        let t = packed_time(true, 838, 59, 59, 999_999);
        assert_eq!(text(&opaque(FIELD_TIME, &t)), "\"-838:59:59.999999\"");
        let t = packed_time(false, 1, 2, 3, 0);
        assert_eq!(text(&opaque(FIELD_TIME, &t)), "\"01:02:03.000000\"");
        assert!(error(&opaque(FIELD_TIME, &[0; 7])).contains("not 8"));
    }

    #[test]
    fn other_opaques_are_base64() {
        assert_eq!(text(&opaque(15, b"abc")), "\"base64:type15:YWJj\"");
        assert_eq!(text(&opaque(252, b"ab")), "\"base64:type252:YWI=\"");
        assert_eq!(text(&opaque(16, &[0xff])), "\"base64:type16:/w==\"");
        assert_eq!(text(&opaque(15, b"")), "\"base64:type15:\"");
        // 57 bytes make exactly 76 characters: no line break yet; 58 bytes break once.
        let b57 = text(&opaque(252, &[0u8; 57]));
        assert_eq!(b57, format!("\"base64:type252:{}\"", "A".repeat(76)));
        let b58 = text(&opaque(252, &[0u8; 58]));
        assert_eq!(b58, format!("\"base64:type252:{}\\nAA==\"", "A".repeat(76)));
        // VAR_STRING opaques print as plain strings.
        assert_eq!(text(&opaque(FIELD_VAR_STRING, b"x\ny")), "\"x\\ny\"");
    }

    #[test]
    fn nested_opaques_inside_containers() {
        // Opaque payload in a container: field type, length, data.
        let dec = vec![FIELD_NEWDECIMAL, 4, 3, 2, 0x81, 50];
        let date = [
            vec![FIELD_DATE, 8],
            packed_datetime(2020, 12, 31, 0, 0, 0, 0).to_vec(),
        ]
        .concat();
        let arr = container(
            false,
            false,
            &[],
            &[(TYPE_OPAQUE, dec), (TYPE_OPAQUE, date)],
        );
        assert_eq!(text(&doc(TYPE_SMALL_ARRAY, arr)), "[1.50, \"2020-12-31\"]");
    }

    /// `levels` nested single-element small arrays around `[]`.
    fn nested_arrays(levels: usize) -> Vec<u8> {
        let mut body = vec![0, 0, 4, 0];
        for _ in 1..levels {
            body = container(false, false, &[], &[(TYPE_SMALL_ARRAY, body)]);
        }
        doc(TYPE_SMALL_ARRAY, body)
    }

    #[test]
    fn depth_limit_is_100() {
        let ok = text(&nested_arrays(100));
        assert_eq!(ok, format!("{}{}", "[".repeat(100), "]".repeat(100)));
        assert!(error(&nested_arrays(101)).contains("deeper than 100"));
    }

    #[test]
    fn truncation_and_corruption_are_errors() {
        let full = {
            let obj = container(
                true,
                false,
                &["key"],
                &[(TYPE_STRING, vec![5, b'v', b'a', b'l', b'u', b'e'])],
            );
            doc(TYPE_SMALL_OBJECT, obj)
        };
        assert_eq!(text(&full), r#"{"key": "value"}"#);
        for cut in 1..full.len() {
            let e = error(&full[..cut]);
            assert!(e.contains("byte offset"), "{e}");
        }
        assert!(error(&[TYPE_INT64, 1, 2, 3]).contains("truncated int64"));
        assert!(error(&[TYPE_DOUBLE, 0]).contains("truncated double"));
        assert!(error(&[0x0d, 0]).contains("unknown value type 0x0d at byte offset 0"));
        assert!(error(&[TYPE_LITERAL, 3]).contains("unknown literal"));
        assert!(error(&[TYPE_STRING, 0x80, 0x80, 0x80, 0x80, 0x80, 1]).contains("past 5 bytes"));
        assert!(error(&[TYPE_STRING, 0xff, 0xff, 0xff, 0xff, 0x7f]).contains("32 bits"));
        assert!(error(&[TYPE_STRING, 5, b'a']).contains("truncated string"));
        assert!(error(&[TYPE_OPAQUE, 15]).contains("opaque length"));
        // Header claims more entries than the size allows.
        assert!(error(&[TYPE_SMALL_ARRAY, 9, 0, 4, 0]).contains("header"));
        // Value offset pointing back into the header.
        let bad = [TYPE_SMALL_ARRAY, 1, 0, 9, 0, TYPE_STRING, 0, 0, 1, b'x'];
        assert!(error(&bad).contains("value 0 offset 0"));
        // Key offset past the object.
        let bad = [
            TYPE_SMALL_OBJECT,
            1,
            0,
            12,
            0,
            40,
            0,
            1,
            0,
            TYPE_LITERAL,
            0,
            0,
            b'k',
        ];
        assert!(error(&bad).contains("key 0 offset 40"));
        // Invalid UTF-8 key.
        let bad = [
            TYPE_SMALL_OBJECT,
            1,
            0,
            12,
            0,
            11,
            0,
            1,
            0,
            TYPE_LITERAL,
            0,
            0,
            0xff,
        ];
        assert!(error(&bad).contains("key is not valid UTF-8"));
        let e = JsonDecodeError("x at byte offset 3".into());
        assert_eq!(e.to_string(), "x at byte offset 3");
    }

    #[test]
    fn heavy_escaping_stays_under_the_size_cap() {
        // 2000 control bytes print as 12000 characters: 6x, under the 8x cap.
        let mut d = vec![TYPE_STRING, 0xd0, 0x0f];
        d.extend(std::iter::repeat_n(0x01u8, 2000));
        assert_eq!(text(&d).len(), 2 + 6 * 2000);
    }

    #[test]
    fn shared_offsets_cannot_explode() {
        // Each level holds the next level twice via the same offset: 2^60 leaves.
        let mut body = vec![0, 0, 4, 0];
        for _ in 0..60 {
            let n = body.len();
            let mut b = vec![2, 0];
            b.extend_from_slice(&((10 + n) as u16).to_le_bytes());
            b.extend_from_slice(&[TYPE_SMALL_ARRAY, 10, 0, TYPE_SMALL_ARRAY, 10, 0]);
            b.extend(body);
            body = b;
        }
        assert!(error(&doc(TYPE_SMALL_ARRAY, body)).contains("exceeds 8x"));
    }
}
