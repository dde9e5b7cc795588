//! MySQL's binary `DECIMAL` in a row image, decoded to an unscaled integer.
//!
//! # Invariant
//! A value is read only for a valid `DECIMAL(p,s)` (p ≤ 65, s ≤ p), whose image is at most 30
//! bytes; every digit group is checked to hold no more digits than it may, so the result has at
//! most `p` digits and a malformed image is an error, never an overflow or an out-of-range read.

use arrow::datatypes::i256;

use super::cursor::{Cursor, RowsError};

/// Bytes used by a group of 0–9 decimal digits in MySQL's binary DECIMAL.
const DIG2BYTES: [usize; 10] = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4];
/// Digits per full 4-byte group.
const DIGITS_PER_GROUP: usize = 9;

/// MySQL's binary DECIMAL: integer and fraction digits in big-endian groups of nine, the sign
/// in the inverted top bit, negative numbers stored bitwise inverted. Returns the unscaled
/// value (exactly `scale` fraction digits).
pub(super) fn read_decimal(
    cur: &mut Cursor<'_>,
    precision: u8,
    scale: u8,
) -> Result<Unscaled, RowsError> {
    let wide = precision > DECIMAL128_DIGITS;
    let (precision, scale) = (precision as usize, scale as usize);
    if scale > precision || precision > MAX_DECIMAL_DIGITS {
        return Err(RowsError::Value(format!(
            "DECIMAL({precision},{scale}) is invalid"
        )));
    }
    let intg = precision - scale;
    let (intg0, intg0x) = (intg / DIGITS_PER_GROUP, intg % DIGITS_PER_GROUP);
    let (frac0, frac0x) = (scale / DIGITS_PER_GROUP, scale % DIGITS_PER_GROUP);
    let size = intg0 * 4 + DIG2BYTES[intg0x] + frac0 * 4 + DIG2BYTES[frac0x];
    let raw = cur.take(size)?;
    if raw.is_empty() {
        return Ok(Unscaled::Narrow(0));
    }
    let negative = raw[0] & 0x80 == 0;
    let mask = if negative { 0xff } else { 0 };
    // At most 65 digits take at most 30 bytes (see `decimal_sizes_fit_the_buffer`).
    let mut buf = [0u8; 32];
    let bytes = &mut buf[..size];
    for (dst, src) in bytes.iter_mut().zip(raw) {
        *dst = src ^ mask;
    }
    bytes[0] ^= 0x80;
    // Digit groups, most significant first: a partial group, full groups of nine, a partial
    // group. Each is checked to hold no more digits than it may.
    let mut pos = 0;
    let mut next = |len: usize, digits: usize| -> Result<u64, String> {
        let g = bytes[pos..pos + len]
            .iter()
            .fold(0u64, |a, b| (a << 8) | *b as u64);
        pos += len;
        if g >= POW10[digits] {
            return Err(format!("DECIMAL group {g} exceeds {digits} digits"));
        }
        Ok(g)
    };
    let layout = std::iter::once((DIG2BYTES[intg0x], intg0x))
        .chain(std::iter::repeat_n((4, DIGITS_PER_GROUP), intg0 + frac0))
        .chain(std::iter::once((DIG2BYTES[frac0x], frac0x)))
        .filter(|(_, digits)| *digits > 0);
    // Up to 38 digits fit i128 arithmetic, which is much cheaper than i256.
    Ok(if wide {
        let mut v = i256::ZERO;
        for (len, digits) in layout {
            let g = next(len, digits)?;
            v = v
                .wrapping_mul(i256::from_i128(POW10[digits] as i128))
                .wrapping_add(i256::from_i128(g as i128));
        }
        Unscaled::Wide(if negative { v.wrapping_neg() } else { v })
    } else {
        let mut v: i128 = 0;
        for (len, digits) in layout {
            let g = next(len, digits)?;
            // At most 38 digits in all: below 10^38, far from i128's limit.
            v = v
                .checked_mul(POW10[digits] as i128)
                .and_then(|v| v.checked_add(g as i128))
                .ok_or_else(|| format!("DECIMAL({precision},{scale}) value overflows"))?;
        }
        Unscaled::Narrow(if negative { -v } else { v })
    })
}

/// Powers of ten up to one DECIMAL digit group.
const POW10: [u64; 10] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
];

/// The largest DECIMAL precision MySQL and MariaDB allow.
const MAX_DECIMAL_DIGITS: usize = 65;

/// Precision up to which DECIMAL values fit Arrow's `Decimal128`.
const DECIMAL128_DIGITS: u8 = 38;

/// An unscaled DECIMAL value, narrow when its precision allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Unscaled {
    Narrow(i128),
    Wide(i256),
}

impl std::fmt::Display for Unscaled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unscaled::Narrow(v) => write!(f, "{v}"),
            Unscaled::Wide(v) => write!(f, "{v}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(bytes: &[u8], p: u8, s: u8) -> String {
        let mut c = Cursor::new(bytes);
        read_decimal(&mut c, p, s).unwrap().to_string()
    }

    #[test]
    fn binary_decimal_decodes_positive_and_negative() {
        // DECIMAL(10,4) 1234.5678 and -1234.5678, as MySQL's decimal2bin writes them.
        assert_eq!(dec(&[0x80, 0x04, 0xd2, 0x16, 0x2e], 10, 4), "12345678");
        assert_eq!(dec(&[0x7f, 0xfb, 0x2d, 0xe9, 0xd1], 10, 4), "-12345678");
        // DECIMAL(5,0) 0
        assert_eq!(dec(&[0x80, 0x00, 0x00], 5, 0), "0");
    }

    #[test]
    fn decimal_sizes_fit_the_buffer() {
        for precision in 1..=MAX_DECIMAL_DIGITS {
            for scale in 0..=precision.min(38) {
                let bytes = |d: usize| d / DIGITS_PER_GROUP * 4 + DIG2BYTES[d % DIGITS_PER_GROUP];
                assert!(
                    bytes(precision - scale) + bytes(scale) <= 32,
                    "({precision},{scale})"
                );
            }
        }
        // Precision beyond MySQL's 65 (a corrupt table map) is an error, not an overrun.
        let mut c = Cursor::new(&[0x80; 200]);
        assert!(read_decimal(&mut c, 255, 0).is_err());
        assert!(read_decimal(&mut c, 10, 11).is_err());
        let mut c = Cursor::new(&[0x80, 0x00]);
        assert!(read_decimal(&mut c, 10, 4).is_err());
    }
}
