//! Values that targets write as text because they have no column type of their own there.
//!
//! # Invariant
//! Identifiers are double-quoted with `"` doubled, as PostgreSQL and DataFusion's SQL (which
//! `deltalake` parses) read them, so any column name survives. MySQL `TIME` (an Arrow duration, up to ±838 hours) is written as a signed
//! `H:MM:SS.ffffff`, which PostgreSQL's `interval` reads back and people read as a time.

use std::fmt::Write;

use arrow::array::{Array, AsArray};
use arrow::datatypes::{
    DurationMicrosecondType, DurationMillisecondType, DurationNanosecondType, DurationSecondType,
    TimeUnit,
};

/// `name` as a double-quoted SQL identifier.
pub fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `array[row]` of a duration array of `unit`, in microseconds.
pub fn duration_micros(array: &dyn Array, unit: TimeUnit, row: usize) -> i64 {
    match unit {
        TimeUnit::Second => array
            .as_primitive::<DurationSecondType>()
            .value(row)
            .saturating_mul(1_000_000),
        TimeUnit::Millisecond => array
            .as_primitive::<DurationMillisecondType>()
            .value(row)
            .saturating_mul(1_000),
        TimeUnit::Microsecond => array.as_primitive::<DurationMicrosecondType>().value(row),
        TimeUnit::Nanosecond => array.as_primitive::<DurationNanosecondType>().value(row) / 1_000,
    }
}

/// A signed interval as `[-]H:MM:SS.ffffff` (hours unbounded, as MySQL's `TIME` needs).
pub fn write_interval(out: &mut String, micros: i64) {
    let sign = if micros < 0 { "-" } else { "" };
    let m = micros.unsigned_abs();
    let (seconds, fraction) = (m / 1_000_000, m % 1_000_000);
    let _ = write!(
        out,
        "{sign}{}:{:02}:{:02}.{fraction:06}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mysql_time_range_is_written_whole() {
        let mut s = String::new();
        write_interval(&mut s, -(838 * 3600 + 59 * 60 + 59) * 1_000_000 - 1);
        assert_eq!(s, "-838:59:59.000001");
        s.clear();
        write_interval(&mut s, 61_500_000);
        assert_eq!(s, "0:01:01.500000");
    }

    #[test]
    fn identifiers_keep_their_quotes() {
        assert_eq!(quote_identifier("a\"b"), "\"a\"\"b\"");
    }
}
