//! The state on an S3-compatible object store, in a build with the `s3` feature:
//! `cargo test --features s3 --test s3_store`. The store is `moto_server` (PyPI's `moto`),
//! started on a free port of 127.0.0.1 and stopped at the end.
#![cfg(feature = "s3")]

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cdcfusion::durable::store::FileKind;
use cdcfusion::durable::{DurableOptions, Store, StoreError, StoreOptions};
use cdcfusion::engine::{Engine, EngineOptions};
use cdcfusion::source::connect::current_position;
use cdcfusion::source::schema::Flavor;
use common::durable::*;
use common::*;
use mysql_async::prelude::Queryable;

/// `moto_server` on a free port, killed when dropped.
struct Moto {
    child: Child,
    port: u16,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Moto {
    fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("moto_server (pip install 'moto[server]')");
        let deadline = Instant::now() + HANG_GUARD;
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "moto_server does not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Self { child, port }
    }

    /// Creates `bucket` with a plain HTTP request (moto accepts it unsigned).
    fn create_bucket(&self, bucket: &str) {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        write!(
            s,
            "PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.port
        )
        .unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    }

    fn options(&self) -> StoreOptions {
        [
            ("aws_endpoint", format!("http://127.0.0.1:{}", self.port)),
            ("aws_allow_http", "true".into()),
            ("aws_region", "us-east-1".into()),
            ("aws_access_key_id", "test".into()),
            ("aws_secret_access_key", "test".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

#[tokio::test]
async fn a_source_resumes_from_checkpoints_on_an_s3_compatible_store() {
    let moto = tokio::task::spawn_blocking(Moto::start).await.unwrap();
    moto.create_bucket("cdc");
    let location = "s3://cdc/engine-a";
    // Create-if-absent holds on the store: the commit of a manifest cannot be repeated.
    let store = Store::open(location, &moto.options()).unwrap();
    store
        .create("probe/1.manifest", FileKind::Manifest, b"one")
        .await
        .unwrap();
    let again = store
        .create("probe/1.manifest", FileKind::Manifest, b"two")
        .await;
    assert!(matches!(again, Err(StoreError::Exists { .. })), "{again:?}");
    store.delete("probe/1.manifest").await.unwrap();

    let srv = server();
    let db = "s3_db";
    let mut conn = root_conn(srv).await;
    fresh_db(&mut conn, db).await;
    conn.query_drop(format!(
        "CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(16));
         INSERT INTO {db}.t SELECT seq, CONCAT('v', seq) FROM {db}.seq_1_to_300;"
    ))
    .await
    .unwrap();
    let options = EngineOptions {
        durable: DurableOptions {
            checkpoint_interval: Duration::from_millis(100),
            state_snapshot_min_changes: 20,
        },
        store: moto.options(),
    };
    let engine = Engine::open(location, options.clone()).await.unwrap();
    engine
        .sql(&format!(
            "CREATE SOURCE s3src FROM MYSQL '{}' WITH (tables = '{db}.*', chunk_size = 50, server_id = {})",
            srv.cdc_url(),
            next_server_id()
        ))
        .await
        .unwrap();
    engine.wait_ready("s3src").await.unwrap();
    conn.query_drop(format!(
        "UPDATE {db}.t SET v = 'x' WHERE id <= 30; DELETE FROM {db}.t WHERE id > 290"
    ))
    .await
    .unwrap();
    let end = current_position(&mut conn, Flavor::MariaDb)
        .await
        .unwrap()
        .0;
    engine
        .source("s3src")
        .unwrap()
        .wait_for(&end)
        .await
        .unwrap();
    engine.shutdown().await.unwrap();
    drop(engine);
    conn.query_drop(format!("INSERT INTO {db}.t VALUES (1000, 'while down')"))
        .await
        .unwrap();
    let engine = Engine::open(location, options).await.unwrap();
    engine.wait_ready("s3src").await.unwrap();
    let end = current_position(&mut conn, Flavor::MariaDb)
        .await
        .unwrap()
        .0;
    engine
        .source("s3src")
        .unwrap()
        .wait_for(&end)
        .await
        .unwrap();
    let from = engine
        .source("s3src")
        .unwrap()
        .status()
        .consistent_from
        .unwrap();
    check_table(srv, &engine, "s3src", db, "t", "id, v", true, &from, &end).await;
    let reads = query(
        &engine,
        &format!("SELECT count(*) AS n FROM s3src.{db}.\"t$changelog\" WHERE _op = 'r'"),
    )
    .await;
    assert_eq!(reads, ["n=300"], "the restart did not snapshot again");
}
