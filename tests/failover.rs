//! A source that follows its server's failover: a private MariaDB primary and a GTID replica
//! of it (`log_slave_updates`, strict GTID mode), the primary killed, the replica promoted, and
//! the source pointed at it with `ALTER SOURCE ... SET (url = ...)`. The oracles are the
//! servers: their rows, and the GTID positions they report.

mod common;

use std::time::Duration;

use cdcfusion::devserver::{DevServer, DevServerOptions};
use cdcfusion::engine::{Engine, EngineError, EngineOptions};
use cdcfusion::source::connect::ConnectOptions;
use cdcfusion::sqlstate::HasSqlState;
use common::*;
use mysql_async::prelude::Queryable;

const DB: &str = "fo";

fn gtid_server(server_id: u32) -> DevServer {
    gtid_server_strict(server_id, true)
}

/// A server in strict GTID mode or not (which lets a replica log transactions of its own
/// among those it replicates: errant ones).
fn gtid_server_strict(server_id: u32, strict: bool) -> DevServer {
    DevServer::start(DevServerOptions {
        server_id,
        extra_args: vec![
            "--log-slave-updates".into(),
            format!("--gtid-strict-mode={}", u8::from(strict)),
        ],
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

/// The current table equals `server`'s rows.
async fn same_rows(engine: &Engine, server: &DevServer) {
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
}

/// The current table equals `server`'s rows, and the changelog holds exactly one entry per
/// change made (none lost, none twice).
async fn check(engine: &Engine, server: &DevServer, snapshot_rows: u64, made: Made) {
    same_rows(engine, server).await;
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
    replicated(gtid_server(1), gtid_server(2)).await
}

/// `replica` made a replica of `primary`, the table `fo.t` of 20 rows on both.
async fn replicated(primary: DevServer, replica: DevServer) -> (DevServer, DevServer) {
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

/// `ALTER SOURCE s SET (url = <to's URL>)`: the source moved to `to`, or why not.
async fn move_to(engine: &Engine, to: &DevServer) -> Result<(), EngineError> {
    exec(
        engine,
        &format!("ALTER SOURCE s SET (url = '{}')", to.cdc_url()),
    )
    .await
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

/// A durable engine in a fresh directory (kept while the first value lives), with its path.
async fn durable_engine() -> (tempfile::TempDir, String, Engine) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap().to_string();
    let engine = Engine::open(&path, durable_options()).await.unwrap();
    (dir, path, engine)
}

/// The replica catches up, the primary dies, the replica is promoted.
async fn promote(primary: &mut DevServer, replica: &DevServer) {
    caught_up(replica, primary).await;
    primary.kill();
    run(replica, "STOP SLAVE; RESET SLAVE ALL").await;
}

fn durable_options() -> EngineOptions {
    let mut o = EngineOptions::default();
    o.durable.checkpoint_interval = Duration::from_millis(100);
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_follows_its_primary_to_a_promoted_replica() {
    let (mut primary, replica) = pair().await;
    let (_dir, path, engine) = durable_engine().await;
    create(&engine, &primary.cdc_url(), "").await;
    let mut made = Made::default();
    write(&primary, 21, 30, &mut made).await;
    synced(&engine, &primary).await;

    // A replica that is behind is refused, naming what it lacks; the source goes on.
    caught_up(&replica, &primary).await;
    run(&replica, "STOP SLAVE").await;
    write(&primary, 51, 10, &mut made).await;
    synced(&engine, &primary).await;
    let behind = move_to(&engine, &replica).await.unwrap_err();
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
    promote(&mut primary, &replica).await;
    move_to(&engine, &replica).await.unwrap();
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
    let (_dir, path, engine) = durable_engine().await;
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
    promote(&mut primary, &replica).await;
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
    move_to(&engine, &other).await.unwrap();
    let stopped = failed(&engine).await;
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
    promote(&mut primary, &replica).await;
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

/// `server`'s rows of the table, by key.
async fn rows_of(server: &DevServer) -> std::collections::BTreeMap<u64, i64> {
    let rows: Vec<(u64, i64)> = root_conn(server)
        .await
        .query(format!("SELECT id, v FROM {DB}.t"))
        .await
        .unwrap();
    rows.into_iter().collect()
}

/// Waits until source `s` has failed; its state, SQLSTATE and error.
async fn failed(engine: &Engine) -> String {
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    loop {
        let rows = query(
            engine,
            "SELECT state, error_sqlstate, error FROM cdc.sources WHERE name = 's'",
        )
        .await;
        if rows[0].starts_with("state=failed") {
            return rows[0].clone();
        }
        assert!(tokio::time::Instant::now() < deadline, "{rows:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The current table equals `server`'s rows but the row of key `errant`, which the source
/// never read.
async fn all_but(engine: &Engine, server: &DevServer, errant: u64) {
    let mut want = rows_of(server).await;
    assert!(
        want.remove(&errant).is_some(),
        "{errant} is not on the server"
    );
    let current = query(engine, &format!("SELECT id, v FROM s.{DB}.t ORDER BY id")).await;
    let want: Vec<String> = want
        .iter()
        .map(|(id, v)| format!("id={id} v={v}"))
        .collect();
    assert_eq!(current, want);
}

/// A replica of `primary` that logs a transaction of its own (key 1000) below the position
/// the source on `engine` reaches with more writes to `primary`: its errant GTID.
async fn errant_replica(engine: &Engine, primary: &DevServer, replica: &DevServer) -> String {
    let mut made = Made::default();
    write(primary, 21, 5, &mut made).await;
    caught_up(replica, primary).await;
    run(replica, &format!("INSERT INTO {DB}.t VALUES (1000, 7)")).await;
    let errant = gtid_binlog_pos(replica).await;
    write(primary, 26, 10, &mut made).await;
    synced(engine, primary).await;
    errant
}

/// `accept` (a move that accepts the errant transaction of [`errant_replica`]) is taken, and
/// the source goes on at `replica` without that transaction's row.
async fn goes_on_without_errant(engine: &Engine, accept: &str, replica: &DevServer) {
    exec(engine, accept).await.unwrap();
    write(replica, 36, 10, &mut Made::default()).await;
    synced(engine, replica).await;
    all_but(engine, replica, 1000).await;
}

/// How many changelog entries the source's table has.
async fn entries(engine: &Engine) -> Vec<String> {
    query(
        engine,
        &format!("SELECT count(*) AS n FROM s.{DB}.\"t$changelog\""),
    )
    .await
}

/// The newest changelog entry of each key gives the current table, and no two entries share
/// a position.
async fn replays(engine: &Engine) {
    let replayed = query(
        engine,
        &format!(
            "SELECT id, v FROM (SELECT id, v, _op, row_number() OVER (PARTITION BY id ORDER BY \
             _position DESC) AS n FROM s.{DB}.\"t$changelog\") WHERE n = 1 AND _op <> 'd' \
             ORDER BY id"
        ),
    )
    .await;
    let current = query(engine, &format!("SELECT id, v FROM s.{DB}.t ORDER BY id")).await;
    assert_eq!(replayed, current);
    // Re-snapshot entries included, every entry has a position of its own.
    let dup = query(
        engine,
        &format!("SELECT count(*) - count(DISTINCT _position) AS dup FROM s.{DB}.\"t$changelog\""),
    )
    .await;
    assert_eq!(dup, ["dup=0"]);
}

/// A move that names where it goes on: a position of the new server (needed where no GTIDs
/// carry one across; here the promoted replica's end, which holds everything the source
/// applied). The source stands there at once, in the new server's history, and an engine
/// that dies before it read anything there goes on at it after the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_goes_on_at_a_named_position_of_the_new_server() {
    let (mut primary, replica) = pair().await;
    let (_dir, path, engine) = durable_engine().await;
    create(&engine, &primary.cdc_url(), "").await;
    let mut made = Made::default();
    write(&primary, 21, 20, &mut made).await;
    synced(&engine, &primary).await;
    promote(&mut primary, &replica).await;
    let (end, _) = cdcfusion::source::connect::current_position(
        &mut root_conn(&replica).await,
        cdcfusion::change::schema::Flavor::MariaDb,
    )
    .await
    .unwrap();
    let alter = |start: &str| {
        format!(
            "ALTER SOURCE s SET (url = '{}', start_position = '{start}')",
            replica.cdc_url()
        )
    };
    // A file the server does not have, an offset past the end of one it has.
    for (start, names) in [
        (
            "nosuch-bin.000009:4".to_string(),
            "nosuch-bin.000009".to_string(),
        ),
        (
            format!("{}:{}", end.file, end.offset + 1_000_000),
            "past its end".into(),
        ),
    ] {
        let refused = exec(&engine, &alter(&start)).await.unwrap_err();
        assert_eq!(refused.sqlstate().code(), "55000", "{refused}");
        assert!(refused.to_string().contains(&names), "{refused}");
    }
    exec(&engine, &alter(&end.to_string())).await.unwrap();
    assert_eq!(
        query(&engine, "SELECT position FROM cdc.sources").await,
        [format!("position=~0001~{end}")]
    );
    // Named on the server the source reads already: refused.
    let again = exec(&engine, &alter("current")).await.unwrap_err();
    assert_eq!(again.sqlstate().code(), "55000", "{again}");
    assert!(
        again.to_string().contains("reads that server already"),
        "{again}"
    );
    // The engine dies before it read anything at the new server.
    drop(engine);
    let engine = reopen(&path).await;
    write(&replica, 41, 20, &mut made).await;
    synced(&engine, &replica).await;
    check(&engine, &replica, 20, made).await;
    moved(&engine, &primary, &replica).await;
}

/// A replica that is behind the source cannot take it over by GTID, but can by reading every
/// table there again: the source then holds the replica's rows, its changelog getting only the
/// differences (the transactions the replica never applied are undone), and goes on there,
/// across a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_is_behind_is_taken_by_a_new_snapshot() {
    let (primary, replica) = pair().await;
    let (_dir, path, engine) = durable_engine().await;
    create(&engine, &primary.cdc_url(), "").await;
    write(&primary, 21, 20, &mut Made::default()).await;
    caught_up(&replica, &primary).await;
    run(&replica, "STOP SLAVE; RESET SLAVE ALL").await;
    write(&primary, 41, 10, &mut Made::default()).await;
    synced(&engine, &primary).await;
    let to_replica = format!("ALTER SOURCE s SET (url = '{}')", replica.cdc_url());
    let behind = exec(&engine, &to_replica).await.unwrap_err();
    assert_eq!(behind.sqlstate().code(), "55000", "{behind}");
    let before = entries(&engine).await;
    exec(&engine, &format!("{to_replica} RESNAPSHOT"))
        .await
        .unwrap();
    engine.wait_ready("s").await.unwrap();
    synced(&engine, &replica).await;
    same_rows(&engine, &replica).await;
    replays(&engine).await;
    // The entries added are the differences between the two servers' rows, no more.
    let (old, new) = (rows_of(&primary).await, rows_of(&replica).await);
    let mut want: Vec<String> = old
        .iter()
        .filter(|(id, v)| new.get(*id) != Some(*v))
        .map(|(id, _)| match new.get(id) {
            Some(v) => format!("_op=u id={id} v={v}"),
            None => format!("_op=d id={id}"),
        })
        .chain(
            new.iter()
                .filter(|(id, _)| !old.contains_key(*id))
                .map(|(id, v)| format!("_op=c id={id} v={v}")),
        )
        .collect();
    want.sort();
    let mut added = query(
        &engine,
        &format!(
            "SELECT _op, id, CASE WHEN _op = 'd' THEN NULL ELSE v END AS v \
             FROM s.{DB}.\"t$changelog\" WHERE _position > '~0001~'"
        ),
    )
    .await;
    added.sort();
    let added: Vec<String> = added
        .into_iter()
        .map(|r| r.trim_end_matches(" v=NULL").to_string())
        .collect();
    assert_eq!(added, want);
    assert!(!want.is_empty() && entries(&engine).await != before);
    moved(&engine, &primary, &replica).await;
    write(&replica, 51, 10, &mut Made::default()).await;
    synced(&engine, &replica).await;
    same_rows(&engine, &replica).await;
    drop(engine);
    write(&replica, 61, 10, &mut Made::default()).await;
    let engine = reopen(&path).await;
    synced(&engine, &replica).await;
    same_rows(&engine, &replica).await;
    replays(&engine).await;
}

/// A replica that logged a transaction of its own below the source's position (errant: the
/// primary never had it; non-strict GTID mode lets it replicate on) is refused, naming that
/// GTID, since going on after the source's GTIDs would leave its change out; accepted, the
/// source goes on there without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_with_errant_transactions_is_refused_unless_accepted() {
    let (mut primary, replica) = replicated(gtid_server(1), gtid_server_strict(2, false)).await;
    let engine = Engine::new();
    create(&engine, &primary.cdc_url(), "").await;
    let errant = errant_replica(&engine, &primary, &replica).await;
    promote(&mut primary, &replica).await;
    let to_replica = format!("ALTER SOURCE s SET (url = '{}'", replica.cdc_url());
    let refused = exec(&engine, &format!("{to_replica})")).await.unwrap_err();
    assert_eq!(refused.sqlstate().code(), "55000", "{refused}");
    assert!(
        refused
            .to_string()
            .contains(&format!("errant GTIDs {errant}")),
        "{errant}: {refused}"
    );
    goes_on_without_errant(
        &engine,
        &format!("{to_replica}, accept_errant_gtids = true)"),
        &replica,
    )
    .await;
}

/// Behind an address that stays the same, no statement names the new server: the source finds
/// the errant transaction itself when it goes on there, and stops naming it; accepted with the
/// same address, it goes on, also after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_errant_replica_behind_the_same_address_stops_the_source_until_accepted() {
    let (mut primary, replica) = replicated(gtid_server(1), gtid_server_strict(2, false)).await;
    let endpoint = common::proxy::FaultProxy::start(primary.port()).await;
    let (_dir, path, engine) = durable_engine().await;
    let url = format!(
        "mysql://cdc:{}@127.0.0.1:{}?prefer_socket=false",
        cdcfusion::devserver::CDC_PASSWORD,
        endpoint.port()
    );
    create(&engine, &url, ", read_timeout_seconds = 2").await;
    let errant = errant_replica(&engine, &primary, &replica).await;
    promote(&mut primary, &replica).await;
    endpoint.set_upstream(replica.port());
    endpoint.reset_all();
    let stopped = failed(&engine).await;
    assert!(
        stopped.contains("error_sqlstate=55000")
            && stopped.contains(&format!("errant GTIDs {errant}")),
        "{stopped}"
    );
    let accept = format!("ALTER SOURCE s SET (url = '{url}', accept_errant_gtids = true)");
    goes_on_without_errant(&engine, &accept, &replica).await;
    drop(engine);
    write(&replica, 46, 10, &mut Made::default()).await;
    let engine = reopen(&path).await;
    synced(&engine, &replica).await;
    all_but(&engine, &replica, 1000).await;
}

/// The GTIDs executed at a file position, as a MySQL source reads them (its file's starting
/// set and the transactions before the position, listed by the server), equal what MariaDB's
/// own `BINLOG_GTID_POS` says at every transaction boundary of a binlog with two domains.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gtids_at_a_file_position_are_the_servers_own() {
    let (primary, _replica) = pair().await;
    write(&primary, 21, 5, &mut Made::default()).await;
    run(
        &primary,
        &format!("SET SESSION gtid_domain_id = 7; INSERT INTO {DB}.t VALUES (500, 1)"),
    )
    .await;
    run(&primary, "FLUSH BINARY LOGS").await;
    write(&primary, 26, 5, &mut Made::default()).await;
    let mut conn = root_conn(&primary).await;
    let connect = ConnectOptions::from_url(&primary.root_url()).unwrap();
    let files: Vec<(String, u64)> = conn.query("SHOW BINARY LOGS").await.unwrap();
    let mut checked = 0;
    for (file, _) in &files {
        let events: Vec<(String, u64, String, u32, u64, String)> = conn
            .query(format!("SHOW BINLOG EVENTS IN '{file}'"))
            .await
            .unwrap();
        for (_, pos, kind, _, _, _) in events.iter().filter(|e| e.2 == "Gtid") {
            let at = cdcfusion::change::position::BinlogCoord::new(file.as_str(), *pos);
            let ours = cdcfusion::source::binlog::files::executed_at(
                &mut conn,
                &connect,
                cdcfusion::change::schema::Flavor::MariaDb,
                &at,
            )
            .await
            .unwrap();
            let server: Option<String> = conn
                .exec_first("SELECT BINLOG_GTID_POS(?, ?)", (file.as_str(), *pos))
                .await
                .unwrap();
            let server: cdcfusion::change::position::GtidSet =
                server.unwrap_or_default().parse().unwrap();
            assert_eq!(ours, server, "{kind} at {at}");
            checked += 1;
        }
    }
    assert!(
        checked > 10 && files.len() > 1,
        "{checked} positions in {files:?}"
    );
}

/// Transactions the primary logged under another server id after the source started there
/// (not the last of their domain, so the source's own position does not name that id) are the
/// old history's, not errant: the source learns the primary's binlog state as it runs (each
/// poll of the server), so the promoted replica that holds them is taken without being told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_of_another_server_id_logged_while_running_are_not_errant() {
    let (mut primary, replica) = pair().await;
    let engine = Engine::new();
    create(&engine, &primary.cdc_url(), "").await;
    run(
        &primary,
        &format!("SET SESSION server_id = 5; INSERT INTO {DB}.t VALUES (500, 1)"),
    )
    .await;
    let mut made = Made::default();
    write(&primary, 21, 5, &mut made).await;
    synced(&engine, &primary).await;
    // A few polls of the server (one a second) read its binlog state meanwhile.
    tokio::time::sleep(Duration::from_secs(3)).await;
    promote(&mut primary, &replica).await;
    move_to(&engine, &replica).await.unwrap();
    write(&replica, 26, 5, &mut made).await;
    synced(&engine, &replica).await;
    same_rows(&engine, &replica).await;
}
