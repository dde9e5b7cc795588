//! Databases as PostgreSQL clients see them: which DataFusion catalog a connection's database
//! names, and the `pg_catalog` schema of each database.
//!
//! # Databases
//! A connection's database picks the session's default catalog: a source's name makes
//! `shop.orders` mean `source.shop.orders`; `postgres` always exists and keeps the engine's
//! default catalog (status tables, tables registered from Rust); any other name is refused with
//! `3D000` at start-up. Three-part names reach every catalog from any database.
//!
//! # pg_catalog
//! The `pg_catalog` tables and functions come from `datafusion-pg-catalog`. As in PostgreSQL,
//! `pg_class`, `pg_namespace` and `pg_attribute` describe the current database only, while
//! `pg_database` lists them all (the engine's default catalog under the name `postgres`):
//! [`DatabaseView`] gives the crate that view. One `pg_catalog` provider per database is kept
//! for the server's lifetime, because its object ids must stay stable between the queries a
//! client makes (psql looks a table's oid up, then asks for its columns by that oid).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{CatalogProvider, CatalogProviderList, SchemaProvider};
use datafusion::datasource::TableType;
use datafusion::error::DataFusionError;
use datafusion_pg_catalog::pg_catalog::catalog_info::CatalogInfo;
use datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider;
use datafusion_pg_catalog::pg_catalog::{PgCatalogSchemaProvider, PgCatalogStaticTables};

use crate::engine::Engine;

/// The database that always exists and keeps the engine's default catalog.
pub const DEFAULT_DATABASE: &str = "postgres";
/// The schema name PostgreSQL clients look their catalog up in.
pub const PG_CATALOG: &str = "pg_catalog";

/// The catalog that database `name` selects, if it exists.
pub fn catalog_of_database(engine: &Engine, name: &str) -> Option<String> {
    if name == DEFAULT_DATABASE {
        return Some(engine.default_catalog());
    }
    engine.source(name).ok().map(|_| name.to_string())
}

/// The `pg_catalog` schema of each database, created on first use and kept.
pub struct PgCatalogs {
    static_tables: Arc<PgCatalogStaticTables>,
    catalogs: Arc<dyn CatalogProviderList>,
    default_catalog: String,
    by_catalog: Mutex<HashMap<String, Arc<dyn SchemaProvider>>>,
}

impl std::fmt::Debug for PgCatalogs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgCatalogs")
            .field("default_catalog", &self.default_catalog)
            .finish_non_exhaustive()
    }
}

impl PgCatalogs {
    /// Installs the PostgreSQL functions psql and drivers call into the engine's session and
    /// prepares the per-database `pg_catalog` schemas.
    pub fn install(engine: &Engine) -> Result<Self, DataFusionError> {
        let default_catalog = engine.default_catalog();
        datafusion_pg_catalog::pg_catalog::setup_pg_catalog(
            engine.context(),
            &default_catalog,
            EmptyContextProvider,
        )
        .map_err(|e| *e)?;
        super::compat::install(engine.context());
        Ok(Self {
            static_tables: Arc::new(PgCatalogStaticTables::try_new()?),
            catalogs: Arc::clone(engine.context().state().catalog_list()),
            default_catalog,
            by_catalog: Mutex::new(HashMap::new()),
        })
    }

    /// The `pg_catalog` schema of the database whose catalog is `catalog`.
    pub fn for_catalog(&self, catalog: &str) -> Result<Arc<dyn SchemaProvider>, DataFusionError> {
        let mut by_catalog = self.by_catalog.lock().expect("pg_catalog cache");
        if let Some(schema) = by_catalog.get(catalog) {
            return Ok(Arc::clone(schema));
        }
        let view = DatabaseView {
            catalogs: Arc::clone(&self.catalogs),
            current: catalog.to_string(),
            default_catalog: self.default_catalog.clone(),
        };
        let schema: Arc<dyn SchemaProvider> = Arc::new(PgCatalogSchemaProvider::try_new(
            view,
            Arc::clone(&self.static_tables),
            EmptyContextProvider,
        )?);
        by_catalog.insert(catalog.to_string(), Arc::clone(&schema));
        Ok(schema)
    }
}

/// The engine's catalogs as one database sees them (see the module docs).
#[derive(Clone)]
struct DatabaseView {
    catalogs: Arc<dyn CatalogProviderList>,
    current: String,
    default_catalog: String,
}

impl std::fmt::Debug for DatabaseView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseView")
            .field("current", &self.current)
            .finish_non_exhaustive()
    }
}

impl DatabaseView {
    /// The engine catalog behind database `name`.
    fn catalog_name<'a>(&'a self, name: &'a str) -> &'a str {
        if name == DEFAULT_DATABASE {
            &self.default_catalog
        } else {
            name
        }
    }

