//! The durable side of the engine: opening a state store and committing the catalog.
//!
//! # Invariant
//! A source runs only if the catalog naming it is committed, and the catalog stops naming a
//! source before its files are removed: `CREATE SOURCE` commits the next catalog and then starts
//! the source; `DROP SOURCE` commits the catalog without it, stops it, and deletes its files. A
//! crash between the steps leaves a catalog that a restart follows (a source without a
//! checkpoint snapshots; files of a dropped source are garbage). Catalog commits are serial
//! (the catalog lock) and create-if-absent, so two engines cannot both commit one. The users
//! SQL creates are kept in the same catalog, committed before the front end lets them log in.

use std::sync::Arc;

use super::error::EngineError;
use super::servers::Link;
use super::session::{Engine, EngineOptions};
use super::source::RunningSource;
use crate::capture::{Capture, CaptureOptions};
use crate::durable::manifest::commit_catalog;
use crate::durable::{new_source_id, CatalogSource, CatalogUser, Durability, DurableError, Store};
use crate::source::error::SourceError;
use crate::sql::{
    parse_cdc_statement, CdcStatement, CreateSource, MoveStart, MySqlUrl, SourceChanges,
};

impl Engine {
    /// An engine whose catalog and checkpoints live in `location` (a directory, `file://`,
    /// `s3://bucket/prefix` with the `s3` feature, or `memory://`); every source in its catalog
    /// is started again and resumes from its newest checkpoint.
    pub async fn open(location: &str, options: EngineOptions) -> Result<Self, EngineError> {
        let store = Store::open(location, &options.store).map_err(DurableError::from)?;
        let durability = Arc::new(Durability::open(store, options.durable).await?);
        let engine = Self::build(Some(Arc::clone(&durability)))
            .with_allowed_locations(options.allowed_locations);
        let catalog = durability.catalog.lock().await.clone();
        for entry in catalog.sources {
            let Some(CdcStatement::CreateSource(create)) = parse_cdc_statement(&entry.statement)?
            else {
                return Err(EngineError::NotSupported(
                    "a catalog entry that is not CREATE SOURCE",
                ));
            };
            let options = create.options.to_capture_options();
            let checkpointer = Arc::new(durability.checkpointer(&entry.id));
            engine.start_source(
                &entry.name,
                create.url.expose(),
                options,
                create.to_string(),
                Some(checkpointer),
            )?;
            tracing::info!(source = %entry.name, "source restored from the catalog");
        }
        engine.restore_sinks(&catalog.sinks)?;
        Ok(engine)
    }

    /// Writes a last checkpoint of every durable source (a clean stop).
    pub async fn shutdown(&self) -> Result<(), EngineError> {
        let sources = self.running_sources();
        for source in sources {
            source.checkpoint_now().await?;
        }
        Ok(())
    }

    /// `CREATE SOURCE`: checked against the server first (unless `validate = false`); on a
    /// durable engine the catalog is committed first, so a source that
    /// runs is always one a restart brings back.
    pub(super) async fn create(&self, create: &CreateSource) -> Result<(), EngineError> {
        let options = create.options.to_capture_options();
        self.check_name(&create.name)?;
        if create.options.validate {
            validate(create.url.expose(), &options).await?;
        }
        let Some(durable) = &self.durable else {
            return self.start_source(
                &create.name,
                create.url.expose(),
                options,
                create.to_string(),
                None,
            );
        };
        let mut catalog = durable.catalog.lock().await;
        self.check_name(&create.name)?;
        let mut next = catalog.clone();
        next.seq += 1;
        let id = new_source_id();
        next.sources.push(CatalogSource {
            name: create.name.clone(),
            id: id.clone(),
            statement: create.to_sql_with_password(),
        });
        commit_catalog(&durable.store, &next)
            .await
            .map_err(DurableError::from)?;
        *catalog = next;
        self.start_source(
            &create.name,
            create.url.expose(),
            options,
            create.to_string(),
            Some(Arc::new(durable.checkpointer(&id))),
        )
    }

    /// `DROP SOURCE`: on a durable engine the catalog is committed first, then the source's
    /// files are removed.
    pub(super) async fn drop_durable(&self, name: &str) -> Result<(), EngineError> {
        let Some(durable) = &self.durable else {
            self.check_no_sinks(name)?;
            return self.drop_source(name);
        };
        let mut catalog = durable.catalog.lock().await;
        let source = self.source(name)?;
        self.check_no_sinks(name)?;
        let mut next = catalog.clone();
        next.seq += 1;
        next.sources.retain(|s| s.name != name);
        commit_catalog(&durable.store, &next)
            .await
            .map_err(DurableError::from)?;
        *catalog = next;
        self.drop_source(name)?;
        if let Some(c) = &source.checkpointer {
            if let Err(e) = c.remove_all().await {
                tracing::warn!(source = %name, error = %e, "removing the dropped source's files failed");
            }
        }
        Ok(())
    }
}

