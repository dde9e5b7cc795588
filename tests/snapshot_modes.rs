//! Snapshot modes, keys and chunk keys beyond the simple integer primary key.

mod common;

use cdcfusion::capture::{Capture, CaptureOptions, SnapshotMode, TableChange};
use cdcfusion::change::position::{BinlogCoord, GtidSet, StartPosition};
use cdcfusion::change::schema::{Flavor, TableId};
use cdcfusion::change::{Op, SourceTransaction};
use cdcfusion::source::binlog::{BinlogReader, BinlogReaderOptions, TableFilter};
use cdcfusion::source::connect::{current_position, ConnectOptions};
use cdcfusion::source::snapshot::incremental::{
    HookPoint, Phase, RowReader, SnapshotMethod, Visibility,
};
use cdcfusion::source::snapshot::select_batches;
use common::*;
use futures::FutureExt;
use mysql_async::prelude::Queryable;
use std::sync::Arc;

fn options(tables: &str, mode: SnapshotMode) -> CaptureOptions {
    let mut o = CaptureOptions::new(tables, mode);
    o.server_id = next_server_id();
    o.snapshot.window_server_id = next_server_id();
    o
}

async fn start_capture(o: CaptureOptions) -> (Capture, Vec<TableChange>) {
    let connect = ConnectOptions::from_url(&server().cdc_url()).unwrap();
    tokio::time::timeout(HANG_GUARD, Capture::start(connect, o))
        .await
        .unwrap()
        .unwrap()
}

async fn position() -> (BinlogCoord, GtidSet) {
    current_position(&mut root_conn(server()).await, Flavor::MariaDb)
        .await
        .unwrap()
}

/// The captured state of table `t` and the source table, each as sorted row strings.
async fn state_and_source(capture: &Capture, t: usize) -> (Vec<String>, Vec<String>) {
    let mut state = row_strings(&capture.state(t).to_batch().unwrap());
    state.sort();
    let mut conn = ConnectOptions::from_url(&server().cdc_url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut source: Vec<String> =
        select_batches(&mut conn, &capture.tables()[t], None, vec![], 1000)
            .await
            .unwrap()
            .iter()
            .flat_map(row_strings)
            .collect();
    source.sort();
    (state, source)
}

#[tokio::test]
async fn snapshot_only_stops_at_a_consistent_end() {
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, "mode_so").await;
    conn.query_drop("CREATE TABLE mode_so.t (id INT PRIMARY KEY, v INT); INSERT INTO mode_so.t VALUES (1,1),(2,2),(3,3),(4,4)")
        .await
        .unwrap();
    let mut o = options("mode_so.*", SnapshotMode::SnapshotOnly);
    o.snapshot.chunk_size = 2;
    o.snapshot.method = SnapshotMethod::Watermarks;
    let writer = Arc::new(tokio::sync::Mutex::new(root_conn(server()).await));
    o.snapshot.hook = Some(Arc::new(move |point, chunk| {
        let writer = Arc::clone(&writer);
        async move {
            if point == HookPoint::AfterSelect && chunk.index == 0 {
                writer
                    .lock()
                    .await
                    .query_drop("UPDATE mode_so.t SET v = 40 WHERE id = 4")
                    .await
                    .unwrap();
            }
        }
        .boxed()
    }));
    let (mut capture, events) = start_capture(o).await;
    assert_eq!(capture.progress().report().phase, Phase::Done);
    // Consistent at max(HIGH): the update made during the snapshot is in.
    let (state, source) = state_and_source(&capture, 0).await;
    assert_eq!(state, source);
    assert!(events.iter().all(|e| e.event.op != Op::Delete));
    // Bounded: later writes are not captured.
    conn.query_drop("INSERT INTO mode_so.t VALUES (5,5)")
        .await
        .unwrap();
    assert!(capture.next().await.unwrap().is_none());
}

