//! Retention of history: how much of each changelog a source keeps (`retain_history`), and how
//! far the front of one may be trimmed now.
//!
//! # Invariant
//! [`trimmable`] never lets go of an entry that
//! * the policy keeps: one of the newest `n` entries, or one committed within the duration;
//! * a reader still needs: an entry after the [`Floor`] its holders put down (a sink's entries
//!   not yet committed to its target);
//! * is not yet in the state store, for a source that has one (a restart replays from there).
//!
//! Only whole segments go (`Changelog::trim`), so retained history starts on a transaction
//! boundary and AS OF can read from there on.

use std::fmt;
use std::time::Duration;

use super::changelog::Changelog;

/// How much history a source keeps: `retain_history = 'all' | '<n> changes' | '<duration>'`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RetainHistory {
    /// Every entry since the snapshot.
    #[default]
    All,
    /// At least the newest `n` entries of each table.
    Changes(u64),
    /// At least the entries committed within this long of now.
    Duration(Duration),
}

/// Units a duration may be written in, with their length in seconds.
const UNITS: [(&[&str], u64); 4] = [
    (&["d", "day", "days"], 86_400),
    (&["h", "hour", "hours"], 3_600),
    (&["m", "min", "mins", "minute", "minutes"], 60),
    (&["s", "sec", "secs", "second", "seconds"], 1),
];

impl RetainHistory {
    /// Reads `'all'`, `'<n> changes'` or a duration (`'24h'`, `'30 minutes'`, `'7d'`).
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim().to_ascii_lowercase();
        if text == "all" {
            return Ok(Self::All);
        }
        let digits = text.bytes().take_while(u8::is_ascii_digit).count();
        let (number, unit) = text.split_at(digits);
        let unit = unit.trim();
        let form = "give 'all', '<n> changes' or a duration such as '24h', '30m', '7 days'";
        let n: u64 = number
            .parse()
            .map_err(|_| format!("{text:?} does not start with a number; {form}"))?;
        if unit.is_empty() {
            return Err(format!("{text:?} needs a unit; {form}"));
        }
        if matches!(unit, "change" | "changes") {
            return Ok(Self::Changes(n));
        }
        let (_, seconds) = UNITS
            .iter()
            .find(|(names, _)| names.contains(&unit))
            .ok_or_else(|| format!("unknown unit {unit:?} in {text:?}; {form}"))?;
        n.checked_mul(*seconds)
            .map(|s| Self::Duration(Duration::from_secs(s)))
            .ok_or_else(|| format!("{text:?} is too long"))
    }
}

/// The canonical text, which [`RetainHistory::parse`] reads back to the same value.
impl fmt::Display for RetainHistory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::All => f.write_str("all"),
            Self::Changes(1) => f.write_str("1 change"),
            Self::Changes(n) => write!(f, "{n} changes"),
            Self::Duration(d) => {
                let s = d.as_secs();
                let (names, unit) = UNITS
                    .iter()
                    .find(|(_, unit)| s % unit == 0 && s > 0)
                    .unwrap_or(&UNITS[3]);
                write!(f, "{}{}", s / unit, names[0])
            }
        }
    }
}

/// What the readers that hold history back still need of one changelog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Floor {
    /// Nobody holds anything.
    Free,
    /// The entries whose `_position` sorts after this text.
    After(String),
    /// Every entry (a sink that has not committed yet and starts from the snapshot).
    Everything,
}

impl Floor {
    /// The floor that keeps what both keep.
    pub fn and(self, other: Floor) -> Floor {
        match (self, other) {
            (Floor::Everything, _) | (_, Floor::Everything) => Floor::Everything,
            (Floor::Free, f) | (f, Floor::Free) => f,
            (Floor::After(a), Floor::After(b)) => Floor::After(a.min(b)),
        }
    }

    fn releases(&self, max_position: &str) -> bool {
        match self {
            Floor::Free => true,
            Floor::After(p) => max_position <= p.as_str(),
            Floor::Everything => false,
        }
    }
}

