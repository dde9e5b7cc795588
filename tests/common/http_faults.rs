//! An HTTP proxy in front of an S3-compatible server that injects faults request by request:
//! requests of one method whose path contains a given text are answered with an HTTP error
//! (503 SlowDown, as S3 answers under load), or held unanswered until the test lets them go
//! or drops them. Every other request passes through unchanged. This is how a test puts a
//! fault between two steps of one commit: a Delta commit first puts its data files, then its
//! log entry under `_delta_log/`, so failing or holding only the latter lands right between
//! them.
//!
//! Requests are read with their `Content-Length` body (the S3 clients under test never send
//! chunked bodies); each one passed through goes to the server on a connection of its own,
//! closed after the answer, which is then relayed whole.
#![allow(dead_code)] // Not every test binary injects HTTP faults.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

/// What happens to a request that matches the armed rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Answered `503 Slow Down` without reaching the server.
    Fail,
    /// Held unanswered until [`HttpFaults::release`] (then passed on) or
    /// [`HttpFaults::drop_held`] (then the connection closes, nothing reaches the server).
    Hold,
}

#[derive(Debug)]
struct Rule {
    fault: Fault,
    method: String,
    path_contains: String,
}

#[derive(Debug, Default)]
struct State {
    rule: Mutex<Option<Rule>>,
    /// What each `release` (false) or `drop_held` (true) decided, in order: a held request
    /// waits for the first decision after it was held (a later `arm` cannot undo it).
    decisions: Mutex<Vec<bool>>,
    held: AtomicU64,
    faulted: AtomicU64,
    /// Paths of the `PUT`s that reached the server, in order.
    puts: Mutex<Vec<String>>,
    connections: Mutex<Vec<AbortHandle>>,
}

/// See the module docs; dropping it stops the proxy and its connections.
#[derive(Debug)]
pub struct HttpFaults {
    port: u16,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for HttpFaults {
    fn drop(&mut self) {
        self.task.abort();
        for handle in self.state.connections.lock().unwrap().drain(..) {
            handle.abort();
        }
    }
}

/// One request read off a client connection.
struct Request {
    method: String,
    path: String,
    /// The head as sent, without its final blank line.
    head: String,
    body: Vec<u8>,
}

impl HttpFaults {
    /// Proxies a free port on 127.0.0.1 to the HTTP server on `127.0.0.1:upstream`.
    pub async fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(State::default());
        let shared = Arc::clone(&state);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let state = Arc::clone(&shared);
                let handle = tokio::spawn(serve(client, upstream, state));
                let mut open = shared.connections.lock().unwrap();
                open.retain(|h| !h.is_finished());
                open.push(handle.abort_handle());
            }
        });
        Self { port, state, task }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// From now on, `method` requests whose path contains `path_contains` meet `fault`.
    pub fn arm(&self, fault: Fault, method: &str, path_contains: &str) {
        *self.state.rule.lock().unwrap() = Some(Rule {
            fault,
            method: method.to_string(),
            path_contains: path_contains.to_string(),
        });
    }

    /// Disarms the rule; held requests go on to the server.
    pub fn release(&self) {
        *self.state.rule.lock().unwrap() = None;
        self.state.decisions.lock().unwrap().push(false);
    }

    /// Disarms the rule; held requests never reach the server (their connections close).
    pub fn drop_held(&self) {
        *self.state.rule.lock().unwrap() = None;
        self.state.decisions.lock().unwrap().push(true);
    }

    /// Requests held right now.
    pub fn held(&self) -> u64 {
        self.state.held.load(Ordering::SeqCst)
    }

    /// Requests answered with an error or held so far.
    pub fn faulted(&self) -> u64 {
        self.state.faulted.load(Ordering::SeqCst)
    }

    /// Paths of the `PUT`s that reached the server so far, in order.
    pub fn puts(&self) -> Vec<String> {
        self.state.puts.lock().unwrap().clone()
    }
}

/// Serves one client connection, request by request, until either side ends it.
async fn serve(mut client: TcpStream, upstream: u16, state: Arc<State>) {
    let mut buffered = Vec::new();
    loop {
        let Some(request) = read_request(&mut client, &mut buffered).await else {
            return;
        };
        let fault = state.rule.lock().unwrap().as_ref().and_then(|rule| {
            (rule.method == request.method && request.path.contains(&rule.path_contains))
                .then_some(rule.fault)
        });
        match fault {
            Some(Fault::Fail) => {
                state.faulted.fetch_add(1, Ordering::SeqCst);
                let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>";
                let answer = format!(
                    "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                if client.write_all(answer.as_bytes()).await.is_err() {
                    return;
                }
                continue;
            }
            Some(Fault::Hold) => {
                state.faulted.fetch_add(1, Ordering::SeqCst);
                state.held.fetch_add(1, Ordering::SeqCst);
                let seen = state.decisions.lock().unwrap().len();
                let drop = loop {
                    if let Some(&drop) = state.decisions.lock().unwrap().get(seen) {
                        break drop;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                };
                state.held.fetch_sub(1, Ordering::SeqCst);
                if drop {
                    return;
                }
            }
            None => {}
        }
        let Some(answer) = forward(upstream, &request).await else {
            return;
        };
        if request.method == "PUT" {
            state.puts.lock().unwrap().push(request.path.clone());
        }
        if client.write_all(&answer).await.is_err() {
            return;
        }
        if closes(&answer) {
            return;
        }
    }
}

/// Reads one request (head and `Content-Length` body); `None` when the client is gone.
async fn read_request(client: &mut TcpStream, buffered: &mut Vec<u8>) -> Option<Request> {
    let mut buf = [0u8; 64 * 1024];
    let end = loop {
        if let Some(end) = buffered.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        let n = client.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        buffered.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&buffered[..end]).into_owned();
    buffered.drain(..end + 4);
    let mut words = head.split_whitespace();
    let method = words.next()?.to_string();
    let path = words.next()?.to_string();
    let length = head
        .lines()
        .skip(1)
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.trim().parse::<usize>().ok())
        .unwrap_or(0);
    while buffered.len() < length {
        let n = client.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        buffered.extend_from_slice(&buf[..n]);
    }
    let body = buffered.drain(..length).collect();
    Some(Request {
        method,
        path,
        head,
        body,
    })
}

/// Sends `request` to the server on a connection of its own and returns the whole answer.
async fn forward(upstream: u16, request: &Request) -> Option<Vec<u8>> {
    let mut server = TcpStream::connect(("127.0.0.1", upstream)).await.ok()?;
    // The server closes after this one answer, which marks where the answer ends.
    let head: Vec<&str> = request
        .head
        .lines()
        .filter(|line| {
            !line
                .split_once(':')
                .is_some_and(|(name, _)| name.trim().eq_ignore_ascii_case("connection"))
        })
        .collect();
    let head = format!("{}\r\nConnection: close\r\n\r\n", head.join("\r\n"));
    server.write_all(head.as_bytes()).await.ok()?;
    server.write_all(&request.body).await.ok()?;
    let mut answer = Vec::new();
    server.read_to_end(&mut answer).await.ok()?;
    (!answer.is_empty()).then_some(answer)
}

/// Whether the server's answer closes the connection, so the client must not send more on it.
fn closes(answer: &[u8]) -> bool {
    let end = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(answer.len());
    String::from_utf8_lossy(&answer[..end])
        .lines()
        .filter_map(|line| line.split_once(':'))
        .any(|(name, value)| {
            name.trim().eq_ignore_ascii_case("connection")
                && value.trim().eq_ignore_ascii_case("close")
        })
}
