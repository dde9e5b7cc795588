//! Fuzzed inputs at the front door: mutated protocol messages on raw sockets, and mutated SQL
//! statements over the catalogs. Every input ends with an answer or a clean error (a SQLSTATE;
//! for bytes that cannot be read, the connection closed with `FATAL`), never a hang or a
//! crash, and a client connected all along keeps being served.
//!
//! Each part runs [`INPUTS`] inputs with a fixed seed (`FUZZ_SEED`, `FUZZ_INPUTS` run others).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use cdcfusion::config::AuthMethod;

use crate::common::HANG_GUARD;
use crate::fixture::*;

const SETUP: &str =
    "CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(10), d DECIMAL(8,2), ts DATETIME(3));
     INSERT INTO {db}.t VALUES (1, 'a', 1.50, '2024-01-01 00:00:00.001'), (2, NULL, -3, NULL);";

const INPUTS: usize = 10_000;

fn seed_and_budget() -> (u64, usize) {
    let seed = std::env::var("FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0xf0f0);
    let budget = std::env::var("FUZZ_INPUTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(INPUTS);
    (seed, budget)
}

fn message(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![kind];
    out.extend_from_slice(&(body.len() as i32 + 4).to_be_bytes());
    out.extend_from_slice(body);
    out
}

fn cstr(s: &str) -> Vec<u8> {
    let mut out = s.as_bytes().to_vec();
    out.push(0);
    out
}

fn startup(user: &str, database: &str) -> Vec<u8> {
    let mut body = 196_608i32.to_be_bytes().to_vec();
    for (k, v) in [("user", user), ("database", database)] {
        body.extend(cstr(k));
        body.extend(cstr(v));
    }
    body.push(0);
    let mut packet = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    packet.extend_from_slice(&body);
    packet
}

/// Valid message sequences a client sends after logging in, each ending the way clients end
/// them (`Sync` for the extended protocol).
fn seeds(db: &str) -> Vec<Vec<Vec<u8>>> {
    let select = format!("SELECT id, v, d, ts FROM {db}.t WHERE id = $1");
    let mut parse = cstr("s1");
    parse.extend(cstr(&select));
    parse.extend(1i16.to_be_bytes());
    parse.extend(23i32.to_be_bytes());
    let mut bind = cstr("p1");
    bind.extend(cstr("s1"));
    bind.extend(1i16.to_be_bytes()); // parameter formats
    bind.extend(1i16.to_be_bytes()); // binary
    bind.extend(1i16.to_be_bytes()); // parameters
    bind.extend(4i32.to_be_bytes());
    bind.extend(1i32.to_be_bytes());
    bind.extend(1i16.to_be_bytes()); // result formats
    bind.extend(1i16.to_be_bytes());
    let mut describe = vec![b'P'];
    describe.extend(cstr("p1"));
    let mut execute = cstr("p1");
    execute.extend(0i32.to_be_bytes());
    let mut close = vec![b'S'];
    close.extend(cstr("s1"));
    vec![
        vec![message(
            b'Q',
            &cstr(&format!("SELECT * FROM {db}.t ORDER BY id")),
        )],
        vec![message(
            b'Q',
            &cstr("SELECT 1; SHOW TimeZone; SELECT name FROM cdc.sources"),
        )],
        vec![message(
            b'Q',
            &cstr(&format!("COPY (SELECT * FROM {db}.t) TO STDOUT")),
        )],
        vec![
            message(b'P', &parse),
            message(b'B', &bind),
            message(b'D', &describe),
            message(b'E', &execute),
            message(b'C', &close),
            message(b'S', b""),
        ],
        vec![
            message(b'P', &parse),
            message(b'H', b""),
            message(b'S', b""),
        ],
        vec![
            message(b'd', b"1\tx\n"),
            message(b'c', b""),
            message(b'f', &cstr("no")),
        ],
        vec![message(b'X', b"")],
    ]
}

/// `messages` with one of them mutated: bits flipped, bytes set to edge values, its length
/// field changed, its type byte changed, cut short, or random bytes added.
fn mutate(mut messages: Vec<Vec<u8>>, rng: &mut StdRng) -> (Vec<u8>, &'static str) {
    let i = rng.random_range(0..messages.len());
    let m = &mut messages[i];
    let what = match rng.random_range(0..7) {
        0 => {
            for _ in 0..rng.random_range(1..=3) {
                let at = rng.random_range(0..m.len());
                m[at] ^= 1 << rng.random_range(0..8);
            }
            "bits flipped"
        }
        1 => {
            const EDGES: [u8; 5] = [0x00, 0xff, 0x80, 0x7f, 0x01];
            for _ in 0..rng.random_range(1..=3) {
                let at = rng.random_range(0..m.len());
                m[at] = EDGES[rng.random_range(0..EDGES.len())];
            }
            "edge bytes"
        }
        2 => {
            const LENGTHS: [i32; 7] = [0, 3, 4, 5, -1, i32::MAX, 1 << 20];
            let length = match rng.random_range(0..2) {
                0 => LENGTHS[rng.random_range(0..LENGTHS.len())],
                _ => i32::from_be_bytes([m[1], m[2], m[3], m[4]]) + rng.random_range(-8..8),
            };
            m[1..5].copy_from_slice(&length.to_be_bytes());
            "length changed"
        }
        3 => {
            m[0] = rng.random();
            "type changed"
        }
        4 if m.len() > 5 => {
            let keep = rng.random_range(5..m.len());
            m.truncate(keep);
            "cut short"
        }
        _ => {
            let at = rng.random_range(0..=m.len());
            let extra: Vec<u8> = (0..rng.random_range(1..32)).map(|_| rng.random()).collect();
            m.splice(at..at, extra);
            "bytes added"
        }
    };
    (messages.concat(), what)
}

/// The backend messages of `bytes`: (type, SQLSTATE of an error).
fn backend_messages(bytes: &[u8]) -> Vec<(u8, Option<String>)> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while rest.len() >= 5 {
        let length = i32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]).max(4) as usize;
        let (body, next) = rest[5..].split_at((length - 4).min(rest.len() - 5));
        let code = (rest[0] == b'E').then(|| {
            body.split(|&b| b == 0)
                .find_map(|field| field.strip_prefix(b"C"))
                .map(|c| String::from_utf8_lossy(c).into_owned())
                .unwrap_or_default()
        });
        out.push((rest[0], code));
        rest = next;
    }
    out
}

