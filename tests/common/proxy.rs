//! A TCP proxy between the engine and a server that injects real network faults: it resets
//! every open connection, stalls them (bytes stop flowing both ways), or accepts new
//! connections and drops them at once. Only loopback addresses are used. Clients must connect
//! with `prefer_socket=false`: otherwise the MySQL driver moves a loopback connection to the
//! server's Unix socket after the handshake, around the proxy.
#![allow(dead_code)] // Not every test binary injects faults.

use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

#[derive(Debug, Default)]
struct Faults {
    refuse: AtomicBool,
    stall: AtomicBool,
    connections: Mutex<Vec<AbortHandle>>,
    accepted: AtomicU64,
    /// Where new connections go.
    upstream: AtomicU16,
}

/// See the module docs; dropping it stops the proxy and its connections.
#[derive(Debug)]
pub struct FaultProxy {
    port: u16,
    faults: Arc<Faults>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
        self.reset_all();
    }
}

impl FaultProxy {
    /// Forwards a free port on 127.0.0.1 to `127.0.0.1:upstream`.
    pub async fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let faults = Arc::new(Faults::default());
        faults.upstream.store(upstream, Ordering::SeqCst);
        let shared = Arc::clone(&faults);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                shared.accepted.fetch_add(1, Ordering::Relaxed);
                if shared.refuse.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let faults = Arc::clone(&shared);
                let upstream = shared.upstream.load(Ordering::SeqCst);
                let handle = tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                        return;
                    };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::select! {
                        () = pipe(cr, sw, Arc::clone(&faults)) => {}
                        () = pipe(sr, cw, faults) => {}
                    }
                });
                let mut open = shared.connections.lock().unwrap();
                open.retain(|h| !h.is_finished());
                open.push(handle.abort_handle());
            }
        });
        Self { port, faults, task }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Closes every open connection at once (both ends see it end without a goodbye).
    pub fn reset_all(&self) {
        for handle in self.faults.connections.lock().unwrap().drain(..) {
            handle.abort();
        }
    }

    /// While on, new connections are accepted and dropped at once.
    pub fn refuse_new(&self, on: bool) {
        self.faults.refuse.store(on, Ordering::SeqCst);
    }

    /// While on, no byte moves in either direction on any connection.
    pub fn stall(&self, on: bool) {
        self.faults.stall.store(on, Ordering::SeqCst);
    }

    /// Sends new connections to `127.0.0.1:upstream` from now on (another server behind the
    /// same address, as a managed database's failover does); open ones stay where they are.
    pub fn set_upstream(&self, upstream: u16) {
        self.faults.upstream.store(upstream, Ordering::SeqCst);
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.faults.accepted.load(Ordering::Relaxed)
    }
}

/// Copies `from` to `to` until either ends, holding bytes back while stalled.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    faults: Arc<Faults>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        while faults.stall.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
