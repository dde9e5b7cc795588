//! The state store: checksummed files on an `object_store` (a local directory by default,
//! S3-compatible when built with the `s3` feature, in memory for tests).
//!
//! # Invariant
//! A file is either read back exactly as it was written or refused with an error naming the
//! file and what is wrong with it: every file is framed as
//! `magic "CDCF" | format u8 | kind u8 | reserved u16 | payload length u64 | payload | crc32`,
//! where the CRC covers everything before it. A truncated file loses its length or its CRC, a
//! flipped bit fails the CRC, and a file of another kind (a segment where a manifest belongs)
//! fails the kind check. Callers additionally compare the size and CRC a manifest recorded for
//! each file it names ([`FileRef`]), so a file replaced by another valid one is refused too.
//!
//! Writes are whole-object puts, which `object_store` makes atomic (a local directory writes a
//! staging file and renames or hard-links it into place). [`Store::create`] is
//! create-if-absent: it fails if the object exists, which is what makes a manifest's commit
//! atomic and fences a second writer.
//!
//! # Durability of a local directory
//! `object_store` does not `fsync`, so a file it wrote may still be in the page cache when a
//! manifest naming it reaches the disk, and a power failure could then leave a manifest whose
//! files are empty or missing. Every write to a local directory therefore returns only after
//! the file and its directory (and, once, each directory above it up to the store's root) are
//! synced. A manifest is written after the files it names, so they are on disk before it is,
//! and it is on disk itself before its checkpoint is reported. Deletes are not synced: a lost
//! delete leaves garbage, which the next checkpoint removes again.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::location::Location;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};

/// First bytes of every state file.
const MAGIC: &[u8; 4] = b"CDCF";
/// Version of the framing and of the payloads' layout.
pub const FORMAT_VERSION: u8 = 1;
/// Magic, format, kind, reserved, payload length.
const HEADER_LEN: usize = 16;
/// The CRC32 after the payload.
const TRAILER_LEN: usize = 4;

/// What a state file holds; checked on read so a file cannot stand in for another kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Manifest = 1,
    Catalog = 2,
    Segment = 3,
    State = 4,
    Progress = 5,
}

impl FileKind {
    fn from_byte(b: u8) -> Option<Self> {
        [
            Self::Manifest,
            Self::Catalog,
            Self::Segment,
            Self::State,
            Self::Progress,
        ]
        .into_iter()
        .find(|k| *k as u8 == b)
    }
}

/// A file as a manifest names it: path, size and checksum.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRef {
    pub path: String,
    pub size: u64,
    pub crc32: u32,
}

/// Errors at the state store boundary.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open the state store {location}: {message}")]
    Open { location: String, message: String },
    /// The store failed (I/O, network); retrying may succeed.
    #[error("state store error on {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: object_store::Error,
    },
    /// The file exists but is not what was written: never loaded.
    #[error("state file {path} is corrupt: {problem}")]
    Corrupt { path: String, problem: String },
    /// A create-if-absent write found the file already there.
    #[error("state file {path} already exists: another engine may be writing this state")]
    Exists { path: String },
    /// A file the state needs is missing.
    #[error("state file {path} is missing")]
    Missing { path: String },
    /// A file written to a local directory could not be synced to disk.
    #[error("cannot sync state file {path} to disk: {source}")]
    Sync {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// Options of the store: `object_store` configuration keys for remote stores
/// (`aws_access_key_id`, `aws_endpoint`, `aws_region`, `aws_allow_http`, ...), and how often
/// one request is retried before its failure reaches the checkpoint loop: `max_retries`
/// (default 10) and `retry_timeout_ms` (default 180000).
pub type StoreOptions = Vec<(String, String)>;

impl StoreError {
    /// Whether trying again can succeed: the store could not be reached or failed (network,
    /// timeout, a 5xx answer after the client's own retries). A damaged, missing or duplicate
    /// file, or a request the store refuses (credentials, permissions), needs a person.
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Io { source, .. } => matches!(
                source,
                object_store::Error::Generic { .. } | object_store::Error::JoinError { .. }
            ),
            _ => false,
        }
    }
}

