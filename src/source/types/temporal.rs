//! Calendar and clock arithmetic for MySQL's temporal types.
//!
//! # Invariant
//! Every MySQL date, datetime, timestamp and time either maps to exactly one Arrow value or is
//! one of the values with no calendar meaning (zero dates such as `0000-00-00`, partly zero
//! dates such as `2024-02-00`, and day-of-month overflows stored under `ALLOW_INVALID_DATES`
//! such as `2024-02-31`), which map to `None` and are read as NULL. Fields outside what MySQL
//! can store (month 13, hour 24, a fraction of a million microseconds or more) are errors, not
//! guesses: they only come from a corrupt or misread value. No arithmetic here can overflow.

/// Microseconds per second.
pub(crate) const MICROS: i64 = 1_000_000;

/// The largest year MySQL stores in a `DATE`/`DATETIME`.
const MAX_YEAR: u32 = 9999;

/// The largest hour count of a MySQL `TIME` (`838:59:59`).
const MAX_TIME_HOURS: u32 = 838;

/// Days from 1970-01-01 to the given civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Days in `month` (1-12) of `year`, proleptic Gregorian.
fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// A MySQL date as days since the epoch.
///
/// `Ok(None)` for dates with no calendar meaning (zero, partly zero, or a day past the end of
/// its month), which both read paths turn into NULL; an error for fields MySQL cannot store.
pub fn date_to_days(year: u32, month: u32, day: u32) -> Result<Option<i32>, String> {
    if year > MAX_YEAR || month > 12 || day > 31 {
        return Err(format!(
            "date {year:04}-{month:02}-{day:02} is outside what MySQL stores"
        ));
    }
    if month == 0 || day == 0 || day > days_in_month(year, month) {
        return Ok(None);
    }
    // Within years 0..=9999 the day count is below 3 million: it fits i32.
    Ok(Some(days_from_civil(year as i64, month, day) as i32))
}

/// A MySQL date and time of day as microseconds since the epoch (no zone applied); `Ok(None)`
/// when the date part has no calendar meaning (see [`date_to_days`]).
pub fn datetime_to_micros(
    year: u32,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
    micros: u32,
) -> Result<Option<i64>, String> {
    if hour > 23 || minute > 59 || second > 59 || micros as i64 >= MICROS {
        return Err(format!(
            "time of day {hour:02}:{minute:02}:{second:02}.{micros:06} is outside what MySQL stores"
        ));
    }
    let Some(days) = date_to_days(year, month, day)? else {
        return Ok(None);
    };
    // |days| < 3e6, so the product stays below 3e17 microseconds: no overflow.
    Ok(Some(
        ((days as i64 * 24 + hour as i64) * 60 + minute as i64) * 60 * MICROS
            + second as i64 * MICROS
            + micros as i64,
    ))
}

/// A MySQL `TIME` as signed microseconds; an error beyond MySQL's `±838:59:59.999999`.
pub fn time_to_micros(
    negative: bool,
    hours: u32,
    minutes: u32,
    seconds: u32,
    micros: u32,
) -> Result<i64, String> {
    if hours > MAX_TIME_HOURS || minutes > 59 || seconds > 59 || micros as i64 >= MICROS {
        let sign = if negative { "-" } else { "" };
        return Err(format!(
            "time {sign}{hours:02}:{minutes:02}:{seconds:02}.{micros:06} is outside MySQL's TIME range"
        ));
    }
    let v = ((hours as i64 * 60 + minutes as i64) * 60 + seconds as i64) * MICROS + micros as i64;
    Ok(if negative { -v } else { v })
}

