//! Positions in one server's binlog history, and the GTIDs of both flavours.
//!
//! # Invariant
//! Changes are ordered by *where they are in the binlog*, never by their GTIDs: within one
//! server's history, `(file sequence, offset of the transaction's first event, event index,
//! row index)` is a total order that matches commit order. GTIDs identify transactions across
//! servers, but two GTID sets from different histories are not comparable, and all changes of
//! one transaction share one GTID, so a GTID compare cannot order them. [`GtidSet`] therefore has
//! no `Ord`; [`BinlogCoord`] and [`ChangePosition`] do.
//!
//! A source that moves to another server (a failover) goes on in a new *history*: the new
//! server's file names and offsets have no order relative to the old one's, so every
//! [`BinlogCoord`] carries the number of the history it belongs to, and a later history orders
//! after every position of an earlier one. History 0 writes as `file:offset`; history `n > 0`
//! as `~000n~file:offset`, a prefix that sorts after any binlog file name (`~` is the last
//! printable ASCII character), so text comparisons of `_position` keep the order too.
//!
//! MySQL GTIDs are `uuid[:tag]:gno` and sets are `uuid:1-5:7,uuid2:1-3`; MariaDB GTIDs are
//! `domain-server-seq` and a position is one GTID per replication domain (`0-1-30,1-2-5`).
//! Both hide behind [`Gtid`] and [`GtidSet`] so the rest of the engine never branches on flavour.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// A point between two events of one binlog file: `file` + byte `offset`, in history
/// `history` (see the module docs).
///
/// Ordered by history, then the numeric suffix of the file name (`binlog.000010` after
/// `binlog.000009`), then the offset, then the name. Watermarks (LOW/HIGH) and transaction
/// starts are `BinlogCoord`s.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BinlogCoord {
    pub file: Arc<str>,
    pub offset: u64,
    /// The file name's numeric suffix, parsed once: positions are compared very often.
    seq: u64,
    history: u16,
}

/// The most histories a source can have (four digits in the text form).
pub const MAX_HISTORY: u16 = 9999;

impl BinlogCoord {
    /// A position of history 0 (the server a source was created on).
    pub fn new(file: impl Into<Arc<str>>, offset: u64) -> Self {
        let file = file.into();
        Self {
            seq: file_sequence(&file),
            file,
            offset,
            history: 0,
        }
    }

    /// The same file and offset in history `history`.
    pub fn in_history(mut self, history: u16) -> Self {
        self.history = history;
        self
    }

    /// The number of the server history the position belongs to.
    pub fn history(&self) -> u16 {
        self.history
    }

    /// Offset `offset` of the same file, without parsing its name again (a reader makes one
    /// per event).
    pub fn at(&self, offset: u64) -> Self {
        Self {
            file: Arc::clone(&self.file),
            offset,
            seq: self.seq,
            history: self.history,
        }
    }

    /// Appends the history prefix (`~000n~`, nothing for history 0) to `out`.
    fn push_history(&self, out: &mut Vec<u8>) {
        if self.history > 0 {
            out.push(b'~');
            push_decimal(out, self.history.into(), 4);
            out.push(b'~');
        }
    }

    /// Splits the history prefix off a position's text: `(history, rest)`.
    fn split_history(text: &str) -> Result<(u16, &str), PositionParseError> {
        let Some(rest) = text.strip_prefix('~') else {
            return Ok((0, text));
        };
        let bad = || PositionParseError(format!("bad history prefix in {text:?}"));
        let (digits, rest) = rest.split_once('~').ok_or_else(bad)?;
        let history: u16 = digits.parse().map_err(|_| bad())?;
        if history == 0 || history > MAX_HISTORY {
            return Err(bad());
        }
        Ok((history, rest))
    }

    /// The numeric suffix of the file name, which the server increments on every rotation.
    pub fn file_seq(&self) -> u64 {
        self.seq
    }
}

/// The numeric suffix of a binlog file name (`mysql-bin.000042` → 42), 0 when there is none.
pub fn file_sequence(name: &str) -> u64 {
    name.rsplit_once('.')
        .and_then(|(_, suffix)| suffix.parse().ok())
        .unwrap_or(0)
}

