//! Loading a source's newest checkpoint back into memory.
//!
//! # Argument
//! Each table's state is its state snapshot (the rows at the end of checkpoint `state.seq`)
//! followed by the changelog segments of the later checkpoints, replayed in order. Replaying is
//! exact because after the hand-off the changelog *is* the sequence of row operations the state
//! went through: for a keyed table `d` removes the key and `c`/`u` store the row under its key;
//! for a keyless table (a multiset) `c` adds one copy and `d` removes one. The result is the
//! state at the manifest's position, where the binlog resumes; the engine drops any change
//! before it (`Capture::resume`). Every file is checked (framing CRC, the size and CRC the
//! manifest recorded, the columns) before any of it is used. Changelog entries past the
//! source's memory budget stay in their files (see `spill`). Entries retention removed are in
//! no file: the changelog starts after them with their count, so offsets stay what they were.
//!
//! A table's state file is written under the schema the manifest records for it, and a
//! checkpoint after a schema change writes the state again, so every replayed entry is of that
//! schema; older entries of other schemas are only read, through the union of the table's
//! schema history (see `schemas`).

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::compute::concat_batches;

use super::error::DurableError;
use super::ipc;
use super::manifest::Manifest;
use super::spill::{spill_over_budget, StoredChangelog};
use super::store::{FileKind, FileRef, Store};
use crate::capture::SchemaChange;
use crate::change::keys::RowCodec;
use crate::change::position::BinlogCoord;
use crate::change::schema::{TableId, TableSchema};
use crate::change::Op;
use crate::state::changelog::{Changelog, ChangelogRows, ChangelogSegment, Trimmed};
use crate::state::current::CurrentTable;
use crate::state::merge::TableState;

/// A checkpoint loaded into memory.
#[derive(Debug)]
pub struct Recovered {
    pub position: BinlogCoord,
    pub consistent_from: BinlogCoord,
    pub states: Vec<TableState>,
    pub changelogs: Vec<Changelog>,
}

/// Loads `manifest` for `tables` (resolved on the server, in the manifest's order). Changelog
/// entries beyond `budget` bytes (0: no limit) are left in the store, oldest first, to be read
/// back from `stores` (one per table) when scanned.
pub async fn load(
    store: &Store,
    manifest: &Manifest,
    tables: &[Arc<TableSchema>],
    history: &[SchemaChange],
    stores: &[Arc<StoredChangelog>],
    budget: u64,
) -> Result<Recovered, DurableError> {
    let resume_err = |message: String| DurableError::Resume {
        manifest: format!("{} of source {}", manifest.seq, manifest.source_id),
        message,
    };
    let coord = |s: &str| {
        s.parse::<BinlogCoord>()
            .map_err(|e| resume_err(e.to_string()))
    };
    let position = coord(&manifest.position)?;
    let consistent_from = coord(&manifest.consistent_from)?;
    let mut states = Vec::with_capacity(tables.len());
    let mut changelogs = Vec::with_capacity(tables.len());
    for (entry, schema) in manifest.tables.iter().zip(tables) {
        let codec =
            Arc::new(
                RowCodec::new(Arc::clone(schema)).map_err(|source| DurableError::Encode {
                    what: format!("the keys of {}", schema.id),
                    source,
                })?,
            );
        let rows = read_batches(store, &entry.state.file, FileKind::State, &schema.arrow).await?;
        let rows = concat_batches(&schema.arrow, &rows).map_err(|e| DurableError::Decode {
            path: store.describe(&entry.state.file.path),
            message: e.to_string(),
        })?;
        if rows.num_rows() as u64 != entry.state.rows {
            return Err(DurableError::Decode {
                path: store.describe(&entry.state.file.path),
                message: format!(
                    "{} rows, but the manifest recorded {}",
                    rows.num_rows(),
                    entry.state.rows
                ),
            });
        }
        let mut current =
            CurrentTable::new(Arc::clone(&codec), &rows).map_err(|e| DurableError::Decode {
                path: store.describe(&entry.state.file.path),
                message: e.to_string(),
            })?;
        let t = changelogs.len();
        let trimmed = entry
            .trimmed
            .as_ref()
            .map_or_else(Trimmed::default, |r| Trimmed {
                rows: r.rows as usize,
                last_position: Some(r.last_position.clone()),
                max_commit_ts: r.max_commit_ts,
            });
        changelogs.push(changelog_of(schema, t, history).after_trimmed(trimmed, manifest.tx_seq));
        let log_schema = Arc::clone(&changelogs[t].schema);
        for segment in &entry.segments {
            let bytes = store.read_ref(&segment.file, FileKind::Segment).await?;
            let batches = ipc::decode_changelog(&bytes, &log_schema).map_err(|message| {
                DurableError::Decode {
                    path: store.describe(&segment.file.path),
                    message,
                }
            })?;
            let replay = segment.first_seq > entry.state.seq;
            for batch in batches {
                if replay {
                    apply(&mut current, &codec, &batch).map_err(|message| {
                        DurableError::Decode {
                            path: store.describe(&segment.file.path),
                            message,
                        }
                    })?;
                }
                changelogs[t]
                    .append(ChangelogSegment::of_batch(batch))
                    .map_err(|e| DurableError::Decode {
                        path: store.describe(&segment.file.path),
                        message: e.to_string(),
                    })?;
            }
            // Everything loaded is in the store: memory stays within the budget as files load.
            let persisted: Vec<usize> = changelogs.iter().map(Changelog::num_rows).collect();
            spill_over_budget(&changelogs, &persisted, stores, budget);
        }
        states.push(TableState::from_current(current));
    }
    Ok(Recovered {
        position,
        consistent_from,
        states,
        changelogs,
    })
}