    /// The catalog of database `name` when it is the current one.
    fn current_catalog(&self, name: &str) -> Option<Arc<dyn CatalogProvider>> {
        let name = self.catalog_name(name);
        (name == self.current)
            .then(|| self.catalogs.catalog(name))
            .flatten()
    }

    async fn table(
        &self,
        catalog: &str,
        schema: &str,
        table: &str,
    ) -> Result<Option<Arc<dyn datafusion::catalog::TableProvider>>, DataFusionError> {
        match self.current_catalog(catalog).and_then(|c| c.schema(schema)) {
            Some(schema) => schema.table(table).await,
            None => Ok(None),
        }
    }
}

#[async_trait]
impl CatalogInfo for DatabaseView {
    async fn catalog_names(&self) -> Result<Vec<String>, DataFusionError> {
        let mut names: Vec<String> = CatalogProviderList::catalog_names(self.catalogs.as_ref())
            .into_iter()
            .map(|n| {
                if n == self.default_catalog {
                    DEFAULT_DATABASE.to_string()
                } else {
                    n
                }
            })
            .collect();
        names.sort();
        Ok(names)
    }

    async fn schema_names(&self, catalog: &str) -> Result<Option<Vec<String>>, DataFusionError> {
        // `pg_catalog` is listed (as oid 11, which the crate's `pg_proc` and `pg_type` rows
        // refer to, so `\df pg_catalog.*` finds them) but its tables are not: see
        // `table_names`.
        Ok(self.current_catalog(catalog).map(|c| {
            let mut names: Vec<String> = c
                .schema_names()
                .into_iter()
                .filter(|s| s != PG_CATALOG)
                .collect();
            names.push(PG_CATALOG.to_string());
            names
        }))
    }

    async fn table_names(
        &self,
        catalog: &str,
        schema: &str,
    ) -> Result<Option<Vec<String>>, DataFusionError> {
        // The catalog does not describe itself: `pg_class` lists the data's tables only.
        if schema == PG_CATALOG {
            return Ok(self.current_catalog(catalog).map(|_| Vec::new()));
        }
        Ok(self
            .current_catalog(catalog)
            .and_then(|c| c.schema(schema))
            .map(|s| s.table_names()))
    }

    async fn table_schema(
        &self,
        catalog: &str,
        schema: &str,
        table: &str,
    ) -> Result<Option<SchemaRef>, DataFusionError> {
        Ok(self
            .table(catalog, schema, table)
            .await?
            .map(|t| t.schema()))
    }

    async fn table_type(
        &self,
        catalog: &str,
        schema: &str,
        table: &str,
    ) -> Result<Option<TableType>, DataFusionError> {
        Ok(self
            .table(catalog, schema, table)
            .await?
            .map(|t| t.table_type()))
    }
}

/// The engine's catalogs for one session: the current database's catalog gains its
/// `pg_catalog` schema; every other catalog is the engine's own.
#[derive(Debug)]
pub struct SessionCatalogs {
    pub inner: Arc<dyn CatalogProviderList>,
    pub current: String,
    pub pg_catalog: Arc<dyn SchemaProvider>,
}

impl CatalogProviderList for SessionCatalogs {
    fn register_catalog(
        &self,
        name: String,
        catalog: Arc<dyn CatalogProvider>,
    ) -> Option<Arc<dyn CatalogProvider>> {
        self.inner.register_catalog(name, catalog)
    }

    fn catalog_names(&self) -> Vec<String> {
        CatalogProviderList::catalog_names(self.inner.as_ref())
    }

    fn catalog(&self, name: &str) -> Option<Arc<dyn CatalogProvider>> {
        let catalog = self.inner.catalog(name)?;
        if name != self.current {
            return Some(catalog);
        }
        Some(Arc::new(WithPgCatalog {
            inner: catalog,
            pg_catalog: Arc::clone(&self.pg_catalog),
        }))
    }
}

/// A catalog plus its database's `pg_catalog` schema.
#[derive(Debug)]
struct WithPgCatalog {
    inner: Arc<dyn CatalogProvider>,
    pg_catalog: Arc<dyn SchemaProvider>,
}

impl CatalogProvider for WithPgCatalog {
    fn schema_names(&self) -> Vec<String> {
        let mut names = self.inner.schema_names();
        if !names.iter().any(|n| n == PG_CATALOG) {
            names.push(PG_CATALOG.to_string());
        }
        names
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        if name == PG_CATALOG {
            return Some(Arc::clone(&self.pg_catalog));
        }
        self.inner.schema(name)
    }

    fn register_schema(
        &self,
        name: &str,
        schema: Arc<dyn SchemaProvider>,
    ) -> datafusion::error::Result<Option<Arc<dyn SchemaProvider>>> {
        self.inner.register_schema(name, schema)
    }
}