impl Ord for BinlogCoord {
    fn cmp(&self, other: &Self) -> Ordering {
        // Offsets first after the sequence: within one file the names are equal, and comparing
        // two integers is cheaper than comparing the names.
        (self.history, self.seq, self.offset)
            .cmp(&(other.history, other.seq, other.offset))
            .then_with(|| self.file.cmp(&other.file))
    }
}

impl PartialOrd for BinlogCoord {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for BinlogCoord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.history > 0 {
            write!(f, "~{:04}~", self.history)?;
        }
        write!(f, "{}:{}", self.file, self.offset)
    }
}

impl FromStr for BinlogCoord {
    type Err = PositionParseError;

    /// Parses `file:offset`, e.g. `binlog.000003:1234`, after a history prefix if any.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (history, s) = Self::split_history(s)?;
        let (file, offset) = s
            .rsplit_once(':')
            .ok_or_else(|| PositionParseError(format!("expected file:offset, got {s:?}")))?;
        let offset = offset.parse().map_err(|_| {
            PositionParseError(format!("offset {offset:?} in {s:?} is not a number"))
        })?;
        if file.is_empty() {
            return Err(PositionParseError(format!("empty file name in {s:?}")));
        }
        Ok(Self::new(file, offset).in_history(history))
    }
}

/// The position of one row change: its transaction's first event, the index of the rows event
/// inside the transaction, the row inside that event, and a sub-index that tells apart the two
/// changelog entries of an update that changes the primary key (delete 0, insert 1). Ordered
/// lexicographically.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChangePosition {
    pub tx: BinlogCoord,
    pub event_index: u32,
    pub row_index: u32,
    pub sub: u8,
}

impl ChangePosition {
    /// Writes the text form of the position `(tx, event_index, row_index, sub)` (what
    /// `Display` writes), without building a `ChangePosition`.
    pub fn write_text(
        w: &mut impl fmt::Write,
        tx: &BinlogCoord,
        event_index: u32,
        row_index: u32,
        sub: u8,
    ) -> fmt::Result {
        let mut text = Vec::with_capacity(tx.file.len() + 54);
        Self::push_tx_text(&mut text, tx);
        Self::push_indexes_text(&mut text, event_index, row_index, sub);
        write_bytes(w, &text)
    }

    /// The part of [`ChangePosition::write_text`] that every change of the transaction
    /// starting at `tx` shares, `file:offset:`, appended to `out` as UTF-8.
    pub fn push_tx_text(out: &mut Vec<u8>, tx: &BinlogCoord) {
        tx.push_history(out);
        out.extend_from_slice(tx.file.as_bytes());
        out.push(b':');
        push_decimal(out, tx.offset, 12);
        out.push(b':');
    }

    /// The rest of [`ChangePosition::write_text`] after [`ChangePosition::push_tx_text`],
    /// `event_index:row_index:sub`, the indexes zero-padded to the ten digits a `u32` takes.
    pub fn push_indexes_text(out: &mut Vec<u8>, event_index: u32, row_index: u32, sub: u8) {
        push_decimal(out, event_index.into(), 10);
        out.push(b':');
        push_decimal(out, row_index.into(), 10);
        out.push(b':');
        push_decimal(out, sub.into(), 1);
    }
}

