//! Text forms that PostgreSQL writes differently from the libraries that encode the rest:
//! `float4`/`float8` as `float4out`/`float8out` write them, and the seconds' fraction of
//! `timestamp`, `time` and `interval` with its trailing zeros dropped.
//!
//! # Invariant
//! Only the text form changes, and only to PostgreSQL's: the binary form is the libraries',
//! untouched, and a value reads back to the same number or instant from either form (floats are
//! written with the shortest digits that round-trip, as PostgreSQL 12 and later do for
//! `extra_float_digits` above zero, or rounded to `15 + extra_float_digits` (`6 +` for
//! `float4`) significant digits otherwise, as `%g` does).

use std::error::Error;
use std::fmt::Write;

use bytes::{BufMut, BytesMut};
use pgwire::api::results::FieldInfo;
use pgwire::api::Type;
use pgwire::error::PgWireResult;
use pgwire::types::format::FormatOptions;
use pgwire::types::ToSqlText;
use postgres_types::{IsNull, ToSql};

/// Significant digits of `%g` below which fixed notation is used, and the default precision:
/// C's `DBL_DIG` and `FLT_DIG`.
const DBL_DIG: i32 = 15;
const FLT_DIG: i32 = 6;

/// A `float8` or `float4` value written as PostgreSQL writes it.
#[derive(Debug, Clone, Copy)]
pub enum PgFloat {
    Double(Option<f64>),
    Single(Option<f32>),
}

/// The shortest decimal digits of `value` that read back to it, and the decimal exponent of
/// the first digit (`1.5e-5` is `("15", -5)`); `value` finite and not zero.
fn shortest_digits(scientific: &str) -> (String, i32) {
    let (mantissa, exponent) = scientific
        .split_once('e')
        .expect("`{:e}` writes an exponent");
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    (digits, exponent.parse().expect("a decimal exponent"))
}

/// `digits` (no sign, first digit non-zero) with the first digit at decimal exponent
/// `exponent`, in fixed or scientific notation as `%g` chooses for `precision` significant
/// digits: scientific below 1e-4 or from 10^precision on, with a signed exponent of at least
/// two digits; no trailing zeros after the point, and no point without a fraction.
fn layout(negative: bool, digits: &str, exponent: i32, precision: i32) -> String {
    let mut out = String::with_capacity(digits.len() + 8);
    if negative {
        out.push('-');
    }
    let digits = digits.trim_end_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    if exponent < -4 || exponent >= precision {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let sign = if exponent < 0 { '-' } else { '+' };
        let _ = write!(out, "e{sign}{:02}", exponent.unsigned_abs());
    } else if exponent < 0 {
        out.push_str("0.");
        for _ in 0..(-exponent - 1) {
            out.push('0');
        }
        out.push_str(digits);
    } else {
        let whole = exponent as usize + 1;
        if digits.len() <= whole {
            out.push_str(digits);
            for _ in digits.len()..whole {
                out.push('0');
            }
        } else {
            out.push_str(&digits[..whole]);
            out.push('.');
            out.push_str(&digits[whole..]);
        }
    }
    out
}

/// PostgreSQL's text of a finite, non-zero float whose shortest scientific form (Rust's
/// `{:e}`) is `shortest` and whose form rounded to `rounded_digits` significant digits is
/// `rounded`, for `extra_float_digits` `extra` and C's `digits` for the type.
fn finite_text(negative: bool, shortest: &str, rounded: &str, extra: i8, dig: i32) -> String {
    if extra > 0 {
        let (digits, exponent) = shortest_digits(shortest);
        // `float8out` switches to exponents from 10^15 on (10^6 for `float4out`), as `%g` does.
        layout(negative, &digits, exponent, dig)
    } else {
        let precision = (dig + i32::from(extra)).max(1);
        let (digits, exponent) = shortest_digits(rounded);
        layout(negative, &digits, exponent, precision)
    }
}

