//! The PostgreSQL target: a table written in one transaction per commit, with a progress row
//! in that same transaction.
//!
//! Changelog sinks append their rows with `COPY`; upsert sinks `COPY` the commit's rows and
//! deleted keys into temporary tables, delete by key and `INSERT ... ON CONFLICT DO UPDATE`.
//! The table is created when absent (key columns as its primary key), checked when present
//! (every column the sink writes must hold its values, and an upsert needs a unique key on
//! exactly the sink's key), and gains new nullable columns in the commit whose rows first
//! carry them (a schema change the sink follows).
//!
//! # Invariant
//! The rows of commit *n* and the progress row `(sink, table) → (n, position)` in the
//! schema's `_cdcfusion_sinks` table are committed in one PostgreSQL transaction, and the
//! progress row only moves from *n − 1* to *n*: a reader never sees half a commit, a restart
//! resumes after exactly what the table holds, and a second engine writing the same sink is
//! refused instead of interleaving.

mod copy;
mod read;
mod types;

use std::collections::HashMap;

use arrow::array::RecordBatch;
use arrow::datatypes::Schema;
use async_trait::async_trait;
use bytes::Bytes;
use futures::SinkExt;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, GenericClient, NoTls, Transaction};

use super::error::SinkError;
use super::target::{Commit, Committed, SinkMode, Target, TargetLayout, TargetRows};
use super::text::quote_identifier as quote;
pub use copy::copy_text;
use types::{accepts, pg_type};

/// The table, in the target table's schema, that holds each sink's progress.
const PROGRESS_TABLE: &str = "_cdcfusion_sinks";

/// Rows encoded into one `COPY` message: small enough that the server parses one while the
/// next is encoded, large enough that a message's overhead does not count.
const COPY_SLICE_ROWS: usize = 16_384;

/// A PostgreSQL table one sink writes; see the module docs.
#[derive(Debug)]
pub struct PostgresTarget {
    url: String,
    schema: String,
    table: String,
    client: Option<Client>,
    sink: String,
    mode: SinkMode,
    key: Vec<String>,
    /// The table's columns as the sink knows them: name → PostgreSQL type.
    columns: HashMap<String, String>,
}

/// Why a PostgreSQL error happened, decided by its SQLSTATE; without one, by whether the
/// connection failed (I/O, closed) or the client could not encode a value (a definite error).
fn classify(what: &str, e: tokio_postgres::Error) -> SinkError {
    let Some(code) = e.code() else {
        let io = std::error::Error::source(&e)
            .is_some_and(|s| s.downcast_ref::<std::io::Error>().is_some());
        return if e.is_closed() || io {
            SinkError::unavailable(what, e)
        } else {
            SinkError::Input(format!("{what}: {e}"))
        };
    };
    let class = &code.code()[..2];
    // Connection trouble, resources, shutdown, serialization and deadlock, a lock: all pass.
    let passes =
        matches!(class, "08" | "53" | "57" | "40") || *code == SqlState::LOCK_NOT_AVAILABLE;
    let message = e
        .as_db_error()
        .map_or_else(|| e.to_string(), |d| d.message().to_string());
    if passes {
        SinkError::unavailable(what, format!("{message} (SQLSTATE {})", code.code()))
    } else {
        SinkError::Conflict(format!(
            "{what}: {message} (PostgreSQL SQLSTATE {})",
            code.code()
        ))
    }
}

/// Splits `schema.table` (or `table`, in `public`) into its two names.
fn split_table(table: &str) -> Result<(String, String), SinkError> {
    let bad = || {
        SinkError::Invalid(format!(
            "TABLE takes 'schema.table' or 'table', not '{table}'"
        ))
    };
    let parts: Vec<&str> = table.split('.').collect();
    let (schema, name) = match parts.as_slice() {
        [name] => ("public", *name),
        [schema, name] => (*schema, *name),
        _ => return Err(bad()),
    };
    if schema.trim().is_empty() || name.trim().is_empty() {
        return Err(bad());
    }
    Ok((schema.to_string(), name.to_string()))
}

