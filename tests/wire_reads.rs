//! The snapshot's own row connection (`source::mysql_client`) against the driver's reads: the same
//! batches for every column type, NULLs, long values and a row past one packet; the same
//! errors; parameters, the statement cache, the socket fallback, what it declines to speak,
//! and a stalled server noticed within the read timeout; a silent binlog connection replaced.

mod common;

use std::time::{Duration, Instant};

use cdcfusion::change::schema::TableId;
use cdcfusion::devserver::{CDC_PASSWORD, CDC_USER};
use cdcfusion::source::connect::{ConnectOptions, SESSION_INIT};
use cdcfusion::source::mysql_client::{Opened, WireConnection};
use cdcfusion::source::snapshot::columns::select_batches_wire;
use cdcfusion::source::snapshot::select::select_batches;
use cdcfusion::source::SourceError;
use common::proxy::FaultProxy;
use common::*;
use mysql_async::prelude::Queryable;
use mysql_async::{OptsBuilder, Value};

fn options_of(url: &str) -> ConnectOptions {
    ConnectOptions::from_url(url).unwrap()
}

/// A fault proxy in front of the server, and options that reach it as the CDC user over TCP
/// (the driver would otherwise switch to the Unix socket, around the proxy).
async fn proxied() -> (FaultProxy, ConnectOptions) {
    let proxy = FaultProxy::start(server().port()).await;
    let url = format!(
        "mysql://{CDC_USER}:{CDC_PASSWORD}@127.0.0.1:{}?prefer_socket=false",
        proxy.port()
    );
    (proxy, options_of(&url))
}

async fn open(options: &ConnectOptions, socket: Option<&str>) -> WireConnection {
    match WireConnection::open(options, socket, &SESSION_INIT).await {
        Ok(Opened::Ready(conn)) => *conn,
        other => panic!("expected a connection, got {other:?}"),
    }
}

async fn socket_path() -> String {
    let mut conn = root_conn(server()).await;
    conn.query_first("SELECT @@socket").await.unwrap().unwrap()
}

/// Every kind of column the capture reads, NULLs in every nullable one, a 70 kB text and a
/// 17 MiB blob (a row of two packets).
async fn typed_table(db: &str) {
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, db).await;
    conn.query_drop("SET GLOBAL max_allowed_packet = 67108864")
        .await
        .unwrap();
    conn.query_drop(format!(
        "CREATE TABLE {db}.t (
           id BIGINT PRIMARY KEY, ti TINYINT, tu TINYINT UNSIGNED, si SMALLINT,
           mi MEDIUMINT, i INT, iu INT UNSIGNED, bu BIGINT UNSIGNED, y YEAR,
           f FLOAT, d DOUBLE, dec1 DECIMAL(30,10), dt DATETIME(6), da DATE, ts TIMESTAMP(3) NULL,
           tm TIME(6), v VARCHAR(40), c CHAR(4), tx MEDIUMTEXT, b VARBINARY(8), bl LONGBLOB,
           e ENUM('x','y'), st SET('p','q'), bt BIT(10), j JSON)"
    ))
    .await
    .unwrap();
    conn.query_drop(format!(
        "INSERT INTO {db}.t VALUES
         (1, -128, 255, -32768, -8388608, -2147483648, 4294967295, 18446744073709551615, 2155,
          -1.5, 1e-300, -12345678901234567890.0123456789, '9999-12-31 23:59:59.999999',
          '1000-01-01', '2030-01-01 00:00:00.5', '-838:59:59.000000', 'héllo', 'ab',
          REPEAT('z', 70000), X'00FF10', X'DEADBEEF', 'y', 'p,q', b'1010101010', '{{\"a\": [1, 2]}}'),
         (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
          NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
         (3, 0, 0, 0, 0, 0, 0, 9223372036854775807, 1901, 0, -0.0, 0, '2024-02-29 00:00:00',
          '2024-02-29', '1970-01-01 00:00:01', '00:00:00.000001', '', '', '', X'', X'', 'x', '',
          b'0', 'null')"
    ))
    .await
    .unwrap();
    // A connection made after the limit was raised, so the server may build the long values.
    let mut conn = root_conn(server()).await;
    conn.query_drop(format!(
        "INSERT INTO {db}.t (id, bl) SELECT seq + 3, REPEAT('b', 17 * 1024 * 1024 + seq)
         FROM {db}.seq_1_to_2"
    ))
    .await
    .unwrap();
    conn.query_drop(format!(
        "INSERT INTO {db}.t (id, i, v) SELECT seq, seq, CONCAT('row ', seq) FROM {db}.seq_10_to_5000"
    ))
    .await
    .unwrap();
}