/// Appends `value` in decimal, zero-padded to at least `width` (at most 20) digits: what
/// `{value:0width$}` writes. Positions and GTIDs are written for every changelog entry as
/// bytes, checked as UTF-8 once per column, where the formatter's machinery and a check per
/// part were a visible share of building a segment.
pub fn push_decimal(out: &mut Vec<u8>, value: u64, width: usize) {
    const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
        2021222324252627282930313233343536373839\
        4041424344454647484950515253545556575859\
        6061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899";
    // Two digits at a time from the end, into zeros: the padding is what is left of them.
    let mut digits = [b'0'; 20];
    let (mut at, mut rest) = (digits.len(), value);
    // A pair taken while `rest >= 10` is never the leading one with a leading zero: the last
    // pair taken is `rest` itself, 10..=99.
    while rest >= 10 {
        let pair = (rest % 100) as usize * 2;
        rest /= 100;
        at -= 2;
        digits[at..at + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    if rest > 0 || value == 0 {
        at -= 1;
        digits[at] = b'0' + rest as u8;
    }
    let start = at.min(digits.len() - width.min(digits.len()));
    out.extend_from_slice(&digits[start..]);
}

/// Writes text built as bytes (always UTF-8: it holds only the pushers' output and `str`s).
fn write_bytes(w: &mut impl fmt::Write, text: &[u8]) -> fmt::Result {
    w.write_str(std::str::from_utf8(text).map_err(|_| fmt::Error)?)
}

impl ChangePosition {
    /// Text that sorts before the position of every change of a transaction starting at or
    /// after `tx`, and after every change of earlier transactions (of the same binlog file
    /// name length): where "after this point" starts for a text comparison of `_position`.
    pub fn text_before(tx: &BinlogCoord) -> String {
        let mut text = Vec::with_capacity(tx.file.len() + 20);
        Self::push_tx_text(&mut text, tx);
        // Without its last `:`, the transaction's part is a proper prefix of each of its
        // changes' text, so it sorts before all of them.
        text.pop();
        // The file name is a `str` and the rest ASCII: nothing is replaced.
        String::from_utf8_lossy(&text).into_owned()
    }

    /// Text of the last position a version published at `tx` can hold: after every entry of
    /// transactions before `tx` and every snapshot entry at `tx` (event index 0), before every
    /// change of the transaction that starts at `tx`. Where "what is published from now on"
    /// starts.
    pub fn text_after_version(tx: &BinlogCoord) -> String {
        let mut s = String::new();
        // Writing to a String cannot fail.
        let _ = Self::write_text(&mut s, tx, 0, u32::MAX, u8::MAX);
        s
    }

    /// The transaction coordinate of a position's text (what [`Self::text_before`] or
    /// `Display` wrote).
    pub fn coord_of_text(text: &str) -> Option<BinlogCoord> {
        let (history, text) = BinlogCoord::split_history(text).ok()?;
        let mut parts = text.split(':');
        let file = parts.next()?;
        let offset = parts.next()?.parse().ok()?;
        Some(BinlogCoord::new(file, offset).in_history(history))
    }
}

impl fmt::Display for ChangePosition {
    /// Renders as text that sorts like the position when compared as a string within one file
    /// name length: `binlog.000003:000000001234:0000000002:0000000000:0`. Every index is
    /// padded to its type's full width, so the order holds for any transaction size.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Self::write_text(f, &self.tx, self.event_index, self.row_index, self.sub)
    }
}

impl FromStr for ChangePosition {
    type Err = PositionParseError;

    /// Parses what `Display` writes: `file:offset:event:row:sub`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || PositionParseError(format!("expected file:offset:event:row:sub, got {s:?}"));
        let mut parts = s.rsplitn(4, ':');
        let sub = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let row_index = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let event_index = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let tx = parts.next().ok_or_else(bad)?.parse()?;
        Ok(Self {
            tx,
            event_index,
            row_index,
            sub,
        })
    }
}

/// One transaction identifier.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Gtid {
    /// MySQL: source UUID, optional tag (8.4), transaction number.
    MySql {
        sid: [u8; 16],
        tag: Option<String>,
        gno: u64,
    },
    /// MariaDB: replication domain, originating server id, sequence number.
    MariaDb { domain: u32, server: u32, seq: u64 },
}

impl Gtid {
    /// Appends the GTID's text (what `Display` writes) to `out` as UTF-8: the changelog
    /// writes one per transaction, where going through a formatter cost more than the digits.
    pub fn push_text(&self, out: &mut Vec<u8>) {
        match self {
            Gtid::MySql { sid, tag, gno } => {
                push_uuid(out, sid);
                if let Some(tag) = tag {
                    out.push(b':');
                    out.extend_from_slice(tag.as_bytes());
                }
                out.push(b':');
                push_decimal(out, *gno, 1);
            }
            Gtid::MariaDb {
                domain,
                server,
                seq,
            } => {
                push_decimal(out, (*domain).into(), 1);
                out.push(b'-');
                push_decimal(out, (*server).into(), 1);
                out.push(b'-');
                push_decimal(out, *seq, 1);
            }
        }
    }
}

impl fmt::Display for Gtid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut text = Vec::with_capacity(64);
        self.push_text(&mut text);
        write_bytes(f, &text)
    }
}

/// Formats 16 bytes as a lowercase hyphenated UUID.
pub fn format_uuid(sid: &[u8; 16]) -> String {
    let mut text = Vec::with_capacity(36);
    push_uuid(&mut text, sid);
    // ASCII only: nothing is replaced.
    String::from_utf8_lossy(&text).into_owned()
}

