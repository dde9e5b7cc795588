//! How the columns of a sink's rows are declared in PostgreSQL, and which existing columns can
//! take them.
//!
//! # Invariant
//! Every Arrow type a sink can produce maps to one PostgreSQL type that holds each of its
//! values exactly (unsigned 64-bit integers as `numeric`, MySQL `TIME` as `interval`, nested
//! values as `jsonb`); a type with no such mapping is refused when the sink opens, naming the
//! column, never truncated at the first commit.

use arrow::datatypes::DataType;

use super::super::error::SinkError;

/// The PostgreSQL type a new column of `data_type` is created with.
pub fn pg_type(column: &str, data_type: &DataType) -> Result<String, SinkError> {
    let t = match data_type {
        DataType::Boolean => "boolean".to_string(),
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => "smallint".into(),
        DataType::Int32 | DataType::UInt16 => "integer".into(),
        DataType::Int64 | DataType::UInt32 => "bigint".into(),
        DataType::UInt64 => "numeric(20,0)".into(),
        DataType::Float16 | DataType::Float32 => "real".into(),
        DataType::Float64 => "double precision".into(),
        DataType::Decimal32(p, s)
        | DataType::Decimal64(p, s)
        | DataType::Decimal128(p, s)
        | DataType::Decimal256(p, s) => {
            if *s < 0 || i16::from(*s) > i16::from(*p) {
                "numeric".into()
            } else {
                format!("numeric({p},{s})")
            }
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "text".into(),
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => "bytea".into(),
        DataType::Date32 | DataType::Date64 => "date".into(),
        DataType::Time32(_) | DataType::Time64(_) => "time".into(),
        DataType::Timestamp(_, None) => "timestamp".into(),
        DataType::Timestamp(_, Some(_)) => "timestamptz".into(),
        DataType::Duration(_) => "interval".into(),
        DataType::Struct(_) | DataType::List(_) | DataType::LargeList(_) => "jsonb".into(),
        DataType::Null => "text".into(),
        other => {
            return Err(SinkError::Unsupported(format!(
                "column {column} is of type {other}, which a POSTGRES sink cannot write; cast it in the sink's query (for example CAST({column} AS VARCHAR))"
            )))
        }
    };
    Ok(t)
}

/// Whether an existing column of PostgreSQL type `typname` (`pg_type.typname`) holds every
/// value of `data_type` without loss.
pub fn accepts(typname: &str, data_type: &DataType) -> bool {
    let integer_rank = |t: &str| match t {
        "int2" => Some(16),
        "int4" => Some(32),
        "int8" => Some(64),
        _ => None,
    };
    let bits = match data_type {
        DataType::Int8 | DataType::UInt8 | DataType::Int16 => Some(16),
        DataType::Int32 | DataType::UInt16 => Some(32),
        DataType::Int64 | DataType::UInt32 => Some(64),
        _ => None,
    };
    match (typname, data_type) {
        ("numeric", d) if bits.is_some() || (d.is_numeric() && !d.is_floating()) => true,
        (t, _) if bits.is_some() => integer_rank(t).is_some_and(|r| Some(r) >= bits),
        (
            "text" | "varchar" | "bpchar",
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View,
        ) => true,
        ("text" | "varchar", DataType::Null) => true,
        ("float8", DataType::Float16 | DataType::Float32 | DataType::Float64)
        | ("float4", DataType::Float16 | DataType::Float32)
        | ("bool", DataType::Boolean)
        | ("date", DataType::Date32 | DataType::Date64)
        | ("time", DataType::Time32(_) | DataType::Time64(_))
        | ("timestamp", DataType::Timestamp(_, None))
        | ("timestamptz", DataType::Timestamp(_, Some(_)))
        | ("interval", DataType::Duration(_))
        | ("json" | "jsonb", DataType::Struct(_) | DataType::List(_) | DataType::LargeList(_)) => {
            true
        }
        ("bytea", d) => matches!(
            d,
            DataType::Binary
                | DataType::LargeBinary
                | DataType::BinaryView
                | DataType::FixedSizeBinary(_)
        ),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sqlstate::HasSqlState;
    use crate::sqlstate::SqlState;
    use arrow::datatypes::TimeUnit;

    #[test]
    fn every_source_type_has_a_lossless_column() {
        for (d, t) in [
            (DataType::UInt64, "numeric(20,0)"),
            (DataType::Decimal128(10, 2), "numeric(10,2)"),
            (DataType::Duration(TimeUnit::Microsecond), "interval"),
            (
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                "timestamptz",
            ),
            (DataType::UInt32, "bigint"),
        ] {
            assert_eq!(pg_type("c", &d).unwrap(), t);
        }
        let err = pg_type(
            "m",
            &DataType::Interval(arrow::datatypes::IntervalUnit::MonthDayNano),
        );
        assert!(err.is_err());
        let err = pg_type(
            "m",
            &DataType::Map(
                std::sync::Arc::new(arrow::datatypes::Field::new(
                    "e",
                    DataType::Struct(Default::default()),
                    false,
                )),
                false,
            ),
        )
        .unwrap_err();
        assert_eq!(err.sqlstate(), SqlState::FEATURE_NOT_SUPPORTED);
        assert!(err.to_string().contains("column m"), "{err}");
    }

    #[test]
    fn existing_columns_take_only_what_they_hold() {
        assert!(accepts("int8", &DataType::Int32));
        assert!(!accepts("int4", &DataType::Int64));
        assert!(!accepts("int4", &DataType::UInt32));
        assert!(accepts("numeric", &DataType::UInt64));
        assert!(!accepts("int8", &DataType::UInt64));
        assert!(accepts("varchar", &DataType::Utf8));
        assert!(!accepts("text", &DataType::Int32));
        assert!(!accepts("float4", &DataType::Float64));
        assert!(accepts("jsonb", &DataType::Struct(Default::default())));
    }
}
