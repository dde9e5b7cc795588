//! One column definition of a DDL statement as `information_schema` would show it after the
//! statement: its [`ColumnKind`] and nullability, the value existing rows get when the column
//! is added, and whether old values survive a change of type unchanged.
//!
//! # Invariant
//! Every answer is exact or an error naming why it is not: a type, a default or a conversion
//! whose result depends on server settings or on rounding is an error, never a guess.

use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::datatypes::i256;
use sqlparser::ast::{
    CharacterLength, ColumnOption, DataType, EnumMember, ExactNumberInfo, Expr, ObjectName,
    TimezoneInfo,
};

use crate::change::kinds::{Arrow, Implicit, SimpleKind};
use crate::change::schema::{Charset, ColumnKind, ColumnSpec};
use crate::source::evolve::literal::{literal, parse_date, parse_time, Literal};
use crate::source::types::{parse_decimal_text, time_to_micros, ColumnBuilder};

/// A column as declared by `ADD`, `CHANGE`, `MODIFY` or `CREATE TABLE`.
#[derive(Debug)]
pub struct Declared {
    pub spec: ColumnSpec,
    /// Declared with `PRIMARY KEY`.
    pub primary_key: bool,
    /// Declared `UNIQUE` (the column gets a unique index of its name).
    pub unique: bool,
    /// Why old values may change on conversion into this declaration even when the kind does
    /// not (`CHAR` strips trailing spaces, `FLOAT(M,D)` rounds, unsigned fractions clamp).
    rewrites: Option<&'static str>,
    /// `CHAR`: values are read without trailing spaces.
    strips_spaces: bool,
    /// `FLOAT(M,D)` / `DOUBLE(M,D)`: stored values are rounded to `D` digits.
    rounds: bool,
    default: Option<Expr>,
    /// Why the value of existing rows cannot be known (generated, `AUTO_INCREMENT`).
    computed: Option<&'static str>,
    /// The type as written, for messages.
    pub type_text: String,
}

/// Declares column `name` of type `data_type` with `options`; text without its own character
/// set takes `table_charset` (`None` = binary).
pub fn declare(
    name: &str,
    data_type: &DataType,
    options: &[&ColumnOption],
    table_charset: Option<Charset>,
) -> Result<Declared, String> {
    let mut charset_name: Option<String> = None;
    let mut nullable = None;
    let mut primary_key = false;
    let mut unique = false;
    let mut default = None;
    let mut computed = None;
    for option in options {
        match option {
            ColumnOption::Null => nullable = Some(true),
            ColumnOption::NotNull => nullable = Some(false),
            ColumnOption::PrimaryKey(_) => primary_key = true,
            ColumnOption::Unique(_) => unique = true,
            ColumnOption::Default(e) => default = Some(e.clone()),
            ColumnOption::CharacterSet(n) => charset_name = Some(last_part(n)),
            // A collation names its character set before the first `_` (`latin1_bin`).
            ColumnOption::Collation(n) if charset_name.is_none() => {
                let c = last_part(n);
                charset_name = Some(c.split('_').next().unwrap_or_default().to_string());
            }
            ColumnOption::Generated { .. } => computed = Some("a generated column"),
            ColumnOption::Identity(_) => computed = Some("an identity column"),
            ColumnOption::DialectSpecific(tokens)
                if tokens
                    .iter()
                    .any(|t| t.to_string().eq_ignore_ascii_case("AUTO_INCREMENT")) =>
            {
                computed = Some("an AUTO_INCREMENT column");
            }
            ColumnOption::Collation(_)
            | ColumnOption::Comment(_)
            | ColumnOption::ForeignKey(_)
            | ColumnOption::Check(_)
            | ColumnOption::OnUpdate(_)
            | ColumnOption::Srid(_)
            | ColumnOption::Invisible
            | ColumnOption::DialectSpecific(_) => {}
            other => return Err(format!("column option {other} is not understood")),
        }
    }
    let charset = match charset_name {
        Some(n) => Charset::from_name(&n)?,
        None => table_charset,
    };
    let (kind, rewrites) = kind_of(data_type, charset)?;
    kind.check()?;
    let nullable = match (nullable, primary_key) {
        (_, true) => false,
        (Some(n), false) => n,
        // Whether it is NULL then depends on explicit_defaults_for_timestamp.
        (None, false) if matches!(kind, ColumnKind::Timestamp { .. }) => {
            return Err(format!(
                "TIMESTAMP column {name} declared without NULL or NOT NULL (its nullability \
                 depends on explicit_defaults_for_timestamp)"
            ))
        }
        (None, false) => true,
    };
    let strips_spaces = matches!(data_type, DataType::Char(_) | DataType::Character(_))
        && matches!(kind, ColumnKind::Text { .. });
    let rounds = matches!(
        data_type,
        DataType::Float(ExactNumberInfo::PrecisionAndScale(..))
            | DataType::FloatUnsigned(ExactNumberInfo::PrecisionAndScale(..))
            | DataType::Double(ExactNumberInfo::PrecisionAndScale(..))
            | DataType::DoubleUnsigned(ExactNumberInfo::PrecisionAndScale(..))
    );
    Ok(Declared {
        spec: ColumnSpec {
            name: name.to_string(),
            kind,
            nullable,
        },
        primary_key,
        unique,
        rewrites: rewrites
            .or(strips_spaces.then_some("CHAR drops trailing spaces of old values"))
            .or(rounds.then_some("FLOAT(M,D) and DOUBLE(M,D) round old values")),
        strips_spaces,
        rounds,
        default,
        computed,
        type_text: data_type.to_string(),
    })
}

