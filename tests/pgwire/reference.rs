//! The machine's PostgreSQL as the reference clients are compared with: a fresh database per
//! test on the local server (trust authentication, user `postgres`), dropped at the end.

use tokio_postgres::{Client, NoTls};

/// Where the reference server listens.
const ADMIN: &str = "host=127.0.0.1 port=5432 user=postgres dbname=postgres";

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
        let admin = connect(ADMIN).await;
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
        format!(
            "host=127.0.0.1 port=5432 user=postgres dbname={}",
            self.database
        )
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
