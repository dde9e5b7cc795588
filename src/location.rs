//! [`Location`]: where the engine keeps or writes files (its state directory, a sink's target,
//! a location SQL may reach), parsed once from the text a user gave.
//!
//! # Invariant
//! Every place that takes such a URL reads it through [`Location::parse`], so they accept the
//! same forms and refuse the others with the same words: a path (absolute, or relative to the
//! working directory), `file:///absolute/path`, `s3://bucket[/prefix]`, and `memory://`
//! (tests). What a place cannot use (a Delta table in memory, S3 in a build without it) it
//! refuses by the variant, never by matching the text again. This module imports nothing of
//! the crate, so every stage may use it.

use std::fmt;
use std::path::{Path, PathBuf};

/// A parsed location; see the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A directory or file on this machine.
    Local(PathBuf),
    /// An S3-compatible bucket and a key prefix (without slashes at its ends; empty for the
    /// bucket's root).
    S3 { bucket: String, prefix: String },
    /// An object store in memory, gone with the process (tests).
    Memory,
}

/// A location that is none of the accepted forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LocationError {
    #[error("an empty location")]
    Empty,
    #[error(
        "{text:?}: the scheme {scheme}:// is not one cdcfusion writes to (use a directory, \
         file:///path, s3://bucket/prefix or memory://)"
    )]
    UnknownScheme { text: String, scheme: String },
    #[error("{0:?}: s3:// needs a bucket (s3://bucket/prefix)")]
    NoBucket(String),
    #[error("{0:?}: a file:// URL needs an absolute path (file:///path)")]
    NotAFilePath(String),
}

impl Location {
    /// Parses `text` (see the module docs); a relative path is taken from the working
    /// directory.
    pub fn parse(text: &str) -> Result<Self, LocationError> {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err(LocationError::Empty);
        }
        if trimmed == "memory://" {
            return Ok(Location::Memory);
        }
        if let Some(rest) = trimmed.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(LocationError::NoBucket(text.to_string()));
            }
            return Ok(Location::S3 {
                bucket: bucket.to_string(),
                prefix: prefix.trim_matches('/').to_string(),
            });
        }
        if trimmed.starts_with("file://") {
            let url = url::Url::parse(trimmed)
                .map_err(|_| LocationError::NotAFilePath(text.to_string()))?;
            let path = url
                .to_file_path()
                .map_err(|()| LocationError::NotAFilePath(text.to_string()))?;
            return Ok(Location::Local(path));
        }
        if let Some((scheme, _)) = trimmed.split_once("://") {
            return Err(LocationError::UnknownScheme {
                text: text.to_string(),
                scheme: scheme.to_string(),
            });
        }
        let path = Path::new(trimmed);
        let path = if path.is_absolute() {
            path.to_path_buf()
        } else {
            std::env::current_dir()
                .map(|dir| dir.join(path))
                .unwrap_or_else(|_| path.to_path_buf())
        };
        Ok(Location::Local(path))
    }

    /// Whether it is on S3.
    pub fn is_s3(&self) -> bool {
        matches!(self, Location::S3 { .. })
    }
}

impl fmt::Display for Location {
    /// As a URL: `file:///path`, `s3://bucket/prefix`, `memory://`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Local(path) => write!(f, "file://{}", path.display()),
            Location::S3 { bucket, prefix } if prefix.is_empty() => write!(f, "s3://{bucket}"),
            Location::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
            Location::Memory => f.write_str("memory://"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_accepted_form_parses_and_the_others_are_named() {
        assert_eq!(
            Location::parse("/var/lib/x"),
            Ok(Location::Local("/var/lib/x".into()))
        );
        assert_eq!(
            Location::parse("file:///var/lib/x"),
            Ok(Location::Local("/var/lib/x".into()))
        );
        assert_eq!(
            Location::parse("s3://lake/cdc/orders/"),
            Ok(Location::S3 {
                bucket: "lake".into(),
                prefix: "cdc/orders".into()
            })
        );
        assert_eq!(
            Location::parse("s3://lake"),
            Ok(Location::S3 {
                bucket: "lake".into(),
                prefix: String::new()
            })
        );
        assert_eq!(Location::parse("memory://"), Ok(Location::Memory));
        let relative = Location::parse("out/here").unwrap();
        assert_eq!(
            relative,
            Location::Local(std::env::current_dir().unwrap().join("out/here"))
        );
        assert_eq!(
            Location::parse("s3://lake/x").unwrap().to_string(),
            "s3://lake/x"
        );
        for (bad, says) in [
            ("", "an empty location"),
            ("gs://b/p", "the scheme gs:// is not one"),
            ("s3:///p", "needs a bucket"),
            ("file://relative", "needs an absolute path"),
        ] {
            let e = Location::parse(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
