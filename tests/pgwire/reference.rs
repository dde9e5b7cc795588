//! The PostgreSQL the clients are compared with: a private server this test binary starts
//! from the installed `postgresql` package (`devserver::DevPostgres`, trust authentication,
//! user `postgres`), a fresh database per test, dropped at the end.

use cdcfusion::devserver::DevPostgres;
use tokio_postgres::{Client, NoTls};

/// The reference server, shared by the tests of this binary.
pub fn server() -> &'static DevPostgres {
    DevPostgres::shared()
}

/// A database of its own on the reference PostgreSQL.
pub struct Reference {
    pub database: String,
    admin: Client,
}

async fn connect(conninfo: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(conninfo, NoTls)
        .await
        .unwrap_or_else(|e| panic!("the reference PostgreSQL at {conninfo}: {e}"));
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

impl Reference {
    /// Creates database `name` afresh (dropping a leftover of an earlier run) and runs
    /// `setup` in it.
    pub async fn create(name: &str, setup: &str) -> Self {
        let admin = connect(&server().conninfo("postgres")).await;
        admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .await
            .unwrap();
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap();
        let reference = Self {
            database: name.to_string(),
            admin,
        };
        reference.client().await.batch_execute(setup).await.unwrap();
        reference
    }

    /// A libpq-style connection string for the database.
    pub fn conninfo(&self) -> String {
        server().conninfo(&self.database)
    }

    pub async fn client(&self) -> Client {
        connect(&self.conninfo()).await
    }

    /// Drops the database.
    pub async fn drop_database(self) {
        self.admin
            .batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.database
            ))
            .await
            .unwrap();
    }
}