/// Special values and zero as PostgreSQL writes them; `None` for the others.
fn special(value: f64) -> Option<&'static str> {
    if value.is_nan() {
        Some("NaN")
    } else if value.is_infinite() {
        Some(if value > 0.0 { "Infinity" } else { "-Infinity" })
    } else if value == 0.0 {
        Some(if value.is_sign_negative() { "-0" } else { "0" })
    } else {
        None
    }
}

/// `float8out`'s text of `value` for `extra_float_digits` `extra`.
pub fn float8_text(value: f64, extra: i8) -> String {
    if let Some(text) = special(value) {
        return text.to_string();
    }
    let abs = value.abs();
    let precision = (DBL_DIG + i32::from(extra)).max(1) as usize;
    finite_text(
        value < 0.0,
        &format!("{abs:e}"),
        &format!("{abs:.*e}", precision - 1),
        extra,
        DBL_DIG,
    )
}

/// `float4out`'s text of `value` for `extra_float_digits` `extra`.
pub fn float4_text(value: f32, extra: i8) -> String {
    if let Some(text) = special(f64::from(value)) {
        return text.to_string();
    }
    let abs = value.abs();
    let precision = (FLT_DIG + i32::from(extra)).max(1) as usize;
    finite_text(
        value < 0.0,
        &format!("{abs:e}"),
        &format!("{abs:.*e}", precision - 1),
        extra,
        FLT_DIG,
    )
}

impl ToSqlText for PgFloat {
    fn to_sql_text(
        &self,
        _ty: &Type,
        out: &mut BytesMut,
        format_options: &FormatOptions,
    ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        let extra = format_options.extra_float_digits;
        let text = match *self {
            PgFloat::Double(Some(v)) => float8_text(v, extra),
            PgFloat::Single(Some(v)) => float4_text(v, extra),
            PgFloat::Double(None) | PgFloat::Single(None) => return Ok(IsNull::Yes),
        };
        out.put_slice(text.as_bytes());
        Ok(IsNull::No)
    }
}

impl ToSql for PgFloat {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        match *self {
            PgFloat::Double(v) => v.to_sql(ty, out),
            PgFloat::Single(v) => v.to_sql(ty, out),
        }
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::FLOAT8 || *ty == Type::FLOAT4
    }

    postgres_types::to_sql_checked!();
}

/// `text` with the fraction of its seconds (`:SS.ffffff`) written without trailing zeros, and
/// without the point when nothing is left: `18:49:42.554000` is `18:49:42.554`, and
/// `18:49:42.000000` is `18:49:42`. Dots elsewhere (a date written `02.01.2020`) are kept.
pub fn trim_seconds_fraction(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        let after_seconds = i >= 3
            && text[i] == b'.'
            && text[i - 3] == b':'
            && text[i - 2].is_ascii_digit()
            && text[i - 1].is_ascii_digit();
        if after_seconds {
            let end = text[i + 1..]
                .iter()
                .position(|b| !b.is_ascii_digit())
                .map_or(text.len(), |n| i + 1 + n);
            let fraction = &text[i + 1..end];
            let kept = fraction.len() - fraction.iter().rev().take_while(|b| **b == b'0').count();
            if kept > 0 {
                out.push(b'.');
                out.extend_from_slice(&fraction[..kept]);
            }
            i = end;
        } else {
            out.push(text[i]);
            i += 1;
        }
    }
    out
}

/// A value whose text form has its seconds' fraction trimmed ([`trim_seconds_fraction`]).
#[derive(Debug)]
pub struct TrimmedFraction<'a, T>(pub &'a T);

impl<T: ToSqlText> ToSqlText for TrimmedFraction<'_, T> {
    fn to_sql_text(
        &self,
        ty: &Type,
        out: &mut BytesMut,
        format_options: &FormatOptions,
    ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        let mut text = BytesMut::new();
        if let IsNull::Yes = self.0.to_sql_text(ty, &mut text, format_options)? {
            return Ok(IsNull::Yes);
        }
        out.put_slice(&trim_seconds_fraction(&text));
        Ok(IsNull::No)
    }
}

