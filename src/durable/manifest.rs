//! Manifests and the catalog: the small JSON files that say which state is complete.
//!
//! # Invariant
//! A checkpoint exists exactly when its manifest exists. Manifests are numbered
//! (`manifests/00000000000000000042.manifest`) and committed with create-if-absent, after every
//! file they name; so the newest manifest always names complete files, a crash before the
//! commit leaves only garbage, and two writers cannot both commit the same number. The catalog
//! (`catalog/<n>.catalog`) is committed the same way on every change of a source, a sink or
//! a user created by SQL.
//!
//! The newest manifest wins. If it cannot be read (corrupt, truncated, unknown format) that is
//! an error naming the file: the engine never falls back silently to an older state, because the
//! older one may already miss files the cleanup removed. The operator can move the damaged
//! manifest aside to resume from the one before (see `docs/operations.md`).

use serde::{Deserialize, Serialize};

use super::schemas::{StoredSchema, StoredSchemaChange};
use super::store::{FileKind, FileRef, Store, StoreError};

/// Digits of a sequence number in file names, so names sort like numbers.
const SEQ_DIGITS: usize = 20;

/// One source's checkpoint: everything needed to resume it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u8,
    /// The source's id (its directory), guarding against a manifest copied between sources.
    pub source_id: String,
    pub seq: u64,
    /// The binlog position the checkpoint covers, `file:offset`: the end of the last
    /// transaction in it, where the stream resumes.
    pub position: String,
    /// The end of the hand-off: from here on the current tables are the source's state at one
    /// position, and the changelog is the binlog's history change for change.
    pub consistent_from: String,
    /// The last `_tx` number given out.
    pub tx_seq: u64,
    pub tables: Vec<TableManifest>,
    /// Every schema change the capture followed up to `position`, in binlog order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub schema_history: Vec<StoredSchemaChange>,
    /// The GTIDs the server had executed at `position`, where the source goes on at another
    /// server (absent: not known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gtids: Option<String>,
    /// The server (`host:port`) each history of positions was read from, history by history
    /// (absent in checkpoints from before a source could move: all from its own server).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub servers: Vec<String>,
    /// What was known of each of those servers' binlogs (MariaDB's `@@gtid_binlog_state`),
    /// history by history, to tell errant transactions from the history's own once the
    /// server is gone (absent in older checkpoints: not known).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub server_states: Vec<String>,
}

/// One captured table in a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableManifest {
    pub db: String,
    pub table: String,
    /// Its schema at the checkpoint's position, which its state file is written under
    /// (absent in checkpoints written before schemas were recorded: the server's is used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<StoredSchema>,
    /// Its rows at the end of checkpoint `state_seq`.
    pub state: StateRef,
    /// Its changelog, in order; segments after `state.seq` are replayed onto the state.
    pub segments: Vec<SegmentRef>,
    /// Set when its capture stopped (a DDL the engine does not follow): the state and the
    /// changelog end there, and a restart keeps the table stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<StopRecord>,
    /// The entries retention removed before its first segment (absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trimmed: Option<TrimRecord>,
}

/// What retention removed from the front of a table's changelog: the entries no longer in
/// any file, counted so offsets stay absolute, and where its retained history starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrimRecord {
    pub rows: u64,
    /// The `_position` of the last entry removed.
    pub last_position: String,
    /// The latest commit time (µs) of the entries removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_commit_ts: Option<i64>,
}

/// Why and where a table's capture stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StopRecord {
    pub reason: String,
    /// `file:offset` of the transaction that stopped it.
    pub position: String,
    /// Another table took its name: it is read again (see `capture::TableStop`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_again: bool,
    /// It was dropped at the source (see `capture::TableStop`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dropped: bool,
}

/// A table's rows as of one checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateRef {
    /// The checkpoint whose position these rows reflect.
    pub seq: u64,
    pub rows: u64,
    pub file: FileRef,
}

/// Changelog entries of the checkpoints `first_seq..=last_seq` (one file; more than one
/// checkpoint after compaction).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentRef {
    pub first_seq: u64,
    pub last_seq: u64,
    pub rows: u64,
    /// The first and last `_position` of its entries (absent in files written before they
    /// were recorded): spilled segments are found by them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub positions: Option<(String, String)>,
    /// The latest commit time (µs) of its entries, when any has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_commit_ts: Option<i64>,
    pub file: FileRef,
}

impl Manifest {
    /// Every file the manifest names.
    pub fn files(&self) -> impl Iterator<Item = &FileRef> {
        self.tables
            .iter()
            .flat_map(|t| std::iter::once(&t.state.file).chain(t.segments.iter().map(|s| &s.file)))
    }
}