#[tokio::test]
async fn stream_only_from_current_file_offset_and_gtid() {
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, "mode_st").await;
    conn.query_drop(
        "CREATE TABLE mode_st.t (id INT PRIMARY KEY, v INT); INSERT INTO mode_st.t VALUES (1,1)",
    )
    .await
    .unwrap();
    let (coord, gtids) = position().await;
    conn.query_drop("INSERT INTO mode_st.t VALUES (2,2)")
        .await
        .unwrap();
    let (mid, _) = position().await;
    let starts = [
        (
            StartPosition::Coord(coord.clone()),
            vec!["id=2 v=2", "id=3 v=3"],
        ),
        (StartPosition::Gtid(gtids), vec!["id=2 v=2", "id=3 v=3"]),
        (StartPosition::Coord(mid), vec!["id=3 v=3"]),
    ];
    let mut captures = Vec::new();
    for (start, expected) in starts {
        let (capture, initial) = start_stream(start).await;
        assert!(initial.is_empty(), "no snapshot in stream_only mode");
        captures.push((capture, expected));
    }
    conn.query_drop("INSERT INTO mode_st.t VALUES (3,3)")
        .await
        .unwrap();
    let (end, _) = position().await;
    for (mut capture, expected) in captures {
        let events = capture.catch_up_to(&end).await.unwrap();
        let rows: Vec<String> = events
            .iter()
            .map(|e| {
                row_strings(
                    &capture
                        .state(0)
                        .codec()
                        .decode([e.event.after.as_ref().unwrap()])
                        .unwrap(),
                )[0]
                .clone()
            })
            .collect();
        assert_eq!(rows, expected);
        assert!(events.iter().all(|e| e.event.op == Op::Insert));
    }
    // From the current end: only what comes after.
    let (mut capture, _) = start_stream(StartPosition::Current).await;
    conn.query_drop("INSERT INTO mode_st.t VALUES (4,4)")
        .await
        .unwrap();
    let (end, _) = position().await;
    let events = capture.catch_up_to(&end).await.unwrap();
    assert_eq!(events.len(), 1);
}

async fn start_stream(start: StartPosition) -> (Capture, Vec<TableChange>) {
    start_capture(options("mode_st.t", SnapshotMode::StreamOnly(start))).await
}