impl PostgresTarget {
    /// A target table `table` (`schema.table`, or `table` in `public`) in the database at
    /// `url` (`postgresql://user[:password]@host[:port]/database`).
    pub fn new(url: &str, table: &str) -> Result<Self, SinkError> {
        if !(url.starts_with("postgresql://") || url.starts_with("postgres://")) {
            return Err(SinkError::Invalid(format!(
                "POSTGRES takes 'postgresql://user@host[:port]/database', not '{}'",
                mask(url)
            )));
        }
        url.parse::<tokio_postgres::Config>()
            .map_err(|e| SinkError::Invalid(format!("POSTGRES '{}': {e}", mask(url))))?;
        let (schema, table) = split_table(table)?;
        Ok(Self {
            url: url.to_string(),
            schema,
            table,
            client: None,
            sink: String::new(),
            mode: SinkMode::Changelog,
            key: Vec::new(),
            columns: HashMap::new(),
        })
    }

    fn what(&self) -> String {
        format!("PostgreSQL table {}.{}", self.schema, self.table)
    }

    fn qualified(&self, table: &str) -> String {
        format!("{}.{}", quote(&self.schema), quote(table))
    }

    async fn connect(&self) -> Result<Client, SinkError> {
        let (client, connection) = tokio_postgres::connect(&self.url, NoTls)
            .await
            .map_err(|e| classify(&format!("connecting to {}", mask(&self.url)), e))?;
        let what = self.what();
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(target = %what, error = %e, "PostgreSQL sink connection ended");
            }
        });
        Ok(client)
    }

    /// The table's columns (name → `typname` and the full type), or `None` when absent.
    async fn existing_columns(
        &self,
        client: &impl GenericClient,
    ) -> Result<Option<Vec<(String, String, String)>>, SinkError> {
        let rows = client
            .query(
                "SELECT a.attname::text, t.typname::text, format_type(a.atttypid, a.atttypmod) \
                 FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid \
                 WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped \
                 ORDER BY a.attnum",
                &[&self.qualified(&self.table)],
            )
            .await
            .map_err(|e| classify(&self.what(), e))?;
        if rows.is_empty() {
            let exists: bool = client
                .query_one(
                    "SELECT to_regclass($1) IS NOT NULL",
                    &[&self.qualified(&self.table)],
                )
                .await
                .map_err(|e| classify(&self.what(), e))?
                .get(0);
            if !exists {
                return Ok(None);
            }
        }
        Ok(Some(
            rows.iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect(),
        ))
    }

    /// Whether the table has a unique index on exactly the sink's key columns.
    async fn has_unique_key(&self, client: &Client) -> Result<bool, SinkError> {
        let rows = client
            .query(
                "SELECT array_agg(a.attname::text) \
                 FROM pg_index i JOIN pg_attribute a \
                   ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) \
                 WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indpred IS NULL \
                 GROUP BY i.indexrelid",
                &[&self.qualified(&self.table)],
            )
            .await
            .map_err(|e| classify(&self.what(), e))?;
        let mut key = self.key.clone();
        key.sort();
        Ok(rows.iter().any(|r| {
            let mut columns: Vec<String> = r.get(0);
            columns.sort();
            columns == key
        }))
    }

    /// Creates the table for `layout`.
    async fn create_table(
        &mut self,
        client: &Client,
        layout: &TargetLayout,
    ) -> Result<(), SinkError> {
        let mut columns = Vec::new();
        for field in layout.schema.fields() {
            let t = pg_type(field.name(), field.data_type())?;
            let not_null = if layout.key.contains(field.name()) {
                " NOT NULL"
            } else {
                ""
            };
            columns.push(format!("{} {t}{not_null}", quote(field.name())));
            self.columns.insert(field.name().clone(), t);
        }
        if !layout.key.is_empty() {
            let key: Vec<String> = layout.key.iter().map(|k| quote(k)).collect();
            columns.push(format!("PRIMARY KEY ({})", key.join(", ")));
        }
        client
            .batch_execute(&format!(
                "CREATE TABLE IF NOT EXISTS {} ({})",
                self.qualified(&self.table),
                columns.join(", ")
            ))
            .await
            .map_err(|e| classify(&self.what(), e))
    }

    /// Checks an existing table against `layout`.
    async fn check_table(
        &mut self,
        client: &Client,
        layout: &TargetLayout,
        existing: Vec<(String, String, String)>,
    ) -> Result<(), SinkError> {
        let by_name: HashMap<&str, (&str, &str)> = existing
            .iter()
            .map(|(n, t, f)| (n.as_str(), (t.as_str(), f.as_str())))
            .collect();
        for field in layout.schema.fields() {
            // A column of the query the table lacks is added by the first commit with it.
            pg_type(field.name(), field.data_type())?;
            if let Some((typname, full)) = by_name.get(field.name().as_str()) {
                if !accepts(typname, field.data_type()) {
                    return Err(SinkError::Conflict(format!(
                        "column {} of {} is {full}, which cannot hold the sink's {} values; alter the column (or drop the table and let the sink create it)",
                        field.name(),
                        self.what(),
                        field.data_type()
                    )));
                }
            }
        }
        self.columns = existing.into_iter().map(|(n, _, f)| (n, f)).collect();
        if self.mode == SinkMode::Upsert && !self.has_unique_key(client).await? {
            let key: Vec<String> = self.key.iter().map(|k| quote(k)).collect();
            return Err(SinkError::Conflict(format!(
                "{} has no primary key or unique index on ({}), which an upsert sink needs; run ALTER TABLE {} ADD PRIMARY KEY ({})",
                self.what(),
                self.key.join(", "),
                self.qualified(&self.table),
                key.join(", ")
            )));
        }
        Ok(())
    }

    /// The marker of this sink in the progress table.
    async fn marker(&self, client: &Client) -> Result<Option<Committed>, SinkError> {
        client
            .batch_execute(&format!(
                "CREATE TABLE IF NOT EXISTS {} (sink text NOT NULL, target text NOT NULL, \
                 commit bigint NOT NULL, position text NOT NULL, \
                 committed_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (sink, target))",
                self.qualified(PROGRESS_TABLE)
            ))
            .await
            .or_else(|e| {
                // Two sinks creating it at once: one wins, the other sees it exists.
                if e.code() == Some(&SqlState::UNIQUE_VIOLATION) {
                    Ok(())
                } else {
                    Err(classify(&self.what(), e))
                }
            })?;
        let row = client
            .query_opt(
                &format!(
                    "SELECT commit, position FROM {} WHERE sink = $1 AND target = $2",
                    self.qualified(PROGRESS_TABLE)
                ),
                &[&self.sink, &self.table],
            )
            .await
            .map_err(|e| classify(&self.what(), e))?;
        Ok(row.map(|r| Committed {
            number: u64::try_from(r.get::<_, i64>(0)).unwrap_or(0),
            position: r.get(1),
        }))
    }

    /// Adds the columns of `schema` the table lacks, as nullable, inside `tx`.
    async fn add_columns(
        &self,
        tx: &Transaction<'_>,
        schema: &Schema,
    ) -> Result<Vec<(String, String)>, SinkError> {
        let mut added = Vec::new();
        for field in schema.fields() {
            if self.columns.contains_key(field.name()) {
                continue;
            }
            let t = pg_type(field.name(), field.data_type())?;
            tx.batch_execute(&format!(
                "ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} {t}",
                self.qualified(&self.table),
                quote(field.name())
            ))
            .await
            .map_err(|e| classify(&self.what(), e))?;
            added.push((field.name().clone(), t));
        }
        Ok(added)
    }

    /// Loads `batch` into `table` (its columns, by name) with COPY.
    async fn copy_into(
        &self,
        tx: &Transaction<'_>,
        table: &str,
        batch: &RecordBatch,
    ) -> Result<(), SinkError> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let columns: Vec<String> = batch
            .schema()
            .fields()
            .iter()
            .map(|f| quote(f.name()))
            .collect();
        let sink = tx
            .copy_in::<_, Bytes>(&format!("COPY {table} ({}) FROM STDIN", columns.join(", ")))
            .await
            .map_err(|e| classify(&self.what(), e))?;
        futures::pin_mut!(sink);
        // Sent a slice at a time, so the server parses one while the next is encoded.
        let mut offset = 0;
        while offset < batch.num_rows() {
            let n = COPY_SLICE_ROWS.min(batch.num_rows() - offset);
            let text = copy_text(&batch.slice(offset, n))?;
            sink.send(Bytes::from(text))
                .await
                .map_err(|e| classify(&self.what(), e))?;
            offset += n;
        }
        sink.finish().await.map_err(|e| classify(&self.what(), e))?;
        Ok(())
    }

    /// A temporary table (dropped at commit) with the columns of `schema`, typed as the
    /// target's.
    async fn stage(
        &self,
        tx: &Transaction<'_>,
        name: &str,
        schema: &Schema,
    ) -> Result<(), SinkError> {
        let columns = schema
            .fields()
            .iter()
            .map(|f| {
                let t = match self.columns.get(f.name()) {
                    Some(t) => t.clone(),
                    None => pg_type(f.name(), f.data_type())?,
                };
                Ok(format!("{} {t}", quote(f.name())))
            })
            .collect::<Result<Vec<_>, SinkError>>()?;
        tx.batch_execute(&format!(
            "CREATE TEMPORARY TABLE {} ({}) ON COMMIT DROP",
            quote(name),
            columns.join(", ")
        ))
        .await
        .map_err(|e| classify(&self.what(), e))
    }

    async fn upsert(&self, tx: &Transaction<'_>, commit: &Commit) -> Result<(), SinkError> {
        let target = self.qualified(&self.table);
        let matches = |alias: &str| {
            self.key
                .iter()
                .map(|k| format!("t.{k} = {alias}.{k}", k = quote(k)))
                .collect::<Vec<_>>()
                .join(" AND ")
        };
        if let Some(deletes) = commit.deletes.as_ref().filter(|d| d.num_rows() > 0) {
            self.stage(tx, "_cdcfusion_deletes", &deletes.schema())
                .await?;
            self.copy_into(tx, &quote("_cdcfusion_deletes"), deletes)
                .await?;
            tx.batch_execute(&format!(
                "DELETE FROM {target} t USING {} d WHERE {}",
                quote("_cdcfusion_deletes"),
                matches("d")
            ))
            .await
            .map_err(|e| classify(&self.what(), e))?;
        }
        if commit.rows.num_rows() == 0 {
            return Ok(());
        }
        let schema = commit.rows.schema();
        self.stage(tx, "_cdcfusion_rows", &schema).await?;
        self.copy_into(tx, &quote("_cdcfusion_rows"), &commit.rows)
            .await?;
        let columns: Vec<String> = schema.fields().iter().map(|f| quote(f.name())).collect();
        let key: Vec<String> = self.key.iter().map(|k| quote(k)).collect();
        let updates: Vec<String> = schema
            .fields()
            .iter()
            .filter(|f| !self.key.contains(f.name()))
            .map(|f| format!("{c} = EXCLUDED.{c}", c = quote(f.name())))
            .collect();
        let action = if updates.is_empty() {
            "NOTHING".to_string()
        } else {
            format!("UPDATE SET {}", updates.join(", "))
        };
        tx.batch_execute(&format!(
            "INSERT INTO {target} ({cols}) SELECT {cols} FROM {} ON CONFLICT ({}) DO {action}",
            quote("_cdcfusion_rows"),
            key.join(", "),
            cols = columns.join(", ")
        ))
        .await
        .map_err(|e| classify(&self.what(), e))
    }

    /// Moves the progress row from `number - 1` to `number` in `tx`.
    async fn advance(&self, tx: &Transaction<'_>, marker: &Committed) -> Result<(), SinkError> {
        let number = i64::try_from(marker.number)
            .map_err(|_| SinkError::Input(format!("commit number {} too large", marker.number)))?;
        let progress = self.qualified(PROGRESS_TABLE);
        let moved = if number == 1 {
            tx.execute(
                &format!(
                    "INSERT INTO {progress} (sink, target, commit, position) VALUES ($1, $2, $3, $4) \
                     ON CONFLICT (sink, target) DO NOTHING"
                ),
                &[&self.sink, &self.table, &number, &marker.position],
            )
            .await
        } else {
            tx.execute(
                &format!(
                    "UPDATE {progress} SET commit = $3::bigint, position = $4, committed_at = now() \
                     WHERE sink = $1 AND target = $2 AND commit = $3::bigint - 1"
                ),
                &[&self.sink, &self.table, &number, &marker.position],
            )
            .await
        }
        .map_err(|e| classify(&self.what(), e))?;
        if moved == 1 {
            Ok(())
        } else {
            Err(SinkError::Conflict(format!(
                "{} already holds commit {} of sink {}: another engine writes this sink (or the progress row in {} was changed by hand)",
                self.what(),
                marker.number,
                self.sink,
                self.qualified(PROGRESS_TABLE)
            )))
        }
    }

    async fn write(&mut self, commit: &Commit) -> Result<Vec<(String, String)>, SinkError> {
        let mut client = self
            .client
            .take()
            .ok_or_else(|| SinkError::unavailable(self.what(), "the connection is not open"))?;
        let result = async {
            let tx = client
                .transaction()
                .await
                .map_err(|e| classify(&self.what(), e))?;
            let added = self.add_columns(&tx, &commit.rows.schema()).await?;
            match self.mode {
                SinkMode::Changelog => {
                    self.copy_into(&tx, &self.qualified(&self.table), &commit.rows)
                        .await?
                }
                SinkMode::Upsert => self.upsert(&tx, commit).await?,
            }
            self.advance(&tx, &commit.marker).await?;
            tx.commit().await.map_err(|e| classify(&self.what(), e))?;
            Ok::<_, SinkError>(added)
        }
        .await;
        // A connection that failed mid-commit is not reused: `open` connects again.
        if result.is_ok() {
            self.client = Some(client);
        }
        result
    }
}