#[tokio::test]
async fn mutated_protocol_messages_end_cleanly() {
    let (seed, budget) = seed_and_budget();
    let mut trusting = settings();
    trusting.auth = AuthMethod::Trust;
    trusting.statement_timeout = Some(std::time::Duration::from_secs(5));
    let f = Fixture::start("pg_fuzz_wire", "fw", SETUP, trusting).await;
    let bystander = f.client("fw").await;
    let login = startup(USER, "fw");
    let seeds = seeds("pg_fuzz_wire");
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut answered, mut closed_fatal) = (0, 0);
    for n in 0..budget {
        let sequence = seeds[rng.random_range(0..seeds.len())].clone();
        let (input, what) = mutate(sequence, &mut rng);
        if std::env::var("FUZZ_TRACE").is_ok() {
            eprintln!("input {n} ({what}): {input:02x?}");
        }
        let mut socket = TcpStream::connect(f.addr).await.unwrap();
        socket.write_all(&login).await.unwrap();
        // The server may close the connection before reading everything: a failed write is
        // part of the answer.
        let _ = socket.write_all(&input).await;
        let _ = socket.shutdown().await;
        let mut bytes = Vec::new();
        tokio::time::timeout(HANG_GUARD, socket.read_to_end(&mut bytes))
            .await
            .unwrap_or_else(|_| panic!("input {n} ({what}, seed {seed}) hangs: {input:02x?}"))
            .ok();
        let messages = backend_messages(&bytes);
        assert!(
            messages.iter().any(|(kind, _)| *kind == b'R'),
            "input {n} ({what}): the login got no answer: {messages:?}"
        );
        for (kind, code) in &messages {
            if *kind == b'E' {
                let code = code.as_deref().unwrap_or_default();
                assert!(
                    code.len() == 5 && code != "XX000",
                    "input {n} ({what}, seed {seed}): error without a proper SQLSTATE ({code:?}): {input:02x?}"
                );
            }
        }
        match messages.last() {
            Some((b'E', _)) => closed_fatal += 1,
            _ => answered += 1,
        }
        if n % 1000 == 999 {
            let row = bystander
                .query_one("SELECT count(*) FROM pg_fuzz_wire.t", &[])
                .await
                .unwrap_or_else(|e| panic!("after {} inputs: {e}", n + 1));
            assert_eq!(row.get::<_, i64>(0), 2);
        }
    }
    println!(
        "{budget} inputs (seed {seed}): {answered} answered, {closed_fatal} ended by an error"
    );
    assert!(answered > 0 && closed_fatal > 0);
    // New connections are still served.
    let client = f.client("fw").await;
    client.simple_query("SELECT 1").await.unwrap();
}