async fn read_batches(
    store: &Store,
    file: &FileRef,
    kind: FileKind,
    schema: &arrow::datatypes::SchemaRef,
) -> Result<Vec<RecordBatch>, DurableError> {
    let bytes = store.read_ref(file, kind).await?;
    ipc::decode(&bytes, schema).map_err(|message| DurableError::Decode {
        path: store.describe(&file.path),
        message,
    })
}

/// Replays one changelog batch onto `current`; see the module docs.
fn apply(current: &mut CurrentTable, codec: &RowCodec, batch: &RecordBatch) -> Result<(), String> {
    let entries = ChangelogRows::new(batch).map_err(|e| e.to_string())?;
    // The table's columns lead the image; a changelog read under a wider schema (columns a
    // later DDL dropped) carries more after them.
    let width = codec.schema().columns.len();
    let image = entries.image().get(..width).ok_or_else(|| {
        format!(
            "{} image columns, the table has {width}",
            entries.image().len()
        )
    })?;
    let image = RecordBatch::try_new(Arc::clone(&codec.schema().arrow), image.to_vec())
        .map_err(|e| e.to_string())?;
    let (keys, rows) = codec.encode(&image).map_err(|e| e.to_string())?;
    let keyless = codec.keyless();
    for i in 0..entries.len() {
        let key = keys.row(i);
        let count = current.count(key.as_ref());
        let op = entries.op(i).map_err(|e| format!("row {i}: {e}"))?;
        let value = match (op, keyless) {
            (Op::Delete, false) => None,
            (Op::Insert | Op::Update | Op::Read, false) => Some((Arc::new(rows.row(i).owned()), 1)),
            (Op::Insert | Op::Read, true) => Some((Arc::new(rows.row(i).owned()), count + 1)),
            (Op::Delete, true) => (count > 1).then(|| (Arc::new(rows.row(i).owned()), count - 1)),
            // A keyless table's change is a delete and an insert, never an update.
            (Op::Update, true) => {
                return Err(format!(
                    "row {i} is an update of a keyless table, which cannot be replayed"
                ))
            }
        };
        current.put(key.as_ref(), value);
    }
    Ok(())
}

/// An empty changelog of table `t` (now `schema`) that reads entries of every schema the table
/// had in `history`.
fn changelog_of(schema: &TableSchema, t: usize, history: &[SchemaChange]) -> Changelog {
    let mut changes = history.iter().filter(|c| c.table == t).peekable();
    let mut log = match changes.peek() {
        // Created after the source started: its first schema is the one it was created with.
        Some(first) if first.before.columns.is_empty() => Changelog::new(&first.after.arrow),
        Some(first) => Changelog::new(&first.before.arrow),
        None => return Changelog::new(&schema.arrow),
    };
    for change in changes {
        log.evolve(&change.after.arrow);
    }
    log
}

/// The schemas `manifest` records for its tables at its position (`None` for a table of a
/// checkpoint written before schemas were recorded) and the schema changes before it.
pub fn recorded_schemas(
    manifest: &Manifest,
) -> Result<(Vec<Option<TableSchema>>, Vec<SchemaChange>), DurableError> {
    let bad = |message: String| DurableError::Decode {
        path: format!("manifest {} of source {}", manifest.seq, manifest.source_id),
        message,
    };
    let ids: Vec<TableId> = manifest
        .tables
        .iter()
        .map(|t| TableId::new(t.db.as_str(), t.table.as_str()))
        .collect();
    let schemas = manifest
        .tables
        .iter()
        .zip(&ids)
        .map(|(t, id)| t.schema.as_ref().map(|s| s.to_schema(id)).transpose())
        .collect::<Result<Vec<_>, String>>()
        .map_err(bad)?;
    let history = manifest
        .schema_history
        .iter()
        .map(|c| {
            let id = ids
                .get(c.table)
                .ok_or_else(|| format!("a schema change of table {} it does not hold", c.table))?;
            c.to_change(id)
        })
        .collect::<Result<Vec<_>, String>>()
        .map_err(bad)?;
    Ok((schemas, history))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::change::schema::{ColumnKind, ColumnSpec};
    use crate::state::changelog::{changelog_schema, union_schema};

    /// A changelog kept across a `DROP COLUMN` is read under the union of its schemas, whose
    /// image is wider than the table now: replay takes the table's columns from it.
    #[test]
    fn a_changelog_under_a_wider_schema_replays_onto_the_narrower_table() {
        let int = |name: &str| ColumnSpec {
            name: name.into(),
            kind: ColumnKind::Int {
                bits: 32,
                unsigned: false,
            },
            nullable: true,
        };
        let id = TableId::new("d", "t");
        let wide = TableSchema::new(id.clone(), vec![int("id"), int("a"), int("gone")], vec![0]);
        let narrow = Arc::new(TableSchema::new(id, vec![int("id"), int("a")], vec![0]));
        let union = union_schema(
            &changelog_schema(&wide.arrow),
            &changelog_schema(&narrow.arrow),
        );
        let codec = Arc::new(RowCodec::new(Arc::clone(&narrow)).unwrap());
        let mut current = CurrentTable::new(
            Arc::clone(&codec),
            &RecordBatch::new_empty(Arc::clone(&narrow.arrow)),
        )
        .unwrap();
        apply(&mut current, &codec, &RecordBatch::new_empty(union)).unwrap();
    }
}