impl<T: ToSql> ToSql for TrimmedFraction<'_, T> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        self.0.to_sql(ty, out)
    }

    fn accepts(ty: &Type) -> bool {
        T::accepts(ty)
    }

    postgres_types::to_sql_checked!();
}

/// Passes values on to `inner`, each with its seconds' fraction trimmed in the text form: what
/// `arrow-pg` encodes for `timestamp`, `time` and `interval` columns goes through it.
pub struct TrimFraction<'a, S>(pub &'a mut S);

impl<S: arrow_pg::encoder::Encoder> arrow_pg::encoder::Encoder for TrimFraction<'_, S> {
    type Item = S::Item;

    fn encode_field<T>(&mut self, value: &T, pg_field: &FieldInfo) -> PgWireResult<()>
    where
        T: ToSql + ToSqlText + Sized,
    {
        self.0.encode_field(&TrimmedFraction(value), pg_field)
    }

    fn take_row(&mut self) -> Self::Item {
        self.0.take_row()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What PostgreSQL 15 prints for these values (`SELECT x::float8`, `x::float4`) with the
    /// default `extra_float_digits = 1`, and with 0 and -3.
    #[test]
    fn floats_read_as_postgresql_writes_them() {
        for (value, text) in [
            (1e300, "1e+300"),
            (1.5e-5, "1.5e-05"),
            (-2.5e-300, "-2.5e-300"),
            (123456789012345.0, "123456789012345"),
            (1e15, "1e+15"),
            (0.1, "0.1"),
            (1.5, "1.5"),
            (100.0, "100"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-0.0, "-0"),
            (0.0, "0"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "Infinity"),
            (f64::NEG_INFINITY, "-Infinity"),
            (0.1 + 0.2, "0.30000000000000004"),
            (1.0 / 3.0, "0.3333333333333333"),
        ] {
            assert_eq!(float8_text(value, 1), text, "{value:e}");
        }
        for (value, text) in [
            (1.5f32, "1.5"),
            (0.1, "0.1"),
            (1e10, "1e+10"),
            (1234567.0, "1.234567e+06"),
            (123456.0, "123456"),
            (-0.000015, "-1.5e-05"),
            (f32::INFINITY, "Infinity"),
        ] {
            assert_eq!(float4_text(value, 1), text, "{value:e}");
        }
        // Rounded to 15 (+ extra) significant digits, as `%g`.
        assert_eq!(float8_text(0.1 + 0.2, 0), "0.3");
        assert_eq!(float8_text(1.0 / 3.0, 0), "0.333333333333333");
        assert_eq!(float8_text(123456789012345678.0, 0), "1.23456789012346e+17");
        assert_eq!(float8_text(1.0 / 3.0, -3), "0.333333333333");
        assert_eq!(float4_text(1.0 / 3.0, 0), "0.333333");
        assert_eq!(float4_text(1234567.0, 0), "1.23457e+06");
        assert_eq!(float8_text(99999.5, -14), "1e+05");
    }

    #[test]
    fn only_the_seconds_fraction_is_trimmed() {
        let trim = |s: &str| String::from_utf8(trim_seconds_fraction(s.as_bytes())).unwrap();
        assert_eq!(
            trim("2020-01-02 18:49:42.554000"),
            "2020-01-02 18:49:42.554"
        );
        assert_eq!(trim("2020-01-02 18:49:42.000000"), "2020-01-02 18:49:42");
        assert_eq!(
            trim("1999-12-31 23:59:59.000001"),
            "1999-12-31 23:59:59.000001"
        );
        assert_eq!(trim("-838:59:59.999000"), "-838:59:59.999");
        assert_eq!(trim("1 day 02:00:00.500000"), "1 day 02:00:00.5");
        assert_eq!(trim("02.01.2020 18:49:42.100000"), "02.01.2020 18:49:42.1");
        assert_eq!(trim("18:49:42"), "18:49:42");
    }
}