/// Appends 16 bytes as a lowercase hyphenated UUID (a GTID's source id).
fn push_uuid(out: &mut Vec<u8>, sid: &[u8; 16]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for (i, b) in sid.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push(b'-');
        }
        out.push(HEX[usize::from(b >> 4)]);
        out.push(HEX[usize::from(b & 0xf)]);
    }
}

fn parse_uuid(s: &str) -> Option<[u8; 16]> {
    let hex: String = s.chars().filter(|c| *c != '-').collect();
    if hex.len() != 32 || s.len() != 36 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// MySQL GTID intervals: `(uuid, tag)` → sorted, disjoint, inclusive transaction numbers.
pub type MySqlIntervals = BTreeMap<([u8; 16], Option<String>), Vec<(u64, u64)>>;

/// The set of transactions a server has executed (MySQL) or its per-domain position (MariaDB).
///
/// Deliberately not `Ord`: sets from different histories are incomparable.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum GtidSet {
    /// No GTIDs at all (GTID mode off, or nothing executed yet).
    #[default]
    Empty,
    /// `(uuid, tag)` → sorted, disjoint, inclusive intervals of transaction numbers.
    MySql(MySqlIntervals),
    /// domain → (server id, sequence number) of the last transaction in that domain.
    MariaDb(BTreeMap<u32, (u32, u64)>),
}

impl GtidSet {
    /// Records that `gtid` has been executed.
    pub fn add(&mut self, gtid: &Gtid) {
        match gtid {
            Gtid::MySql { sid, tag, gno } => {
                if !matches!(self, GtidSet::MySql(_)) {
                    *self = GtidSet::MySql(BTreeMap::new());
                }
                let GtidSet::MySql(map) = self else {
                    unreachable!("just set to MySql")
                };
                let intervals = map.entry((*sid, tag.clone())).or_default();
                insert_range(intervals, *gno, *gno);
            }
            Gtid::MariaDb {
                domain,
                server,
                seq,
            } => {
                if !matches!(self, GtidSet::MariaDb(_)) {
                    *self = GtidSet::MariaDb(BTreeMap::new());
                }
                let GtidSet::MariaDb(map) = self else {
                    unreachable!("just set to MariaDb")
                };
                map.insert(*domain, (*server, *seq));
            }
        }
    }

    /// Adds every GTID of `more` (of the same flavour; MariaDB: each domain keeps the later
    /// of the two positions).
    pub fn union_with(&mut self, more: &GtidSet) {
        match more {
            GtidSet::Empty => {}
            GtidSet::MySql(theirs) => {
                if !matches!(self, GtidSet::MySql(_)) {
                    *self = GtidSet::MySql(BTreeMap::new());
                }
                let GtidSet::MySql(ours) = self else {
                    unreachable!("just set to MySql")
                };
                for (origin, intervals) in theirs {
                    let into = ours.entry(origin.clone()).or_default();
                    for &(a, b) in intervals {
                        insert_range(into, a, b);
                    }
                }
            }
            GtidSet::MariaDb(theirs) => {
                if !matches!(self, GtidSet::MariaDb(_)) {
                    *self = GtidSet::MariaDb(BTreeMap::new());
                }
                let GtidSet::MariaDb(ours) = self else {
                    unreachable!("just set to MariaDb")
                };
                for (&domain, &at) in theirs {
                    let here = ours.entry(domain).or_insert(at);
                    if at.1 > here.1 {
                        *here = at;
                    }
                }
            }
        }
    }

    /// Whether `gtid` is covered by this set (MariaDB: its sequence is at or before the domain's).
    pub fn contains(&self, gtid: &Gtid) -> bool {
        match (self, gtid) {
            (GtidSet::MySql(map), Gtid::MySql { sid, tag, gno }) => map
                .get(&(*sid, tag.clone()))
                .is_some_and(|iv| iv.iter().any(|(a, b)| a <= gno && gno <= b)),
            (GtidSet::MariaDb(map), Gtid::MariaDb { domain, seq, .. }) => {
                map.get(domain).is_some_and(|(_, s)| seq <= s)
            }
            _ => false,
        }
    }