#[tokio::test]
async fn wire_reads_equal_driver_reads_for_every_type() {
    typed_table("wire_types").await;
    let options = options_of(&server().cdc_url());
    let mut driver = options.connect().await.unwrap();
    let id = TableId::new("wire_types", "t");
    let schema = options.table_schema(&mut driver, &id).await.unwrap();
    let socket = socket_path().await;
    for via in [None, Some(socket.as_str())] {
        let mut wire = open(&options, via).await;
        // The whole table, and ranges by parameter, in batches smaller than the table.
        let cases: Vec<(Option<&str>, Vec<Value>)> = vec![
            (None, vec![]),
            (Some("`id` < ?"), vec![Value::Int(4)]),
            (
                Some("`id` >= ? AND `id` < ?"),
                vec![Value::Int(3), Value::Int(4000)],
            ),
            (Some("`id` >= ?"), vec![Value::Int(4999)]),
            (Some("`id` >= ?"), vec![Value::Int(1_000_000)]),
        ];
        for (predicate, params) in cases {
            let theirs = select_batches(&mut driver, &schema, predicate, params.clone(), 1000)
                .await
                .unwrap();
            let ours = select_batches_wire(&mut wire, &schema, predicate, &params, 1000)
                .await
                .unwrap();
            assert_eq!(ours, theirs, "{predicate:?} {params:?} via {via:?}");
        }
        wire.ping().await.unwrap();
        wire.quit().await;
    }
}

/// The server's count of aborted clients, asked on one connection kept for the test (a
/// connection per question could add to the count itself).
async fn aborted_clients(root: &mut mysql_async::Conn) -> u64 {
    let row: Option<(String, u64)> = root
        .query_first("SHOW GLOBAL STATUS LIKE 'Aborted_clients'")
        .await
        .unwrap();
    row.unwrap().1
}

