//! Malformed protocol bytes, written by hand on a raw socket: each closes only its own
//! connection with a `FATAL` `08P01` error, and a client connected at the same time keeps
//! working.

use std::time::Duration;

use cdcfusion::config::AuthMethod;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::HANG_GUARD;
use crate::fixture::*;

const SETUP: &str = "CREATE TABLE {db}.t (id INT PRIMARY KEY);
     INSERT INTO {db}.t VALUES (1), (2);";

/// A protocol 3.0 start-up packet.
fn startup(user: &str, database: &str) -> Vec<u8> {
    let mut body = 196_608i32.to_be_bytes().to_vec();
    for (k, v) in [("user", user), ("database", database)] {
        body.extend_from_slice(k.as_bytes());
        body.push(0);
        body.extend_from_slice(v.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut packet = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    packet.extend_from_slice(&body);
    packet
}

/// A typed message whose length field says `length` (normally the body's length + 4).
fn message(kind: u8, length: i32, body: &[u8]) -> Vec<u8> {
    let mut out = vec![kind];
    out.extend_from_slice(&length.to_be_bytes());
    out.extend_from_slice(body);
    out
}

fn whole(kind: u8, body: &[u8]) -> Vec<u8> {
    message(kind, body.len() as i32 + 4, body)
}

/// Reads backend messages until the server closes the connection; returns their types and
/// the SQLSTATE of the last error.
async fn until_closed(socket: &mut TcpStream) -> (Vec<u8>, Option<String>) {
    let mut bytes = Vec::new();
    tokio::time::timeout(HANG_GUARD, socket.read_to_end(&mut bytes))
        .await
        .expect("the server never closed the connection")
        .ok();
    let (mut kinds, mut code) = (Vec::new(), None);
    let mut rest = &bytes[..];
    while rest.len() >= 5 {
        let length = i32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
        let (body, next) = rest[5..].split_at((length - 4).min(rest.len() - 5));
        kinds.push(rest[0]);
        if rest[0] == b'E' {
            code = body
                .split(|&b| b == 0)
                .find_map(|field| field.strip_prefix(b"C"))
                .map(|c| String::from_utf8_lossy(c).into_owned());
        }
        rest = next;
    }
    (kinds, code)
}

/// Connects, sends `bytes` and expects a `FATAL` `08P01` and the end of the connection.
async fn refused(f: &Fixture, what: &str, chunks: &[Vec<u8>]) {
    let mut socket = TcpStream::connect(f.addr).await.unwrap();
    for chunk in chunks {
        socket.write_all(chunk).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (kinds, code) = until_closed(&mut socket).await;
    assert_eq!(
        code.as_deref(),
        Some("08P01"),
        "{what}: got messages {kinds:?}"
    );
    assert_eq!(kinds.last(), Some(&b'E'), "{what}: {kinds:?}");
}

#[tokio::test]
async fn malformed_messages_close_only_their_connection() {
    let mut trusting = settings();
    trusting.auth = AuthMethod::Trust;
    let f = Fixture::start("pg_wire", "wire", SETUP, settings()).await;
    let trusted = Fixture::serve(
        std::sync::Arc::clone(&f.engine),
        "wire",
        "pg_wire",
        trusting,
    )
    .await;
    let bystander = f.client("wire").await;
    let login = startup(USER, "wire");

    // Before start-up: garbage, a length that is too short, an unknown protocol version.
    refused(
        &f,
        "an HTTP request",
        &[b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()],
    )
    .await;
    refused(
        &f,
        "a start-up packet of length 2",
        &[vec![0, 0, 0, 2, 0, 3, 0, 0]],
    )
    .await;
    let mut version_9 = 8i32.to_be_bytes().to_vec();
    version_9.extend_from_slice(&(9i32 << 16).to_be_bytes());
    refused(&f, "protocol 9.0", &[version_9]).await;
    let mut unterminated = startup(USER, "wire");
    unterminated.pop();
    let length = unterminated.len() as i32;
    unterminated[..4].copy_from_slice(&length.to_be_bytes());
    refused(&f, "unterminated start-up parameters", &[unterminated]).await;

    // During SCRAM: an empty password message (it used to panic the connection's task), a
    // SASL response whose data length overruns it, a password message shorter than its header.
    refused(
        &f,
        "an empty password message",
        &[login.clone(), whole(b'p', b"")],
    )
    .await;
    let mut overrun = b"SCRAM-SHA-256\0".to_vec();
    overrun.extend_from_slice(&1000i32.to_be_bytes());
    overrun.extend_from_slice(b"n,,n=x,r=abc");
    refused(
        &f,
        "an overrunning SASL length",
        &[login.clone(), whole(b'p', &overrun)],
    )
    .await;
    refused(
        &f,
        "a password length of 2",
        &[login.clone(), message(b'p', 2, b"")],
    )
    .await;

    // After start-up (trust, so the raw client gets that far).
    let ready = startup("anyone", "wire");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("an unknown message type", whole(b'Z', b"")),
        ("a negative length", message(b'Q', -5, b"SELECT 1\0")),
        ("a length below four", message(b'Q', 3, b"")),
        ("a query without its terminator", whole(b'Q', b"SELECT 1")),
        (
            "a query with bytes after it",
            whole(b'Q', b"SELECT 1\0SELECT 2\0"),
        ),
        ("a Parse whose type count overruns it", {
            let mut body = b"\0SELECT $1\0".to_vec();
            body.extend_from_slice(&5u16.to_be_bytes());
            whole(b'P', &body)
        }),
        ("a Bind whose value length overruns it", {
            let mut body = b"\0\0".to_vec();
            body.extend_from_slice(&0u16.to_be_bytes());
            body.extend_from_slice(&1u16.to_be_bytes());
            body.extend_from_slice(&1_000i32.to_be_bytes());
            whole(b'B', &body)
        }),
        ("a Sync with a body", whole(b'S', b"x")),
    ];
    for (what, bytes) in cases {
        refused(&trusted, what, &[ready.clone(), bytes]).await;
        // The client connected all along is unaffected.
        let row = bystander
            .query_one("SELECT count(*) FROM pg_wire.t", &[])
            .await
            .unwrap();
        assert_eq!(row.get::<_, i64>(0), 2, "after {what}");
    }
    // A message cut short by the end of the connection.
    let mut socket = TcpStream::connect(trusted.addr).await.unwrap();
    socket.write_all(&ready).await.unwrap();
    socket
        .write_all(&message(b'Q', 100, b"SELECT"))
        .await
        .unwrap();
    socket.shutdown().await.unwrap();
    let (kinds, code) = until_closed(&mut socket).await;
    assert_eq!(code.as_deref(), Some("08P01"), "truncated: {kinds:?}");

    // Both servers still accept new clients.
    let fresh = f.client("wire").await;
    fresh.simple_query("SELECT 1").await.unwrap();
    let fresh = trusted.client_as("anyone", "", "wire").await.unwrap();
    fresh.simple_query("SELECT 1").await.unwrap();
    trusted.shutdown().await;
    f.shutdown().await;
}