    /// What this set holds that `server`'s lacks, one description per source of GTIDs (empty
    /// when `server` covers it all): for MariaDB a domain whose position on `server` is
    /// behind (`0-1-41..0-1-57`: the sequence numbers past the server's), for MySQL the
    /// missing intervals (`uuid:5-9`). Sets of the two flavours never cover each other.
    pub fn missing_in(&self, server: &GtidSet) -> Vec<String> {
        // A server with no GTIDs at all lacks every one, of either flavour.
        let (no_domains, no_intervals) = (
            GtidSet::MariaDb(BTreeMap::new()),
            GtidSet::MySql(BTreeMap::new()),
        );
        let server = match (self, server) {
            (GtidSet::MariaDb(_), GtidSet::Empty) => &no_domains,
            (GtidSet::MySql(_), GtidSet::Empty) => &no_intervals,
            _ => server,
        };
        match (self, server) {
            (GtidSet::Empty, _) => Vec::new(),
            (GtidSet::MariaDb(ours), GtidSet::MariaDb(theirs)) => ours
                .iter()
                .filter_map(|(domain, (server_id, seq))| {
                    let at = theirs.get(domain).map_or(0, |(_, s)| *s);
                    (at < *seq).then(|| format!("{domain}-{server_id}-{}..{seq}", at + 1))
                })
                .collect(),
            (GtidSet::MySql(ours), GtidSet::MySql(theirs)) => {
                let mut out = Vec::new();
                for ((sid, tag), intervals) in ours {
                    let have = theirs.get(&(*sid, tag.clone()));
                    for &(a, b) in intervals {
                        for (x, y) in subtract(a, b, have.map_or(&[][..], Vec::as_slice)) {
                            let name = match tag {
                                Some(tag) => format!("{}:{tag}", format_uuid(sid)),
                                None => format_uuid(sid),
                            };
                            out.push(if x == y {
                                format!("{name}:{x}")
                            } else {
                                format!("{name}:{x}-{y}")
                            });
                        }
                    }
                }
                out
            }
            (ours, _) => vec![format!("{ours} (the server has no GTIDs of this kind)")],
        }
    }

    pub fn is_empty(&self) -> bool {
        match self {
            GtidSet::Empty => true,
            GtidSet::MySql(m) => m.is_empty(),
            GtidSet::MariaDb(m) => m.is_empty(),
        }
    }
}

/// The parts of the inclusive range `a..=b` that sorted, disjoint `have` leaves out.
pub(crate) fn subtract(a: u64, b: u64, have: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut from = a;
    for &(x, y) in have {
        if y < from {
            continue;
        }
        if x > b {
            break;
        }
        if x > from {
            out.push((from, x - 1));
        }
        from = y.saturating_add(1);
        if from > b {
            return out;
        }
    }
    out.push((from, b));
    out
}

/// Inserts the inclusive range `a..=b` into sorted, disjoint intervals, merging neighbours.
fn insert_range(intervals: &mut Vec<(u64, u64)>, a: u64, b: u64) {
    let (mut lo, mut hi) = (a, b);
    // Every interval that overlaps or touches [a, b] is absorbed.
    intervals.retain(|&(x, y)| {
        let touches = x <= hi.saturating_add(1) && y.saturating_add(1) >= lo;
        if touches {
            lo = lo.min(x);
            hi = hi.max(y);
        }
        !touches
    });
    let idx = intervals.partition_point(|&(x, _)| x < lo);
    intervals.insert(idx, (lo, hi));
}

impl fmt::Display for GtidSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GtidSet::Empty => Ok(()),
            GtidSet::MySql(map) => {
                let mut first = true;
                for ((sid, tag), intervals) in map {
                    if !first {
                        f.write_str(",")?;
                    }
                    first = false;
                    write!(f, "{}", format_uuid(sid))?;
                    if let Some(tag) = tag {
                        write!(f, ":{tag}")?;
                    }
                    for (a, b) in intervals {
                        if a == b {
                            write!(f, ":{a}")?;
                        } else {
                            write!(f, ":{a}-{b}")?;
                        }
                    }
                }
                Ok(())
            }
            GtidSet::MariaDb(map) => {
                let parts: Vec<String> = map
                    .iter()
                    .map(|(d, (s, q))| format!("{d}-{s}-{q}"))
                    .collect();
                f.write_str(&parts.join(","))
            }
        }
    }
}