/// Waits until the server has counted at least `at_least` aborted clients (or the guard ends).
async fn aborted_at_least(root: &mut mysql_async::Conn, at_least: u64) -> u64 {
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        let now = aborted_clients(root).await;
        if now >= at_least || Instant::now() > deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn connections_that_quit_are_not_counted_as_aborted() {
    // The counter is the server's, shared with the other tests here, which drop a few
    // connections of their own: hence margins, with 30 connections each way.
    let options = options_of(&server().cdc_url());
    let mut root = root_conn(server()).await;
    let before = aborted_clients(&mut root).await;
    for _ in 0..30 {
        let mut wire = open(&options, None).await;
        wire.ping().await.unwrap();
        wire.quit().await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after_quits = aborted_clients(&mut root).await;
    assert!(after_quits < before + 10, "{before} → {after_quits}");
    // The control: dropped without a goodbye, each is counted.
    for _ in 0..30 {
        let mut wire = open(&options, None).await;
        wire.ping().await.unwrap();
        drop(wire);
    }
    let after_drops = aborted_at_least(&mut root, after_quits + 30).await;
    assert!(
        after_drops >= after_quits + 30,
        "{after_quits} → {after_drops}"
    );
}

#[tokio::test]
async fn wire_errors_are_the_drivers_errors() {
    let db = "wire_errors";
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, db).await;
    conn.query_drop(format!(
        "CREATE TABLE {db}.t (id INT PRIMARY KEY, a INT); INSERT INTO {db}.t VALUES (1, 1)"
    ))
    .await
    .unwrap();
    let options = options_of(&server().cdc_url());
    let mut driver = options.connect().await.unwrap();
    let schema = options
        .table_schema(&mut driver, &TableId::new(db, "t"))
        .await
        .unwrap();
    let mut wire = open(&options, None).await;
    // A column dropped after the schema was read: the same definite error as the driver's.
    conn.query_drop(format!("ALTER TABLE {db}.t DROP COLUMN a"))
        .await
        .unwrap();
    let theirs = select_batches(&mut driver, &schema, None, vec![], 100)
        .await
        .unwrap_err();
    let ours = select_batches_wire(&mut wire, &schema, None, &[], 100)
        .await
        .unwrap_err();
    assert!(
        matches!(theirs, SourceError::ColumnsChanged { .. }),
        "{theirs:?}"
    );
    assert!(
        matches!(ours, SourceError::ColumnsChanged { .. }),
        "{ours:?}"
    );
    assert_eq!(ours.is_transient(), theirs.is_transient());
    // A server error leaves the connection usable.
    wire.ping().await.unwrap();
    // Parameters that do not match the statement are refused, not sent.
    let err = wire
        .select("SELECT ?", &[], &|| "a test".into(), |_| Ok(()))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("a test"), "{err}");
    // A wrong password is the same definite error as the driver's.
    let url = format!(
        "mysql://{CDC_USER}:not-{CDC_PASSWORD}@127.0.0.1:{}",
        server().port()
    );
    let err = WireConnection::open(&options_of(&url), None, &SESSION_INIT)
        .await
        .unwrap_err();
    match &err {
        SourceError::AccessDenied { user, .. } => assert_eq!(user, CDC_USER),
        other => panic!("expected access denied, got {other:?}"),
    }
    assert!(!err.is_transient());
}

/// The number of rows `SELECT id ... WHERE id <= n` returns, each `n` a statement of its own.
async fn count_up_to(wire: &mut WireConnection, db: &str, n: i64) -> i64 {
    let sql = format!("SELECT id FROM {db}.t WHERE id <= ? AND id > {n} - {n}");
    let mut rows = 0;
    wire.select(&sql, &[Value::Int(n)], &|| "counting".into(), |_| {
        rows += 1;
        Ok(())
    })
    .await
    .unwrap();
    rows
}

#[tokio::test]
async fn many_statements_and_a_bad_socket() {
    let db = "wire_statements";
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, db).await;
    conn.query_drop(format!(
        "CREATE TABLE {db}.t (id INT PRIMARY KEY);
         INSERT INTO {db}.t SELECT seq FROM {db}.seq_1_to_200"
    ))
    .await
    .unwrap();
    let options = options_of(&server().cdc_url());
    // A socket that is not there: the connection goes over TCP instead.
    let mut wire = open(&options, Some("/nonexistent/mysqld.sock")).await;
    // More distinct statements than a connection keeps, then the first ones again.
    for n in 1..=150 {
        assert_eq!(count_up_to(&mut wire, db, n).await, n);
    }
    for n in 1..=5 {
        assert_eq!(count_up_to(&mut wire, db, n).await, n);
    }
    // A callback's error ends the read with it.
    let err = wire
        .select(
            &format!("SELECT id FROM {db}.t"),
            &[],
            &|| "stopping".into(),
            |_| Err(SourceError::Config("stop here".into())),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("stop here"), "{err}");
}

