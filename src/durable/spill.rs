//! Changelog segments that live only in the state store: reading them back, and choosing which
//! leave memory when a source's changelogs outgrow their budget.
//!
//! # Why the checkpoint files
//! A checkpoint already writes every changelog entry once, in position order, to a file its
//! manifest names. A spilled segment therefore needs no file of its own: it is found again by
//! its position range in the newest manifest's files, wherever compaction has moved its entries
//! since. The checkpointer spills only entries its committed manifest holds.
//!
//! # Invariant
//! A read gives exactly the entries of the asked ranges, in position order, or an error: a file
//! removed by a newer checkpoint between reading the manifest and the file is looked up again in
//! the newer manifest; anything else that is missing or damaged is an error, never a shorter
//! history.

use std::sync::Arc;

use arrow::array::{AsArray, RecordBatch};
use async_trait::async_trait;

use super::error::DurableError;
use super::ipc;
use super::manifest::{load_newest_manifest, SegmentRef};
use super::store::{FileKind, Store, StoreError};
use crate::change::schema::TableId;
use crate::locks::RwLocked;
use crate::sqlstate::HasSqlState;
use crate::state::changelog::{Changelog, SegmentStore, StoredSegmentError, POSITION_COLUMN};

/// The changelog files of one table of one source, as a [`SegmentStore`].
#[derive(Debug)]
pub struct StoredChangelog {
    store: Store,
    source_id: String,
    /// The table's index in the source's manifests, and its name (checked against them).
    index: usize,
    /// Renamed with the table (`Checkpointer::checkpoint`, once a manifest has the new name).
    table: std::sync::RwLock<TableId>,
}

impl StoredChangelog {
    /// The table's name as the newest manifests record it.
    fn table(&self) -> TableId {
        self.table.read_locked().clone()
    }

    /// The table is named `to` in the manifests from now on.
    pub fn rename(&self, to: TableId) {
        *self.table.write_locked() = to;
    }

    pub fn new(store: Store, source_id: &str, index: usize, table: TableId) -> Self {
        Self {
            store,
            source_id: source_id.to_string(),
            index,
            table: std::sync::RwLock::new(table),
        }
    }

    async fn read_once(
        &self,
        ranges: &[(String, String)],
    ) -> Result<Vec<RecordBatch>, DurableError> {
        let manifest = load_newest_manifest(&self.store, &self.source_id)
            .await?
            .ok_or_else(|| self.missing("the source has no checkpoint"))?;
        let entry = manifest
            .tables
            .get(self.index)
            .filter(|t| {
                let name = self.table();
                t.db == name.db && t.table == name.table
            })
            .ok_or_else(|| {
                self.missing(&format!(
                    "checkpoint {} no longer holds this table's changelog",
                    manifest.seq
                ))
            })?;
        if let Some(trim) = &entry.trimmed {
            if let Some((from, _)) = ranges.iter().find(|(a, _)| *a <= trim.last_position) {
                return Err(DurableError::Trimmed {
                    message: format!(
                        "changelog entries of {} from {from} on were removed by retention \
                         (retain_history) while the query read them; run it again",
                        self.table()
                    ),
                });
            }
        }
        let mut out = Vec::new();
        for segment in entry.segments.iter().filter(|s| overlaps(s, ranges)) {
            let bytes = self
                .store
                .read_ref(&segment.file, FileKind::Segment)
                .await?;
            let batches =
                ipc::decode_as_written(&bytes).map_err(|message| DurableError::Decode {
                    path: self.store.describe(&segment.file.path),
                    message,
                })?;
            for batch in batches {
                out.extend(within(&batch, ranges));
            }
        }
        Ok(out)
    }

    fn missing(&self, message: &str) -> DurableError {
        DurableError::Decode {
            path: format!(
                "the changelog of {} in source {}",
                self.table(),
                self.source_id
            ),
            message: message.to_string(),
        }
    }
}

/// Whether a checkpoint file may hold entries of `ranges` (files written before positions
/// were recorded may hold any).
fn overlaps(segment: &SegmentRef, ranges: &[(String, String)]) -> bool {
    match &segment.positions {
        Some((lo, hi)) => ranges.iter().any(|(a, b)| a <= hi && lo <= b),
        None => true,
    }
}