impl Engine {
    /// The users SQL created, as the catalog keeps them (none without a state store).
    pub async fn catalog_users(&self) -> Vec<CatalogUser> {
        match &self.durable {
            Some(durable) => durable.catalog.lock().await.users.clone(),
            None => Vec::new(),
        }
    }

    /// Commits `users` as the users SQL created, in place of the catalog's. Without a state
    /// store nothing is kept: such users live as long as the front end that holds them.
    pub async fn commit_users(&self, users: Vec<CatalogUser>) -> Result<(), EngineError> {
        let Some(durable) = &self.durable else {
            return Ok(());
        };
        let mut catalog = durable.catalog.lock().await;
        let mut next = catalog.clone();
        next.seq += 1;
        next.users = users;
        commit_catalog(&durable.store, &next)
            .await
            .map_err(DurableError::from)?;
        *catalog = next;
        Ok(())
    }

    /// `ALTER SOURCE ... SET`: on a durable engine the catalog's statement is committed with
    /// the new options first (a restart keeps them), then the running source takes them.
    pub(super) async fn alter_source(
        &self,
        source: &RunningSource,
        changes: &SourceChanges,
    ) -> Result<(), EngineError> {
        // A new way to reach the server is checked before anything is committed: a refused
        // one leaves the source as it was.
        let link = source.next_link(changes).await?;
        if let Some(durable) = &self.durable {
            let mut catalog = durable.catalog.lock().await;
            let mut next = catalog.clone();
            next.seq += 1;
            for entry in next.sources.iter_mut().filter(|s| s.name == source.name) {
                let Some(CdcStatement::CreateSource(mut create)) =
                    parse_cdc_statement(&entry.statement)?
                else {
                    return Err(EngineError::NotSupported(
                        "a catalog entry that is not CREATE SOURCE",
                    ));
                };
                create.options = create.options.altered(changes);
                if let Some((link, _)) = &link {
                    create.url = link.url.clone();
                }
                entry.statement = create.to_sql_with_password();
            }
            commit_catalog(&durable.store, &next)
                .await
                .map_err(DurableError::from)?;
            *catalog = next;
        }
        let reconnected = match link {
            Some((link, goes_on)) => source.reconnect(link, goes_on).await,
            // `SET (...) RESNAPSHOT` that changes no way to the server.
            None if changes.start == Some(MoveStart::Resnapshot) => {
                source.resnapshot().await;
                Ok(())
            }
            None => Ok(()),
        };
        source.alter(changes);
        reconnected
    }

    /// A source cannot be dropped while sinks read it.
    fn check_no_sinks(&self, source: &str) -> Result<(), EngineError> {
        let sinks = self.sinks_reading(source);
        if sinks.is_empty() {
            Ok(())
        } else {
            Err(EngineError::SourceInUse {
                name: source.to_string(),
                sinks,
            })
        }
    }
}

/// How long `CREATE SOURCE` waits for the server while it checks it.
pub const VALIDATE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The checks a capture makes at start-up (connection, credentials, binlog settings,
/// privileges, tables matching the patterns), made before `CREATE SOURCE` answers, within
/// [`VALIDATE_TIMEOUT`]; a failure is the statement's error, with the fix it names.
async fn validate(url: &str, options: &CaptureOptions) -> Result<(), EngineError> {
    let url = MySqlUrl::parse(url).map_err(SourceError::Config)?;
    let mut link = Link::new(url, options.read_timeout, options.server_id)?;
    for server in &mut link.servers {
        server.max_attempts = 2;
    }
    let address = link.connect.address();
    // The first server of the URL that passes the checks is the one the tables are read on.
    let checks = async {
        link.checked_server().await?;
        Capture::matching_tables(&link.connect, &options.tables).await
    };
    match tokio::time::timeout(VALIDATE_TIMEOUT, checks).await {
        Ok(result) => {
            result?;
            Ok(())
        }
        Err(_) => Err(SourceError::Unreachable {
            address,
            attempts: 1,
            last_error: format!(
                "no answer within {} s; check the host and port, or create the source anyway WITH (validate = false)",
                VALIDATE_TIMEOUT.as_secs()
            ),
        }
        .into()),
    }
}