#[tokio::test]
async fn it_declines_tls_and_the_snapshot_reads_on() {
    let options = options_of(&server().cdc_url());
    let tls = ConnectOptions {
        opts: OptsBuilder::from_opts(options.opts.clone())
            .ssl_opts(mysql_async::SslOpts::default())
            .into(),
        ..options.clone()
    };
    match WireConnection::open(&tls, None, &SESSION_INIT).await {
        Ok(Opened::Unsupported(reason)) => assert!(reason.contains("TLS"), "{reason}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn a_stalled_server_is_noticed_within_the_read_timeout() {
    let db = "wire_stall";
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, db).await;
    conn.query_drop(format!(
        "CREATE TABLE {db}.t (id INT PRIMARY KEY, pad VARCHAR(200));
         INSERT INTO {db}.t SELECT seq, REPEAT('p', 200) FROM {db}.seq_1_to_50000"
    ))
    .await
    .unwrap();
    let (proxy, mut options) = proxied().await;
    options.read_timeout = Duration::from_millis(500);
    let mut wire = open(&options, None).await;
    let mut seen = 0u64;
    let err = wire
        .select(
            &format!("SELECT id, pad FROM {db}.t"),
            &[],
            &|| "reading through a stalled link".into(),
            |_| {
                seen += 1;
                if seen == 10 {
                    proxy.stall(true);
                }
                Ok(())
            },
        )
        .await
        .unwrap_err();
    proxy.stall(false);
    assert!(
        matches!(err, SourceError::ReadTimeout { .. }),
        "{err:?} after {seen} rows"
    );
    assert!(err.is_transient());
    assert!((10..50_000).contains(&seen), "{seen}");
}

/// A binlog connection that goes silent without closing (a proxy that stops forwarding both
/// ways: a half-open link) is taken for lost once three heartbeat periods pass without an
/// event: the reader connects again, and the change made meanwhile arrives once the link
/// forwards, exactly once.
#[tokio::test]
async fn a_silent_binlog_connection_is_replaced_after_three_missed_heartbeats() {
    use cdcfusion::change::position::StartPosition;
    use cdcfusion::source::binlog::{table_filter, BinlogReader, BinlogReaderOptions};
    let db = "wire_silent";
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, db).await;
    conn.query_drop(format!("CREATE TABLE {db}.t (id INT PRIMARY KEY)"))
        .await
        .unwrap();
    let (proxy, mut connect) = proxied().await;
    // Heartbeats every 500 ms; silence for 1.5 s is a lost connection.
    connect.read_timeout = Duration::from_millis(1500);
    let options = BinlogReaderOptions::new(next_server_id(), StartPosition::Current)
        .with_filter(table_filter(&format!("{db}.*")).unwrap());
    let mut reader = BinlogReader::open(connect, options).await.unwrap();
    conn.query_drop(format!("INSERT INTO {db}.t VALUES (1)"))
        .await
        .unwrap();
    let first = read_until(&mut reader, |t| t.num_rows() > 0).await;
    assert_eq!(with_rows(&first).len(), 1);
    let before = proxy.accepted();

    // Silent for four periods of the bound: no byte either way, the socket still open.
    let waiting = tokio::spawn(async move {
        let txs = read_until(&mut reader, |t| t.num_rows() > 0).await;
        (reader, txs)
    });
    proxy.stall(true);
    conn.query_drop(format!("INSERT INTO {db}.t VALUES (2)"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(6)).await;
    proxy.stall(false);
    let (mut reader, txs) = tokio::time::timeout(HANG_GUARD, waiting)
        .await
        .expect("the reader never noticed the silence")
        .unwrap();
    // It connected again (an idle, healthy stream makes no new connection).
    assert!(proxy.accepted() > before, "no new connection was made");
    let inserted = |txs: &[cdcfusion::change::SourceTransaction]| -> Vec<String> {
        with_rows(txs)
            .iter()
            .flat_map(|t| &t.changes)
            .flat_map(|c| row_strings(c.after.as_ref().unwrap()))
            .collect()
    };
    assert_eq!(inserted(&txs), ["id=2"]);
    // Nothing twice: the next change is the next one read.
    conn.query_drop(format!("INSERT INTO {db}.t VALUES (3)"))
        .await
        .unwrap();
    let next = read_until(&mut reader, |t| t.num_rows() > 0).await;
    assert_eq!(inserted(&next), ["id=3"]);
}