#[tokio::test]
async fn composite_keys_keyless_tables_and_collated_string_chunk_keys() {
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, "mode_keys").await;
    conn.query_drop(
        "CREATE TABLE mode_keys.comp (a INT, b VARCHAR(8), v INT, PRIMARY KEY (a, b));
         CREATE TABLE mode_keys.nokey (x INT, y VARCHAR(8));
         CREATE TABLE mode_keys.str (k VARCHAR(16) COLLATE utf8mb4_general_ci PRIMARY KEY, v INT);",
    )
    .await
    .unwrap();
    for i in 0..40 {
        conn.query_drop(format!(
            "INSERT INTO mode_keys.comp VALUES ({}, 'b{}', {i}); INSERT INTO mode_keys.nokey VALUES ({}, 'dup');
             INSERT INTO mode_keys.str VALUES ('{}{i:02}', {i})",
            i / 4,
            i % 4,
            i % 5,
            if i % 2 == 0 { "Key" } else { "key" }
        ))
        .await
        .unwrap();
    }
    for method in [
        SnapshotMethod::Watermarks,
        SnapshotMethod::ConsistentSnapshot,
    ] {
        let mut o = options("mode_keys.*", SnapshotMode::Initial);
        o.snapshot.chunk_size = 7;
        o.snapshot.parallelism = 2;
        o.snapshot.method = method;
        let writer = Arc::new(tokio::sync::Mutex::new(root_conn(server()).await));
        o.snapshot.hook = Some(Arc::new(move |point, chunk| {
            let writer = Arc::clone(&writer);
            async move {
                // The keyless table is one chunk (index 0): write inside its window too.
                let keyless_window = chunk.table.table == "nokey" && chunk.index == 0;
                // A copy added after LOW and before the read: the read sees it, so it must not
                // be counted again from the binlog.
                if point == HookPoint::AfterLow && keyless_window {
                    let mut w = writer.lock().await;
                    w.query_drop("INSERT INTO mode_keys.nokey VALUES (2, 'dup')")
                        .await
                        .unwrap();
                }
                if point == HookPoint::AfterSelect && (chunk.index == 1 || keyless_window) {
                    let mut w = writer.lock().await;
                    let t = &chunk.table.table;
                    let sql = match t.as_str() {
                        "comp" => "UPDATE mode_keys.comp SET v = v + 100 WHERE a = 1; DELETE FROM mode_keys.comp WHERE a = 9",
                        // Window rows whose string key must be placed by the server's collation.
                        "str" => "UPDATE mode_keys.str SET v = v + 100 WHERE k IN ('Key00', 'key09', 'KEY20'); INSERT INTO mode_keys.str VALUES ('kEy10x', 1)",
                        _ => "INSERT INTO mode_keys.nokey VALUES (1, 'dup'); DELETE FROM mode_keys.nokey WHERE x = 4 LIMIT 1",
                    };
                    w.query_drop(sql).await.unwrap();
                }
            }
            .boxed()
        }));
        let (mut capture, _) = start_capture(o).await;
        let report = capture.progress().report();
        assert_eq!(
            report.keyless_tables,
            vec![TableId::new("mode_keys", "nokey")]
        );
        let str_chunks = report
            .chunks
            .iter()
            .filter(|c| c.table.table == "str")
            .count();
        assert!(
            str_chunks >= 5,
            "string keys are cut by boundary queries: {:?}",
            report.chunks
        );
        // Our own row connection reads keyed chunks under watermarks and every chunk of a
        // consistent snapshot (its whole transaction); the driver a keyless table's locked
        // read under watermarks, inside its transaction with HIGH.
        for c in &report.chunks {
            let expected = match method {
                SnapshotMethod::Watermarks if c.table.table == "nokey" => RowReader::Driver,
                _ => RowReader::Own,
            };
            assert_eq!(c.reader, Some(expected), "{method:?} {c:?}");
            // How each waited for commits to show: the consistent snapshot needs no wait, a
            // keyless chunk is a locked read; a keyed one is a locked read too, unless another
            // chunk's hook was writing its range and sent it to the barrier.
            let allowed: &[Visibility] = match method {
                SnapshotMethod::ConsistentSnapshot => &[Visibility::ConsistentSnapshot],
                _ if c.table.table == "nokey" => &[Visibility::LockedRead],
                _ => &[Visibility::LockedRead, Visibility::Barrier],
            };
            assert!(
                c.visibility.is_some_and(|v| allowed.contains(&v)),
                "{method:?} {c:?}"
            );
        }
        let (end, _) = position().await;
        capture.catch_up_to(&end).await.unwrap();
        for t in 0..capture.tables().len() {
            let (state, source) = state_and_source(&capture, t).await;
            assert_eq!(state, source, "{method:?} {}", capture.tables()[t].id);
        }
        // Undo the writes so that the next method starts from the same data.
        conn.query_drop(
            "UPDATE mode_keys.comp SET v = v - 100 WHERE a = 1; UPDATE mode_keys.str SET v = v - 100 WHERE k IN ('Key00', 'key09', 'KEY20');
             DELETE FROM mode_keys.str WHERE k = 'kEy10x'; DELETE FROM mode_keys.nokey WHERE x = 1 LIMIT 1; INSERT INTO mode_keys.nokey VALUES (4, 'dup');
             DELETE FROM mode_keys.nokey WHERE x = 2 LIMIT 1",
        )
        .await
        .unwrap();
    }
}