/// A state store; see the module docs.
#[derive(Debug, Clone)]
pub struct Store {
    inner: Arc<dyn ObjectStore>,
    location: String,
    /// Set for a local directory, whose writes are synced (see the module docs).
    local: Option<Arc<LocalSync>>,
}

/// What a local directory's writes sync.
#[derive(Debug)]
struct LocalSync {
    root: PathBuf,
    /// Directories whose own entry in their parent is already synced: a new file needs only
    /// its directory synced, a new directory also its parent.
    synced: Mutex<HashSet<PathBuf>>,
}

impl LocalSync {
    /// Syncs the file at `path` (relative to the root), its directory, and every directory up
    /// to the root not synced before.
    fn sync(&self, path: &str) -> std::io::Result<()> {
        let sync_dir = |d: &std::path::Path| std::fs::File::open(d)?.sync_all();
        let file = self.root.join(path);
        std::fs::File::open(&file)?.sync_all()?;
        // The file is a new entry in its directory.
        let mut dir = file.parent().unwrap_or(&self.root);
        sync_dir(dir)?;
        // A directory made for it is a new entry in its parent, and so on up.
        while dir != self.root && !self.synced.lock().expect("synced").contains(dir) {
            let parent = dir.parent().unwrap_or(&self.root);
            sync_dir(parent)?;
            self.synced
                .lock()
                .expect("synced")
                .insert(dir.to_path_buf());
            dir = parent;
        }
        Ok(())
    }
}

impl Store {
    /// Opens `location` ([`Location`]): a directory path or `file://` URL (created if needed),
    /// `memory://` (tests), or `s3://bucket/prefix` (with the `s3` feature).
    pub fn open(location: &str, options: &StoreOptions) -> Result<Self, StoreError> {
        let err = |message: String| StoreError::Open {
            location: location.to_string(),
            message,
        };
        let dir = match Location::parse(location).map_err(|e| err(e.to_string()))? {
            Location::Memory => return Ok(Self::memory()),
            Location::S3 { prefix, .. } => return open_s3(location, &prefix, options).map_err(err),
            Location::Local(dir) => dir,
        };
        if !options.is_empty() {
            return Err(err("a local directory takes no store options".into()));
        }
        std::fs::create_dir_all(&dir).map_err(|e| err(e.to_string()))?;
        let root = std::fs::canonicalize(&dir).map_err(|e| err(e.to_string()))?;
        let fs = object_store::local::LocalFileSystem::new_with_prefix(&root)
            .map_err(|e| err(e.to_string()))?;
        Ok(Self {
            inner: Arc::new(fs),
            location: location.to_string(),
            local: Some(Arc::new(LocalSync {
                root,
                synced: Mutex::new(HashSet::new()),
            })),
        })
    }

    /// A store in memory, gone when dropped.
    pub fn memory() -> Self {
        Self {
            inner: Arc::new(object_store::memory::InMemory::new()),
            location: "memory://".into(),
            local: None,
        }
    }

    pub fn location(&self) -> &str {
        &self.location
    }

    /// Writes `payload` framed as `kind` at `path`, replacing any file there.
    pub async fn write(
        &self,
        path: &str,
        kind: FileKind,
        payload: &[u8],
    ) -> Result<FileRef, StoreError> {
        self.put(path, kind, payload, PutMode::Overwrite).await
    }

    /// Writes `payload` at `path` only if nothing is there yet (the commit of a manifest).
    pub async fn create(
        &self,
        path: &str,
        kind: FileKind,
        payload: &[u8],
    ) -> Result<FileRef, StoreError> {
        self.put(path, kind, payload, PutMode::Create).await
    }

