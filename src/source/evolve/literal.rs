//! Constant `DEFAULT` values as written in a statement, and the date and time text MySQL
//! accepts in them.
//!
//! # Invariant
//! A literal is read only in forms whose value is certain; any other form (expressions, charset
//! introducers, text that MySQL would round or reinterpret) is an error, never a guess.

use sqlparser::ast::{Expr, UnaryOperator, Value};

/// A constant `DEFAULT`.
#[derive(Debug)]
pub enum Literal {
    Null,
    Number(String),
    Text(String),
    Bytes(Vec<u8>),
}

pub fn literal(expr: &Expr) -> Result<Literal, String> {
    let not_constant = || format!("DEFAULT {expr} is not a constant");
    match expr {
        Expr::Value(v) => match &v.value {
            Value::Null => Ok(Literal::Null),
            Value::Number(n, _) => Ok(Literal::Number(n.to_string())),
            Value::Boolean(b) => Ok(Literal::Number(if *b { "1" } else { "0" }.into())),
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => {
                Ok(Literal::Text(s.clone()))
            }
            Value::HexStringLiteral(h) => hex_bytes(h).map(Literal::Bytes).ok_or_else(not_constant),
            // `b'101'`: the bits as big-endian bytes.
            Value::SingleQuotedByteStringLiteral(bits) if bits.len() <= 64 => {
                let v = u64::from_str_radix(bits, 2).map_err(|_| not_constant())?;
                let len = bits.len().div_ceil(8);
                Ok(Literal::Bytes(v.to_be_bytes()[8 - len..].to_vec()))
            }
            _ => Err(not_constant()),
        },
        Expr::UnaryOp {
            op: op @ (UnaryOperator::Minus | UnaryOperator::Plus),
            expr: inner,
        } => match literal(inner)? {
            Literal::Number(n) if !n.starts_with(['-', '+']) => {
                let sign = if *op == UnaryOperator::Minus { "-" } else { "" };
                Ok(Literal::Number(format!("{sign}{n}")))
            }
            _ => Err(not_constant()),
        },
        // `DEFAULT (expr)`, functions, CURRENT_TIMESTAMP: evaluated by the server.
        _ => Err(not_constant()),
    }
}

fn hex_bytes(h: &str) -> Option<Vec<u8>> {
    let h = if h.len() % 2 == 1 {
        format!("0{h}")
    } else {
        h.to_string()
    };
    (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(h.get(i..i + 2)?, 16).ok())
        .collect()
}

/// `YYYY-MM-DD`.
pub fn parse_date(s: &str) -> Option<(u32, u32, u32)> {
    let mut parts = s.split('-');
    let (y, m, d) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || y.len() != 4 {
        return None;
    }
    Some((number(y)?, number(m)?, number(d)?))
}

/// `[-]H:MM:SS[.f]` with at most `fsp` fraction digits (more would be rounded).
pub fn parse_time(s: &str, fsp: u8) -> Option<(bool, u32, u32, u32, u32)> {
    let (neg, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let (hms, frac) = s.split_once('.').unwrap_or((s, ""));
    if frac.len() > fsp as usize {
        return None;
    }
    let mut parts = hms.split(':');
    let (h, m, sec) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || m.len() != 2 || sec.len() != 2 {
        return None;
    }
    let micros = if frac.is_empty() {
        0
    } else {
        number(frac)? * 10u32.pow(6 - frac.len() as u32)
    };
    Some((neg, number(h)?, number(m)?, number(sec)?, micros))
}

fn number(s: &str) -> Option<u32> {
    if s.is_empty() || s.len() > 9 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}