/// `url` with its password replaced, for messages.
fn mask(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("****"));
            u.to_string()
        }
        _ => url.to_string(),
    }
}

#[async_trait]
impl Target for PostgresTarget {
    async fn open(&mut self, layout: &TargetLayout) -> Result<Option<Committed>, SinkError> {
        self.client = None;
        self.sink = layout.sink.clone();
        self.mode = layout.mode;
        self.key = layout.key.clone();
        self.columns.clear();
        for field in layout.schema.fields() {
            pg_type(field.name(), field.data_type())?;
        }
        let client = self.connect().await?;
        match self.existing_columns(&client).await? {
            None => self.create_table(&client, layout).await?,
            Some(existing) => self.check_table(&client, layout, existing).await?,
        }
        let marker = self.marker(&client).await?;
        self.client = Some(client);
        Ok(marker)
    }

    async fn commit(&mut self, commit: &Commit) -> Result<(), SinkError> {
        let added = self.write(commit).await?;
        self.columns.extend(added);
        Ok(())
    }

    async fn read(&self, layout: &TargetLayout) -> Result<TargetRows, SinkError> {
        self.read_rows(layout).await
    }

    fn stored(&self, rows: &RecordBatch) -> Result<RecordBatch, SinkError> {
        self.stored_rows(rows)
    }

    fn describe(&self) -> String {
        format!(
            "POSTGRES '{}' TABLE '{}.{}'",
            mask(&self.url),
            self.schema,
            self.table
        )
    }
}

#[cfg(test)]
mod tests;
