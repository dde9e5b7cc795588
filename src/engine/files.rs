//! Which files and object-store locations SQL may reach.
//!
//! DataFusion's SQL can reach storage: `CREATE EXTERNAL TABLE` lists and reads a location,
//! `COPY ... TO` writes one, `INSERT` into a listing table writes under its location. A client
//! of the engine must not read, list or write the machine's files (or fetch URLs) through
//! them, so every planned statement is checked here before it runs: each location it names
//! must lie inside one of the [`AllowedLocations`] an administrator configured, and there are
//! none by default. A location is compared after normalising it as DataFusion reads it
//! (a path becomes a `file://` URL; relative paths are taken from the working directory); a
//! location with a `..` segment, or with an encoded separator, is never allowed.
//!
//! # Invariant
//! A statement that would read, list or write a location outside the allowed ones never
//! runs: it is refused with [`FileAccessDenied`] (SQLSTATE `42501`). The decision uses the
//! statement's text only, before any file system or network access, and the message does not
//! name the location, so it is the same whether the location exists or not.

use std::path::{Component, Path, PathBuf};

use crate::location::Location;
use crate::sqlstate::SqlState;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::datasource::listing::ListingTable;
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::{DdlStatement, LogicalPlan, WriteOp};
use url::Url;

/// A statement would reach storage outside the allowed locations.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("permission denied: {statement} may only use the storage locations the server's allowed_locations setting lists")]
pub struct FileAccessDenied {
    /// What reaches the location (`CREATE EXTERNAL TABLE`, `COPY ... TO`, ...).
    pub statement: &'static str,
}

impl FileAccessDenied {
    /// `insufficient_privilege`.
    pub const SQLSTATE: SqlState = SqlState::INSUFFICIENT_PRIVILEGE;
}

/// An allowed location that is not an absolute path or a location the engine reaches.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("allowed location {0:?} is not an absolute path or a URL (such as s3://bucket/prefix/ or file:///data/exports/){1}")]
pub struct BadLocation(pub String, String);

/// The object-store locations (URL prefixes) SQL may read and write; none by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedLocations {
    prefixes: Vec<Url>,
}

impl AllowedLocations {
    /// Parses `locations`: URLs (`s3://bucket/prefix/`, `file:///data/exports/`) or absolute
    /// paths. Each allows itself and everything below it.
    pub fn parse<S: AsRef<str>>(locations: &[S]) -> Result<Self, BadLocation> {
        let prefixes = locations
            .iter()
            .map(|l| {
                let l = l.as_ref();
                // The forms every place that writes files accepts (`Location`), relative
                // paths excepted: what is allowed must not depend on the working directory.
                if let Err(e) = Location::parse(l) {
                    return Err(BadLocation(l.to_string(), format!(": {e}")));
                }
                let relative = !Path::new(l).is_absolute() && !l.contains("://");
                normalize(l)
                    .filter(|_| !relative)
                    .ok_or_else(|| BadLocation(l.to_string(), String::new()))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { prefixes })
    }

    /// Whether no location is allowed.
    pub fn is_empty(&self) -> bool {
        self.prefixes.is_empty()
    }

    /// Whether `location` (as a statement names it) lies inside an allowed location.
    pub fn allows(&self, location: &str) -> bool {
        let Some(url) = normalize(location) else {
            return false;
        };
        self.prefixes.iter().any(|prefix| inside(&url, prefix))
    }

    /// Refuses `plan` if it reaches a location outside the allowed ones (see the module docs).
    pub fn check(&self, plan: &LogicalPlan) -> Result<(), FileAccessDenied> {
        let mut denied = None;
        let walked = plan.apply_with_subqueries(|node| {
            let (statement, locations) = reached(node);
            if locations.iter().any(|l| !self.allows(l)) {
                denied = Some(FileAccessDenied { statement });
                return Ok(TreeNodeRecursion::Stop);
            }
            Ok(TreeNodeRecursion::Continue)
        });
        match (denied, walked) {
            (Some(denied), _) => Err(denied),
            // The walk itself cannot fail; if it ever did, nothing is let through unchecked.
            (None, Err(_)) => Err(FileAccessDenied {
                statement: "this statement",
            }),
            (None, Ok(_)) => Ok(()),
        }
    }
}

/// The locations a plan node reads, lists or writes, and what it is.
fn reached(node: &LogicalPlan) -> (&'static str, Vec<String>) {
    match node {
        LogicalPlan::Ddl(DdlStatement::CreateExternalTable(create)) => {
            ("CREATE EXTERNAL TABLE", create.locations.clone())
        }
        LogicalPlan::Copy(copy) => ("COPY ... TO", vec![copy.output_url.clone()]),
        LogicalPlan::Dml(dml) => {
            let statement = match dml.op {
                WriteOp::Insert(_) => "INSERT",
                _ => "a statement writing to a table",
            };
            let paths = source_as_provider(&dml.target).ok().and_then(|provider| {
                provider.downcast_ref::<ListingTable>().map(|t| {
                    t.table_paths()
                        .iter()
                        .map(|p| p.as_str().to_string())
                        .collect::<Vec<_>>()
                })
            });
            (statement, paths.unwrap_or_default())
        }
        _ => ("", Vec::new()),
    }
}

/// `location` as the URL DataFusion would read: paths as `file://` URLs. `None` when it has
/// a `..` segment or an encoded separator, or is neither a path nor a URL.
fn normalize(location: &str) -> Option<Url> {
    let url = if Path::new(location).is_absolute() {
        file_url(PathBuf::from(location))?
    } else {
        match Url::parse(location) {
            Ok(url) => url,
            Err(url::ParseError::RelativeUrlWithoutBase) => {
                file_url(std::env::current_dir().ok()?.join(location))?
            }
            Err(_) => return None,
        }
    };
    let segments = url.path_segments().map(Iterator::collect::<Vec<_>>);
    let clean = segments.unwrap_or_default().iter().all(|segment| {
        let decoded = percent_decode(segment);
        decoded != ".." && decoded != "." && !decoded.contains(['/', '\\'])
    });
    clean.then_some(url)
}

/// A `file://` URL of an absolute path; `None` if the path climbs with `..`.
fn file_url(path: PathBuf) -> Option<Url> {
    let mut clean = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => return None,
            Component::CurDir => {}
            other => clean.push(other),
        }
    }
    let trailing = path.as_os_str().to_string_lossy().ends_with('/');
    if trailing {
        Url::from_directory_path(&clean).ok()
    } else {
        Url::from_file_path(&clean).ok()
    }
}