fn last_part(name: &ObjectName) -> String {
    name.0
        .last()
        .and_then(|p| p.as_ident())
        .map(|i| i.value.clone())
        .unwrap_or_default()
}

/// The kind `information_schema` shows for a declared type, and why converting old values into
/// it may change them although the kind is the same.
fn kind_of(
    data_type: &DataType,
    charset: Option<Charset>,
) -> Result<(ColumnKind, Option<&'static str>), String> {
    use DataType as D;
    let int = |bits, unsigned| Ok((ColumnKind::Int { bits, unsigned }, None));
    let unsigned_fraction = Some("an UNSIGNED fractional type clamps negative old values");
    // `fixed`: a CHAR(n); `length`: CHAR(n)'s or VARCHAR(n)'s n, in characters.
    let text = |fixed: bool, length: Option<u32>| {
        Ok(match charset {
            Some(charset) => (ColumnKind::Text { charset, length }, None),
            // `CHARACTER SET binary` makes CHAR(n) a BINARY(n) and the others VARBINARY/BLOB.
            None => (
                ColumnKind::Binary {
                    pad_to: length.filter(|_| fixed).map(|n| n as usize),
                },
                None,
            ),
        })
    };
    let char_len = |l: &Option<CharacterLength>| match l {
        None => Ok(1),
        Some(CharacterLength::IntegerLength { length, .. }) => {
            Ok(u32::try_from(*length).unwrap_or(u32::MAX))
        }
        Some(CharacterLength::Max) => Err(format!("type {data_type} is not MySQL")),
    };
    // A kind without parameters, by its name in the table of kinds.
    let simple = |name: &str| {
        SimpleKind::from_name(name)
            .map(|kind| (ColumnKind::Simple(kind), None))
            .ok_or_else(|| format!("type {data_type} has no exact mapping"))
    };
    match data_type {
        D::Bool | D::Boolean | D::TinyInt(_) => int(8, false),
        D::TinyIntUnsigned(_) => int(8, true),
        D::SmallInt(_) | D::Int2(_) => int(16, false),
        D::SmallIntUnsigned(_) | D::Int2Unsigned(_) => int(16, true),
        D::MediumInt(_) => int(24, false),
        D::MediumIntUnsigned(_) => int(24, true),
        D::Int(_) | D::Integer(_) | D::Int4(_) => int(32, false),
        D::IntUnsigned(_) | D::IntegerUnsigned(_) | D::Int4Unsigned(_) => int(32, true),
        D::BigInt(_) | D::Int8(_) => int(64, false),
        D::BigIntUnsigned(_) | D::Int8Unsigned(_) => int(64, true),
        D::Decimal(info) | D::Numeric(info) | D::Dec(info) => Ok((decimal(info)?, None)),
        D::DecimalUnsigned(info) | D::DecUnsigned(info) => Ok((decimal(info)?, unsigned_fraction)),
        D::Float(info) | D::FloatUnsigned(info) => {
            let kind = match info {
                ExactNumberInfo::Precision(p) if *p > 53 => {
                    return Err(format!("type {data_type} is not a valid MySQL type"))
                }
                ExactNumberInfo::Precision(p) if *p > 24 => ColumnKind::Simple(SimpleKind::Double),
                _ => ColumnKind::Simple(SimpleKind::Float),
            };
            let unsigned = matches!(data_type, D::FloatUnsigned(_));
            Ok((kind, unsigned.then_some(unsigned_fraction).flatten()))
        }
        D::Float4 => Ok((ColumnKind::Simple(SimpleKind::Float), None)),
        D::Double(_) | D::DoublePrecision | D::Real | D::Float8 => {
            Ok((ColumnKind::Simple(SimpleKind::Double), None))
        }
        D::DoubleUnsigned(_) | D::DoublePrecisionUnsigned | D::RealUnsigned => {
            Ok((ColumnKind::Simple(SimpleKind::Double), unsigned_fraction))
        }
        D::Date => Ok((ColumnKind::Simple(SimpleKind::Date), None)),
        D::Time(fsp, TimezoneInfo::None) => Ok((ColumnKind::Time { fsp: fsp_of(fsp)? }, None)),
        D::Datetime(fsp) => Ok((ColumnKind::DateTime { fsp: fsp_of(fsp)? }, None)),
        D::Timestamp(fsp, TimezoneInfo::None) => {
            Ok((ColumnKind::Timestamp { fsp: fsp_of(fsp)? }, None))
        }
        D::Char(l) | D::Character(l) => text(true, Some(char_len(l)?)),
        D::Varchar(l) | D::CharVarying(l) | D::CharacterVarying(l) => {
            text(false, Some(char_len(l)?))
        }
        // NATIONAL VARCHAR is utf8mb3 whatever the table's character set.
        D::Nvarchar(l) => Ok((
            ColumnKind::Text {
                charset: Charset::Utf8,
                length: Some(char_len(l)?),
            },
            None,
        )),
        D::Text | D::TinyText | D::MediumText | D::LongText => text(false, None),
        D::Binary(n) => Ok((
            ColumnKind::Binary {
                pad_to: Some(n.unwrap_or(1) as usize),
            },
            None,
        )),
        D::Varbinary(_) | D::Blob(_) | D::TinyBlob | D::MediumBlob | D::LongBlob => {
            Ok((ColumnKind::Binary { pad_to: None }, None))
        }
        D::Enum(members, None) => Ok((
            ColumnKind::Enum {
                labels: labels(members)?,
            },
            None,
        )),
        D::Set(members) => Ok((
            ColumnKind::Set {
                labels: members
                    .iter()
                    .map(|m| m.trim_end_matches(' ').to_string())
                    .collect(),
            },
            None,
        )),
        D::Bit(n) => Ok((
            ColumnKind::Bit {
                bits: u16::try_from(n.unwrap_or(1)).map_err(|_| format!("type {data_type}"))?,
            },
            None,
        )),
        D::JSON => Ok((ColumnKind::Simple(SimpleKind::Json), None)),
        D::Custom(name, modifiers) => {
            let name = last_part(name).to_ascii_lowercase();
            match (name.as_str(), modifiers.as_slice()) {
                ("year", [] | [_]) if modifiers.iter().all(|m| m == "4") => {
                    Ok((ColumnKind::Simple(SimpleKind::Year), None))
                }
                ("text", [_]) => text(false, None),
                ("vector", [_]) => Ok((ColumnKind::Simple(SimpleKind::Vector), None)),
                (name, []) => simple(name),
                _ => Err(format!("type {data_type} has no exact mapping")),
            }
        }
        D::Uuid => simple("uuid"),
        other => Err(format!("type {other} has no exact mapping")),
    }
}

