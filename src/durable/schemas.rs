//! Table schemas and their history as checkpoints keep them.
//!
//! # Invariant
//! A checkpoint holds the schema each table had at its position and every schema change the
//! capture followed before it, so a restart decodes its files and resumes the stream with the
//! schemas of that position, not with whatever the server has now (a DDL the stream has not
//! reached yet must not be applied early). The stored form names every part of a column's kind
//! and is converted back exactly; an unknown kind is an error naming it.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::capture::SchemaChange;
use crate::change::kinds::SimpleKind;
use crate::change::position::BinlogCoord;
use crate::change::schema::{Charset, ColumnKind, ColumnSpec, IndexSpec, TableId, TableSchema};

/// A table's schema in a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredSchema {
    pub version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_charset: Option<String>,
    pub columns: Vec<StoredColumn>,
    pub primary_key: Vec<usize>,
    /// Secondary indexes (absent from manifests written before they were kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub indexes: Vec<StoredIndex>,
}

/// One secondary index of a [`StoredSchema`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredIndex {
    pub name: String,
    pub columns: Vec<usize>,
    #[serde(default)]
    pub unique: bool,
}

/// One column of a [`StoredSchema`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredColumn {
    pub name: String,
    pub kind: StoredKind,
    pub nullable: bool,
}

/// [`ColumnKind`] spelled out for a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StoredKind {
    Int {
        bits: u8,
        unsigned: bool,
    },
    Float,
    Double,
    Decimal {
        precision: u8,
        scale: u8,
    },
    Date,
    Time {
        fsp: u8,
    },
    DateTime {
        fsp: u8,
    },
    Timestamp {
        fsp: u8,
    },
    Year,
    /// `charset`: `utf8` or `latin1`; `length`: the declared length of `CHAR(n)`/`VARCHAR(n)`.
    Text {
        charset: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        length: Option<u32>,
    },
    Binary {
        pad_to: Option<usize>,
    },
    Enum {
        labels: Vec<String>,
    },
    Set {
        labels: Vec<String>,
    },
    Bit {
        bits: u16,
    },
    Json,
    Geometry,
    Vector,
    /// Any other kind of the table of kinds, by its name there (`{"type":"simple","name":"uuid"}`).
    Simple {
        name: String,
    },
}

/// One followed schema change in a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredSchemaChange {
    /// Index of the table in the manifest.
    pub table: usize,
    pub position: String,
    pub commit_ts_micros: i64,
    pub statement: String,
    pub before: StoredSchema,
    pub after: StoredSchema,
}

impl From<&ColumnKind> for StoredKind {
    fn from(kind: &ColumnKind) -> Self {
        match kind {
            ColumnKind::Int { bits, unsigned } => StoredKind::Int {
                bits: *bits,
                unsigned: *unsigned,
            },
            ColumnKind::Decimal { precision, scale } => StoredKind::Decimal {
                precision: *precision,
                scale: *scale,
            },
            ColumnKind::Time { fsp } => StoredKind::Time { fsp: *fsp },
            ColumnKind::DateTime { fsp } => StoredKind::DateTime { fsp: *fsp },
            ColumnKind::Timestamp { fsp } => StoredKind::Timestamp { fsp: *fsp },
            ColumnKind::Text { charset, length } => StoredKind::Text {
                charset: match charset {
                    Charset::Utf8 => "utf8",
                    Charset::Latin1 => "latin1",
                }
                .into(),
                length: *length,
            },
            ColumnKind::Binary { pad_to } => StoredKind::Binary { pad_to: *pad_to },
            ColumnKind::Enum { labels } => StoredKind::Enum {
                labels: labels.to_vec(),
            },
            ColumnKind::Set { labels } => StoredKind::Set {
                labels: labels.to_vec(),
            },
            ColumnKind::Bit { bits } => StoredKind::Bit { bits: *bits },
            // The kinds that had a tag of their own before the table of kinds keep it, so
            // manifests read both ways.
            ColumnKind::Simple(simple) => match simple {
                SimpleKind::Float => StoredKind::Float,
                SimpleKind::Double => StoredKind::Double,
                SimpleKind::Date => StoredKind::Date,
                SimpleKind::Year => StoredKind::Year,
                SimpleKind::Json => StoredKind::Json,
                SimpleKind::Geometry => StoredKind::Geometry,
                SimpleKind::Vector => StoredKind::Vector,
                other => StoredKind::Simple {
                    name: other.name().to_string(),
                },
            },
        }
    }
}

