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
//! Its `pg_index` and `pg_constraint` are ours (see `keys`): the primary keys of the
//! database's tables; `pg_class` gains their indexes (`indexes`), `pg_attribute` the column
//! types the front end sends (`attributes`), and `pg_settings` lists the settings
//! (`pg_settings`). Its `pg_roles` lists the users (see `users`) as they are when it is read:
//! each can log in, and an admin shows as a superuser who may create roles.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int32Type, SchemaRef};
use datafusion::catalog::Session;
use datafusion::catalog::{CatalogProvider, CatalogProviderList, SchemaProvider};
use datafusion::common::Constraint;
use datafusion::datasource::TableType;
use datafusion::error::DataFusionError;
use datafusion_pg_catalog::pg_catalog::catalog_info::CatalogInfo;
use datafusion_pg_catalog::pg_catalog::context::{PgCatalogContextProvider, Role as PgRole};
use datafusion_pg_catalog::pg_catalog::{PgCatalogSchemaProvider, PgCatalogStaticTables};

use crate::config::Role;
use crate::engine::Engine;
use crate::frontend::access::users::Users;
use crate::frontend::pg_compat::attributes::TypedAttributes;
use crate::frontend::pg_compat::indexes::{ClassWithIndexes, IndexDefinitions, PgGetIndexdef};
use crate::frontend::pg_compat::keys::{
    all_rows, KeySource, KeyTable, KeyTableProvider, PrimaryKey,
};

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
    definitions: IndexDefinitions,
    roles: UserRoles,
    catalogs: Arc<dyn CatalogProviderList>,
    default_catalog: String,
    by_catalog: Mutex<HashMap<String, Database>>,
}

/// One database's `pg_catalog` schema and where its tables' keys, oids and schemas come from.
type Database = (Arc<dyn SchemaProvider>, Arc<dyn KeySource>);

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
    pub fn install(engine: &Engine, users: &Arc<Users>) -> Result<Self, DataFusionError> {
        let default_catalog = engine.default_catalog();
        let roles = UserRoles {
            users: Arc::clone(users),
        };
        datafusion_pg_catalog::pg_catalog::setup_pg_catalog(
            engine.context(),
            &default_catalog,
            roles.clone(),
        )
        .map_err(|e| *e)?;
        crate::frontend::pg_compat::pg_functions::install(engine.context());
        crate::frontend::pg_compat::numeric_avg::install(engine.context());
        let static_tables = Arc::new(PgCatalogStaticTables::try_new()?);
        crate::frontend::pg_compat::reflect::install(
            engine.context(),
            static_tables.pg_type.data(),
        )?;
        let definitions = IndexDefinitions::default();
        engine
            .context()
            .register_udf(datafusion::logical_expr::ScalarUDF::new_from_impl(
                PgGetIndexdef::new(definitions.clone()),
            ));
        Ok(Self {
            static_tables,
            definitions,
            roles,
            catalogs: Arc::clone(engine.context().state().catalog_list()),
            default_catalog,
            by_catalog: Mutex::new(HashMap::new()),
        })
    }

    /// The `pg_catalog` schema of the database whose catalog is `catalog`.
    pub fn for_catalog(&self, catalog: &str) -> Result<Arc<dyn SchemaProvider>, DataFusionError> {
        Ok(self.of_catalog(catalog)?.0)
    }

    /// Where the keys, oids and schemas of the tables of database catalog `catalog` come from.
    pub fn keys_of(&self, catalog: &str) -> Result<Arc<dyn KeySource>, DataFusionError> {
        Ok(self.of_catalog(catalog)?.1)
    }

    fn of_catalog(&self, catalog: &str) -> Result<Database, DataFusionError> {
        let mut by_catalog = self.by_catalog.lock().expect("pg_catalog cache");
        if let Some((schema, keys)) = by_catalog.get(catalog) {
            return Ok((Arc::clone(schema), Arc::clone(keys)));
        }
        let view = DatabaseView {
            catalogs: Arc::clone(&self.catalogs),
            current: catalog.to_string(),
            default_catalog: self.default_catalog.clone(),
        };
        let provider = PgCatalogSchemaProvider::try_new(
            view.clone(),
            Arc::clone(&self.static_tables),
            self.roles.clone(),
        )?;
        let built = |name: &str| {
            provider
                .build_table_by_name(name)?
                .ok_or_else(|| DataFusionError::Internal(format!("pg_catalog.{name} is missing")))?
                .try_into_table_provider()
        };
        let (class, attribute) = (built("pg_class")?, built("pg_attribute")?);
        let pg_catalog: Arc<dyn SchemaProvider> = Arc::new(provider);
        let source: Arc<dyn KeySource> = Arc::new(CatalogKeys {
            pg_catalog: Arc::clone(&pg_catalog),
            view,
            definitions: self.definitions.clone(),
            oids: Mutex::new(HashMap::new()),
        });
        let schema: Arc<dyn SchemaProvider> = Arc::new(WithKeys {
            class: Arc::new(ClassWithIndexes {
                inner: class,
                keys: Arc::clone(&source),
            }),
            attribute: Arc::new(TypedAttributes {
                inner: attribute,
                tables: Arc::clone(&source),
            }),
            index: Arc::new(KeyTableProvider::new(KeyTable::Index, Arc::clone(&source))),
            constraint: Arc::new(KeyTableProvider::new(
                KeyTable::Constraint,
                Arc::clone(&source),
            )),
            inner: pg_catalog,
        });
        by_catalog.insert(
            catalog.to_string(),
            (Arc::clone(&schema), Arc::clone(&source)),
        );
        Ok((schema, source))
    }
}