    async fn put(
        &self,
        path: &str,
        kind: FileKind,
        payload: &[u8],
        mode: PutMode,
    ) -> Result<FileRef, StoreError> {
        let framed = frame(kind, payload);
        let file = FileRef {
            path: path.to_string(),
            size: framed.len() as u64,
            // The CRC the frame ends with (a CRC over a frame including it is a constant).
            crc32: crc32fast::hash(&framed[..framed.len() - TRAILER_LEN]),
        };
        self.put_plain(path, framed.into(), mode).await?;
        Ok(file)
    }

    /// Writes `payload` as it is (no frame) at `path`: the files of a Parquet sink, which
    /// any reader must be able to open. The file appears whole or not at all (object stores
    /// put atomically; a local directory renames a finished file into place) and is synced
    /// before this returns. `PutMode::Create` refuses a file that is already there.
    pub async fn put_plain(
        &self,
        path: &str,
        payload: bytes::Bytes,
        mode: PutMode,
    ) -> Result<(), StoreError> {
        let options = PutOptions {
            mode,
            ..Default::default()
        };
        match self
            .inner
            .put_opts(&Path::from(path), PutPayload::from(payload), options)
            .await
        {
            Ok(_) => self.sync(path).await,
            Err(object_store::Error::AlreadyExists { .. }) => Err(StoreError::Exists {
                path: self.describe(path),
            }),
            Err(source) => Err(StoreError::Io {
                path: self.describe(path),
                source,
            }),
        }
    }

    /// Makes a file just written to a local directory durable (see the module docs).
    async fn sync(&self, path: &str) -> Result<(), StoreError> {
        let Some(local) = &self.local else {
            return Ok(());
        };
        let local = Arc::clone(local);
        let relative = path.to_string();
        let result = tokio::task::spawn_blocking(move || local.sync(&relative))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        result.map_err(|e| StoreError::Sync {
            path: self.describe(path),
            source: e,
        })
    }

    /// Reads and checks the file at `path`; returns its payload.
    pub async fn read(&self, path: &str, kind: FileKind) -> Result<Vec<u8>, StoreError> {
        let bytes = self.read_raw(path).await?;
        unframe(&bytes, kind).map_err(|problem| StoreError::Corrupt {
            path: self.describe(path),
            problem,
        })
    }

    /// Reads the file `file` names, checking also the size and CRC recorded for it.
    pub async fn read_ref(&self, file: &FileRef, kind: FileKind) -> Result<Vec<u8>, StoreError> {
        let bytes = self.read_raw(&file.path).await?;
        let corrupt = |problem: String| StoreError::Corrupt {
            path: self.describe(&file.path),
            problem,
        };
        if bytes.len() as u64 != file.size {
            return Err(corrupt(format!(
                "{} bytes, but the manifest recorded {}",
                bytes.len(),
                file.size
            )));
        }
        let payload = unframe(&bytes, kind).map_err(corrupt)?;
        let crc = crc32fast::hash(&bytes[..bytes.len() - TRAILER_LEN]);
        if crc != file.crc32 {
            return Err(corrupt(format!(
                "checksum {crc:#010x}, but the manifest recorded {:#010x}",
                file.crc32
            )));
        }
        Ok(payload)
    }

    /// Reads the file at `path` as it is (no frame check; see [`Store::put_plain`]).
    pub async fn read_raw(&self, path: &str) -> Result<bytes::Bytes, StoreError> {
        let result = self.inner.get(&Path::from(path)).await;
        let get = match result {
            Ok(get) => get,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(StoreError::Missing {
                    path: self.describe(path),
                })
            }
            Err(source) => {
                return Err(StoreError::Io {
                    path: self.describe(path),
                    source,
                })
            }
        };
        get.bytes().await.map_err(|source| StoreError::Io {
            path: self.describe(path),
            source,
        })
    }

    /// Paths of every file under `prefix`, sorted.
    pub async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        let mut out: Vec<String> = self
            .inner
            .list(Some(&Path::from(prefix)))
            .map_ok(|meta| meta.location.to_string())
            .try_collect()
            .await
            .map_err(|source| StoreError::Io {
                path: self.describe(prefix),
                source,
            })?;
        out.sort();
        Ok(out)
    }

    /// Deletes `path`; a file already gone is fine.
    pub async fn delete(&self, path: &str) -> Result<(), StoreError> {
        match self.inner.delete(&Path::from(path)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(source) => Err(StoreError::Io {
                path: self.describe(path),
                source,
            }),
        }
    }

    /// `path` as users find it: inside the store's location.
    pub fn describe(&self, path: &str) -> String {
        format!("{}/{path}", self.location.trim_end_matches('/'))
    }
}

