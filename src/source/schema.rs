//! Reading table schemas ([`TableSchema`]) from the source server's `information_schema`.
//!
//! # Invariant
//! A [`TableSchema`] is built from `information_schema` (what `SELECT` returns) and is the one
//! schema both read paths decode into, so they agree on column order, names, Arrow types and
//! nullability. The binlog path checks every table map against it before decoding a row
//! (see `binlog::rows`), and never decodes with a schema that does not match the event.

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use crate::change::kinds::SimpleKind;
use crate::change::schema::{Charset, ColumnKind, ColumnSpec, IndexSpec, TableId, TableSchema};
use crate::source::error::{SourceError, SourceResult};

/// One row of `information_schema.COLUMNS`.
struct InfoColumn {
    name: String,
    data_type: String,
    column_type: String,
    nullable: bool,
    precision: Option<u64>,
    scale: Option<u64>,
    datetime_precision: Option<u64>,
    charset: Option<String>,
    octet_length: Option<u64>,
    /// `CHARACTER_MAXIMUM_LENGTH`: the declared length of `CHAR(n)`/`VARCHAR(n)`.
    max_chars: Option<u64>,
}

/// The base tables of the server that `filter` accepts, ordered by database and name.
pub async fn list_tables(
    conn: &mut Conn,
    filter: &crate::source::binlog::filter::TableFilter,
) -> SourceResult<Vec<TableId>> {
    let rows: Vec<mysql_async::Row> = conn
        .query(
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES \
             WHERE TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_SCHEMA, TABLE_NAME",
        )
        .await
        .map_err(|e| SourceError::from_mysql("listing tables", e))?;
    Ok(rows
        .into_iter()
        .filter_map(|r| {
            let db: String = r.get_opt(0)?.ok()?;
            let table: String = r.get_opt(1)?.ok()?;
            Some(TableId::new(db, table))
        })
        .filter(|t| filter(t))
        .collect())
}

/// Loads the schema of `id` from `information_schema`; `None` when the table does not exist.
pub async fn load_table_schema(conn: &mut Conn, id: &TableId) -> SourceResult<Option<TableSchema>> {
    let ctx = || format!("reading the columns of {id}");
    let rows: Vec<mysql_async::Row> = conn
        .exec(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, NUMERIC_PRECISION, \
             NUMERIC_SCALE, DATETIME_PRECISION, CHARACTER_SET_NAME, CHARACTER_OCTET_LENGTH, \
             CHARACTER_MAXIMUM_LENGTH FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
            (&id.db, &id.table),
        )
        .await
        .map_err(|e| SourceError::from_mysql(ctx(), e))?;
    if rows.is_empty() {
        return Ok(None);
    }
    let mut info = Vec::with_capacity(rows.len());
    for row in rows {
        let get_s = |i: usize| -> String {
            row.get_opt::<String, _>(i)
                .and_then(Result::ok)
                .unwrap_or_default()
        };
        let get_n = |i: usize| -> Option<u64> {
            row.get_opt::<Option<u64>, _>(i)
                .and_then(Result::ok)
                .flatten()
        };
        info.push(InfoColumn {
            name: get_s(0),
            data_type: get_s(1).to_ascii_lowercase(),
            column_type: get_s(2),
            nullable: get_s(3) == "YES",
            precision: get_n(4),
            scale: get_n(5),
            datetime_precision: get_n(6),
            charset: row
                .get_opt::<Option<String>, _>(7)
                .and_then(Result::ok)
                .flatten(),
            octet_length: get_n(8),
            max_chars: get_n(9),
        });
    }
    let json_columns = json_check_columns(conn, id).await?;
    let pk_names: Vec<String> = conn
        .exec(
            "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND CONSTRAINT_NAME = 'PRIMARY' \
             ORDER BY ORDINAL_POSITION",
            (&id.db, &id.table),
        )
        .await
        .map_err(|e| SourceError::from_mysql(ctx(), e))?;
    let mut columns = Vec::with_capacity(info.len());
    for col in &info {
        let is_json = json_columns
            .iter()
            .any(|c| c.eq_ignore_ascii_case(&col.name));
        let kind = kind_from_info(col, is_json)
            .and_then(|kind| kind.check().map(|()| kind))
            .map_err(|detail| SourceError::UnsupportedType {
                table: id.to_string(),
                column: col.name.clone(),
                detail,
            })?;
        columns.push(ColumnSpec {
            name: col.name.clone(),
            kind,
            nullable: col.nullable,
        });
    }
    let primary_key = pk_names
        .iter()
        .filter_map(|n| columns.iter().position(|c| &c.name == n))
        .collect();
    let charset: Vec<Option<String>> = conn
        .exec(
            "SELECT c.CHARACTER_SET_NAME FROM information_schema.TABLES t \
             JOIN information_schema.COLLATIONS c ON c.COLLATION_NAME = t.TABLE_COLLATION \
             WHERE t.TABLE_SCHEMA = ? AND t.TABLE_NAME = ?",
            (&id.db, &id.table),
        )
        .await
        .map_err(|e| SourceError::from_mysql(ctx(), e))?;
    let indexes = secondary_indexes(conn, id, &columns).await?;
    Ok(Some(
        TableSchema::new(id.clone(), columns, primary_key)
            .with_default_charset(charset.into_iter().flatten().next())
            .with_indexes(indexes),
    ))
}