/// The engine's sources and sinks, as created by `CREATE SOURCE` and `CREATE SINK`, and the
/// users created by `CREATE USER`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Catalog {
    pub format: u8,
    pub seq: u64,
    pub sources: Vec<CatalogSource>,
    /// Absent in catalogs written before sinks existed.
    #[serde(default)]
    pub sinks: Vec<CatalogSink>,
    /// Absent in catalogs written before users could be created by SQL.
    #[serde(default)]
    pub users: Vec<CatalogUser>,
}

/// One user created by SQL: what its logins are checked against, never its password. The
/// front end derives and reads these; the catalog only keeps them.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatalogUser {
    pub name: String,
    /// The role's name as SQL writes it (`admin` or `reader`).
    pub role: String,
    /// SCRAM-SHA-256: the salt, the iteration count and `Hi(password, salt, iterations)`
    /// (the salted password), salt and salted password in hex.
    pub scram_salt: String,
    pub scram_iterations: u32,
    pub scram_salted_password: String,
    /// md5: `md5(password || name)` in hex, which PostgreSQL's md5 method salts per login.
    pub md5: String,
}

impl std::fmt::Debug for CatalogUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CatalogUser")
            .field("name", &self.name)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

/// One sink in the catalog. Its position is not here: the target holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatalogSink {
    pub name: String,
    /// The source its query reads (known before the query can be planned again).
    pub source: String,
    /// The `CREATE SINK` statement, password included, with `start` resolved to a position
    /// when it said `now` (so a restart before the first commit starts at the same place).
    pub statement: String,
    /// `ALTER SINK ... PAUSE` holds across restarts.
    #[serde(default)]
    pub paused: bool,
}

/// One source in the catalog.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatalogSource {
    pub name: String,
    /// Directory of the source's checkpoints (`sources/<id>/`); a new id for every `CREATE`,
    /// so a source dropped and created again never sees the old one's files.
    pub id: String,
    /// The `CREATE SOURCE` statement, password included (the engine reconnects unattended).
    pub statement: String,
}

/// Errors reading manifests and the catalog.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("state file {path} is corrupt: {message}")]
    Parse { path: String, message: String },
}

/// `dir/<seq>.<ext>`.
pub fn numbered_path(dir: &str, seq: u64, ext: &str) -> String {
    format!("{dir}/{seq:0width$}.{ext}", width = SEQ_DIGITS)
}

