//! Errant transactions: what a server a source is to move to has logged *below* the source's
//! GTID position that the history the source read never logged.
//!
//! Going on at such a server after the source's GTIDs skips them (they sit before the point
//! the stream starts from), so the source's state would lack their changes while the server
//! has them: a silent divergence. Transactions *after* the source's position (new writes at
//! the new primary, or in a domain or server UUID the source has not seen) are streamed to it
//! like any others, so they are not errant here.
//!
//! # Invariant
//! Only what a GTID start would skip is reported: a transaction at or past the source's
//! position is never errant, and one the source's history is known to have logged never is.
//!
//! # What "below" means
//! * MariaDB: a domain's sequence numbers order its transactions. A server's binlog state
//!   (`@@gtid_binlog_state`: the last GTID each server id logged in each domain) entry
//!   `d-s-n` is below the source's position `d-a-m` when `n <= m`; it is errant unless the
//!   source's history logged server `s`'s transactions that far in domain `d` (its own
//!   position's server, or the binlog state recorded from its server).
//! * MySQL: the transaction numbers of one server UUID (and tag). A GTID of the server's
//!   executed set is below the source's set when its UUID is one the source has and its number
//!   is at most the largest the source has of it; it is errant unless the source has it.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use super::position::{subtract, GtidSet, PositionParseError};

/// MariaDB's `@@gtid_binlog_state`: the last sequence number each server id logged in each
/// domain.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BinlogState(BTreeMap<(u32, u32), u64>);

impl BinlogState {
    /// Takes what `other` knows too (the larger sequence number of each server id).
    pub fn merge(&mut self, other: &BinlogState) {
        for (&origin, &seq) in &other.0 {
            let at = self.0.entry(origin).or_insert(seq);
            *at = (*at).max(seq);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The GTID position this state stands at: per domain, the GTID of the highest sequence
    /// number (the latest, as a domain's numbers only grow).
    pub fn position(&self) -> GtidSet {
        let mut latest: BTreeMap<u32, (u32, u64)> = BTreeMap::new();
        for (&(domain, server), &seq) in &self.0 {
            let at = latest.entry(domain).or_insert((server, seq));
            if seq > at.1 {
                *at = (server, seq);
            }
        }
        if latest.is_empty() {
            GtidSet::Empty
        } else {
            GtidSet::MariaDb(latest)
        }
    }
}

impl FromStr for BinlogState {
    type Err = PositionParseError;

    /// `0-1-40,0-2-31` (whitespace ignored); empty for a server that logged nothing.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        let mut out = BinlogState::default();
        for part in s.split(',').filter(|p| !p.is_empty()) {
            let err = || {
                PositionParseError(format!(
                    "{part:?} in binlog state {s:?} is not domain-server-seq"
                ))
            };
            let mut nums = part.split('-');
            let (Some(d), Some(srv), Some(seq), None) =
                (nums.next(), nums.next(), nums.next(), nums.next())
            else {
                return Err(err());
            };
            let domain = d.parse().map_err(|_| err())?;
            let server = srv.parse().map_err(|_| err())?;
            let seq = seq.parse().map_err(|_| err())?;
            out.merge(&BinlogState(BTreeMap::from([((domain, server), seq)])));
        }
        Ok(out)
    }
}

impl fmt::Display for BinlogState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|((d, s), n)| format!("{d}-{s}-{n}"))
            .collect();
        f.write_str(&parts.join(","))
    }
}

/// MariaDB: the entries of `server` (a server's binlog state) below `ours` (the source's GTID
/// position) that its history never logged (`known`: the binlog state recorded from the
/// server it was read from), as `domain-server-seq`; see the module docs.
pub fn errant_mariadb(ours: &GtidSet, server: &BinlogState, known: &BinlogState) -> Vec<String> {
    let GtidSet::MariaDb(position) = ours else {
        return Vec::new();
    };
    server
        .0
        .iter()
        .filter(|&(&(domain, id), &seq)| {
            let Some(&(at_id, at_seq)) = position.get(&domain) else {
                // A domain the source has not seen: streamed to it, not below it.
                return false;
            };
            let logged = id == at_id || known.0.get(&(domain, id)).is_some_and(|&k| k >= seq);
            seq <= at_seq && !logged
        })
        .map(|((domain, id), seq)| format!("{domain}-{id}-{seq}"))
        .collect()
}

/// MySQL: the GTIDs of `server` (its executed set) below `ours` (the source's executed set)
/// that `ours` lacks, as a GTID set's text per UUID; see the module docs.
pub fn errant_mysql(ours: &GtidSet, server: &GtidSet) -> Vec<String> {
    let (GtidSet::MySql(ours), GtidSet::MySql(theirs)) = (ours, server) else {
        return Vec::new();
    };
    let mut errant = BTreeMap::new();
    for (origin, have) in ours {
        let Some(&(_, top)) = have.last() else {
            continue;
        };
        let below: Vec<(u64, u64)> = theirs
            .get(origin)
            .into_iter()
            .flatten()
            .filter(|&&(a, _)| a <= top)
            .map(|&(a, b)| (a, b.min(top)))
            .collect();
        let lacking: Vec<(u64, u64)> = below
            .iter()
            .flat_map(|&(a, b)| subtract(a, b, have))
            .collect();
        if !lacking.is_empty() {
            errant.insert(origin.clone(), lacking);
        }
    }
    if errant.is_empty() {
        return Vec::new();
    }
    let set = GtidSet::MySql(errant).to_string();
    set.split(',').map(str::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(s: &str) -> GtidSet {
        s.parse().unwrap()
    }

    fn state(s: &str) -> BinlogState {
        s.parse().unwrap()
    }

    #[test]
    fn mariadb_errant_are_other_servers_below_the_position_the_history_never_logged() {
        let ours = set("0-1-40,1-1-7");
        // The replica wrote 0-2-31 itself while it replicated (non-strict mode), then took
        // the primary's 0-1-31..40; domain 5 is its own, not below anything of ours.
        let replica = state("0-1-40,0-2-31,5-2-3");
        assert_eq!(
            errant_mariadb(&ours, &replica, &state("0-1-40")),
            ["0-2-31"]
        );
        // A server the history did log (an earlier primary) is not errant.
        assert!(errant_mariadb(&ours, &replica, &state("0-2-35")).is_empty());
        // Written after the source's position (the new primary's own writes): streamed.
        assert!(errant_mariadb(&ours, &state("0-1-40,0-2-41"), &state("0-1-40")).is_empty());
        assert!(errant_mariadb(&set(""), &replica, &BinlogState::default()).is_empty());
    }

    #[test]
    fn mysql_errant_are_holes_below_the_sources_numbers() {
        let a = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let b = "4e11fa47-71ca-11e1-9e33-c80aa9429562";
        let ours = set(&format!("{a}:1-40:45-50"));
        let server = set(&format!("{a}:1-52,{b}:1-9"));
        assert_eq!(errant_mysql(&ours, &server), [format!("{a}:41-44")]);
        assert!(errant_mysql(&ours, &set(&format!("{a}:1-40:45-60"))).is_empty());
    }

    #[test]
    fn a_binlog_state_reads_and_prints_as_the_server_does() {
        let s = state(" 0-1-40, 0-2-31 ,1-1-7");
        assert_eq!(s.to_string(), "0-1-40,0-2-31,1-1-7");
        assert!(state("").is_empty());
        assert!("0-1".parse::<BinlogState>().is_err());
        assert!("0-1-x".parse::<BinlogState>().is_err());
    }
}