impl TryFrom<&StoredKind> for ColumnKind {
    type Error = String;

    fn try_from(kind: &StoredKind) -> Result<Self, String> {
        let kind = match kind {
            StoredKind::Int { bits, unsigned } => ColumnKind::Int {
                bits: *bits,
                unsigned: *unsigned,
            },
            StoredKind::Float => ColumnKind::Simple(SimpleKind::Float),
            StoredKind::Double => ColumnKind::Simple(SimpleKind::Double),
            StoredKind::Decimal { precision, scale } => ColumnKind::Decimal {
                precision: *precision,
                scale: *scale,
            },
            StoredKind::Date => ColumnKind::Simple(SimpleKind::Date),
            StoredKind::Time { fsp } => ColumnKind::Time { fsp: *fsp },
            StoredKind::DateTime { fsp } => ColumnKind::DateTime { fsp: *fsp },
            StoredKind::Timestamp { fsp } => ColumnKind::Timestamp { fsp: *fsp },
            StoredKind::Year => ColumnKind::Simple(SimpleKind::Year),
            StoredKind::Text { charset, length } => ColumnKind::Text {
                charset: match charset.as_str() {
                    "utf8" => Charset::Utf8,
                    "latin1" => Charset::Latin1,
                    other => return Err(format!("unknown character set {other:?}")),
                },
                length: *length,
            },
            StoredKind::Binary { pad_to } => ColumnKind::Binary { pad_to: *pad_to },
            StoredKind::Enum { labels } => ColumnKind::Enum {
                labels: labels.clone().into(),
            },
            StoredKind::Set { labels } => ColumnKind::Set {
                labels: labels.clone().into(),
            },
            StoredKind::Bit { bits } => ColumnKind::Bit { bits: *bits },
            StoredKind::Json => ColumnKind::Simple(SimpleKind::Json),
            StoredKind::Geometry => ColumnKind::Simple(SimpleKind::Geometry),
            StoredKind::Vector => ColumnKind::Simple(SimpleKind::Vector),
            StoredKind::Simple { name } => ColumnKind::Simple(
                SimpleKind::from_name(name)
                    .ok_or_else(|| format!("unknown column kind {name:?}"))?,
            ),
        };
        kind.check()?;
        Ok(kind)
    }
}

impl From<&TableSchema> for StoredSchema {
    fn from(schema: &TableSchema) -> Self {
        Self {
            version: schema.version,
            default_charset: schema.default_charset.clone(),
            columns: schema
                .columns
                .iter()
                .map(|c| StoredColumn {
                    name: c.name.clone(),
                    kind: (&c.kind).into(),
                    nullable: c.nullable,
                })
                .collect(),
            primary_key: schema.primary_key.clone(),
            indexes: schema
                .indexes
                .iter()
                .map(|i| StoredIndex {
                    name: i.name.clone(),
                    columns: i.columns.clone(),
                    unique: i.unique,
                })
                .collect(),
        }
    }
}

