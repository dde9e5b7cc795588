//! Scalars inside MySQL binary JSON, printed as MySQL prints them: doubles (`my_gcvt`),
//! DECIMAL, temporal values and base64 opaque values. Each function names the MySQL source it
//! mirrors; together with the parent module they make the text equal MySQL's byte for byte.

use std::fmt;

// `enum_field_types` values that get special printing as opaque payloads.
pub(super) const FIELD_TIMESTAMP: u8 = 7;
pub(super) const FIELD_DATE: u8 = 10;
pub(super) const FIELD_TIME: u8 = 11;
pub(super) const FIELD_DATETIME: u8 = 12;
pub(super) const FIELD_NEWDECIMAL: u8 = 246;
pub(super) const FIELD_VAR_STRING: u8 = 253;

pub(super) fn push_display(out: &mut String, v: impl fmt::Display) {
    use fmt::Write;
    let _ = write!(out, "{v}");
}

/// Prints a finite double as MySQL's JSON printer does: `my_gcvt` with
/// `MY_GCVT_MAX_FIELD_WIDTH` (34) characters, then `.0` if the text has neither a
/// `.` nor an `e` (so `1.0`, `100.0`, `-0.0`, `0.0001`, but `1e15`, `1e-16`).
///
/// `my_gcvt` asks `dtoa` (mode 4, up to 34 digits) for the shortest digit string
/// that reads back as the same double (see [`shortest_digits`]). It then picks
/// fixed or exponent notation. With a 34 (33 for negatives) character field and at
/// most 17 digits, its rules reduce to: fixed notation when the decimal exponent
/// `decpt` (value = 0.DIGITS x 10^decpt) is in -14..=15, or when `decpt` is below
/// the digit count (a 16/17 digit number with a fraction); exponent notation
/// otherwise. No digit is ever dropped at this width. Exponent notation is
/// `D[.DDD]e[-]X` with no `+` and no exponent padding.
pub(super) fn write_double(d: f64, out: &mut String) {
    let (digits, decpt) = shortest_digits(d.abs());
    let digits = digits.as_bytes();
    let len = digits.len() as i32;

    // The literal decision of my_gcvt (strings/dtoa.cc), kept in its own terms.
    let width: i32 = if d < 0.0 { 33 } else { 34 };
    const MAX_DECPT_FOR_F_FORMAT: i32 = 15; // DBL_DIG
    let exp_len =
        1 + i32::from(decpt >= 101 || decpt <= -99) + i32::from(decpt >= 11 || decpt <= -9);
    let f_len = if decpt <= 0 {
        len - decpt + 2
    } else if decpt < len {
        len + 1
    } else {
        decpt
    };
    let have_space = f_len <= width;
    let force_e = decpt <= 0 && width <= 2 - decpt && width >= 3 + exp_len;
    // MySQL also tests `(len > 1 || !force_e)` inside the decpt == -2 case, which
    // the outer `!force_e` makes redundant.
    let use_f = (have_space || (decpt <= width && !force_e && (decpt >= -1 || decpt == -2)))
        && (!have_space
            || (decpt > -MAX_DECPT_FOR_F_FORMAT
                && (decpt <= MAX_DECPT_FOR_F_FORMAT || len > decpt)));

    let start = out.len();
    // dtoa reports the sign bit, so -0.0 prints as "-0".
    if d.is_sign_negative() {
        out.push('-');
    }
    if use_f {
        if decpt <= 0 {
            out.push_str("0.");
            for _ in 0..-decpt {
                out.push('0');
            }
            out.push_str(std::str::from_utf8(digits).expect("ASCII digits"));
        } else {
            for (i, &c) in digits.iter().enumerate() {
                out.push(c as char);
                if i as i32 + 1 == decpt && (i as i32) + 1 < len {
                    out.push('.');
                }
            }
            for _ in len..decpt {
                out.push('0');
            }
        }
    } else {
        out.push(digits[0] as char);
        if len > 1 {
            out.push('.');
            out.push_str(std::str::from_utf8(&digits[1..]).expect("ASCII digits"));
        }
        out.push('e');
        push_display(out, decpt - 1);
    }
    if !out[start..].contains(['.', 'e']) {
        out.push_str(".0");
    }
}

