//! A source that follows its server's failover: a private MariaDB primary and a GTID replica
//! of it (`log_slave_updates`, strict GTID mode), the primary killed, the replica promoted, and
//! the source pointed at it with `ALTER SOURCE ... SET (url = ...)`. The oracles are the
//! servers: their rows, and the GTID positions they report.

mod common;

use std::time::Duration;

use cdcfusion::devserver::{DevServer, DevServerOptions};
use cdcfusion::engine::{Engine, EngineError, EngineOptions};
use cdcfusion::sqlstate::HasSqlState;
use common::*;
use mysql_async::prelude::Queryable;

const DB: &str = "fo";

fn gtid_server(server_id: u32) -> DevServer {
    DevServer::start(DevServerOptions {
        server_id,
        extra_args: vec!["--log-slave-updates".into(), "--gtid-strict-mode=1".into()],
        ..Default::default()
    })
    .unwrap_or_else(|e| panic!("cannot start a private MariaDB: {e}"))
}

async fn run(server: &DevServer, sql: &str) {
    root_conn(server)
        .await
        .query_drop(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

async fn exec(engine: &Engine, sql: &str) -> Result<(), EngineError> {
    engine.sql(sql).await?.collect().await?;
    Ok(())
}

async fn gtid_binlog_pos(server: &DevServer) -> String {
    root_conn(server)
        .await
        .query_first("SELECT @@GLOBAL.gtid_binlog_pos")
        .await
        .unwrap()
        .unwrap_or_default()
}

/// Waits until `replica` has applied everything `primary` has logged.
async fn caught_up(replica: &DevServer, primary: &DevServer) {
    let pos = gtid_binlog_pos(primary).await;
    let waited: Option<i64> = root_conn(replica)
        .await
        .query_first(format!("SELECT MASTER_GTID_WAIT('{pos}', 60)"))
        .await
        .unwrap();
    assert_eq!(waited, Some(0), "the replica never reached {pos}");
}

/// Waits until source `s` stands at `server`'s GTID position (the server's own report of
/// what it has logged), which is also the check of `cdc.sources.gtid_position`.
async fn synced(engine: &Engine, server: &DevServer) {
    let want = format!("gtid_position={}", gtid_binlog_pos(server).await);
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    loop {
        let rows = query(
            engine,
            "SELECT gtid_position, error FROM cdc.sources WHERE name = 's'",
        )
        .await;
        if rows.first().is_some_and(|r| r.starts_with(&want)) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the source never reached {want}: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Changes made, per changelog operation.
#[derive(Debug, Default, PartialEq, Eq, Clone, Copy)]
struct Made {
    inserts: u64,
    updates: u64,
    deletes: u64,
}

/// `n` single-row transactions from key `from` on: an insert each, an update of the row
/// before it and, every fifth, a delete of the row two before.
async fn write(server: &DevServer, from: u64, n: u64, made: &mut Made) {
    let mut conn = root_conn(server).await;
    for id in from..from + n {
        conn.query_drop(format!("INSERT INTO {DB}.t VALUES ({id}, 0)"))
            .await
            .unwrap();
        made.inserts += 1;
        conn.query_drop(format!("UPDATE {DB}.t SET v = v + 1 WHERE id = {}", id - 1))
            .await
            .unwrap();
        made.updates += conn.affected_rows();
        if id % 5 == 0 {
            conn.query_drop(format!("DELETE FROM {DB}.t WHERE id = {}", id - 2))
                .await
                .unwrap();
            made.deletes += conn.affected_rows();
        }
    }
}

/// The current table equals `server`'s rows, and the changelog holds exactly one entry per
/// change made (none lost, none twice).
async fn check(engine: &Engine, server: &DevServer, snapshot_rows: u64, made: Made) {
    let rows: Vec<(u64, i64)> = root_conn(server)
        .await
        .query(format!("SELECT id, v FROM {DB}.t ORDER BY id"))
        .await
        .unwrap();
    let expected: Vec<String> = rows
        .iter()
        .map(|(id, v)| format!("id={id} v={v}"))
        .collect();
    let current = query(engine, &format!("SELECT id, v FROM s.{DB}.t ORDER BY id")).await;
    assert_eq!(current, expected);
    let ops = query(
        engine,
        &format!("SELECT _op, count(*) AS n FROM s.{DB}.\"t$changelog\" GROUP BY _op ORDER BY _op"),
    )
    .await;
    let mut want = vec![
        format!("_op=c n={}", made.inserts),
        format!("_op=d n={}", made.deletes),
        format!("_op=r n={snapshot_rows}"),
        format!("_op=u n={}", made.updates),
    ];
    want.retain(|w| !w.ends_with(" n=0"));
    assert_eq!(ops, want);
    let positions = query(
        engine,
        &format!(
            "SELECT count(DISTINCT _position) AS n, count(*) AS all FROM s.{DB}.\"t$changelog\""
        ),
    )
    .await;
    let total = snapshot_rows + made.inserts + made.updates + made.deletes;
    assert_eq!(positions, [format!("n={total} all={total}")]);
}

/// A primary and a replica of it, the table `fo.t` of 20 rows on both.
async fn pair() -> (DevServer, DevServer) {
    let primary = gtid_server(1);
    let replica = gtid_server(2);
    // Both servers start alike (their users made at start-up): the replica forgets its own
    // binlog and replicates from the primary's position, as one provisioned from a copy.
    let start = gtid_binlog_pos(&primary).await;
    run(
        &replica,
        &format!(
            "RESET MASTER; SET GLOBAL gtid_slave_pos = '{start}';
             CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {}, \
             MASTER_USER = 'root', MASTER_USE_GTID = slave_pos; START SLAVE",
            primary.port()
        ),
    )
    .await;
    run(
        &primary,
        &format!(
            "CREATE DATABASE {DB}; CREATE TABLE {DB}.t (id BIGINT PRIMARY KEY, v INT);
             INSERT INTO {DB}.t SELECT seq, 0 FROM {DB}.seq_1_to_20"
        ),
    )
    .await;
    (primary, replica)
}

/// Source `s` on `engine`, capturing `fo.*` through `url` with `options` added, ready.
async fn create(engine: &Engine, url: &str, options: &str) {
    exec(
        engine,
        &format!(
            "CREATE SOURCE s FROM MYSQL '{url}' WITH (tables = '{DB}.*', server_id = {}{options})",
            source_server_id()
        ),
    )
    .await
    .unwrap();
    engine.wait_ready("s").await.unwrap();
}

/// The engine on `path` again, its source ready.
async fn reopen(path: &str) -> Engine {
    let engine = Engine::open(path, durable_options()).await.unwrap();
    engine.wait_ready("s").await.unwrap();
    engine
}

/// The source has moved from `from` to `to`: its servers are listed so, and its position is
/// of the second history.
async fn moved(engine: &Engine, from: &DevServer, to: &DevServer) {
    let servers = query(engine, "SELECT servers, position FROM cdc.sources").await;
    assert!(
        servers[0].starts_with(&format!(
            "servers=127.0.0.1:{} (server_id 1), 127.0.0.1:{} (server_id 2) position=~0001~",
            from.port(),
            to.port()
        )),
        "{servers:?}"
    );
}

fn durable_options() -> EngineOptions {
    let mut o = EngineOptions::default();
    o.durable.checkpoint_interval = Duration::from_millis(100);
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_follows_its_primary_to_a_promoted_replica() {
    let (mut primary, replica) = pair().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap().to_string();
    let engine = Engine::open(&path, durable_options()).await.unwrap();
    create(&engine, &primary.cdc_url(), "").await;
    let mut made = Made::default();
    write(&primary, 21, 30, &mut made).await;
    synced(&engine, &primary).await;

    // A replica that is behind is refused, naming what it lacks; the source goes on.
    caught_up(&replica, &primary).await;
    run(&replica, "STOP SLAVE").await;
    write(&primary, 51, 10, &mut made).await;
    synced(&engine, &primary).await;
    let behind = exec(
        &engine,
        &format!("ALTER SOURCE s SET (url = '{}')", replica.cdc_url()),
    )
    .await
    .unwrap_err();
    assert_eq!(behind.sqlstate().code(), "55000", "{behind}");
    let lacking = gtid_binlog_pos(&primary).await;
    let domain_seq = lacking.rsplit('-').next().unwrap().to_string();
    assert!(
        behind.to_string().contains(&format!("..{domain_seq}")),
        "{behind}"
    );
    check(&engine, &primary, 20, made).await;

    // The replica catches up; the primary dies; the replica is promoted.
    run(&replica, "START SLAVE").await;
    caught_up(&replica, &primary).await;
    primary.kill();
    run(&replica, "STOP SLAVE; RESET SLAVE ALL").await;
    exec(
        &engine,
        &format!("ALTER SOURCE s SET (url = '{}')", replica.cdc_url()),
    )
    .await
    .unwrap();
    // The engine dies before it read anything at the new server: its checkpoint's position
    // is the old server's, and the restart goes on at the new one by GTID again.
    drop(engine);
    let engine = reopen(&path).await;
    write(&replica, 61, 30, &mut made).await;
    synced(&engine, &replica).await;
    check(&engine, &replica, 20, made).await;
    moved(&engine, &primary, &replica).await;

    // The engine dies without a clean stop and comes back at the new primary.
    drop(engine);
    write(&replica, 91, 10, &mut made).await;
    let engine = reopen(&path).await;
    write(&replica, 101, 10, &mut made).await;
    synced(&engine, &replica).await;
    check(&engine, &replica, 20, made).await;
}

/// A source created with both servers in its URL moves to the promoted replica on its own
/// once the primary is gone, and a restart keeps it there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_with_two_servers_moves_on_its_own() {
    let (mut primary, replica) = pair().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap().to_string();
    let engine = Engine::open(&path, durable_options()).await.unwrap();
    let both = format!(
        "mysql://cdc:{}@127.0.0.1:{},127.0.0.1:{}",
        cdcfusion::devserver::CDC_PASSWORD,
        primary.port(),
        replica.port()
    );
    create(&engine, &both, ", read_timeout_seconds = 2").await;
    let mut made = Made::default();
    write(&primary, 21, 30, &mut made).await;
    synced(&engine, &primary).await;
    caught_up(&replica, &primary).await;
    primary.kill();
    run(&replica, "STOP SLAVE; RESET SLAVE ALL").await;
    write(&replica, 51, 30, &mut made).await;
    synced(&engine, &replica).await;
    check(&engine, &replica, 20, made).await;
    moved(&engine, &primary, &replica).await;
    drop(engine);
    let engine = reopen(&path).await;
    write(&replica, 81, 10, &mut made).await;
    synced(&engine, &replica).await;
    check(&engine, &replica, 20, made).await;
}

/// A server of another history (one that never replicated the source's server) whose GTID
/// position is past the source's passes the coverage check, but cannot send its binlog after
/// the source's GTIDs: the source stops with that reason instead of reading from elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_of_another_history_is_refused() {
    let (primary, _replica) = pair().await;
    let other = gtid_server(3);
    let engine = Engine::new();
    create(&engine, &primary.cdc_url(), "").await;
    let mut made = Made::default();
    write(&primary, 21, 5, &mut made).await;
    synced(&engine, &primary).await;
    // Its own transactions, more of them than the source's server logged.
    run(
        &other,
        &format!("CREATE DATABASE {DB}; CREATE TABLE {DB}.t (id BIGINT PRIMARY KEY, v INT)"),
    )
    .await;
    write(&other, 1, 60, &mut Made::default()).await;
    exec(
        &engine,
        &format!("ALTER SOURCE s SET (url = '{}')", other.cdc_url()),
    )
    .await
    .unwrap();
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    let stopped = loop {
        let rows = query(
            &engine,
            "SELECT state, error_sqlstate, error FROM cdc.sources WHERE name = 's'",
        )
        .await;
        if rows[0].starts_with("state=failed") {
            break rows[0].clone();
        }
        assert!(tokio::time::Instant::now() < deadline, "{rows:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        stopped.contains("error_sqlstate=55000") && stopped.contains("cannot go on after GTIDs"),
        "{stopped}"
    );
    // Nothing of the other server's history was taken: the source stands where it was.
    let at = query(&engine, "SELECT position, gtid_position FROM cdc.sources").await;
    assert_eq!(
        at,
        [format!(
            "position={} gtid_position={}",
            cdcfusion::source::connect::current_position(
                &mut root_conn(&primary).await,
                cdcfusion::change::schema::Flavor::MariaDb
            )
            .await
            .unwrap()
            .0,
            gtid_binlog_pos(&primary).await
        )]
    );
}

/// A failover behind an address that stays the same (a managed database's endpoint; here a
/// proxy sent to the promoted replica) is a move too: the server behind the address is
/// another one, and the source goes on there by GTID.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_behind_the_same_address_is_followed() {
    let (mut primary, replica) = pair().await;
    let endpoint = common::proxy::FaultProxy::start(primary.port()).await;
    let engine = Engine::new();
    let url = format!(
        "mysql://cdc:{}@127.0.0.1:{}?prefer_socket=false",
        cdcfusion::devserver::CDC_PASSWORD,
        endpoint.port()
    );
    create(&engine, &url, ", read_timeout_seconds = 2").await;
    let mut made = Made::default();
    write(&primary, 21, 20, &mut made).await;
    synced(&engine, &primary).await;
    caught_up(&replica, &primary).await;
    primary.kill();
    run(&replica, "STOP SLAVE; RESET SLAVE ALL").await;
    endpoint.set_upstream(replica.port());
    endpoint.reset_all();
    write(&replica, 41, 20, &mut made).await;
    synced(&engine, &replica).await;
    check(&engine, &replica, 20, made).await;
    let servers = query(&engine, "SELECT servers, position FROM cdc.sources").await;
    let at = format!("127.0.0.1:{}", endpoint.port());
    assert!(
        servers[0].starts_with(&format!(
            "servers={at} (server_id 1), {at} (server_id 2) position=~0001~"
        )),
        "{servers:?}"
    );
}