/// Whether `url` is `prefix` or below it.
fn inside(url: &Url, prefix: &Url) -> bool {
    if url.scheme() != prefix.scheme()
        || url.host_str() != prefix.host_str()
        || url.port_or_known_default() != prefix.port_or_known_default()
    {
        return false;
    }
    let segments = |u: &Url| -> Vec<String> {
        let mut s: Vec<String> = u
            .path_segments()
            .map(|s| s.map(str::to_string).collect())
            .unwrap_or_default();
        if s.last().is_some_and(String::is_empty) {
            s.pop();
        }
        s
    };
    let (url, prefix) = (segments(url), segments(prefix));
    url.len() >= prefix.len() && url[..prefix.len()] == prefix[..]
}

/// `%xx` escapes decoded (lossily: only the separators and dots matter here).
fn percent_decode(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed() -> AllowedLocations {
        AllowedLocations::parse(&["s3://bucket/prefix/", "file:///data/exports/", "/srv/in"])
            .unwrap()
    }

    #[test]
    fn locations_inside_an_allowed_prefix_are_allowed() {
        let a = allowed();
        for location in [
            "s3://bucket/prefix/x.parquet",
            "s3://bucket/prefix/",
            "s3://bucket/prefix",
            "file:///data/exports/out.csv",
            "/data/exports/out.csv",
            "/data/exports/./deep/out.csv",
            "/data/exports/*.csv",
            "file:///srv/in/a.json",
            "/srv/in",
        ] {
            assert!(a.allows(location), "{location}");
        }
    }

    #[test]
    fn everything_else_is_refused() {
        let a = allowed();
        for location in [
            "s3://bucket/prefix2/x",
            "s3://bucket/",
            "s3://other/prefix/x",
            "gs://bucket/prefix/x",
            "http://bucket/prefix/x",
            "/data/exports/../secret",
            "/data/exports/a/../../secret",
            "file:///data/exports/..%2Fsecret",
            "file:///data/exports/%2e%2e/secret",
            "file:///data/exports/a%2F..%2F..%2Fsecret",
            "/etc/passwd",
            "/data",
            "relative.csv",
            "",
        ] {
            assert!(!a.allows(location), "{location}");
        }
        assert!(!AllowedLocations::default().allows("/data/exports/x"));
    }

    #[test]
    fn allowed_locations_must_be_absolute() {
        assert!(AllowedLocations::parse(&["exports/"]).is_err());
        assert!(AllowedLocations::parse(&["/data/../etc"]).is_err());
        assert!(AllowedLocations::parse(&["s3://bucket/p/"]).is_ok());
    }

    #[tokio::test]
    async fn file_statements_are_found_in_plans() {
        let ctx = datafusion::prelude::SessionContext::new();
        ctx.sql("CREATE TABLE m AS VALUES (1)").await.unwrap();
        let plan = |sql: &'static str| {
            let state = ctx.state();
            async move { state.create_logical_plan(sql).await.unwrap() }
        };
        let none = AllowedLocations::default();
        for sql in [
            "CREATE EXTERNAL TABLE e STORED AS CSV LOCATION '/etc/passwd'",
            "COPY (SELECT 1) TO '/tmp/x.csv'",
            "COPY m TO '/tmp/x.csv'",
            "EXPLAIN COPY (SELECT 1) TO '/tmp/x.csv'",
        ] {
            let denied = none.check(&plan(sql).await).unwrap_err();
            let message = denied.to_string();
            assert!(
                !message.contains("/tmp") && !message.contains("/etc"),
                "{message}"
            );
        }
        for sql in [
            "SELECT 1",
            "CREATE TABLE n AS VALUES (2)",
            "CREATE VIEW v AS SELECT 1",
            "INSERT INTO m VALUES (3)",
        ] {
            assert_eq!(none.check(&plan(sql).await), Ok(()), "{sql}");
        }
        let exports = AllowedLocations::parse(&["/tmp/exports/"]).unwrap();
        assert!(exports
            .check(&plan("COPY (SELECT 1) TO '/tmp/exports/x.csv'").await)
            .is_ok());
        assert!(exports
            .check(&plan("COPY (SELECT 1) TO '/tmp/x.csv'").await)
            .is_err());
    }
}