/// Tokens statements are built and mutated from.
const WORDS: &[&str] = &[
    "SELECT",
    "FROM",
    "WHERE",
    "GROUP",
    "BY",
    "ORDER",
    "HAVING",
    "LIMIT",
    "OFFSET",
    "UNION",
    "ALL",
    "JOIN",
    "LEFT",
    "ON",
    "AS",
    "AND",
    "OR",
    "NOT",
    "NULL",
    "IS",
    "IN",
    "BETWEEN",
    "LIKE",
    "CASE",
    "WHEN",
    "THEN",
    "ELSE",
    "END",
    "CAST",
    "WITH",
    "DISTINCT",
    "EXISTS",
    "VALUES",
    "count(*)",
    "sum(id)",
    "avg(d)",
    "max(v)",
    "min(ts)",
    "array_agg(v)",
    "string_agg(v, ',')",
    "length(v)",
    "upper(v)",
    "substr(v, 2, 1)",
    "coalesce(v, 'x')",
    "now()",
    "random()",
    "id",
    "v",
    "d",
    "ts",
    "*",
    "t",
    "pg_fuzz_sql.t",
    "fs.pg_fuzz_sql.t",
    "fs.pg_fuzz_sql.\"t$changelog\"",
    "_op",
    "_position",
    "cdc.sources",
    "cdc.tables",
    "pg_catalog.pg_class",
    "information_schema.columns",
    "relname",
    "column_name",
    "(",
    ")",
    ",",
    ";",
    "=",
    "<>",
    "<",
    ">=",
    "+",
    "-",
    "*",
    "/",
    "%",
    "||",
    "::",
    "text",
    "int",
    "numeric(5,1)",
    "date",
    "timestamptz",
    "1",
    "0",
    "-1",
    "2.5",
    "1e308",
    "9223372036854775807",
    "'a'",
    "''",
    "'2024-02-30'",
    "'{1,2}'",
    "$1",
    "TRUE",
    "FALSE",
    "INTERVAL '1 day'",
];

