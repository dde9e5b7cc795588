//! Failures are visible and contained: a panic in any of a source's tasks fails only that
//! source (shown in `cdc.sources`, its tables refuse queries), a DDL the engine does not follow
//! stops only its table until it is re-snapshotted, and `CREATE SOURCE` checks the server
//! before it answers.
//!
//! Failpoints are process-wide, so this file is its own test binary and its tests take turns.

mod common;

use std::sync::Arc;
use std::time::Duration;

use cdcfusion::engine::{Engine, EngineError};
use cdcfusion::failpoint;
use cdcfusion::provider::health::{ReadPolicy, TableUnavailable};
use cdcfusion::sqlstate::{Coded, HasSqlState};
use common::*;
use datafusion::error::DataFusionError;
use mysql_async::prelude::Queryable;
use tokio::sync::Mutex;

/// Failpoints are global: one test at a time.
static TURN: Mutex<()> = Mutex::const_new(());

fn create(name: &str, db: &str) -> String {
    create_at(name, &server().cdc_url(), db, ", chunk_size = 4")
}

/// `CREATE SOURCE name` of `db.*` at `url`, with `more` options after `tables` and `server_id`.
fn create_at(name: &str, url: &str, db: &str, more: &str) -> String {
    format!(
        "CREATE SOURCE {name} FROM MYSQL '{url}' WITH (tables = '{db}.*', server_id = {}{more})",
        source_server_id()
    )
}

async fn table_db(db: &str) {
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, db).await;
    conn.query_drop(format!(
        "CREATE TABLE {db}.t (id INT PRIMARY KEY, v INT);
         INSERT INTO {db}.t SELECT seq, seq FROM {db}.seq_1_to_20;
         CREATE TABLE {db}.u (id INT PRIMARY KEY, v INT);
         INSERT INTO {db}.u SELECT seq, seq FROM {db}.seq_1_to_10;"
    ))
    .await
    .unwrap();
}

async fn exec(engine: &Engine, sql: &str) -> Result<(), EngineError> {
    engine.sql(sql).await?.collect().await?;
    Ok(())
}