/// The entry offset through which `log` may be trimmed now (see the module docs): its leading
/// segments up to there may go. `now` is in µs since the epoch; `durable` is how many entries
/// the state store holds (`None` without one).
pub fn trimmable(
    log: &Changelog,
    policy: &RetainHistory,
    now: i64,
    floor: &Floor,
    durable: Option<usize>,
) -> usize {
    let mut end = log.trimmed().rows;
    let mut upto = end;
    let cutoff = match policy {
        RetainHistory::All => return upto,
        RetainHistory::Changes(_) => None,
        RetainHistory::Duration(d) => {
            Some(now.saturating_sub(i64::try_from(d.as_micros()).unwrap_or(i64::MAX)))
        }
    };
    for segment in log.segments() {
        end += segment.rows;
        if durable.is_some_and(|d| end > d) || !floor.releases(&segment.max_position) {
            break;
        }
        match (policy, cutoff) {
            (RetainHistory::Changes(n), _) => {
                if ((log.num_rows() - end) as u64) < *n {
                    break;
                }
                upto = end;
            }
            (_, Some(cutoff)) => match segment.max_commit_ts {
                Some(ts) if ts >= cutoff => break,
                Some(_) => upto = end,
                // Snapshot entries have no commit time: they go with the older changes after
                // them, never on their own.
                None => {}
            },
            _ => break,
        }
    }
    upto
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::changelog::ChangelogSegment;
    use arrow::array::{
        ArrayRef, Int32Array, RecordBatch, StringArray, StructArray, TimestampMicrosecondArray,
        UInt32Array, UInt64Array,
    };
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    #[test]
    fn policies_parse_and_render_back() {
        for (text, value, shown) in [
            ("all", RetainHistory::All, "all"),
            (" ALL ", RetainHistory::All, "all"),
            ("1000 changes", RetainHistory::Changes(1000), "1000 changes"),
            ("1 change", RetainHistory::Changes(1), "1 change"),
            (
                "24h",
                RetainHistory::Duration(Duration::from_secs(86_400)),
                "1d",
            ),
            (
                "90 minutes",
                RetainHistory::Duration(Duration::from_secs(5_400)),
                "90m",
            ),
            (
                "7 days",
                RetainHistory::Duration(Duration::from_secs(604_800)),
                "7d",
            ),
            (
                "45s",
                RetainHistory::Duration(Duration::from_secs(45)),
                "45s",
            ),
            ("0s", RetainHistory::Duration(Duration::ZERO), "0s"),
        ] {
            assert_eq!(RetainHistory::parse(text), Ok(value), "{text}");
            assert_eq!(value.to_string(), shown);
            assert_eq!(RetainHistory::parse(shown), Ok(value));
        }
        for bad in [
            "",
            "forever",
            "24",
            "h24",
            "3 weeks",
            "-1h",
            "99999999999999999999d",
        ] {
            let error = RetainHistory::parse(bad).unwrap_err();
            assert!(!error.is_empty(), "{bad}");
        }
        assert!(RetainHistory::parse("3 weeks")
            .unwrap_err()
            .contains("'<n> changes'"));
    }

    /// A changelog of `segments` transactions of `rows` entries each; transaction `i` is at
    /// position `p{i}` and commits at `i` seconds (snapshot reads first, with no time, when
    /// `snapshot`).
    fn log(segments: usize, rows: usize, snapshot: bool) -> Changelog {
        let table = Schema::new(vec![Field::new("id", DataType::Int32, false)]);
        let mut log = Changelog::new(&table);
        let schema = Arc::clone(&log.schema);
        for i in 0..segments {
            let time = (!snapshot || i > 0).then_some(i as i64 * 1_000_000);
            let before = match schema.field(schema.fields().len() - 1).data_type() {
                DataType::Struct(fields) => StructArray::new_null(fields.clone(), rows),
                _ => unreachable!(),
            };
            let positions: Vec<String> = (0..rows).map(|r| format!("p{i:04}:{r:04}")).collect();
            let columns: Vec<ArrayRef> = vec![
                Arc::new(StringArray::from(vec!["c"; rows])),
                Arc::new(StringArray::from(positions)),
                Arc::new(StringArray::new_null(rows)),
                Arc::new(UInt64Array::from(vec![i as u64; rows])),
                Arc::new(TimestampMicrosecondArray::from(vec![time; rows]).with_timezone("UTC")),
                Arc::new(StringArray::from(vec!["db.t"; rows])),
                Arc::new(UInt32Array::from(vec![0; rows])),
                Arc::new(Int32Array::from_iter_values(0..rows as i32)),
                Arc::new(before),
            ];
            let batch = RecordBatch::try_new(Arc::clone(&schema), columns).unwrap();
            log.append(ChangelogSegment::of_batch(batch)).unwrap();
        }
        log
    }

    #[test]
    fn trims_only_what_the_policy_the_holders_and_the_store_let_go() {
        // Ten transactions of 100 entries, large enough not to merge.
        let log = log(10, 100, false);
        let s = 1_000_000;
        let free = Floor::Free;
        assert_eq!(
            trimmable(&log, &RetainHistory::All, 100 * s, &free, None),
            0
        );
        // Keep at least 250 changes: seven whole transactions can go (300 stay).
        let keep = RetainHistory::Changes(250);
        assert_eq!(trimmable(&log, &keep, 0, &free, None), 700);
        // Keep 5 s at 10 s: transactions committed at 0..=4 go.
        let five = RetainHistory::Duration(Duration::from_secs(5));
        assert_eq!(trimmable(&log, &five, 10 * s, &free, None), 500);
        // A sink that committed through the third transaction holds the rest.
        let sink = Floor::After("p0002:0099".into());
        assert_eq!(trimmable(&log, &keep, 0, &sink, None), 300);
        assert_eq!(trimmable(&log, &keep, 0, &Floor::Everything, None), 0);
        // Only what the store holds goes.
        assert_eq!(trimmable(&log, &keep, 0, &free, Some(450)), 400);
        // Floors combine to the stricter.
        assert_eq!(
            Floor::After("b".into()).and(Floor::After("a".into())),
            Floor::After("a".into())
        );
        assert_eq!(
            Floor::Free.and(Floor::After("a".into())),
            Floor::After("a".into())
        );
        assert_eq!(
            Floor::After("a".into()).and(Floor::Everything),
            Floor::Everything
        );
    }

    #[test]
    fn snapshot_entries_go_only_with_older_changes_after_them() {
        let log = log(4, 100, true);
        let s = 1_000_000;
        let ten = RetainHistory::Duration(Duration::from_secs(10));
        // Every change is recent: the snapshot stays too.
        assert_eq!(trimmable(&log, &ten, 5 * s, &Floor::Free, None), 0);
        // The changes at 1 s and 2 s are old: the snapshot before them goes with them.
        assert_eq!(
            trimmable(&log, &ten, 12 * s + 500_000, &Floor::Free, None),
            300
        );
    }
}