/// A position string that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid binlog position: {0}")]
pub struct PositionParseError(pub String);

impl FromStr for GtidSet {
    type Err = PositionParseError;

    /// Parses a MariaDB GTID position (`0-1-30,1-2-5`) or a MySQL GTID set
    /// (`uuid:1-5:7,uuid2:tag:1-3`); whitespace and newlines (as MySQL prints them) are ignored.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        if s.is_empty() {
            return Ok(GtidSet::Empty);
        }
        let err = |why: &str| PositionParseError(format!("{why} in GTID set {s:?}"));
        if s.contains(':') {
            let mut set = GtidSet::MySql(BTreeMap::new());
            for part in s.split(',') {
                let mut fields = part.split(':');
                let sid = parse_uuid(fields.next().unwrap_or_default())
                    .ok_or_else(|| err("bad server UUID"))?;
                let mut tag = None;
                for field in fields {
                    if field.chars().next().is_some_and(|c| c.is_ascii_digit()) {
                        let (a, b) = match field.split_once('-') {
                            Some((a, b)) => (a, b),
                            None => (field, field),
                        };
                        let a: u64 = a.parse().map_err(|_| err("bad interval"))?;
                        let b: u64 = b.parse().map_err(|_| err("bad interval"))?;
                        if a == 0 || b < a {
                            return Err(err("empty or zero interval"));
                        }
                        let GtidSet::MySql(map) = &mut set else {
                            unreachable!("constructed as MySql above")
                        };
                        insert_range(map.entry((sid, tag.clone())).or_default(), a, b);
                    } else {
                        tag = Some(field.to_ascii_lowercase());
                    }
                }
            }
            Ok(set)
        } else {
            let mut set = GtidSet::MariaDb(BTreeMap::new());
            for part in s.split(',') {
                let nums: Vec<&str> = part.split('-').collect();
                if nums.len() != 3 {
                    return Err(err("expected domain-server-seq"));
                }
                let parse32 = |x: &str| x.parse::<u32>().map_err(|_| err("bad number"));
                let seq = nums[2].parse::<u64>().map_err(|_| err("bad sequence"))?;
                set.add(&Gtid::MariaDb {
                    domain: parse32(nums[0])?,
                    server: parse32(nums[1])?,
                    seq,
                });
            }
            Ok(set)
        }
    }
}

/// Where a binlog reader starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartPosition {
    /// The server's current end of the binlog at connect time.
    Current,
    /// An exact transaction boundary: `file:offset`.
    Coord(BinlogCoord),
    /// After every transaction in this set (MySQL) / after this per-domain position (MariaDB).
    Gtid(GtidSet),
}

impl FromStr for StartPosition {
    type Err = PositionParseError;