/// Waits until `cdc.sources` shows `source` failed; returns its state, SQLSTATE, error,
/// position and table columns.
async fn failed(engine: &Engine, source: &str) -> String {
    let sql = format!(
        "SELECT state, error_sqlstate, error, error_position IS NOT NULL AS has_position, error_table, error_at IS NOT NULL AS has_time FROM cdc.sources WHERE name = '{source}'"
    );
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    loop {
        let rows = query(engine, &sql).await;
        if rows.iter().any(|r| r.starts_with("state=failed")) {
            return rows.join("\n");
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{source} never failed: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The typed refusal of a scan of a stopped table.
async fn refusal(engine: &Engine, sql: &str) -> TableUnavailable {
    let error = match engine.sql(sql).await {
        Ok(df) => match df.collect().await {
            Ok(rows) => panic!("{sql} answered {rows:?}"),
            Err(e) => e,
        },
        Err(EngineError::DataFusion(e)) => e,
        Err(e) => panic!("{sql}: {e}"),
    };
    match error.find_root() {
        DataFusionError::External(e) => e
            .downcast_ref::<Coded>()
            .and_then(|c| c.downcast_ref::<TableUnavailable>())
            .unwrap_or_else(|| panic!("{sql}: {e}"))
            .clone(),
        other => panic!("{sql}: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_any_task_fails_only_its_source() {
    let _turn = TURN.lock().await;
    let state = tempfile::tempdir().unwrap();
    let mut options = cdcfusion::engine::EngineOptions::default();
    options.durable.checkpoint_interval = Duration::from_millis(100);
    let engine = Engine::open(state.path().to_str().unwrap(), options)
        .await
        .unwrap();
    table_db("fail_ok").await;
    exec(&engine, &create("healthy", "fail_ok")).await.unwrap();
    engine.wait_ready("healthy").await.unwrap();
    let mut conn = root_conn(server()).await;

    // Each kind of task: where the panic is injected, and what starts the failing source.
    for (point, scoped) in [
        ("snapshot.chunk", false),
        ("window.feed", false),
        ("capture.apply", false),
        ("checkpoint", true),
        ("poller", true),
    ] {
        let name = format!("f_{}", point.replace('.', "_"));
        let db = format!("fail_{}", point.replace('.', "_"));
        table_db(&db).await;
        let scope = scoped.then_some(name.as_str());
        if point != "capture.apply" {
            failpoint::arm(point, scope, 0);
        }
        exec(&engine, &create(&name, &db)).await.unwrap();
        if point == "capture.apply" {
            engine.wait_ready(&name).await.unwrap();
            failpoint::arm(point, None, 0);
            conn.query_drop(format!("UPDATE {db}.t SET v = v + 1 WHERE id = 3"))
                .await
                .unwrap();
        }
        let status = failed(&engine, &name).await;
        assert!(!failpoint::is_armed(point, scope), "{point} never fired");
        failpoint::disarm_all();
        assert!(status.contains("error_sqlstate=XX000"), "{point}: {status}");
        assert!(status.contains(point), "{point}: {status}");
        assert!(status.contains("has_time=true"), "{point}: {status}");
        match point {
            // A chunk being read names its table; the stream names the table and position.
            "snapshot.chunk" => assert!(status.contains(&format!("error_table={db}.")), "{status}"),
            "capture.apply" => {
                assert!(status.contains(&format!("error_table={db}.t")), "{status}");
                assert!(status.contains("has_position=true"), "{status}");
            }
            _ => {}
        }
        // Its tables refuse queries (once it has any), naming the cause.
        if !matches!(point, "snapshot.chunk" | "window.feed") {
            let ready = tokio::time::timeout(HANG_GUARD, engine.wait_ready(&name)).await;
            assert!(ready.expect("hand-off").is_err(), "{point}: not failed");
            let e = refusal(&engine, &format!("SELECT * FROM {name}.{db}.t")).await;
            assert_eq!(e.sqlstate().code(), "XX000", "{e}");
            assert!(e.to_string().contains(point), "{e}");
        }
        // The healthy source goes on.
        conn.query_drop(format!(
            "INSERT INTO fail_ok.t VALUES ({}, 0)",
            100 + name.len()
        ))
        .await
        .unwrap();
        sync_source(&engine, "healthy").await;
        let healthy = query(
            &engine,
            "SELECT state, error FROM cdc.sources WHERE name = 'healthy'",
        )
        .await;
        assert_eq!(healthy, ["state=running error=NULL"], "after {point}");
        let n = query(&engine, "SELECT count(*) AS n FROM healthy.fail_ok.t").await;
        assert_ne!(
            n,
            ["n=20"],
            "the healthy source stopped following after {point}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ddl_stops_its_table_until_it_is_read_again() {
    let _turn = TURN.lock().await;
    let db = "fail_ddl";
    table_db(db).await;
    let engine = Engine::new();
    exec(&engine, &create("d", db)).await.unwrap();
    engine.wait_ready("d").await.unwrap();
    let mut conn = root_conn(server()).await;

    // A narrowing type change cannot be followed exactly: the table stops, the other one
    // goes on. (Its later rows are not read.)
    conn.query_drop(format!("ALTER TABLE {db}.t MODIFY v TINYINT"))
        .await
        .unwrap();
    conn.query_drop(format!(
        "DELETE FROM {db}.t; INSERT INTO {db}.t VALUES (1, 1)"
    ))
    .await
    .unwrap();
    conn.query_drop(format!("INSERT INTO {db}.u VALUES (11, 11)"))
        .await
        .unwrap();
    sync_source(&engine, "d").await;
    let e = refusal(&engine, &format!("SELECT * FROM d.{db}.t")).await;
    assert_eq!(e.sqlstate().code(), "55000", "{e}");
    let text = e.to_string();
    assert!(text.contains("MODIFY v TINYINT"), "{text}");
    assert!(text.contains(&format!("RESNAPSHOT TABLE {db}.t")), "{text}");
    let e = refusal(&engine, &format!("SELECT * FROM d.{db}.\"t$changelog\"")).await;
    assert_eq!(e.sqlstate().code(), "55000", "{e}");
    assert_eq!(
        query(&engine, &format!("SELECT count(*) AS n FROM d.{db}.u")).await,
        ["n=11"]
    );
    assert_eq!(
        query(
            &engine,
            "SELECT \"table\", state FROM cdc.tables WHERE source = 'd' ORDER BY 1"
        )
        .await,
        ["table=t state=stopped", "table=u state=capturing"]
    );
    // A session that opts in reads the last state, and is warned.
    let policy = ReadPolicy::new(true);
    let stale = Arc::new(policy.clone());
    let rows = engine
        .sql_with(
            &format!("SELECT count(*) AS n FROM d.{db}.t"),
            move |mut s| {
                s.config_mut().set_extension(stale);
                s
            },
        )
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(
        rows.iter().flat_map(row_strings).collect::<Vec<_>>(),
        ["n=20"]
    );
    let warnings = policy.take_warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("MODIFY"), "{warnings:?}");

    // RESNAPSHOT TABLE repairs it, under its new columns: equal to the server again, and
    // capturing.
    exec(&engine, &format!("ALTER SOURCE d RESNAPSHOT TABLE {db}.t"))
        .await
        .unwrap();
    engine.wait_ready("d").await.unwrap();
    conn.query_drop(format!("INSERT INTO {db}.t VALUES (2, 2)"))
        .await
        .unwrap();
    sync_source(&engine, "d").await;
    assert_eq!(
        query(&engine, &format!("SELECT id, v FROM d.{db}.t ORDER BY id")).await,
        ["id=1 v=1", "id=2 v=2"]
    );

    assert_eq!(
        query(
            &engine,
            "SELECT statement FROM cdc.schema_history WHERE source = 'd'"
        )
        .await,
        [format!(
            "statement=ALTER SOURCE ... RESNAPSHOT TABLE {db}.t"
        )]
    );

    // An added column is followed: the table goes on, the new rows and the old ones alike.
    conn.query_drop(format!(
        "ALTER TABLE {db}.u ADD COLUMN note VARCHAR(8) DEFAULT 'x'"
    ))
    .await
    .unwrap();
    conn.query_drop(format!("INSERT INTO {db}.u VALUES (12, 12, 'y')"))
        .await
        .unwrap();
    sync_source(&engine, "d").await;
    assert_eq!(
        query(
            &engine,
            &format!("SELECT id, v, note FROM d.{db}.u WHERE id >= 10 ORDER BY id")
        )
        .await,
        [
            "id=10 v=10 note=x",
            "id=11 v=11 note=x",
            "id=12 v=12 note=y"
        ]
    );
    assert_eq!(
        query(&engine, &format!("SELECT count(*) AS n FROM d.{db}.t")).await,
        ["n=2"]
    );

    // A rename to a name the source selects is followed; to one it does not, the table stops.
    conn.query_drop(format!("RENAME TABLE {db}.t TO {db}.t_old"))
        .await
        .unwrap();
    sync_source(&engine, "d").await;
    assert_eq!(
        query(
            &engine,
            &format!("SELECT id, v FROM d.{db}.t_old ORDER BY id")
        )
        .await,
        ["id=1 v=1", "id=2 v=2"]
    );
    assert!(engine
        .sql(&format!("SELECT * FROM d.{db}.t"))
        .await
        .is_err());
    conn.query_drop(format!(
        "CREATE DATABASE IF NOT EXISTS fail_elsewhere; DROP TABLE IF EXISTS fail_elsewhere.t;
         RENAME TABLE {db}.t_old TO fail_elsewhere.t"
    ))
    .await
    .unwrap();
    sync_source(&engine, "d").await;
    let e = refusal(&engine, &format!("SELECT * FROM d.{db}.t_old")).await;
    assert!(e.to_string().contains("RENAME"), "{e}");
    conn.query_drop("DROP DATABASE fail_elsewhere")
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_source_checks_the_server_before_it_answers() {
    let _turn = TURN.lock().await;
    let engine = Engine::new();
    let url = server().cdc_url();
    // Wrong password: the statement fails and names the user.
    let bad = url.replacen(":cdc-secret@", ":wrong@", 1);
    assert_ne!(bad, url, "the dev server's URL changed shape");
    let e = exec(
        &engine,
        &format!(
            "CREATE SOURCE s FROM MYSQL '{bad}' WITH (server_id = {})",
            source_server_id()
        ),
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("credentials"), "{e}");
    assert!(engine.source("s").is_err(), "a refused source was created");
    // No table matches.
    let e = exec(
        &engine,
        &format!(
            "CREATE SOURCE s FROM MYSQL '{url}' WITH (tables = 'no_such_db.*', server_id = {})",
            source_server_id()
        ),
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("no table matches"), "{e}");
    // An address that accepts connections and never answers: bounded, and the fix named.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            open.push(socket);
        }
    });
    let silent_url = format!("mysql://cdc:x@127.0.0.1:{port}");
    let create = format!(
        "CREATE SOURCE s FROM MYSQL '{silent_url}' WITH (server_id = {})",
        source_server_id()
    );
    let e = tokio::time::timeout(HANG_GUARD, exec(&engine, &create))
        .await
        .expect("validation hangs")
        .unwrap_err();
    assert!(e.to_string().contains("validate = false"), "{e}");
    // Deferred: created at once, and shown failed once its capture tries.
    exec(
        &engine,
        &format!(
            "CREATE SOURCE s FROM MYSQL '{bad}' WITH (validate = false, server_id = {})",
            source_server_id()
        ),
    )
    .await
    .unwrap();
    let status = failed(&engine, "s").await;
    assert!(status.contains("error_sqlstate=28000"), "{status}");
    held.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_are_queryable_during_the_snapshot_when_asked_for() {
    use cdcfusion::capture::{CaptureOptions, SnapshotMode};
    use cdcfusion::source::snapshot::incremental::{HookPoint, SnapshotHook};
    let _turn = TURN.lock().await;
    let db = "fail_visible";
    let mut conn = root_conn(server()).await;
    fresh_db(&mut conn, db).await;
    conn.query_drop(format!(
        "CREATE TABLE {db}.t (id INT PRIMARY KEY, v INT);
         INSERT INTO {db}.t SELECT seq, seq FROM {db}.seq_1_to_40;"
    ))
    .await
    .unwrap();
    // The last chunk waits until the test has looked at the partial table.
    let (release, released) = tokio::sync::watch::channel(false);
    let hook: SnapshotHook = Arc::new(move |point, chunk| {
        let mut released = released.clone();
        Box::pin(async move {
            if point == HookPoint::BeforeLow && chunk.index == 3 {
                let _ = released.wait_for(|r| *r).await;
            }
        })
    });
    let mut options = CaptureOptions::new(format!("{db}.*"), SnapshotMode::Initial);
    options.server_id = source_server_id();
    options.snapshot.window_server_id = source_server_id();
    options.snapshot.chunk_size = 10;
    options.snapshot.parallelism = 1;
    options.snapshot.hook = Some(hook);
    options.visible_during_snapshot = true;
    let engine = Engine::new();
    engine
        .create_source("vis", &server().cdc_url(), options)
        .unwrap();
    // Listed from the start, with the chunks done so far, marked incomplete.
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    loop {
        let rows = query(
            &engine,
            "SELECT rows, chunks_done, complete FROM cdc.tables WHERE source = 'vis'",
        )
        .await;
        if rows == ["rows=30 chunks_done=3 complete=false"] {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{rows:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        query(
            &engine,
            &format!("SELECT count(*) AS n, max(id) AS m FROM vis.{db}.t")
        )
        .await,
        ["n=30 m=30"]
    );
    release.send(true).unwrap();
    engine.wait_ready("vis").await.unwrap();
    assert_eq!(
        query(
            &engine,
            "SELECT rows, complete FROM cdc.tables WHERE source = 'vis'"
        )
        .await,
        ["rows=40 complete=true"]
    );
}

/// The server's binlog files, oldest first, as `SHOW BINARY LOGS` lists them.
async fn binlogs(conn: &mut mysql_async::Conn) -> Vec<(String, u64)> {
    conn.query::<(String, u64), _>("SHOW BINARY LOGS")
        .await
        .unwrap()
}

/// Polls `cdc.sources` for `source` until `done` holds for its one row.
async fn sources_row(
    engine: &Engine,
    source: &str,
    columns: &str,
    done: impl Fn(&str) -> bool,
) -> String {
    let sql = format!("SELECT {columns} FROM cdc.sources WHERE name = '{source}'");
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    loop {
        let rows = query(engine, &sql).await;
        if let [row] = rows.as_slice() {
            if done(row) {
                return row.clone();
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never held for {source}: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_left_behind_is_warned_before_its_binlog_expires() {
    let _turn = TURN.lock().await;
    let db = "fail_purge";
    table_db(db).await;
    let mut conn = root_conn(server()).await;
    // A day of binlog: this test binary's server never holds a file that old, so nothing is
    // purged, but a source behind the newest file has a deadline.
    conn.query_drop("SET GLOBAL binlog_expire_logs_seconds = 86400")
        .await
        .unwrap();
    let engine = Engine::new();
    let warn_within = ", binlog_purge_warning_seconds = 172800";
    let sql = create_at("p", &server().cdc_url(), db, warn_within);
    exec(&engine, &sql).await.unwrap();
    engine.wait_ready("p").await.unwrap();
    conn.query_drop(format!("INSERT INTO {db}.t VALUES (100, 0)"))
        .await
        .unwrap();
    sync_source(&engine, "p").await;

    // Caught up, in the newest file: the distances are the server's own listing's.
    let files = binlogs(&mut conn).await;
    let columns = "oldest_binlog, purge_distance_files, purge_distance_bytes >= 4 AS past_start, \
                   purge_eta_seconds, purge_warning, warnings";
    let expected = format!(
        "oldest_binlog={} purge_distance_files={} past_start=true purge_eta_seconds=NULL \
         purge_warning=false warnings=NULL",
        files[0].0,
        files.len() - 1
    );
    sources_row(&engine, "p", columns, |r| r == expected).await;

    // Stopped in its file while the server rotates past it twice.
    failpoint::arm("capture.apply", None, 0);
    conn.query_drop(format!("UPDATE {db}.t SET v = v + 1 WHERE id = 3"))
        .await
        .unwrap();
    failed(&engine, "p").await;
    failpoint::disarm_all();
    let position = query(&engine, "SELECT position FROM cdc.sources WHERE name = 'p'").await;
    let position = position[0].trim_start_matches("position=").to_string();
    let (file, offset) = position.rsplit_once(':').unwrap();
    let offset: u64 = offset.parse().unwrap();
    conn.query_drop("FLUSH BINARY LOGS").await.unwrap();
    conn.query_drop(format!("INSERT INTO {db}.u VALUES (9000, 0)"))
        .await
        .unwrap();
    conn.query_drop("FLUSH BINARY LOGS").await.unwrap();
    let files = binlogs(&mut conn).await;
    let at = files.iter().position(|(f, _)| f == file).unwrap();
    assert_eq!(at + 3, files.len(), "{files:?}");
    let bytes_before: u64 = files[..at].iter().map(|(_, s)| s).sum::<u64>() + offset;
    let warned = sources_row(
        &engine,
        "p",
        "purge_warning, warnings, purge_distance_files, purge_distance_bytes, purge_eta_seconds",
        |r| r.starts_with("purge_warning=true"),
    )
    .await;
    assert!(
        warned.contains(&format!("the binlog {file} holding the source's position")),
        "{warned}"
    );
    assert!(warned.contains("2 file(s) behind"), "{warned}");
    assert!(
        warned.contains(&format!("purge_distance_files={at} ")),
        "{warned}"
    );
    assert!(
        warned.contains(&format!("purge_distance_bytes={bytes_before} ")),
        "{warned}"
    );
    let eta: f64 = warned
        .rsplit_once("purge_eta_seconds=")
        .unwrap()
        .1
        .parse()
        .unwrap();
    assert!(eta > 0.0 && eta <= 86_400.0, "{warned}");
    // The lag counts the files between: the server's listing is the oracle. MariaDB writes a
    // binlog checkpoint event into the new file some time after a rotation, so the end the
    // poll saw may be short of it for a moment: the two must agree once the end holds still.
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    loop {
        let (end_file, end_offset): (String, u64) = conn
            .query_first("SHOW MASTER STATUS")
            .await
            .unwrap()
            .map(|row: mysql_async::Row| (row.get(0).unwrap(), row.get(1).unwrap()))
            .unwrap();
        assert_eq!(end_file, files.last().unwrap().0);
        let lag: u64 = files[at..files.len() - 1]
            .iter()
            .map(|(_, s)| s)
            .sum::<u64>()
            + end_offset
            - offset;
        let shown = sources_row(&engine, "p", "lag_bytes", |_| true).await;
        if shown == format!("lag_bytes={lag}") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{shown}, the server's listing gives {lag}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A shorter warning than the time left clears it.
    exec(
        &engine,
        "ALTER SOURCE p SET (binlog_purge_warning_seconds = 60)",
    )
    .await
    .unwrap();
    sources_row(&engine, "p", "purge_warning, warnings", |r| {
        r == "purge_warning=false warnings=NULL"
    })
    .await;
    conn.query_drop("SET GLOBAL binlog_expire_logs_seconds = 0")
        .await
        .unwrap();
}

/// Kills every connection of MariaDB user `user`.
async fn kill_sessions_of(conn: &mut mysql_async::Conn, user: &str) {
    let ids: Vec<u64> = conn
        .exec(
            "SELECT id FROM information_schema.processlist WHERE user = ?",
            (user,),
        )
        .await
        .unwrap();
    for id in ids {
        // A session may end on its own meanwhile.
        let _ = conn.query_drop(format!("KILL {id}")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_password_is_given_to_a_running_source_which_goes_on() {
    let _turn = TURN.lock().await;
    let db = "fail_rotate";
    table_db(db).await;
    let mut root = root_conn(server()).await;
    root.query_drop(
        "DROP USER IF EXISTS 'rot'@'%', 'rot'@'localhost';
         CREATE USER 'rot'@'%' IDENTIFIED BY 'first-pass';
         CREATE USER 'rot'@'localhost' IDENTIFIED BY 'first-pass';
         GRANT SELECT, RELOAD, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'rot'@'%';
         GRANT SELECT, RELOAD, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'rot'@'localhost';",
    )
    .await
    .unwrap();
    let port = server().port();
    let state = tempfile::tempdir().unwrap();
    let open = || durable_engine(state.path());
    let engine = open().await;
    let url = format!("mysql://rot:first-pass@127.0.0.1:{port}");
    exec(&engine, &create_at("r", &url, db, "")).await.unwrap();
    engine.wait_ready("r").await.unwrap();
    root.query_drop(format!("INSERT INTO {db}.t VALUES (100, 0)"))
        .await
        .unwrap();
    sync_source(&engine, "r").await;

    // The server's password changes, and the source's sessions end: it cannot reconnect.
    let new_password = "second:pass@/x%";
    for host in ["%", "localhost"] {
        root.query_drop(format!(
            "ALTER USER 'rot'@'{host}' IDENTIFIED BY '{new_password}'"
        ))
        .await
        .unwrap();
    }
    kill_sessions_of(&mut root, "rot").await;
    root.query_drop(format!(
        "INSERT INTO {db}.t VALUES (101, 0); UPDATE {db}.t SET v = 7 WHERE id = 100"
    ))
    .await
    .unwrap();
    // The source is cut off: the server refuses its old password.
    sources_row(
        &engine,
        "r",
        "coalesce(error_sqlstate, last_error_sqlstate) AS refused",
        |r| r == "refused=28000",
    )
    .await;

    // A wrong password and a server that cannot be reached are refused, and change nothing.
    let wrong = exec(&engine, "ALTER SOURCE r SET (password = 'wrong')")
        .await
        .unwrap_err();
    assert_eq!(wrong.sqlstate().code(), "28000", "{wrong}");
    let elsewhere = exec(
        &engine,
        &format!(
            "ALTER SOURCE r SET (url = 'mysql://rot:x@127.0.0.1:{}')",
            port + 1
        ),
    )
    .await
    .unwrap_err();
    assert!(
        elsewhere.sqlstate().code().starts_with("08"),
        "{}: {elsewhere}",
        elsewhere.sqlstate().code()
    );

    // The new password: streaming goes on from the published position.
    exec(
        &engine,
        &format!("ALTER SOURCE r SET (password = '{new_password}')"),
    )
    .await
    .unwrap();
    sync_source(&engine, "r").await;
    let rows = query(
        &engine,
        &format!("SELECT id, v FROM r.{db}.t WHERE id >= 100 ORDER BY id"),
    )
    .await;
    assert_eq!(rows, ["id=100 v=7", "id=101 v=0"]);
    let changes = query(
        &engine,
        &format!("SELECT _op, id FROM r.{db}.\"t$changelog\" WHERE id >= 100 ORDER BY _position"),
    )
    .await;
    assert_eq!(changes.len(), 3, "each change once: {changes:?}");
    // The password is shown nowhere.
    let shown = query(&engine, "SELECT url FROM cdc.sources WHERE name = 'r'").await;
    assert_eq!(shown, [format!("url=mysql://rot:****@127.0.0.1:{port}")]);
    let listed = format!("{:?}", query(&engine, "SHOW SOURCES").await);
    assert!(!listed.contains("second"), "{listed}");
    engine.shutdown().await.unwrap();
    drop(engine);

    // A restart reads the catalog's new password.
    let engine = open().await;
    engine.wait_ready("r").await.unwrap();
    root.query_drop(format!("INSERT INTO {db}.t VALUES (102, 0)"))
        .await
        .unwrap();
    sync_source(&engine, "r").await;
    let n = query(
        &engine,
        &format!("SELECT count(*) AS n FROM r.{db}.t WHERE id >= 100"),
    )
    .await;
    assert_eq!(n, ["n=3"]);
    exec(&engine, "DROP SOURCE r").await.unwrap();
    root.query_drop("DROP USER 'rot'@'%', 'rot'@'localhost'")
        .await
        .unwrap();
}

/// A durable engine on `dir`, checkpointing every 200 ms.
async fn durable_engine(dir: &std::path::Path) -> Engine {
    let mut options = cdcfusion::engine::EngineOptions::default();
    options.durable.checkpoint_interval = Duration::from_millis(200);
    Engine::open(dir.to_str().unwrap(), options).await.unwrap()
}

/// The replica ids the server lists as registered (`SHOW SLAVE HOSTS`).
async fn registered_ids(root: &mut mysql_async::Conn) -> Vec<u32> {
    let rows: Vec<mysql_async::Row> = root.query("SHOW SLAVE HOSTS").await.unwrap();
    rows.iter()
        .filter_map(|r| r.get::<u32, _>("Server_id"))
        .collect()
}

/// Waits until the server lists replica id `want` and not `gone`; the ids it lists last.
async fn wait_registered(root: &mut mysql_async::Conn, want: u32, gone: u32) -> Vec<u32> {
    let mut ids = Vec::new();
    for _ in 0..200 {
        ids = registered_ids(root).await;
        if ids.contains(&want) && !ids.contains(&gone) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    ids
}

#[tokio::test]
async fn a_new_server_id_is_given_to_a_running_source_which_goes_on() {
    let _turn = TURN.lock().await;
    let db = "fail_server_id";
    table_db(db).await;
    let mut root = root_conn(server()).await;
    let state = tempfile::tempdir().unwrap();
    let open = || durable_engine(state.path());
    let engine = open().await;
    let (old_id, new_id) = (source_server_id(), source_server_id());
    let url = server().cdc_url();
    exec(
        &engine,
        &format!(
            "CREATE SOURCE si FROM MYSQL '{url}' WITH (tables = '{db}.*', server_id = {old_id})"
        ),
    )
    .await
    .unwrap();
    engine.wait_ready("si").await.unwrap();
    let ids = wait_registered(&mut root, old_id, new_id).await;
    assert!(ids.contains(&old_id) && !ids.contains(&new_id), "{ids:?}");
    exec(
        &engine,
        &format!("ALTER SOURCE si SET (server_id = {new_id})"),
    )
    .await
    .unwrap();
    root.query_drop(format!(
        "INSERT INTO {db}.t VALUES (100, 0); UPDATE {db}.t SET v = 7 WHERE id = 100"
    ))
    .await
    .unwrap();
    sync_source(&engine, "si").await;
    let ids = wait_registered(&mut root, new_id, old_id).await;
    assert!(ids.contains(&new_id) && !ids.contains(&old_id), "{ids:?}");
    let changes = query(
        &engine,
        &format!(
            "SELECT _op, id, v FROM si.{db}.\"t$changelog\" WHERE id >= 100 ORDER BY _position"
        ),
    )
    .await;
    assert_eq!(changes, ["_op=c id=100 v=0", "_op=u id=100 v=7"]);
    let shown = format!("{:?}", query(&engine, "SHOW SOURCES").await);
    assert!(shown.contains(&format!("server_id = {new_id}")), "{shown}");
    engine.shutdown().await.unwrap();
    drop(engine);
    // A restart registers with the catalog's new id.
    let engine = open().await;
    engine.wait_ready("si").await.unwrap();
    root.query_drop(format!("INSERT INTO {db}.t VALUES (101, 0)"))
        .await
        .unwrap();
    sync_source(&engine, "si").await;
    let ids = registered_ids(&mut root).await;
    assert!(ids.contains(&new_id) && !ids.contains(&old_id), "{ids:?}");
    exec(&engine, "DROP SOURCE si").await.unwrap();
}