/// A watermarked chunk reads its range once, as a locking read that never waits. A chunk whose
/// range holds a row an open transaction changed meets its lock: it goes to the barrier, which
/// gives up on a transaction that stays open, and reads the committed rows; the change is
/// captured from the binlog once it commits.
#[tokio::test]
async fn watermark_chunks_read_once_unless_a_row_is_locked() {
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, "mode_lock").await;
    let rows: Vec<String> = (1..=30).map(|i| format!("({i},{i})")).collect();
    conn.query_drop(format!(
        "CREATE TABLE mode_lock.t (id INT PRIMARY KEY, v INT); INSERT INTO mode_lock.t VALUES {}",
        rows.join(",")
    ))
    .await
    .unwrap();
    let watermarks = || {
        let mut o = options("mode_lock.t", SnapshotMode::Initial);
        o.snapshot.chunk_size = 10;
        o.snapshot.method = SnapshotMethod::Watermarks;
        o
    };
    let visibility = |capture: &Capture| {
        let report = capture.progress().report();
        assert!(report.chunks.len() >= 3, "{:?}", report.chunks);
        report
            .chunks
            .iter()
            .map(|c| c.visibility.unwrap())
            .collect::<Vec<_>>()
    };

    let (capture, _) = start_capture(watermarks()).await;
    let quiet = visibility(&capture);
    assert!(
        quiet.iter().all(|v| *v == Visibility::LockedRead),
        "{quiet:?}"
    );
    drop(capture);

    let mut holder = root_conn(server()).await;
    holder
        .query_drop("START TRANSACTION; UPDATE mode_lock.t SET v = 150 WHERE id = 15")
        .await
        .unwrap();
    let (mut capture, _) = start_capture(watermarks()).await;
    let held = visibility(&capture);
    let gave_up = held
        .iter()
        .filter(|v| **v == Visibility::BarrierGaveUp)
        .count();
    let locked = held
        .iter()
        .filter(|v| **v == Visibility::LockedRead)
        .count();
    assert_eq!((gave_up, locked), (1, held.len() - 1), "{held:?}");
    let (state, _) = state_and_source(&capture, 0).await;
    assert!(state.contains(&"id=15 v=15".to_string()), "{state:?}");
    holder.query_drop("COMMIT").await.unwrap();
    let (end, _) = position().await;
    capture.catch_up_to(&end).await.unwrap();
    let (state, source) = state_and_source(&capture, 0).await;
    assert!(state.contains(&"id=15 v=150".to_string()), "{state:?}");
    assert_eq!(state, source);
}

/// The consistent-snapshot method on a server whose default isolation is READ COMMITTED,
/// where InnoDB ignores `WITH CONSISTENT SNAPSHOT` unless the session asks for REPEATABLE
/// READ: a copy of a keyless row written after the snapshot's position and before its
/// `SELECT` is counted once, not read and then applied again from the binlog.
#[tokio::test]
async fn consistent_snapshot_on_a_read_committed_server_counts_a_copy_once() {
    let server = cdcfusion::devserver::DevServer::start(cdcfusion::devserver::DevServerOptions {
        extra_args: vec!["--transaction-isolation=READ-COMMITTED".into()],
        ..Default::default()
    })
    .expect("private MariaDB");
    let mut conn = root_conn(&server).await;
    let isolation: Option<String> = conn
        .query_first("SELECT @@GLOBAL.tx_isolation")
        .await
        .unwrap();
    assert_eq!(isolation.as_deref(), Some("READ-COMMITTED"));
    conn.query_drop(
        "CREATE DATABASE rc; CREATE TABLE rc.nokey (x INT, y VARCHAR(8));
         INSERT INTO rc.nokey VALUES (1, 'dup'), (1, 'dup'), (2, 'one')",
    )
    .await
    .unwrap();
    let mut o = options("rc.nokey", SnapshotMode::Initial);
    o.snapshot.method = SnapshotMethod::ConsistentSnapshot;
    let url = server.root_url();
    o.snapshot.hook = Some(Arc::new(move |point, _| {
        let url = url.clone();
        async move {
            if point == HookPoint::AfterLow {
                let mut w = mysql_async::Conn::from_url(url).await.unwrap();
                w.query_drop("INSERT INTO rc.nokey VALUES (1, 'dup')")
                    .await
                    .unwrap();
            }
        }
        .boxed()
    }));
    let connect = ConnectOptions::from_url(&server.cdc_url()).unwrap();
    let (mut capture, _) = tokio::time::timeout(HANG_GUARD, Capture::start(connect, o))
        .await
        .unwrap()
        .unwrap();
    let (end, _) = current_position(&mut conn, Flavor::MariaDb).await.unwrap();
    capture.catch_up_to(&end).await.unwrap();
    let mut state = row_strings(&capture.state(0).to_batch().unwrap());
    state.sort();
    let copies = state.iter().filter(|r| r.contains("dup")).count();
    assert_eq!(
        copies, 3,
        "three copies of (1, 'dup') in the source: {state:?}"
    );
    assert_eq!(state.len(), 4, "{state:?}");
}