    /// `current`, `file:offset`, or a GTID set of either flavour.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("current") || t.eq_ignore_ascii_case("end") {
            return Ok(StartPosition::Current);
        }
        // A MySQL GTID set starts with a 36-character UUID; anything else with ':' is file:offset.
        let looks_like_uuid = t.len() >= 36 && parse_uuid(&t[..36]).is_some();
        if t.contains(':') && !looks_like_uuid {
            return t.parse().map(StartPosition::Coord);
        }
        t.parse().map(StartPosition::Gtid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(file: &str, offset: u64, ev: u32, row: u32) -> ChangePosition {
        ChangePosition {
            tx: BinlogCoord::new(file, offset),
            event_index: ev,
            row_index: row,
            sub: 0,
        }
    }

    /// What a source has applied and a server has not logged, named per domain or interval.
    #[test]
    fn missing_gtids_are_named() {
        let ours: GtidSet = "0-1-57,1-2-5".parse().unwrap();
        let behind: GtidSet = "0-1-40,1-2-9".parse().unwrap();
        assert_eq!(ours.missing_in(&behind), ["0-1-41..57"]);
        let ahead: GtidSet = "0-3-60,1-2-5,2-2-1".parse().unwrap();
        assert!(ours.missing_in(&ahead).is_empty());
        assert_eq!(ours.missing_in(&GtidSet::Empty).len(), 2);
        let u = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let ours: GtidSet = format!("{u}:1-10:20").parse().unwrap();
        let theirs: GtidSet = format!("{u}:1-3:5-8").parse().unwrap();
        assert_eq!(
            ours.missing_in(&theirs),
            [format!("{u}:4"), format!("{u}:9-10"), format!("{u}:20")]
        );
        assert!(ours.missing_in(&ours).is_empty());
    }

    /// A later history orders after every position of an earlier one, as a value and as
    /// text, and its text reads back as the same position.
    #[test]
    fn histories_order_first_and_round_trip() {
        let old = BinlogCoord::new("zz-bin.999999", 9_999_999);
        let new = BinlogCoord::new("a-bin.000001", 4).in_history(1);
        let later = BinlogCoord::new("a-bin.000001", 4).in_history(12);
        assert!(old < new && new < later);
        assert_eq!(new.to_string(), "~0001~a-bin.000001:4");
        for coord in [&old, &new, &later] {
            assert_eq!(coord.to_string().parse::<BinlogCoord>().unwrap(), *coord);
            let change = ChangePosition {
                tx: coord.clone(),
                event_index: 2,
                row_index: 3,
                sub: 0,
            };
            let text = change.to_string();
            assert_eq!(text.parse::<ChangePosition>().unwrap(), change);
            assert_eq!(ChangePosition::coord_of_text(&text).as_ref(), Some(coord));
            assert!(ChangePosition::text_before(coord) < text);
        }
        let texts: Vec<String> = [&old, &new, &later]
            .iter()
            .map(|c| ChangePosition::text_after_version(c))
            .collect();
        assert!(texts.windows(2).all(|w| w[0] < w[1]), "{texts:?}");
        for bad in ["~0000~b.1:4", "~12b.1:4", "~x~b.1:4", "~10000~b.1:4"] {
            assert!(bad.parse::<BinlogCoord>().is_err(), "{bad}");
        }
    }

    /// The hand-written digits are what the formatter writes, padding and all.
    #[test]
    fn positions_and_gtids_write_the_formatters_text() {
        for value in [
            0,
            1,
            9,
            10,
            99,
            100,
            105,
            1_000,
            90_807,
            4_000_000_000,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            for width in [0, 1, 10, 12, 20] {
                let mut text = Vec::new();
                push_decimal(&mut text, value, width);
                assert_eq!(String::from_utf8(text).unwrap(), format!("{value:0width$}"));
            }
        }
        let p = pos("mysql-bin.000012", 4_567, 3, 4_000_000_000);
        assert_eq!(
            p.to_string(),
            "mysql-bin.000012:000000004567:0000000003:4000000000:0"
        );
        let sid = [
            0x3e, 0x11, 0xfa, 0x47, 0x71, 0xca, 0x11, 0xe1, 0x9e, 0x33, 0xc8, 0x0a, 0xa9, 0x42,
            0x95, 0x62,
        ];
        assert_eq!(format_uuid(&sid), "3e11fa47-71ca-11e1-9e33-c80aa9429562");
        let mysql = Gtid::MySql {
            sid,
            tag: None,
            gno: 17,
        };
        assert_eq!(mysql.to_string(), "3e11fa47-71ca-11e1-9e33-c80aa9429562:17");
        let tagged = Gtid::MySql {
            sid,
            tag: Some("batch_7".into()),
            gno: u64::MAX,
        };
        assert_eq!(
            tagged.to_string(),
            "3e11fa47-71ca-11e1-9e33-c80aa9429562:batch_7:18446744073709551615"
        );
        let mariadb = Gtid::MariaDb {
            domain: 0,
            server: 4_000_000_000,
            seq: u64::MAX,
        };
        assert_eq!(mariadb.to_string(), "0-4000000000-18446744073709551615");
    }

    #[test]
    fn change_positions_read_back_what_they_write() {
        let mut p = pos("my:host-bin.000012", 123456, 7, 42);
        p.sub = 1;
        assert_eq!(p.to_string().parse::<ChangePosition>().unwrap(), p);
        assert!("binlog.000001:4:0:0".parse::<ChangePosition>().is_err());
        assert!("binlog.000001:4:0:x:0".parse::<ChangePosition>().is_err());
    }

    #[test]
    fn position_text_sorts_like_positions_past_five_digits() {
        let v = [
            pos("binlog.000009", 900, 0, 99_999),
            pos("binlog.000009", 900, 0, 100_000),
            pos("binlog.000009", 900, 1, 0),
            pos("binlog.000009", 900, 123_456, 0),
            pos("binlog.000009", 900, u32::MAX, u32::MAX),
        ];
        let text: Vec<String> = v.iter().map(ToString::to_string).collect();
        let mut sorted = text.clone();
        sorted.sort();
        assert_eq!(sorted, text);
    }

    #[test]
    fn positions_order_by_file_sequence_then_offset_then_event_then_row() {
        let mut v = vec![
            pos("binlog.000010", 4, 0, 0),
            pos("binlog.000009", 900, 1, 0),
            pos("binlog.000009", 900, 0, 7),
            pos("binlog.000009", 120, 3, 3),
            pos("binlog.000009", 900, 0, 2),
        ];
        v.sort();
        assert_eq!(
            v,
            vec![
                pos("binlog.000009", 120, 3, 3),
                pos("binlog.000009", 900, 0, 2),
                pos("binlog.000009", 900, 0, 7),
                pos("binlog.000009", 900, 1, 0),
                pos("binlog.000010", 4, 0, 0),
            ]
        );
        // A numeric suffix compares as a number, not as text.
        assert!(BinlogCoord::new("b.999999", 10) < BinlogCoord::new("b.1000000", 4));
    }

    #[test]
    fn changes_of_one_transaction_share_a_gtid_but_are_still_ordered() {
        // Same GTID set after the transaction, different event/row indexes: the position, not
        // the GTID, orders them.
        let gtid = Gtid::MariaDb {
            domain: 0,
            server: 1,
            seq: 7,
        };
        let mut set_a = GtidSet::default();
        set_a.add(&gtid);
        let set_b = set_a.clone();
        assert_eq!(set_a, set_b);
        let a = pos("binlog.000001", 500, 0, 1);
        let b = pos("binlog.000001", 500, 1, 0);
        let c = pos("binlog.000001", 500, 1, 1);
        assert!(a < b && b < c);
        assert_eq!(a.cmp(&a.clone()), Ordering::Equal);
    }

    #[test]
    fn mariadb_gtid_positions_round_trip() {
        let set: GtidSet = "0-1-30,1-2-5".parse().unwrap();
        assert_eq!(set.to_string(), "0-1-30,1-2-5");
        assert!(set.contains(&Gtid::MariaDb {
            domain: 0,
            server: 1,
            seq: 29
        }));
        assert!(!set.contains(&Gtid::MariaDb {
            domain: 0,
            server: 1,
            seq: 31
        }));
        assert!("0-1".parse::<GtidSet>().is_err());
    }

    #[test]
    fn mysql_gtid_sets_merge_intervals() {
        let uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let set: GtidSet = format!("{uuid}:1-5:7,\n{uuid}:6").parse().unwrap();
        assert_eq!(set.to_string(), format!("{uuid}:1-7"));
        let tagged: GtidSet = format!("{uuid}:Tag_1:3-4").parse().unwrap();
        assert_eq!(tagged.to_string(), format!("{uuid}:tag_1:3-4"));
        let mut s = GtidSet::default();
        for gno in [5, 1, 3, 2, 9] {
            s.add(&Gtid::MySql {
                sid: parse_uuid(uuid).unwrap(),
                tag: None,
                gno,
            });
        }
        assert_eq!(s.to_string(), format!("{uuid}:1-3:5:9"));
        let big: GtidSet = format!("{uuid}:1-5000000000").parse().unwrap();
        assert_eq!(big.to_string(), format!("{uuid}:1-5000000000"));
    }

    #[test]
    fn start_positions_parse_each_form() {
        assert_eq!(
            "current".parse::<StartPosition>().unwrap(),
            StartPosition::Current
        );
        assert_eq!(
            "binlog.000002:4".parse::<StartPosition>().unwrap(),
            StartPosition::Coord(BinlogCoord::new("binlog.000002", 4))
        );
        assert!(matches!(
            "0-1-10".parse::<StartPosition>().unwrap(),
            StartPosition::Gtid(GtidSet::MariaDb(_))
        ));
        assert!(matches!(
            "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-3"
                .parse::<StartPosition>()
                .unwrap(),
            StartPosition::Gtid(GtidSet::MySql(_))
        ));
        assert!("binlog.000002:x".parse::<StartPosition>().is_err());
    }
}