/// The users as `pg_roles` rows.
#[derive(Debug, Clone)]
struct UserRoles {
    users: Arc<Users>,
}

#[async_trait]
impl PgCatalogContextProvider for UserRoles {
    async fn roles(&self) -> Vec<String> {
        self.users
            .listed()
            .into_iter()
            .map(|(name, _, _)| name)
            .collect()
    }

    async fn role(&self, name: &str) -> Option<PgRole> {
        let (name, role, _) = self.users.listed().into_iter().find(|(n, ..)| n == name)?;
        let admin = role == Role::Admin;
        Some(PgRole {
            name,
            is_superuser: admin,
            can_login: true,
            can_create_db: false,
            can_create_role: admin,
            can_create_user: admin,
            can_replication: false,
            grants: Vec::new(),
            inherited_roles: Vec::new(),
        })
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

/// A database's `pg_catalog` with its own `pg_index` and `pg_constraint`.
#[derive(Debug)]
struct WithKeys {
    inner: Arc<dyn SchemaProvider>,
    class: Arc<ClassWithIndexes>,
    attribute: Arc<TypedAttributes>,
    index: Arc<KeyTableProvider>,
    constraint: Arc<KeyTableProvider>,
}

#[async_trait]
impl SchemaProvider for WithKeys {
    fn table_names(&self) -> Vec<String> {
        self.inner.table_names()
    }

    async fn table(
        &self,
        name: &str,
    ) -> Result<Option<Arc<dyn datafusion::catalog::TableProvider>>, DataFusionError> {
        if name.eq_ignore_ascii_case("pg_class") {
            return Ok(Some(Arc::clone(&self.class) as _));
        }
        if name.eq_ignore_ascii_case("pg_attribute") {
            return Ok(Some(Arc::clone(&self.attribute) as _));
        }
        if name.eq_ignore_ascii_case("pg_settings") {
            let Some(inner) = self.inner.table(name).await? else {
                return Ok(None);
            };
            return Ok(Some(Arc::new(
                crate::frontend::pg_compat::pg_settings::table(inner.schema())?,
            )));
        }
        match KeyTable::named(name) {
            Some(KeyTable::Index) => Ok(Some(Arc::clone(&self.index) as _)),
            Some(KeyTable::Constraint) => Ok(Some(Arc::clone(&self.constraint) as _)),
            None => self.inner.table(name).await,
        }
    }

    fn table_exist(&self, name: &str) -> bool {
        self.inner.table_exist(name)
    }
}

/// The primary keys of one database's tables, named by its `pg_class` oids.
#[derive(Debug)]
struct CatalogKeys {
    pg_catalog: Arc<dyn SchemaProvider>,
    view: DatabaseView,
    definitions: IndexDefinitions,
    /// The `pg_class` oid of each table by schema and name, as last listed: oids stay while
    /// a table exists, so a name found here is looked up without listing the catalog again.
    oids: Mutex<HashMap<(String, String), i32>>,
}

impl CatalogKeys {
    /// Every row of catalog table `name`, with `columns` cast to `types`.
    async fn rows(
        &self,
        name: &str,
        columns: &[(&str, DataType)],
        state: &dyn Session,
    ) -> Result<Vec<Vec<ArrayRef>>, DataFusionError> {
        let table =
            self.pg_catalog.table(name).await?.ok_or_else(|| {
                DataFusionError::Internal(format!("pg_catalog.{name} is missing"))
            })?;
        let batches = all_rows(table.as_ref(), state).await?;
        batches
            .iter()
            .map(|batch| {
                columns
                    .iter()
                    .map(|(column, to)| {
                        let array = batch.column_by_name(column).ok_or_else(|| {
                            DataFusionError::Internal(format!("{name}.{column} is missing"))
                        })?;
                        Ok(cast(array, to)?)
                    })
                    .collect()
            })
            .collect()
    }
}

/// A table of the database as `pg_class` lists it.
struct ClassTable {
    oid: i32,
    namespace_oid: i32,
    schema: String,
    name: String,
    provider: Arc<dyn datafusion::catalog::TableProvider>,
}

impl CatalogKeys {
    /// The database's tables (`relkind` `r`) with their `pg_class` oids.
    async fn tables(&self, state: &dyn Session) -> Result<Vec<ClassTable>, DataFusionError> {
        let (int, text) = (DataType::Int32, DataType::Utf8);
        let mut namespaces = HashMap::new();
        let columns = [("oid", int.clone()), ("nspname", text.clone())];
        for batch in self.rows("pg_namespace", &columns, state).await? {
            let (oids, names) = (
                batch[0].as_primitive::<Int32Type>(),
                batch[1].as_string::<i32>(),
            );
            for i in 0..oids.len() {
                namespaces.insert(oids.value(i), names.value(i).to_string());
            }
        }
        let columns = [
            ("oid", int.clone()),
            ("relname", text.clone()),
            ("relnamespace", int),
            ("relkind", text),
        ];
        let mut tables = Vec::new();
        let mut oids = HashMap::new();
        for batch in self.rows("pg_class", &columns, state).await? {
            let (oids_column, names) = (
                batch[0].as_primitive::<Int32Type>(),
                batch[1].as_string::<i32>(),
            );
            let (spaces, kinds) = (
                batch[2].as_primitive::<Int32Type>(),
                batch[3].as_string::<i32>(),
            );
            for i in 0..oids_column.len() {
                let Some(schema) = namespaces.get(&spaces.value(i)) else {
                    continue;
                };
                if kinds.value(i) != "r" {
                    continue;
                }
                let table = self
                    .view
                    .table(&self.view.current, schema, names.value(i))
                    .await?;
                if let Some(provider) = table {
                    oids.insert(
                        (schema.clone(), names.value(i).to_string()),
                        oids_column.value(i),
                    );
                    tables.push(ClassTable {
                        oid: oids_column.value(i),
                        namespace_oid: spaces.value(i),
                        schema: schema.clone(),
                        name: names.value(i).to_string(),
                        provider,
                    });
                }
            }
        }
        *self.oids.lock().expect("table oids") = oids;
        Ok(tables)
    }
}

#[async_trait]
impl KeySource for CatalogKeys {
    async fn primary_keys(&self, state: &dyn Session) -> Result<Vec<PrimaryKey>, DataFusionError> {
        let mut keys = Vec::new();
        for table in self.tables(state).await? {
            let Some(constraints) = table.provider.constraints() else {
                continue;
            };
            let fields = table.provider.schema();
            for constraint in constraints.iter() {
                if let Constraint::PrimaryKey(positions) = constraint {
                    keys.push(PrimaryKey {
                        table_oid: table.oid,
                        namespace_oid: table.namespace_oid,
                        table: table.name.clone(),
                        schema: table.schema.clone(),
                        columns: positions.iter().map(|&p| p as i16 + 1).collect(),
                        column_names: positions
                            .iter()
                            .map(|&p| fields.field(p).name().clone())
                            .collect(),
                        rows: table
                            .provider
                            .statistics()
                            .and_then(|s| s.num_rows.get_value().copied())
                            .map_or(0, |n| n as u64),
                    });
                }
            }
        }
        self.definitions.record(&self.view.current, &keys);
        Ok(keys)
    }

    async fn table_schemas(
        &self,
        state: &dyn Session,
    ) -> Result<HashMap<i32, SchemaRef>, DataFusionError> {
        Ok(self
            .tables(state)
            .await?
            .into_iter()
            .map(|t| (t.oid, t.provider.schema()))
            .collect())
    }

    async fn table_origin(
        &self,
        state: &dyn Session,
        schema: &str,
        table: &str,
    ) -> Result<Option<(i32, SchemaRef)>, DataFusionError> {
        let name = (schema.to_string(), table.to_string());
        let cached = self.oids.lock().expect("table oids").get(&name).copied();
        let oid = match cached {
            Some(oid) => Some(oid),
            None => self
                .tables(state)
                .await?
                .into_iter()
                .find(|t| t.schema == schema && t.name == table)
                .map(|t| t.oid),
        };
        let Some(oid) = oid else { return Ok(None) };
        let provider = self.view.table(&self.view.current, schema, table).await?;
        Ok(provider.map(|p| (oid, p.schema())))
    }

    fn known_oid(&self, schema: &str, table: &str) -> Option<i32> {
        let name = (schema.to_string(), table.to_string());
        self.oids.lock().expect("table oids").get(&name).copied()
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
