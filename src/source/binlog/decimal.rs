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
/// value (exactly `scale` fraction digits). Columns keep their [`DecimalLayout`] instead.
#[cfg(test)]
pub(super) fn read_decimal(
    cur: &mut Cursor<'_>,
    precision: u8,
    scale: u8,
) -> Result<Unscaled, RowsError> {
    let layout = DecimalLayout::new(precision, scale)?;
    Ok(if layout.wide() {
        Unscaled::Wide(layout.read_i256(cur)?)
    } else {
        Unscaled::Narrow(layout.read_i128(cur)?)
    })
}

/// Where the digit groups of a `DECIMAL(p,s)` image lie, worked out once per column: a partial
/// integer group, full groups of nine digits, a partial fraction group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct DecimalLayout {
    precision: u8,
    scale: u8,
    /// Bytes and digits of the leading partial group (0 when there is none).
    lead: (u8, u8),
    /// Full 4-byte groups, integer and fraction together.
    full: u8,
    /// Bytes and digits of the trailing partial group (0 when there is none).
    tail: (u8, u8),
    size: u8,
}

impl DecimalLayout {
    /// The layout of `DECIMAL(precision, scale)`; an error unless MySQL allows the type.
    pub(super) fn new(precision: u8, scale: u8) -> Result<Self, String> {
        let (p, s) = (precision as usize, scale as usize);
        if s > p || p > MAX_DECIMAL_DIGITS {
            return Err(format!("DECIMAL({precision},{scale}) is invalid"));
        }
        let intg = p - s;
        let (intg0, intg0x) = (intg / DIGITS_PER_GROUP, intg % DIGITS_PER_GROUP);
        let (frac0, frac0x) = (s / DIGITS_PER_GROUP, s % DIGITS_PER_GROUP);
        let size = intg0 * 4 + DIG2BYTES[intg0x] + frac0 * 4 + DIG2BYTES[frac0x];
        // At most 65 digits take at most 30 bytes (see `decimal_images_take_at_most_30_bytes`).
        Ok(Self {
            precision,
            scale,
            lead: (DIG2BYTES[intg0x] as u8, intg0x as u8),
            full: (intg0 + frac0) as u8,
            tail: (DIG2BYTES[frac0x] as u8, frac0x as u8),
            size: size as u8,
        })
    }

    /// Whether values need 256 bits (more than 38 digits).
    pub(super) fn wide(&self) -> bool {
        self.precision > DECIMAL128_DIGITS
    }

    /// Takes one image off `cur`: its bytes as stored, and the mask that undoes a negative
    /// value's inversion (`0xff` when negative). The bytes are not copied: [`Self::groups`]
    /// undoes the sign as it reads them.
    #[inline]
    fn take<'b>(&self, cur: &mut Cursor<'b>) -> Result<(&'b [u8], u8), RowsError> {
        let raw = cur.take(self.size as usize)?;
        // Only DECIMAL(0,0), which no server writes, has an empty image: it reads as 0.
        let mask = match raw.first() {
            Some(&first) if first & 0x80 == 0 => 0xff,
            _ => 0,
        };
        Ok((raw, mask))
    }

    /// Calls `add(group, digits)` for each digit group, most significant first, each checked to
    /// hold no more digits than it may.
    ///
    /// `raw` is the image as stored and `mask` undoes a negative value's inversion (see
    /// [`Self::take`]); the first byte's top bit, the sign, is cleared as it is read.
    #[inline]
    fn groups(
        &self,
        raw: &[u8],
        mask: u8,
        mut add: impl FnMut(u64, usize),
    ) -> Result<(), RowsError> {
        let mut pos = 0;
        let mut group = |len: usize, digits: usize| -> Result<(), RowsError> {
            let mut g = raw[pos..pos + len]
                .iter()
                .fold(0u64, |a, b| (a << 8) | (b ^ mask) as u64);
            if pos == 0 {
                g ^= 0x80 << (8 * (len - 1));
            }
            pos += len;
            if g >= POW10[digits] {
                return Err(RowsError::Value(format!(
                    "DECIMAL group {g} exceeds {digits} digits"
                )));
            }
            add(g, digits);
            Ok(())
        };
        if self.lead.1 > 0 {
            group(self.lead.0 as usize, self.lead.1 as usize)?;
        }
        for _ in 0..self.full {
            group(4, DIGITS_PER_GROUP)?;
        }
        if self.tail.1 > 0 {
            group(self.tail.0 as usize, self.tail.1 as usize)?;
        }
        Ok(())
    }

    /// One value of at most 38 digits, unscaled.
    #[inline]
    pub(super) fn read_i128(&self, cur: &mut Cursor<'_>) -> Result<i128, RowsError> {
        let (raw, mask) = self.take(cur)?;
        // Up to 18 digits fit u64 arithmetic, which is cheaper still.
        let v = if self.precision <= 18 {
            let mut v = 0u64;
            self.groups(raw, mask, |g, digits| v = v * POW10[digits] + g)?;
            v as i128
        } else if !self.wide() {
            let mut v = 0i128;
            // At most 38 digits in all: below 10^38, far from i128's limit.
            self.groups(raw, mask, |g, digits| {
                v = v * POW10[digits] as i128 + g as i128
            })?;
            v
        } else {
            return Err(RowsError::Value(format!(
                "DECIMAL({},{}) does not fit 128 bits",
                self.precision, self.scale
            )));
        };
        Ok(if mask != 0 { -v } else { v })
    }

    /// One value of any precision, unscaled.
    pub(super) fn read_i256(&self, cur: &mut Cursor<'_>) -> Result<i256, RowsError> {
        let (raw, mask) = self.take(cur)?;
        let mut v = i256::ZERO;
        self.groups(raw, mask, |g, digits| {
            v = v
                .wrapping_mul(i256::from_i128(POW10[digits] as i128))
                .wrapping_add(i256::from_i128(g as i128));
        })?;
        Ok(if mask != 0 { v.wrapping_neg() } else { v })
    }
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
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Unscaled {
    Narrow(i128),
    Wide(i256),
}

#[cfg(test)]
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
    fn decimal_images_take_at_most_30_bytes() {
        for precision in 1..=MAX_DECIMAL_DIGITS {
            for scale in 0..=precision.min(38) {
                let bytes = |d: usize| d / DIGITS_PER_GROUP * 4 + DIG2BYTES[d % DIGITS_PER_GROUP];
                assert!(
                    bytes(precision - scale) + bytes(scale) <= 30,
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