/// The table's secondary indexes, from `information_schema.STATISTICS`: every index but the
/// primary key whose parts are all columns (a prefix index, `KEY (name(10))`, is kept whole: the
/// current table indexes the whole value; a functional part, which has no column, leaves its
/// index out).
async fn secondary_indexes(
    conn: &mut Conn,
    id: &TableId,
    columns: &[ColumnSpec],
) -> SourceResult<Vec<IndexSpec>> {
    let parts: Vec<(String, i64, Option<String>)> = conn
        .exec(
            "SELECT INDEX_NAME, NON_UNIQUE, COLUMN_NAME FROM information_schema.STATISTICS \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND INDEX_NAME <> 'PRIMARY' \
             ORDER BY INDEX_NAME, SEQ_IN_INDEX",
            (&id.db, &id.table),
        )
        .await
        .map_err(|e| SourceError::from_mysql(format!("reading the indexes of {id}"), e))?;
    let mut indexes: Vec<(IndexSpec, bool)> = Vec::new();
    for (name, non_unique, column) in parts {
        let position = column
            .as_deref()
            .and_then(|c| columns.iter().position(|s| s.name.eq_ignore_ascii_case(c)));
        if indexes.last().is_none_or(|(i, _)| i.name != name) {
            let spec = IndexSpec {
                name,
                columns: Vec::new(),
                unique: non_unique == 0,
            };
            indexes.push((spec, true));
        }
        let (spec, whole) = indexes.last_mut().expect("pushed above");
        match position {
            Some(p) => spec.columns.push(p),
            None => *whole = false,
        }
    }
    Ok(indexes
        .into_iter()
        .filter_map(|(spec, whole)| whole.then_some(spec))
        .collect())
}

/// MariaDB stores JSON as LONGTEXT guarded by `CHECK (json_valid(col))`; those columns are JSON.
async fn json_check_columns(conn: &mut Conn, id: &TableId) -> SourceResult<Vec<String>> {
    // MySQL has no TABLE_NAME in CHECK_CONSTRAINTS, and declares JSON as its own type anyway.
    let result: Result<Vec<String>, _> = conn
        .exec(
            "SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS \
             WHERE CONSTRAINT_SCHEMA = ? AND TABLE_NAME = ?",
            (&id.db, &id.table),
        )
        .await;
    let clauses = match result {
        Ok(c) => c,
        Err(mysql_async::Error::Server(e)) if e.code == 1054 => return Ok(Vec::new()),
        Err(e) => {
            return Err(SourceError::from_mysql(
                format!("reading checks of {id}"),
                e,
            ))
        }
    };
    Ok(clauses
        .iter()
        .filter_map(|c| {
            let inner = c.trim().strip_prefix("json_valid(")?.strip_suffix(')')?;
            Some(inner.trim().trim_matches('`').replace("``", "`"))
        })
        .collect())
}