/// A row as `row_strings` spells it, if the change has that image.
type RowImage = Option<String>;

/// A random writer for `consistent_snapshot_positions_match_their_read_views`: transactions of
/// one to three statements (inserts, deletes, updates of a column, of the key and of a range).
async fn proof_writer(seed: u64, transactions: usize) {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut conn = root_conn(server()).await;
    let mut next_id = 10_000 + seed as i64 * 10_000;
    for _ in 0..transactions {
        let mut tx = conn.start_transaction(Default::default()).await.unwrap();
        for _ in 0..rng.random_range(1..=3) {
            let id = rng.random_range(1..=300i64);
            next_id += 1;
            let sql = match rng.random_range(0..6) {
                0 => format!("INSERT INTO csproof.t VALUES ({next_id}, {id}, 'ins')"),
                1 => format!("DELETE FROM csproof.t WHERE id = {id}"),
                2 => format!("UPDATE csproof.t SET c = c + 1, v = 'upd' WHERE id = {id}"),
                3 => format!("UPDATE csproof.t SET id = {next_id} WHERE id = {id}"),
                _ => format!(
                    "UPDATE csproof.t SET v = 'range' WHERE id BETWEEN {id} AND {}",
                    id + 3
                ),
            };
            // A deadlock between two writers rolls one back: a transaction that did not
            // happen, which the binlog does not show either.
            match tx.query_drop(sql).await {
                Ok(()) => {}
                Err(mysql_async::Error::Server(e)) if e.code == 1213 || e.code == 1205 => break,
                Err(e) => panic!("writer {seed}: {e}"),
            }
        }
        tx.commit().await.unwrap();
    }
}