fn decimal(info: &ExactNumberInfo) -> Result<ColumnKind, String> {
    let (p, s) = match info {
        ExactNumberInfo::None => (10, 0),
        ExactNumberInfo::Precision(p) => (*p, 0),
        ExactNumberInfo::PrecisionAndScale(p, s) => (
            *p,
            u64::try_from(*s).map_err(|_| format!("DECIMAL scale {s}"))?,
        ),
    };
    let bad = || format!("DECIMAL({p},{s}) is not a valid MySQL type");
    Ok(ColumnKind::Decimal {
        precision: u8::try_from(p).map_err(|_| bad())?,
        scale: u8::try_from(s).map_err(|_| bad())?,
    })
}

fn fsp_of(fsp: &Option<u64>) -> Result<u8, String> {
    match fsp.unwrap_or(0) {
        n @ 0..=6 => Ok(n as u8),
        n => Err(format!("fractional seconds precision {n} (at most 6)")),
    }
}

fn labels(members: &[EnumMember]) -> Result<Arc<[String]>, String> {
    members
        .iter()
        .map(|m| match m {
            // MySQL strips trailing spaces from member names.
            EnumMember::Name(n) => Ok(n.trim_end_matches(' ').to_string()),
            EnumMember::NamedValue(n, _) => Err(format!("ENUM member {n} with a value")),
        })
        .collect()
}