/// A `TIME` as the binary protocol sends it (sign, days, hours of the day, minutes, seconds,
/// microseconds) as signed microseconds; an error beyond MySQL's `TIME` range.
pub fn time_parts_to_micros(
    negative: bool,
    days: u32,
    hours: u8,
    minutes: u8,
    seconds: u8,
    micros: u32,
) -> Result<i64, String> {
    let hours = days
        .checked_mul(24)
        .and_then(|d| d.checked_add(hours as u32))
        .ok_or_else(|| format!("time of {days} days is outside MySQL's TIME range"))?;
    time_to_micros(negative, hours, minutes as u32, seconds as u32, micros)
}

/// The civil date of a day count since 1970-01-01 (inverse of [`date_to_days`]).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_from_days_inverts_days_from_civil() {
        for (y, m, d) in [
            (1970, 1, 1),
            (2000, 2, 29),
            (1, 1, 1),
            (0, 1, 1),
            (9999, 12, 31),
            (1969, 12, 31),
        ] {
            let days = date_to_days(y as u32, m, d).unwrap().unwrap() as i64;
            assert_eq!(civil_from_days(days), (y, m, d));
        }
    }

    #[test]
    fn civil_dates_match_known_epoch_days() {
        assert_eq!(date_to_days(1970, 1, 1), Ok(Some(0)));
        assert_eq!(date_to_days(2000, 3, 1), Ok(Some(11017)));
        assert_eq!(date_to_days(1, 1, 1), Ok(Some(-719162)));
        assert_eq!(date_to_days(9999, 12, 31), Ok(Some(2932896)));
    }

    #[test]
    fn dates_without_calendar_meaning_are_none() {
        // Zero, partly zero, and past the end of the month (ALLOW_INVALID_DATES).
        for (y, m, d) in [
            (0, 0, 0),
            (2024, 0, 0),
            (2024, 2, 0),
            (2020, 0, 5),
            (2024, 2, 30),
            (2023, 2, 29),
            (2024, 4, 31),
        ] {
            assert_eq!(date_to_days(y, m, d), Ok(None), "{y}-{m}-{d}");
        }
        assert_eq!(date_to_days(2024, 2, 29), Ok(Some(19782)));
        assert_eq!(datetime_to_micros(0, 0, 0, 0, 0, 0, 0), Ok(None));
        assert_eq!(
            datetime_to_micros(2024, 2, 0, 10, 11, 12, 500_000),
            Ok(None)
        );
    }

    #[test]
    fn fields_mysql_cannot_store_are_errors() {
        assert!(date_to_days(2024, 13, 1).is_err());
        assert!(date_to_days(2024, 1, 32).is_err());
        assert!(date_to_days(10_000, 1, 1).is_err());
        assert!(date_to_days(u32::MAX, 1, 1).is_err());
        assert!(datetime_to_micros(2024, 1, 1, 24, 0, 0, 0).is_err());
        assert!(datetime_to_micros(2024, 1, 1, 0, 60, 0, 0).is_err());
        assert!(datetime_to_micros(2024, 1, 1, 0, 0, 0, 1_000_000).is_err());
        assert!(time_to_micros(false, 839, 0, 0, 0).is_err());
        assert!(time_to_micros(true, u32::MAX, 0, 0, 0).is_err());
        assert!(time_to_micros(false, 1, 0, 0, 1_000_000).is_err());
    }

    #[test]
    fn datetime_and_time_extremes() {
        assert_eq!(
            datetime_to_micros(9999, 12, 31, 23, 59, 59, 999_999),
            Ok(Some(253_402_300_799_999_999))
        );
        assert_eq!(
            datetime_to_micros(1000, 1, 1, 0, 0, 0, 0),
            Ok(Some(-30_610_224_000_000_000))
        );
        let max = ((838 * 60 + 59) * 60 + 59) * MICROS;
        assert_eq!(time_to_micros(false, 838, 59, 59, 0), Ok(max));
        assert_eq!(
            time_to_micros(true, 838, 59, 59, 999_999),
            Ok(-max - 999_999)
        );
        assert_eq!(time_to_micros(true, 0, 0, 0, 1), Ok(-1));
    }
}