/// Statements that work, as starting points.
const STATEMENTS: &[&str] = &[
    "SELECT id, v FROM pg_fuzz_sql.t WHERE id = 1",
    "SELECT count(*), sum(d) FROM pg_fuzz_sql.t GROUP BY v HAVING count(*) > 0 ORDER BY 1",
    "SELECT a.id, b.v FROM pg_fuzz_sql.t a JOIN pg_fuzz_sql.t b ON a.id = b.id ORDER BY a.id LIMIT 5",
    "SELECT _op, _position, id FROM fs.pg_fuzz_sql.\"t$changelog\" ORDER BY _position",
    "SELECT name, phase, lag_seconds FROM cdc.sources",
    "SELECT relname FROM pg_catalog.pg_class WHERE relkind = 'r' ORDER BY relname",
    "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 't'",
    "WITH x AS (SELECT id, d * 2 AS dd FROM pg_fuzz_sql.t) SELECT * FROM x WHERE dd > 0",
    "SELECT CASE WHEN v IS NULL THEN 'none' ELSE upper(v) END, CAST(d AS text) FROM pg_fuzz_sql.t",
    "SELECT id FROM pg_fuzz_sql.t UNION ALL SELECT 3 ORDER BY 1",
    "SELECT ts::date, d::numeric(5,1), v || '!' FROM pg_fuzz_sql.t WHERE v LIKE 'a%'",
    "EXPLAIN SELECT * FROM pg_fuzz_sql.t WHERE id IN (1, 2)",
    "SHOW TimeZone",
    "SET application_name = 'fuzz'",
    "SHOW SOURCES",
    "SELECT string_agg(v, ',') FROM pg_fuzz_sql.t",
    "VALUES (1, 'a'), (2, 'b')",
];

/// A statement: a working one with token edits, or words at random.
fn statement(rng: &mut StdRng) -> String {
    let mut tokens: Vec<String> = if rng.random_range(0..10) == 0 {
        (0..rng.random_range(1..12))
            .map(|_| WORDS[rng.random_range(0..WORDS.len())].to_string())
            .collect()
    } else {
        STATEMENTS[rng.random_range(0..STATEMENTS.len())]
            .split(' ')
            .map(str::to_string)
            .collect()
    };
    // A quarter run as written, so the inputs also reach planning and execution.
    for _ in 0..rng.random_range(0..=3) {
        let word = WORDS[rng.random_range(0..WORDS.len())].to_string();
        let at = rng.random_range(0..tokens.len().max(1));
        match rng.random_range(0..4) {
            0 if !tokens.is_empty() => {
                tokens.remove(at);
            }
            1 if !tokens.is_empty() => tokens[at] = word,
            2 if !tokens.is_empty() => {
                let copy = tokens[at].clone();
                tokens.insert(at, copy);
            }
            _ => tokens.insert(at.min(tokens.len()), word),
        }
    }
    tokens.join(" ")
}

#[tokio::test]
async fn mutated_statements_answer_or_fail_with_a_sqlstate() {
    let (seed, budget) = seed_and_budget();
    let mut settings = settings();
    settings.statement_timeout = Some(std::time::Duration::from_secs(5));
    let f = Fixture::start("pg_fuzz_sql", "fs", SETUP, settings).await;
    let client = f.client("fs").await;
    let bystander = f.client("fs").await;
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut answered, mut refused) = (0, 0);
    for n in 0..budget {
        let sql = statement(&mut rng);
        let result = tokio::time::timeout(HANG_GUARD, client.simple_query(&sql))
            .await
            .unwrap_or_else(|_| panic!("statement {n} hangs (seed {seed}): {sql}"));
        match result {
            Ok(_) => answered += 1,
            Err(e) => {
                let code = e.code().map(|c| c.code().to_string()).unwrap_or_else(|| {
                    panic!("statement {n} (seed {seed}) broke the connection: {sql}: {e:?}")
                });
                assert!(
                    code != "XX000",
                    "statement {n} (seed {seed}) failed as an internal error: {sql}: {e:?}"
                );
                refused += 1;
            }
        }
        if n % 1000 == 999 {
            let row = bystander
                .query_one("SELECT count(*) FROM pg_fuzz_sql.t", &[])
                .await
                .unwrap();
            assert_eq!(row.get::<_, i64>(0), 2);
        }
    }
    println!("{budget} statements (seed {seed}): {answered} answered, {refused} refused");
    assert!(answered > 0 && refused > 0);
}