impl StoredSchema {
    /// The schema of table `id`; an error names what does not convert.
    pub fn to_schema(&self, id: &TableId) -> Result<TableSchema, String> {
        let columns = self
            .columns
            .iter()
            .map(|c| {
                Ok(ColumnSpec {
                    name: c.name.clone(),
                    kind: ColumnKind::try_from(&c.kind)
                        .map_err(|e| format!("column {} of {id}: {e}", c.name))?,
                    nullable: c.nullable,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        if let Some(k) = self.primary_key.iter().find(|k| **k >= columns.len()) {
            return Err(format!("key column {k} of {id} is past its columns"));
        }
        Ok(
            TableSchema::new(id.clone(), columns, self.primary_key.clone())
                .with_version(self.version)
                .with_default_charset(self.default_charset.clone())
                .with_indexes(
                    self.indexes
                        .iter()
                        .map(|i| IndexSpec {
                            name: i.name.clone(),
                            columns: i.columns.clone(),
                            unique: i.unique,
                        })
                        .collect(),
                ),
        )
    }
}

impl From<&SchemaChange> for StoredSchemaChange {
    fn from(change: &SchemaChange) -> Self {
        Self {
            table: change.table,
            position: change.position.to_string(),
            commit_ts_micros: change.commit_ts_micros,
            statement: change.statement.clone(),
            before: change.before.as_ref().into(),
            after: change.after.as_ref().into(),
        }
    }
}

impl StoredSchemaChange {
    /// The change of table `id` it records.
    pub fn to_change(&self, id: &TableId) -> Result<SchemaChange, String> {
        Ok(SchemaChange {
            table: self.table,
            position: self
                .position
                .parse::<BinlogCoord>()
                .map_err(|e| format!("the position of a schema change of {id}: {e}"))?,
            commit_ts_micros: self.commit_ts_micros,
            statement: self.statement.clone(),
            before: Arc::new(self.before.to_schema(id)?),
            after: Arc::new(self.after.to_schema(id)?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips() {
        let kinds = [
            ColumnKind::Int {
                bits: 24,
                unsigned: true,
            },
            ColumnKind::Decimal {
                precision: 40,
                scale: 5,
            },
            ColumnKind::Timestamp { fsp: 6 },
            ColumnKind::Text {
                charset: Charset::Latin1,
                length: Some(12),
            },
            ColumnKind::Text {
                charset: Charset::Utf8,
                length: None,
            },
            ColumnKind::Binary { pad_to: Some(16) },
            ColumnKind::Enum {
                labels: vec!["a".to_string(), "it's".to_string()].into(),
            },
            ColumnKind::Set {
                labels: vec!["x".to_string()].into(),
            },
            ColumnKind::Bit { bits: 7 },
        ]
        .into_iter()
        .chain(SimpleKind::all().map(ColumnKind::Simple));
        let columns: Vec<ColumnSpec> = kinds
            .enumerate()
            .map(|(i, kind)| ColumnSpec {
                name: format!("c{i}"),
                kind,
                nullable: i % 2 == 0,
            })
            .collect();
        let id = TableId::new("d", "t");
        let by_two = IndexSpec {
            name: "by_two".into(),
            columns: vec![2, 1],
            unique: true,
        };
        let schema = TableSchema::new(id.clone(), columns, vec![0])
            .with_version(3)
            .with_default_charset(Some("latin1".into()))
            .with_indexes(vec![by_two]);
        assert_eq!(schema.indexes.len(), 1);
        let stored = StoredSchema::from(&schema);
        let json = serde_json::to_string(&stored).unwrap();
        let back: StoredSchema = serde_json::from_str(&json).unwrap();
        assert_eq!(back.to_schema(&id).unwrap(), schema);
    }

    #[test]
    fn a_bad_stored_schema_is_an_error() {
        let id = TableId::new("d", "t");
        let stored = StoredSchema {
            version: 0,
            default_charset: None,
            columns: vec![StoredColumn {
                name: "c".into(),
                kind: StoredKind::Decimal {
                    precision: 90,
                    scale: 0,
                },
                nullable: true,
            }],
            primary_key: vec![],
            indexes: vec![],
        };
        assert!(stored.to_schema(&id).unwrap_err().contains("column c"));
    }
}