/// Shortest digits that read back as `v` (finite, non-negative) and the decimal
/// point position: `v ~= 0.DIGITS x 10^decpt`. Zero is `("0", 1)`.
///
/// This must match David Gay's `dtoa` in shortest mode, which MySQL uses. Rust's
/// `{:e}` also yields the shortest round-trip digits nearest to `v`, but when `v`
/// lies exactly halfway between two shortest candidates (e.g. 1608882928643910.25,
/// between ...10.2 and ...10.3) it may take the upper one, while `dtoa` keeps the
/// one whose last digit is even. Such exact ties are detected and resolved here.
pub(super) fn shortest_digits(v: f64) -> (String, i32) {
    let (digits, decpt) = sci_digits(&format!("{v:e}"));
    let n = digits.len();
    // Two n-digit candidates one unit (10^(decpt-n)) apart can both read back only
    // if that unit is at most one ulp, i.e. n >= 16 for normal doubles; subnormals
    // have hundreds of exact digits and never tie. A tie also needs the exact value
    // to have n+1 significant digits ending in 5: probe with n+2 rounded digits,
    // then confirm with the full expansion (no double has over 767 digits).
    if n < 16 {
        return (digits, decpt);
    }
    let (probe, _) = sci_digits(&format!("{v:.prec$e}", prec = n + 1));
    if probe.len() == n + 1 && probe.ends_with('5') {
        let (exact, exact_decpt) = sci_digits(&format!("{v:.800e}"));
        if exact.len() == n + 1 && exact.ends_with('5') {
            let low = &exact[..n];
            let even = if (low.as_bytes()[n - 1] - b'0').is_multiple_of(2) {
                (low.to_owned(), exact_decpt)
            } else {
                increment_digits(low, exact_decpt)
            };
            let reads_back = format!("0.{}e{}", even.0, even.1)
                .parse::<f64>()
                .is_ok_and(|x| x == v);
            if reads_back {
                return even;
            }
        }
    }
    (digits, decpt)
}

/// Significant digits (trailing zeros removed) and `decpt` of Rust's `{:e}` text.
pub(super) fn sci_digits(sci: &str) -> (String, i32) {
    let (mantissa, exp) = sci.split_once('e').expect("{:e} always has an exponent");
    let exp: i32 = exp.parse().expect("{:e} exponent is an integer");
    let mut digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let kept = digits.trim_end_matches('0').len().max(1);
    digits.truncate(kept);
    (digits, exp + 1)
}

/// Adds one unit in the last place to a digit string, trimming trailing zeros.
pub(super) fn increment_digits(digits: &str, decpt: i32) -> (String, i32) {
    let mut d = digits.as_bytes().to_vec();
    let mut i = d.len();
    loop {
        if i == 0 {
            // All nines: 99 + 1 = 100 -> "1" one place further left.
            return ("1".to_owned(), decpt + 1);
        }
        i -= 1;
        if d[i] == b'9' {
            d[i] = b'0';
        } else {
            d[i] += 1;
            break;
        }
    }
    let s = String::from_utf8(d).expect("ASCII digits");
    let kept = s.trim_end_matches('0').len();
    (s[..kept].to_owned(), decpt)
}

/// Number of bytes MySQL's binary DECIMAL uses for 0..=9 leftover digits.
pub(super) const DIG2BYTES: [usize; 10] = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4];