impl Declared {
    /// The value every existing row gets when this column is added.
    pub fn fill_value(&self) -> Result<ArrayRef, String> {
        if let Some(what) = self.computed {
            return Err(format!("{what} computes a value for each existing row"));
        }
        let kind = &self.spec.kind;
        let mut out = ColumnBuilder::new(kind, 1);
        match &self.default {
            None if self.spec.nullable => out.append_null(),
            None => implicit_default(kind, &mut out)?,
            Some(expr) => match literal(expr)? {
                Literal::Null if self.spec.nullable => out.append_null(),
                Literal::Null => return Err("DEFAULT NULL on a NOT NULL column".into()),
                lit if self.rounds => {
                    return Err(format!(
                        "DEFAULT {lit:?} of a {} is rounded",
                        self.type_text
                    ))
                }
                lit => self.append_literal(lit, &mut out)?,
            },
        }
        out.finish()
    }

    fn append_literal(&self, lit: Literal, out: &mut ColumnBuilder) -> Result<(), String> {
        let kind = &self.spec.kind;
        let bad = |lit: &Literal| format!("DEFAULT {lit:?} for a {}", kind.mysql_type());
        match (kind, &lit) {
            (
                ColumnKind::Int { .. } | ColumnKind::Bit { .. },
                Literal::Number(s) | Literal::Text(s),
            ) => match s.parse::<i64>() {
                Ok(v) if v >= 0 || matches!(kind, ColumnKind::Int { .. }) => {
                    out.append_i64(v).and_then(|()| bit_fits(kind, v as u64))
                }
                _ => s
                    .parse::<u64>()
                    .map_err(|_| bad(&lit))
                    .and_then(|v| bit_fits(kind, v).and_then(|()| out.append_u64(v))),
            },
            (ColumnKind::Int { .. } | ColumnKind::Bit { .. }, Literal::Bytes(b)) => {
                let v = crate::source::types::bit_value(b)?;
                bit_fits(kind, v)?;
                out.append_u64(v)
            }
            (
                ColumnKind::Simple(SimpleKind::Float) | ColumnKind::Simple(SimpleKind::Double),
                Literal::Number(s) | Literal::Text(s),
            ) => {
                if !s
                    .bytes()
                    .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b))
                {
                    return Err(bad(&lit));
                }
                // MySQL reads the literal as a double and stores a FLOAT from that.
                out.append_f64(s.parse::<f64>().map_err(|_| bad(&lit))?)
            }
            (ColumnKind::Decimal { scale, .. }, Literal::Number(s) | Literal::Text(s)) => {
                out.append_decimal(parse_decimal_text(s, *scale)?)
            }
            (ColumnKind::Simple(SimpleKind::Year), Literal::Number(s)) if s == "0" => {
                out.append_i64(0)
            }
            (ColumnKind::Simple(SimpleKind::Year), Literal::Number(s) | Literal::Text(s))
                if s.len() == 4 =>
            {
                match s.parse::<i64>() {
                    Ok(y @ (0 | 1901..=2155)) => out.append_i64(y),
                    _ => Err(bad(&lit)),
                }
            }
            (ColumnKind::Simple(SimpleKind::Date), Literal::Text(s)) => {
                let (y, m, d) = parse_date(s).ok_or_else(|| bad(&lit))?;
                out.append_date(y, m, d)
            }
            (ColumnKind::DateTime { fsp }, Literal::Text(s)) => {
                let (date, time) = s.split_once([' ', 'T']).unwrap_or((s, "00:00:00"));
                let (y, mo, d) = parse_date(date).ok_or_else(|| bad(&lit))?;
                let (neg, h, mi, sec, us) = parse_time(time, *fsp).ok_or_else(|| bad(&lit))?;
                if neg || h > 23 {
                    return Err(bad(&lit));
                }
                out.append_datetime(y, mo, d, h, mi, sec, us)
            }
            (ColumnKind::Time { fsp }, Literal::Text(s)) => {
                let (neg, h, mi, sec, us) = parse_time(s, *fsp).ok_or_else(|| bad(&lit))?;
                out.append_time_micros(time_to_micros(neg, h, mi, sec, us)?)
            }
            (ColumnKind::Text { .. }, Literal::Text(s)) if self.strips_spaces => {
                out.append_str(s.trim_end_matches(' '))
            }
            (ColumnKind::Text { .. }, Literal::Text(s)) => out.append_str(s),
            // An integer literal is stored as its digits.
            (ColumnKind::Text { .. }, Literal::Number(s)) if s.parse::<i64>().is_ok() => {
                out.append_str(s)
            }
            (ColumnKind::Binary { pad_to }, Literal::Bytes(b)) => out.append_bytes(b, *pad_to),
            // Only ASCII text has the same bytes whatever the connection's character set.
            (ColumnKind::Binary { pad_to }, Literal::Text(s)) if s.is_ascii() => {
                out.append_bytes(s.as_bytes(), *pad_to)
            }
            (ColumnKind::Enum { labels }, Literal::Text(s)) => {
                out.append_str(find_label(labels, s).ok_or_else(|| bad(&lit))?)
            }
            (ColumnKind::Set { labels }, Literal::Text(s)) => {
                let mut members: Vec<usize> = Vec::new();
                for m in s.split(',').filter(|m| !m.is_empty()) {
                    let label = find_label(labels, m).ok_or_else(|| bad(&lit))?;
                    members.extend(labels.iter().position(|l| l == label));
                }
                // MySQL prints members in definition order, each once.
                members.sort_unstable();
                members.dedup();
                let text: Vec<&str> = members.iter().map(|&i| labels[i].as_str()).collect();
                out.append_str(&text.join(","))
            }
            _ => Err(bad(&lit)),
        }
    }

    /// `Ok` when every value of `old` converts into this declaration unchanged; otherwise why
    /// not.
    pub fn keeps_values_of(&self, old: &ColumnSpec) -> Result<(), String> {
        if let Some(what) = self.computed {
            return Err(format!("{what} may recompute old values"));
        }
        let (from, to) = (&old.kind, &self.spec.kind);
        if let Some(why) = self.rewrites {
            return Err(why.to_string());
        }
        use ColumnKind as K;
        let exact = from == to
            || match (from, to) {
                (
                    K::Int {
                        bits: b1,
                        unsigned: u1,
                    },
                    K::Int {
                        bits: b2,
                        unsigned: u2,
                    },
                ) => (u1 == u2 && b2 >= b1) || (*u1 && !u2 && b2 > b1),
                (K::Int { bits, unsigned }, K::Decimal { precision, scale }) => {
                    precision - scale >= int_digits(*bits, *unsigned)
                }
                (K::Simple(SimpleKind::Float), K::Simple(SimpleKind::Double)) => true,
                (
                    K::Decimal {
                        precision: p1,
                        scale: s1,
                    },
                    K::Decimal {
                        precision: p2,
                        scale: s2,
                    },
                ) => s2 >= s1 && p2 - s2 >= p1 - s1,
                (K::Time { fsp: f1 }, K::Time { fsp: f2 })
                | (K::DateTime { fsp: f1 }, K::DateTime { fsp: f2 })
                | (K::Timestamp { fsp: f1 }, K::Timestamp { fsp: f2 }) => f2 >= f1,
                // Every latin1 character has a UTF-8 form; not every UTF-8 one a latin1 form.
                // A shorter declared length may cut old values (MySQL truncates them when
                // strict mode is off, with no row events).
                (
                    K::Text {
                        charset: c1,
                        length: l1,
                    },
                    K::Text {
                        charset: c2,
                        length: l2,
                    },
                ) => {
                    (c1 == c2 || *c2 == Charset::Utf8)
                        && match (l1, l2) {
                            (_, None) => true,
                            (Some(l1), Some(l2)) => l2 >= l1,
                            (None, Some(_)) => false,
                        }
                }
                (K::Enum { labels: l1 }, K::Enum { labels: l2 })
                | (K::Set { labels: l1 }, K::Set { labels: l2 }) => l2.starts_with(l1),
                (K::Bit { bits: b1 }, K::Bit { bits: b2 }) => b2 >= b1,
                // BINARY(n) values keep their padding as VARBINARY.
                (K::Binary { .. }, K::Binary { pad_to: None }) => true,
                _ => false,
            };
        if exact {
            Ok(())
        } else {
            Err(format!(
                "a change from {} to {} cannot keep every old value",
                from.mysql_type(),
                to.mysql_type()
            ))
        }
    }
}

