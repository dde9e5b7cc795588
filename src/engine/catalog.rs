//! The session's catalogs: one per source, each captured database a schema holding its current
//! tables and changelogs, plus the `cdc` status schema in every catalog.
//!
//! # Invariant
//! Sources are looked up live at every resolution, so a dropped source's catalog disappears at
//! once, and a scan reads the version pinned for its query (`provider::pin`).

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::{
    CatalogProvider, CatalogProviderList, MemoryCatalogProviderList, SchemaProvider,
};
use datafusion::datasource::TableProvider;

use super::sinks::SinksRef;
use super::source::{RunningSource, SourcesRef};
use super::status::{CdcSchema, STATUS_SCHEMA};
use crate::capture::version::Published;
use crate::locks::RwLocked;
use crate::provider::changelog::ChangelogProvider;
use crate::provider::current::CurrentTableProvider;
use crate::provider::reconcile::ReconcileLog;
use crate::provider::CHANGELOG_SUFFIX;

/// The session's catalogs: one per source (looked up live, so dropping a source removes its
/// catalog), and the ordinary ones (the default catalog) kept in memory.
#[derive(Debug)]
pub(super) struct EngineCatalogs {
    pub(super) others: MemoryCatalogProviderList,
    pub(super) sources: SourcesRef,
    pub(super) sinks: SinksRef,
    pub(super) reconciliations: ReconcileLog,
}

impl CatalogProviderList for EngineCatalogs {
    fn register_catalog(
        &self,
        name: String,
        catalog: Arc<dyn CatalogProvider>,
    ) -> Option<Arc<dyn CatalogProvider>> {
        self.others.register_catalog(name, catalog)
    }

    fn catalog_names(&self) -> Vec<String> {
        let mut names = self.others.catalog_names();
        if let Some(sources) = self.sources.upgrade() {
            names.extend(sources.read_locked().keys().cloned());
        }
        names
    }

    fn catalog(&self, name: &str) -> Option<Arc<dyn CatalogProvider>> {
        let sources = self.sources.upgrade()?;
        let source = sources.read_locked().get(name).cloned();
        match source {
            Some(source) => Some(Arc::new(SourceCatalog {
                source,
                status: Arc::new(CdcSchema::new(
                    Arc::downgrade(&sources),
                    std::sync::Weak::clone(&self.sinks),
                    Arc::clone(&self.reconciliations),
                )),
            })),
            None => self.others.catalog(name),
        }
    }
}

/// A source as a catalog: one schema per captured database, plus `cdc`.
#[derive(Debug)]
struct SourceCatalog {
    source: Arc<RunningSource>,
    status: Arc<CdcSchema>,
}

impl CatalogProvider for SourceCatalog {
    fn schema_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .source
            .status()
            .tables
            .iter()
            .map(|t| t.id.db.clone())
            .collect();
        names.push(STATUS_SCHEMA.to_string());
        names.sort();
        names.dedup();
        names
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        if name == STATUS_SCHEMA {
            return Some(Arc::clone(&self.status) as Arc<dyn SchemaProvider>);
        }
        let tables = self.source.status().tables;
        tables.iter().any(|t| t.id.db == name).then(|| {
            Arc::new(SourceSchema {
                source: Arc::clone(&self.source),
                db: name.to_string(),
            }) as Arc<dyn SchemaProvider>
        })
    }
}

/// One captured database: its tables and their changelogs.
#[derive(Debug)]
struct SourceSchema {
    source: Arc<RunningSource>,
    db: String,
}

impl SourceSchema {
    fn published(&self) -> Published {
        Arc::clone(&self.source.published)
    }
}

#[async_trait]
impl SchemaProvider for SourceSchema {
    fn table_names(&self) -> Vec<String> {
        self.source
            .status()
            .tables
            .iter()
            .filter(|t| t.id.db == self.db)
            .flat_map(|t| {
                [
                    t.id.table.clone(),
                    format!("{}{CHANGELOG_SUFFIX}", t.id.table),
                ]
            })
            .collect()
    }

    async fn table(&self, name: &str) -> datafusion::error::Result<Option<Arc<dyn TableProvider>>> {
        let tables = self.source.status().tables;
        let (base, changelog) = match name.strip_suffix(CHANGELOG_SUFFIX) {
            Some(base) => (base, true),
            None => (name, false),
        };
        let Some(index) = tables
            .iter()
            .position(|t| t.id.db == self.db && t.id.table == base)
        else {
            return Ok(None);
        };
        let name = &self.source.name;
        Ok(Some(if changelog {
            // The union of the schemas its entries were written under, as published.
            let schema = self
                .source
                .published
                .load()
                .changelogs
                .get(index)
                .map(|log| Arc::clone(&log.schema))
                .unwrap_or_else(|| crate::state::changelog::changelog_schema(&tables[index].arrow));
            Arc::new(
                ChangelogProvider::new(name, self.published(), index, schema)
                    .guarded(Arc::clone(&self.source.health), tables[index].id.clone()),
            )
        } else {
            Arc::new(
                CurrentTableProvider::new(
                    name,
                    self.published(),
                    index,
                    Arc::clone(&tables[index]),
                )
                .guarded(Arc::clone(&self.source.health)),
            )
        }))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.table_names().iter().any(|t| t == name)
    }
}