/// The sequence number of a numbered file name, if it is one.
fn seq_of(path: &str, ext: &str) -> Option<u64> {
    let name = path.rsplit('/').next()?;
    let digits = name.strip_suffix(ext)?.strip_suffix('.')?;
    (digits.len() == SEQ_DIGITS && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// The numbered files of `dir` with extension `ext`, oldest first.
pub async fn numbered(
    store: &Store,
    dir: &str,
    ext: &str,
) -> Result<Vec<(u64, String)>, StoreError> {
    let mut out: Vec<(u64, String)> = store
        .list(dir)
        .await?
        .into_iter()
        .filter_map(|p| seq_of(&p, ext).map(|s| (s, p)))
        .collect();
    out.sort();
    Ok(out)
}

/// Reads and parses the JSON document of kind `kind` at `path`.
pub async fn read_json<T: for<'de> Deserialize<'de>>(
    store: &Store,
    path: &str,
    kind: FileKind,
) -> Result<T, ManifestError> {
    let payload = store.read(path, kind).await?;
    serde_json::from_slice(&payload).map_err(|e| ManifestError::Parse {
        path: store.describe(path),
        message: e.to_string(),
    })
}

/// Commits `value` at `path` with create-if-absent.
pub async fn commit_json<T: Serialize>(
    store: &Store,
    path: &str,
    kind: FileKind,
    value: &T,
) -> Result<FileRef, StoreError> {
    let payload = serde_json::to_vec_pretty(value).expect("manifests serialise");
    store.create(path, kind, &payload).await
}

/// Directory of the catalog.
pub const CATALOG_DIR: &str = "catalog";
const CATALOG_EXT: &str = "catalog";
/// Directory of one source's files.
pub fn source_dir(id: &str) -> String {
    format!("sources/{id}")
}
/// Directory of one source's manifests.
pub fn manifest_dir(id: &str) -> String {
    format!("{}/manifests", source_dir(id))
}
pub const MANIFEST_EXT: &str = "manifest";

/// The newest catalog, or an empty one for a new store.
pub async fn load_catalog(store: &Store) -> Result<Catalog, ManifestError> {
    let Some((_, path)) = numbered(store, CATALOG_DIR, CATALOG_EXT).await?.pop() else {
        return Ok(Catalog {
            format: super::store::FORMAT_VERSION,
            ..Default::default()
        });
    };
    let catalog: Catalog = read_json(store, &path, FileKind::Catalog).await?;
    check_format(store, &path, catalog.format)?;
    Ok(catalog)
}

/// Commits `catalog` as the next one (its `seq` must be one past the loaded one).
pub async fn commit_catalog(store: &Store, catalog: &Catalog) -> Result<(), StoreError> {
    let path = numbered_path(CATALOG_DIR, catalog.seq, CATALOG_EXT);
    commit_json(store, &path, FileKind::Catalog, catalog).await?;
    // Older catalogs are history nobody reads; keep the previous one for inspection.
    for (seq, old) in numbered(store, CATALOG_DIR, CATALOG_EXT).await? {
        if seq + 1 < catalog.seq {
            store.delete(&old).await?;
        }
    }
    Ok(())
}

/// The newest manifest of source `id`, if it has one.
pub async fn load_newest_manifest(
    store: &Store,
    id: &str,
) -> Result<Option<Manifest>, ManifestError> {
    let Some((seq, path)) = numbered(store, &manifest_dir(id), MANIFEST_EXT)
        .await?
        .pop()
    else {
        return Ok(None);
    };
    let manifest: Manifest = read_json(store, &path, FileKind::Manifest).await?;
    check_format(store, &path, manifest.format)?;
    if manifest.seq != seq || manifest.source_id != id {
        return Err(ManifestError::Parse {
            path: store.describe(&path),
            message: format!(
                "it says checkpoint {} of source {}, but its name says checkpoint {seq} of source {id}",
                manifest.seq, manifest.source_id
            ),
        });
    }
    Ok(Some(manifest))
}

fn check_format(store: &Store, path: &str, format: u8) -> Result<(), ManifestError> {
    if format != super::store::FORMAT_VERSION {
        return Err(ManifestError::Parse {
            path: store.describe(path),
            message: format!("format {format} is not supported"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(id: &str, seq: u64) -> Manifest {
        Manifest {
            format: super::super::store::FORMAT_VERSION,
            source_id: id.into(),
            seq,
            position: "binlog.000001:4".into(),
            consistent_from: "binlog.000001:4".into(),
            tx_seq: 0,
            tables: Vec::new(),
            schema_history: Vec::new(),
            gtids: None,
            servers: Vec::new(),
            server_states: Vec::new(),
        }
    }

    #[tokio::test]
    async fn the_newest_committed_manifest_wins_and_a_damaged_one_is_an_error() {
        let store = Store::memory();
        assert_eq!(load_newest_manifest(&store, "s").await.unwrap(), None);
        for seq in [1, 2, 10] {
            let path = numbered_path(&manifest_dir("s"), seq, MANIFEST_EXT);
            commit_json(&store, &path, FileKind::Manifest, &manifest("s", seq))
                .await
                .unwrap();
        }
        // Not a manifest name: ignored.
        store
            .write("sources/s/manifests/notes.txt", FileKind::Manifest, b"x")
            .await
            .unwrap();
        let newest = load_newest_manifest(&store, "s").await.unwrap().unwrap();
        assert_eq!(newest.seq, 10);
        // The same number cannot be committed twice.
        let path = numbered_path(&manifest_dir("s"), 10, MANIFEST_EXT);
        assert!(
            commit_json(&store, &path, FileKind::Manifest, &manifest("s", 10))
                .await
                .is_err()
        );
        // A manifest that does not parse is refused by name, not skipped.
        let path = numbered_path(&manifest_dir("s"), 11, MANIFEST_EXT);
        store
            .create(&path, FileKind::Manifest, b"{\"format\":1")
            .await
            .unwrap();
        let err = load_newest_manifest(&store, "s").await.unwrap_err();
        assert!(
            err.to_string().contains("00000000000000000011.manifest"),
            "{err}"
        );
        // A manifest under another name than its number.
        let path = numbered_path(&manifest_dir("s"), 12, MANIFEST_EXT);
        commit_json(&store, &path, FileKind::Manifest, &manifest("s", 3))
            .await
            .unwrap();
        let err = load_newest_manifest(&store, "s").await.unwrap_err();
        assert!(
            err.to_string().contains("its name says checkpoint 12"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn catalogs_commit_in_sequence() {
        let store = Store::memory();
        let mut catalog = load_catalog(&store).await.unwrap();
        assert!(catalog.sources.is_empty());
        for i in 1..=4 {
            catalog.seq = i;
            catalog.sources.push(CatalogSource {
                name: format!("s{i}"),
                id: format!("id{i}"),
                statement: String::new(),
            });
            commit_catalog(&store, &catalog).await.unwrap();
        }
        assert_eq!(load_catalog(&store).await.unwrap(), catalog);
        assert_eq!(
            numbered(&store, CATALOG_DIR, CATALOG_EXT)
                .await
                .unwrap()
                .len(),
            2
        );
        let stale = Catalog {
            seq: 4,
            ..catalog.clone()
        };
        assert!(commit_catalog(&store, &stale).await.is_err());
    }
}