/// Decimal digits of the largest magnitude of an integer type.
fn int_digits(bits: u8, unsigned: bool) -> u8 {
    match (bits, unsigned) {
        (8, _) => 3,
        (16, _) => 5,
        (24, false) => 7,
        (24, true) => 8,
        (32, _) => 10,
        (_, false) => 19,
        (_, true) => 20,
    }
}

fn bit_fits(kind: &ColumnKind, v: u64) -> Result<(), String> {
    match kind {
        ColumnKind::Bit { bits } if *bits < 64 && v >> bits != 0 => {
            Err(format!("{v} does not fit BIT({bits})"))
        }
        _ => Ok(()),
    }
}

/// The label `s` names: itself, or the one label equal to it ignoring ASCII case (the server
/// accepted the statement, so the collation matched it).
fn find_label<'a>(labels: &'a [String], s: &str) -> Option<&'a str> {
    if let Some(l) = labels.iter().find(|l| *l == s) {
        return Some(l);
    }
    let mut ci = labels.iter().filter(|l| l.eq_ignore_ascii_case(s));
    match (ci.next(), ci.next()) {
        (Some(l), None) => Some(l),
        _ => None,
    }
}

fn server_dependent(kind: &ColumnKind) -> String {
    format!(
        "a NOT NULL {} without DEFAULT gets a server-dependent value",
        kind.mysql_type()
    )
}