/// Text of an opaque NEWDECIMAL: a precision byte, a scale byte, then the value in
/// MySQL's binary DECIMAL format (`Json_decimal::convert_from_binary`). Printed by
/// `decimal2string` with no fixed width: optional `-`, the integer part without
/// leading zeros (`0` when empty), then `.` and exactly `scale` digits.
pub(super) fn decimal_text(data: &[u8]) -> Result<String, String> {
    if data.len() < 2 {
        return Err(format!("decimal needs 2 header bytes, has {}", data.len()));
    }
    // MySQL reads both bytes as (signed) char.
    let precision = i32::from(data[0] as i8);
    let scale = i32::from(data[1] as i8);
    if precision < 1 || scale < 0 || scale > precision {
        return Err(format!(
            "invalid decimal precision {precision} / scale {scale}"
        ));
    }
    let (intg, frac) = ((precision - scale) as usize, scale as usize);
    let (intg0, intg0x, frac0, frac0x) = (intg / 9, intg % 9, frac / 9, frac % 9);
    // my_decimal holds 9 words of 9 digits; bigger values would be truncated by
    // bin2decimal, and MySQL never writes them (DECIMAL tops out at 65 digits).
    if intg0 + usize::from(intg0x > 0) + frac0 + usize::from(frac0x > 0) > 9 {
        return Err(format!(
            "decimal precision {precision} / scale {scale} too large"
        ));
    }
    let bin_size = intg0 * 4 + DIG2BYTES[intg0x] + frac0 * 4 + DIG2BYTES[frac0x];
    let bin = &data[2..];
    if bin.len() != bin_size {
        return Err(format!(
            "decimal({precision},{scale}) needs {bin_size} bytes, has {}",
            bin.len()
        ));
    }
    // The first bit is flipped so that the sign sorts; negatives also have every
    // byte inverted. Undo both, then read big-endian groups of digits.
    let negative = bin.first().is_some_and(|b| b & 0x80 == 0);
    let mut raw: Vec<u8> = bin.to_vec();
    if let Some(b) = raw.first_mut() {
        *b ^= 0x80;
    }
    if negative {
        raw.iter_mut().for_each(|b| *b = !*b);
    }
    let mut at = 0;
    let mut group = |digits: usize, nbytes: usize| -> Result<u32, String> {
        let v = raw[at..at + nbytes]
            .iter()
            .fold(0u32, |a, &b| (a << 8) | u32::from(b));
        at += nbytes;
        if u64::from(v) >= 10u64.pow(digits as u32) {
            return Err(format!(
                "decimal digit group {v} has more than {digits} digits"
            ));
        }
        Ok(v)
    };

    let mut int_digits = String::new();
    if intg0x > 0 {
        int_digits.push_str(&group(intg0x, DIG2BYTES[intg0x])?.to_string());
    }
    for _ in 0..intg0 {
        int_digits.push_str(&format!("{:09}", group(9, 4)?));
    }
    let mut frac_digits = String::new();
    for _ in 0..frac0 {
        frac_digits.push_str(&format!("{:09}", group(9, 4)?));
    }
    if frac0x > 0 {
        let v = group(frac0x, DIG2BYTES[frac0x])?;
        frac_digits.push_str(&format!("{v:0width$}", width = frac0x));
    }

    let mut text = String::new();
    // decimal2string prints the sign whenever it is set, even for a zero value.
    if negative {
        text.push('-');
    }
    let int_digits = int_digits.trim_start_matches('0');
    text.push_str(if int_digits.is_empty() {
        "0"
    } else {
        int_digits
    });
    if !frac_digits.is_empty() {
        text.push('.');
        text.push_str(&frac_digits);
    }
    Ok(text)
}

/// Prints a packed temporal value (`TIME_to_longlong_*_packed` layout, fraction in
/// the low 24 bits) the way `my_TIME_to_str(t, 6)` does:
/// DATE `YYYY-MM-DD`; DATETIME/TIMESTAMP `YYYY-MM-DD HH:MM:SS.ffffff`; TIME
/// `[-]HH:MM:SS.ffffff` with hours zero-padded to at least two digits. Two-digit
/// fields that would exceed 99 print as `00` (`format_two_digits`), and the
/// fraction prints its low six digits (`write_digits`).
pub(super) fn write_temporal(field_type: u8, packed: i64, out: &mut String) {
    let negative = packed < 0;
    let tmp = packed.unsigned_abs();
    let frac = tmp % (1 << 24);
    let int_part = tmp >> 24;
    let two = |out: &mut String, v: u64| {
        let v = if v >= 100 { 0 } else { v };
        push_display(out, format_args!("{v:02}"));
    };
    if field_type == FIELD_TIME {
        let hour = (int_part >> 12) % (1 << 10);
        let minute = (int_part >> 6) % (1 << 6);
        let second = int_part % (1 << 6);
        if negative {
            out.push('-');
        }
        push_display(out, format_args!("{hour:02}:"));
        two(out, minute);
        out.push(':');
        two(out, second);
    } else {
        // TIME_from_longlong_datetime_packed; a sign is ignored when printing.
        let ymd = int_part >> 17;
        let ym = ymd >> 5;
        let hms = int_part % (1 << 17);
        let (year, month, day) = (ym / 13, ym % 13, ymd % (1 << 5));
        two(out, year / 100);
        two(out, year % 100);
        out.push('-');
        two(out, month);
        out.push('-');
        two(out, day);
        if field_type == FIELD_DATE {
            return;
        }
        out.push(' ');
        two(out, hms >> 12);
        out.push(':');
        two(out, (hms >> 6) % (1 << 6));
        out.push(':');
        two(out, hms % (1 << 6));
    }
    push_display(out, format_args!(".{:06}", frac % 1_000_000));
}

/// MySQL's `base64_encode`: standard alphabet with `=` padding, and a `\n` before
/// every further group once a line holds 76 characters.
pub(super) fn base64_mysql(data: &[u8], out: &mut String) {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (i, chunk) in data.chunks(3).enumerate() {
        if i > 0 && i % 19 == 0 {
            out.push('\n');
        }
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        out.push(TABLE[(n >> 18) as usize & 63] as char);
        out.push(TABLE[(n >> 12) as usize & 63] as char);
        out.push(if chunk.len() > 1 {
            TABLE[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        out.push(if chunk.len() > 2 {
            TABLE[n as usize & 63] as char
        } else {
            '='
        });
    }
}