fn kind_from_info(col: &InfoColumn, is_json: bool) -> Result<ColumnKind, String> {
    let unsigned = col.column_type.to_ascii_lowercase().contains("unsigned");
    let fsp = col.datetime_precision.unwrap_or(0) as u8;
    let int = |bits| Ok(ColumnKind::Int { bits, unsigned });
    match col.data_type.as_str() {
        "tinyint" => int(8),
        "smallint" => int(16),
        "mediumint" => int(24),
        "int" | "integer" => int(32),
        "bigint" => int(64),
        "decimal" | "numeric" => Ok(ColumnKind::Decimal {
            precision: col.precision.unwrap_or(10) as u8,
            scale: col.scale.unwrap_or(0) as u8,
        }),
        "time" => Ok(ColumnKind::Time { fsp }),
        "datetime" => Ok(ColumnKind::DateTime { fsp }),
        "timestamp" => Ok(ColumnKind::Timestamp { fsp }),
        "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" => {
            if is_json {
                return Ok(ColumnKind::Simple(SimpleKind::Json));
            }
            let length = matches!(col.data_type.as_str(), "char" | "varchar")
                .then_some(col.max_chars)
                .flatten()
                .map(|n| u32::try_from(n).unwrap_or(u32::MAX));
            match Charset::from_name(col.charset.as_deref().unwrap_or("binary"))? {
                Some(charset) => Ok(ColumnKind::Text { charset, length }),
                None => Ok(ColumnKind::Binary { pad_to: None }),
            }
        }
        "binary" => Ok(ColumnKind::Binary {
            pad_to: col.octet_length.map(|n| n as usize),
        }),
        "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob" => {
            Ok(ColumnKind::Binary { pad_to: None })
        }
        "enum" => Ok(ColumnKind::Enum {
            labels: parse_labels(&col.column_type)?.into(),
        }),
        "set" => Ok(ColumnKind::Set {
            labels: parse_labels(&col.column_type)?.into(),
        }),
        "bit" => Ok(ColumnKind::Bit {
            bits: col.precision.unwrap_or(1) as u16,
        }),
        // The kinds without parameters, by their names in the table of kinds.
        other => SimpleKind::from_name(other)
            .map(ColumnKind::Simple)
            .ok_or_else(|| {
                format!(
                    "MySQL type '{other}' ({}) has no exact Arrow mapping yet",
                    col.column_type
                )
            }),
    }
}

/// Parses the labels of `enum('a','b''c')` / `set(...)` as `COLUMN_TYPE` shows them.
pub fn parse_labels(column_type: &str) -> Result<Vec<String>, String> {
    let open = column_type
        .find('(')
        .ok_or_else(|| format!("no label list in {column_type:?}"))?;
    let close = column_type
        .rfind(')')
        .filter(|close| *close > open)
        .ok_or_else(|| format!("unclosed label list in {column_type:?}"))?;
    let body = &column_type[open + 1..close];
    let mut labels = Vec::new();
    let mut chars = body.chars().peekable();
    loop {
        match chars.next() {
            None => break,
            Some('\'') => {
                let mut label = String::new();
                loop {
                    match chars.next() {
                        None => return Err(format!("unterminated label in {column_type:?}")),
                        Some('\'') if chars.peek() == Some(&'\'') => {
                            chars.next();
                            label.push('\'');
                        }
                        Some('\'') => break,
                        Some('\\') => {
                            if let Some(c) = chars.next() {
                                label.push(c);
                            }
                        }
                        Some(c) => label.push(c),
                    }
                }
                labels.push(label);
            }
            Some(',') | Some(' ') => {}
            Some(c) => return Err(format!("unexpected {c:?} in {column_type:?}")),
        }
    }
    Ok(labels)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enum_labels_parse_with_quotes_and_commas() {
        assert_eq!(
            parse_labels("enum('a','it''s','x,y')").unwrap(),
            vec!["a", "it's", "x,y"]
        );
        assert_eq!(parse_labels("set('')").unwrap(), vec![""]);
        assert!(parse_labels("enum('a").is_err());
        assert!(parse_labels("enum)('a'").is_err());
        assert!(parse_labels("enum('a'").is_err());
    }

    #[test]
    fn quoting_escapes_backticks() {
        assert_eq!(TableId::new("d`b", "t").quoted(), "`d``b`.`t`");
    }
}