/// MySQL's implicit default of a `NOT NULL` column without `DEFAULT`.
fn implicit_default(kind: &ColumnKind, out: &mut ColumnBuilder) -> Result<(), String> {
    match kind {
        ColumnKind::Int { .. } => out.append_i64(0),
        ColumnKind::Bit { .. } => out.append_u64(0),
        ColumnKind::Decimal { .. } => out.append_decimal(i256::ZERO),
        ColumnKind::Text { .. } | ColumnKind::Set { .. } => out.append_str(""),
        ColumnKind::Binary { pad_to } => out.append_bytes(b"", *pad_to),
        ColumnKind::Enum { labels } => {
            out.append_str(labels.first().ok_or("an ENUM without members")?)
        }
        // The zero date, which both read paths give as NULL.
        ColumnKind::DateTime { .. } => {
            out.append_null();
            Ok(())
        }
        ColumnKind::Time { .. } => out.append_time_micros(0),
        ColumnKind::Simple(simple) => match simple.row().implicit {
            Implicit::Zero => match simple.row().arrow {
                Arrow::Float32 | Arrow::Float64 => out.append_f64(0.0),
                _ => out.append_i64(0),
            },
            Implicit::Null => {
                out.append_null();
                Ok(())
            }
            Implicit::Text(text) => out.append_str(text),
            Implicit::ServerDependent => Err(server_dependent(kind)),
        },
        ColumnKind::Timestamp { .. } => Err(server_dependent(kind)),
    }
}