/// The promise the consistent-snapshot method rests on, checked against the binlog itself:
/// `START TRANSACTION WITH CONSISTENT SNAPSHOT` reports in `binlog_snapshot_file/position`
/// exactly the transactions its read view sees. Snapshots are taken while writers commit;
/// each one's rows must equal the table as the binlog's transactions up to its position
/// leave it (decoded by the binlog reader, a path that does not use this method).
#[tokio::test]
async fn consistent_snapshot_positions_match_their_read_views() {
    use std::collections::BTreeMap;
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, "csproof").await;
    conn.query_drop(
        "CREATE TABLE csproof.t (id INT PRIMARY KEY, c INT NOT NULL, v VARCHAR(16) NOT NULL);
         INSERT INTO csproof.t SELECT seq, seq, 'init' FROM csproof.seq_1_to_300",
    )
    .await
    .unwrap();
    let rows = "SELECT CONCAT('id=', id, ' c=', c, ' v=', v) FROM csproof.t ORDER BY id";
    let initial: Vec<String> = conn.query(rows).await.unwrap();
    let (from, _) = position().await;
    let writers: Vec<_> = (1..=3u64)
        .map(|seed| tokio::spawn(proof_writer(seed, 300)))
        .collect();
    let mut reader_conn = root_conn(server()).await;
    // InnoDB ignores WITH CONSISTENT SNAPSHOT under any other level.
    reader_conn
        .query_drop("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .await
        .unwrap();
    let mut snapshots: Vec<(BinlogCoord, Vec<String>)> = Vec::new();
    while !writers.iter().all(|w| w.is_finished()) || snapshots.is_empty() {
        reader_conn
            .query_drop("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            .await
            .unwrap();
        let status: Vec<(String, String)> = reader_conn
            .query("SHOW STATUS LIKE 'binlog_snapshot_%'")
            .await
            .unwrap();
        let get = |name: &str| {
            status
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
                .unwrap()
        };
        let at = BinlogCoord::new(
            get("Binlog_snapshot_file"),
            get("Binlog_snapshot_position").parse().unwrap(),
        );
        let seen: Vec<String> = reader_conn.query(rows).await.unwrap();
        reader_conn.query_drop("COMMIT").await.unwrap();
        snapshots.push((at, seen));
    }
    for w in writers {
        w.await.unwrap();
    }
    let (end, _) = position().await;
    snapshots.sort_by(|a, b| a.0.cmp(&b.0));
    let distinct = snapshots.windows(2).filter(|w| w[0].0 != w[1].0).count();
    assert!(
        distinct >= 10,
        "the snapshots saw only {} positions while the writers ran",
        distinct + 1
    );

    // The table at each snapshot's position, from the binlog.
    let key = |row: &str| row.split(' ').next().unwrap().to_string();
    let mut table: BTreeMap<String, String> = initial.into_iter().map(|r| (key(&r), r)).collect();
    let mut connect = ConnectOptions::from_url(&server().cdc_url()).unwrap();
    connect.max_attempts = 2;
    let filter: TableFilter = Arc::new(|t: &TableId| t.db == "csproof" && t.table == "t");
    let mut reader = BinlogReader::open(
        connect,
        BinlogReaderOptions::new(next_server_id(), StartPosition::Coord(from.clone()))
            .with_filter(filter),
    )
    .await
    .unwrap();
    let mut pending: Option<SourceTransaction> = None;
    for (at, seen) in &snapshots {
        loop {
            let tx = match pending.take() {
                Some(tx) => tx,
                None if reader.idle_position().is_some_and(|p| p >= end) => break,
                None => match tokio::time::timeout(HANG_GUARD, reader.step())
                    .await
                    .unwrap()
                    .unwrap()
                {
                    Some(tx) => tx,
                    None => continue,
                },
            };
            if tx.start >= *at {
                pending = Some(tx);
                break;
            }
            // (event and row index, before image, after image) of each row, in binlog order.
            let mut changes: Vec<((u32, u32), RowImage, RowImage)> = Vec::new();
            for batch in &tx.changes {
                let before = batch.before.as_ref().map(row_strings);
                let after = batch.after.as_ref().map(row_strings);
                for (i, index) in batch.index.iter().enumerate() {
                    changes.push((
                        *index,
                        before.as_ref().map(|b| b[i].clone()),
                        after.as_ref().map(|a| a[i].clone()),
                    ));
                }
            }
            changes.sort_by_key(|c| c.0);
            for (_, before, after) in changes {
                if let Some(b) = before {
                    assert!(table.remove(&key(&b)).is_some(), "{b} not held");
                }
                if let Some(a) = after {
                    table.insert(key(&a), a);
                }
            }
        }
        // Both in the order of their keys' text.
        let expected: Vec<&String> = table.values().collect();
        let mut seen: Vec<&String> = seen.iter().collect();
        seen.sort_by_key(|r| key(r));
        assert_eq!(
            seen, expected,
            "the consistent snapshot at {at} does not show the binlog's state there"
        );
    }
}