#[cfg(feature = "s3")]
fn open_s3(location: &str, prefix: &str, options: &StoreOptions) -> Result<Store, String> {
    use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
    let mut builder = AmazonS3Builder::from_env().with_url(location);
    let mut retry = object_store::RetryConfig::default();
    for (key, value) in options {
        let number = || {
            value
                .parse::<u64>()
                .map_err(|e| format!("option {key}: {value:?} is not a whole number: {e}"))
        };
        match key.as_str() {
            "max_retries" => retry.max_retries = number()? as usize,
            "retry_timeout_ms" => {
                retry.retry_timeout = std::time::Duration::from_millis(number()?);
            }
            _ => {
                let key: AmazonS3ConfigKey =
                    key.parse().map_err(|e| format!("option {key}: {e}"))?;
                builder = builder.with_config(key, value);
            }
        }
    }
    let s3 = builder
        .with_retry(retry)
        .build()
        .map_err(|e| e.to_string())?;
    let inner: Arc<dyn ObjectStore> = if prefix.is_empty() {
        Arc::new(s3)
    } else {
        Arc::new(object_store::prefix::PrefixStore::new(
            s3,
            prefix.to_string(),
        ))
    };
    Ok(Store {
        inner,
        location: location.to_string(),
        local: None,
    })
}

#[cfg(not(feature = "s3"))]
fn open_s3(_: &str, _: &str, _: &StoreOptions) -> Result<Store, String> {
    Err("this build has no S3 support (it was built with `--no-default-features`); rebuild with the `s3` feature".into())
}