/// The slices of `batch` (entries in position order) that lie in `ranges`.
fn within(batch: &RecordBatch, ranges: &[(String, String)]) -> Vec<RecordBatch> {
    let positions = batch.column(POSITION_COLUMN).as_string::<i32>();
    let n = batch.num_rows();
    // The first entry for which `before` no longer holds (positions ascend).
    let first_not = |before: &dyn Fn(&str) -> bool| {
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if before(positions.value(mid)) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    };
    ranges
        .iter()
        .filter_map(|(a, b)| {
            let (start, end) = (
                first_not(&|p| p < a.as_str()),
                first_not(&|p| p <= b.as_str()),
            );
            (start < end).then(|| batch.slice(start, end - start))
        })
        .collect()
}

#[async_trait]
impl SegmentStore for StoredChangelog {
    async fn read(
        &self,
        ranges: &[(String, String)],
    ) -> Result<Vec<RecordBatch>, StoredSegmentError> {
        let result = match self.read_once(ranges).await {
            // A newer checkpoint compacted and removed the file: its manifest names the new one.
            Err(DurableError::Store(StoreError::Missing { .. })) => self.read_once(ranges).await,
            other => other,
        };
        result.map_err(|e| StoredSegmentError {
            sqlstate: e.sqlstate(),
            transient: e.is_transient(),
            message: e.to_string(),
        })
    }
}

/// Spills the oldest segments of `changelogs` held in memory, of those whose entries are all in
/// the store (`persisted[t]` entries of table `t`), until their memory is at most three
/// quarters of `budget` (so spilling is not needed again at the very next checkpoint); returns
/// the bytes spilled. A `budget` of 0 spills nothing.
pub fn spill_over_budget(
    changelogs: &[Changelog],
    persisted: &[usize],
    stores: &[Arc<StoredChangelog>],
    budget: u64,
) -> usize {
    if budget == 0 {
        return 0;
    }
    let resident: usize = changelogs.iter().map(Changelog::resident_bytes).sum();
    if resident as u64 <= budget {
        return 0;
    }
    let target = (budget - budget / 4) as usize;
    // Oldest history first, across tables: positions of one source compare across its tables.
    let mut candidates: Vec<(usize, Arc<crate::state::changelog::ChangelogSegment>)> = changelogs
        .iter()
        .zip(persisted)
        .enumerate()
        .flat_map(|(t, (log, &p))| log.spillable(p).into_iter().map(move |s| (t, s)))
        .collect();
    candidates.sort_by(|a, b| a.1.min_position.cmp(&b.1.min_position));
    let mut spilled = 0;
    for (t, segment) in candidates {
        if resident - spilled <= target {
            break;
        }
        let Some(store) = stores.get(t) else { continue };
        spilled += segment.bytes;
        segment.spill(Arc::clone(store) as Arc<dyn SegmentStore>);
    }
    spilled
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::changelog::format;
    use arrow::array::{Int32Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    fn batch(positions: &[&str]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new(format::OP, DataType::Utf8, false),
            Field::new(format::POSITION, DataType::Utf8, false),
            Field::new("v", DataType::Int32, false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec!["c"; positions.len()])),
                Arc::new(StringArray::from(positions.to_vec())),
                Arc::new(Int32Array::from_iter_values(0..positions.len() as i32)),
            ],
        )
        .unwrap()
    }

    #[test]
    fn ranges_select_exactly_their_entries() {
        let b = batch(&["a1", "a2", "a3", "b1", "b2", "c1"]);
        let r = |a: &str, b: &str| (a.to_string(), b.to_string());
        let rows = |slices: Vec<RecordBatch>| -> Vec<usize> {
            slices.iter().map(RecordBatch::num_rows).collect()
        };
        assert_eq!(rows(within(&b, &[r("a2", "b1")])), vec![3]);
        assert_eq!(
            rows(within(&b, &[r("a1", "a1"), r("b2", "c1")])),
            vec![1, 2]
        );
        assert_eq!(
            rows(within(&b, &[r("a0", "a0"), r("d", "e")])),
            Vec::<usize>::new()
        );
        assert_eq!(rows(within(&b, &[r("", "zz")])), vec![6]);
        let seg = |p: Option<(&str, &str)>| SegmentRef {
            first_seq: 1,
            last_seq: 1,
            rows: 1,
            positions: p.map(|(a, b)| (a.to_string(), b.to_string())),
            max_commit_ts: None,
            file: super::super::store::FileRef {
                path: String::new(),
                size: 0,
                crc32: 0,
            },
        };
        assert!(overlaps(&seg(Some(("a1", "b2"))), &[r("b2", "c1")]));
        assert!(!overlaps(&seg(Some(("a1", "b2"))), &[r("b3", "c1")]));
        assert!(overlaps(&seg(None), &[r("x", "y")]));
    }
}