fn frame(kind: FileKind, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len() + TRAILER_LEN);
    out.extend_from_slice(MAGIC);
    out.push(FORMAT_VERSION);
    out.push(kind as u8);
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(payload);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The payload of a framed file, or what is wrong with it.
fn unframe(bytes: &[u8], kind: FileKind) -> Result<Vec<u8>, String> {
    if bytes.len() < HEADER_LEN + TRAILER_LEN {
        return Err(format!(
            "truncated: {} bytes, shorter than an empty file",
            bytes.len()
        ));
    }
    if &bytes[..4] != MAGIC {
        return Err("not a cdcfusion state file (bad magic)".into());
    }
    if bytes[4] != FORMAT_VERSION {
        return Err(format!(
            "format version {} is not supported (expected {FORMAT_VERSION})",
            bytes[4]
        ));
    }
    match FileKind::from_byte(bytes[5]) {
        Some(k) if k == kind => {}
        Some(k) => return Err(format!("holds a {k:?} where a {kind:?} was expected")),
        None => return Err(format!("unknown file kind {}", bytes[5])),
    }
    let len = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
    let expected = HEADER_LEN as u64 + len + TRAILER_LEN as u64;
    if bytes.len() as u64 != expected {
        return Err(format!(
            "truncated or extended: {} bytes, but its header says {expected}",
            bytes.len()
        ));
    }
    let body = bytes.len() - TRAILER_LEN;
    let stored = u32::from_le_bytes(bytes[body..].try_into().expect("4 bytes"));
    let computed = crc32fast::hash(&bytes[..body]);
    if stored != computed {
        return Err(format!(
            "checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
        ));
    }
    Ok(bytes[HEADER_LEN..body].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn files_read_back_exactly_and_damage_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().to_str().unwrap(), &Vec::new()).unwrap();
        let file = store
            .write("a/seg.arrow", FileKind::Segment, b"hello")
            .await
            .unwrap();
        assert_eq!(
            store.read_ref(&file, FileKind::Segment).await.unwrap(),
            b"hello"
        );
        // Wrong kind.
        let err = store
            .read("a/seg.arrow", FileKind::Manifest)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("a/seg.arrow"), "{err}");
        assert!(err.to_string().contains("Segment"), "{err}");
        let on_disk = dir.path().join("a/seg.arrow");
        let bytes = std::fs::read(&on_disk).unwrap();
        // A flipped bit in the payload.
        let mut flipped = bytes.clone();
        flipped[HEADER_LEN + 1] ^= 0x10;
        std::fs::write(&on_disk, &flipped).unwrap();
        let err = store
            .read("a/seg.arrow", FileKind::Segment)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("checksum mismatch"), "{err}");
        // Truncated.
        std::fs::write(&on_disk, &bytes[..bytes.len() - 2]).unwrap();
        let err = store.read_ref(&file, FileKind::Segment).await.unwrap_err();
        assert!(err.to_string().contains("corrupt"), "{err}");
        std::fs::write(&on_disk, &bytes[..bytes.len() - 2]).unwrap();
        let err = store
            .read("a/seg.arrow", FileKind::Segment)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("truncated"), "{err}");
        // Replaced by another valid file of the same kind.
        let other = store
            .write("a/seg.arrow", FileKind::Segment, b"hellO")
            .await
            .unwrap();
        assert_ne!(other.crc32, file.crc32);
        let err = store.read_ref(&file, FileKind::Segment).await.unwrap_err();
        assert!(err.to_string().contains("manifest recorded"), "{err}");
        // Missing.
        let err = store.read("nope", FileKind::Segment).await.unwrap_err();
        assert!(matches!(err, StoreError::Missing { .. }), "{err}");
    }

    #[tokio::test]
    async fn local_writes_sync_every_new_directory_up_to_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().to_str().unwrap(), &Vec::new()).unwrap();
        store
            .write("s/1/tables/0/seg.arrow", FileKind::Segment, b"x")
            .await
            .unwrap();
        store
            .create("s/1/manifests/1.manifest", FileKind::Manifest, b"m")
            .await
            .unwrap();
        let local = store.local.as_ref().expect("a local directory");
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let mut synced: Vec<PathBuf> = local.synced.lock().unwrap().iter().cloned().collect();
        synced.sort();
        let expected: Vec<PathBuf> = ["s", "s/1", "s/1/manifests", "s/1/tables", "s/1/tables/0"]
            .iter()
            .map(|d| root.join(d))
            .collect();
        assert_eq!(synced, expected);
        // A file that is not there (the write went elsewhere) cannot be synced.
        assert!(local.sync("s/1/nothing.arrow").is_err());
    }

    #[tokio::test]
    async fn create_refuses_to_replace_and_listing_skips_nothing_written() {
        let store = Store::memory();
        store
            .create("m/1.manifest", FileKind::Manifest, b"one")
            .await
            .unwrap();
        let err = store
            .create("m/1.manifest", FileKind::Manifest, b"two")
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Exists { .. }), "{err}");
        assert_eq!(
            store
                .read("m/1.manifest", FileKind::Manifest)
                .await
                .unwrap(),
            b"one"
        );
        store
            .write("m/0.manifest", FileKind::Manifest, b"zero")
            .await
            .unwrap();
        assert_eq!(
            store.list("m").await.unwrap(),
            vec!["m/0.manifest".to_string(), "m/1.manifest".to_string()]
        );
        store.delete("m/0.manifest").await.unwrap();
        store.delete("m/0.manifest").await.unwrap();
        assert_eq!(store.list("m").await.unwrap().len(), 1);
    }
}
