//! The bound on open client connections (`server.max_connections`).
//!
//! A connection costs the gateway a socket and a little memory whether or
//! not its client ever finishes a request, and `max_in_flight` counts only
//! requests that have arrived whole. So connections are bounded on their
//! own, the way nginx reuses its oldest idle keep-alive connections: a new
//! connection over the limit closes the oldest open one that is not running
//! a request (idle, or still sending a head or a body). A client that sends
//! whole requests gets them served; one that holds connections open without
//! finishing them loses them to newer ones.
//!
//! A connection is closed for room by shutting its socket down (`shutdown(2)`
//! on its descriptor): its pending read then ends as if the client had gone,
//! and it closes itself. Nothing is polled per request for it (a future
//! polled at every wait for the client cost every call something,
//! benches/HISTORY.md, "Figures behind the code").
//! The descriptor is only touched under the registry's lock, and a
//! connection leaves the registry before its socket is closed (see
//! [`Registered`]), so the number always names that connection's socket.
//!
//! Shutdown closes the connections waiting for a head the same way
//! ([`OpenConnections::close_waiting`]); a request whose head is in, or
//! which pingora's session was handed, is served to its end. A subscription
//! to pingora's shutdown watch, polled at every wait for a head, cost each
//! call about 330 instructions (benches/README.md, "The MCP envelope read by
//! hand"). A connection claims its request with one atomic exchange
//! ([`Registered::head_in`]) that the sweep's own exchange excludes, so no
//! request is cut once claimed, and checks the sweep's flag each time it
//! waits again ([`Registered::wait_for_head`]).

use std::collections::BTreeMap;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

/// The open connections, oldest first.
#[derive(Debug, Default)]
pub(super) struct OpenConnections {
    inner: Mutex<Registry>,
    /// Shutdown began: a connection that waits for a head closes.
    closing: AtomicBool,
}

/// A connection waits for a head (none of it in, or part of it).
const WAITING: u8 = 0;
/// Its head is in: it is served to its end.
const SERVING: u8 = 1;
/// Shut by the shutdown sweep while it waited.
const SHUT: u8 = 2;

#[derive(Debug, Default)]
struct Registry {
    next: u64,
    open: BTreeMap<u64, Arc<Slot>>,
}

/// One connection's entry.
#[derive(Debug)]
struct Slot {
    /// Running a request (its head and body read): never closed for room.
    busy: AtomicBool,
    /// [`WAITING`], [`SERVING`] or [`SHUT`].
    stage: AtomicU8,
    /// The socket's descriptor (it changes when pingora's session hands the
    /// connection back).
    fd: AtomicI32,
}

impl Slot {
    /// Ends the connection: its pending read ends as if the client had gone.
    fn shut(&self) {
        // SAFETY: shutdown(2) takes integers only. The descriptor is still
        // the connection's own socket: a connection leaves the registry
        // (under its lock, which the caller holds) before it closes its
        // socket.
        unsafe { libc::shutdown(self.fd.load(Ordering::Relaxed), libc::SHUT_RDWR) };
    }
}

/// A connection's place among the open ones; leaves when dropped. The
/// connection must drop it before it closes its socket (declare it first).
#[derive(Debug)]
pub(super) struct Registered {
    id: u64,
    slot: Arc<Slot>,
    all: Arc<OpenConnections>,
}

impl OpenConnections {
    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        // Nothing panics while holding it; the map is consistent anyway.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a new connection (socket `fd`) in, first closing the oldest
    /// one not running a request when `max` are open already.
    pub(super) fn register(self: &Arc<Self>, max: usize, fd: RawFd) -> Registered {
        let mut registry = self.lock();
        if registry.open.len() >= max.max(1) {
            let oldest_idle =
                registry.open.iter().find(|(_, slot)| !slot.busy.load(Ordering::Relaxed)).map(|(&id, _)| id);
            if let Some(slot) = oldest_idle.and_then(|id| registry.open.remove(&id)) {
                slot.shut();
            }
        }
        let id = registry.next;
        registry.next += 1;
        let slot =
            Arc::new(Slot { busy: AtomicBool::new(false), stage: AtomicU8::new(WAITING), fd: AtomicI32::new(fd) });
        registry.open.insert(id, slot.clone());
        Registered { id, slot, all: self.clone() }
    }

    /// Shutdown began: closes every connection waiting for a head. One that
    /// waits again later (or registers late) sees the flag itself.
    pub(super) fn close_waiting(&self) {
        self.closing.store(true, Ordering::SeqCst);
        let registry = self.lock();
        for slot in registry.open.values() {
            if slot.stage.compare_exchange(WAITING, SHUT, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
                slot.shut();
            }
        }
    }

    /// How many connections are counted in.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().open.len()
    }
}

impl Registered {
    /// Marks the connection as running a request (or no longer).
    pub(super) fn set_busy(&self, busy: bool) {
        self.slot.busy.store(busy, Ordering::Relaxed);
    }

    /// Its head is in: it is served to its end. `false` when the shutdown
    /// sweep took it first (its socket is shut: it closes).
    pub(super) fn head_in(&self) -> bool {
        match self.slot.stage.compare_exchange(WAITING, SERVING, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => true,
            Err(stage) => stage == SERVING,
        }
    }

    /// It waits for a head again; `false` when shutdown began (then it
    /// closes). Either this sees the sweep's flag or the sweep sees this
    /// stage (both sides store, then load, sequentially consistent).
    pub(super) fn wait_for_head(&self) -> bool {
        if self.slot.stage.swap(WAITING, Ordering::SeqCst) == SHUT {
            return false;
        }
        !self.all.closing.load(Ordering::SeqCst)
    }

    /// The connection's socket is now `fd`, its old one still open: under
    /// the lock, so an eviction sees one or the other, both open.
    pub(super) fn set_fd(&self, fd: RawFd) {
        let _registry = self.all.lock();
        self.slot.fd.store(fd, Ordering::Relaxed);
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.all.lock().open.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::time::Duration;
    use tokio::io::AsyncReadExt;
    use tokio::net::{TcpListener, TcpStream};

    /// A connected pair: the gateway's side and the client's.
    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("addr")).await.expect("connect");
        (listener.accept().await.expect("accept").0, client)
    }

    /// `n` connected pairs: the gateway's sides and the clients'.
    async fn pairs(n: usize) -> (Vec<TcpStream>, Vec<TcpStream>) {
        let (mut sockets, mut clients) = (Vec::new(), Vec::new());
        for _ in 0..n {
            let (socket, client) = pair().await;
            sockets.push(socket);
            clients.push(client);
        }
        (sockets, clients)
    }

    /// Whether the gateway's side was shut down: its read ends at once.
    async fn is_closed(socket: &mut TcpStream) -> bool {
        let mut byte = [0u8; 1];
        matches!(tokio::time::timeout(Duration::from_millis(100), socket.read(&mut byte)).await, Ok(Ok(0)))
    }

    #[tokio::test]
    async fn shutdown_closes_the_connections_waiting_for_a_head_and_no_other() {
        let all = Arc::new(OpenConnections::default());
        let (mut sockets, _clients) = pairs(4).await;
        let waiting = all.register(8, sockets[0].as_raw_fd());
        let serving = all.register(8, sockets[1].as_raw_fd());
        let served = all.register(8, sockets[2].as_raw_fd());
        assert!(serving.head_in() && served.head_in());
        assert!(served.head_in(), "a head already taken stays taken");
        all.close_waiting();
        assert!(is_closed(&mut sockets[0]).await, "waiting for a head: closed");
        assert!(!waiting.head_in(), "a head that comes after the sweep is not served");
        assert!(!is_closed(&mut sockets[1]).await, "its head is in: served to its end");
        assert!(!serving.wait_for_head(), "done, it does not wait for another head");
        assert!(!served.wait_for_head());
        let late = all.register(8, sockets[3].as_raw_fd());
        assert!(!late.wait_for_head(), "registered after the sweep: closes itself");
    }

    #[tokio::test]
    async fn before_shutdown_connections_wait_and_serve_as_they_please() {
        let all = Arc::new(OpenConnections::default());
        let (mut socket, _client) = pair().await;
        let conn = all.register(8, socket.as_raw_fd());
        for _ in 0..3 {
            assert!(conn.wait_for_head());
            assert!(conn.head_in());
        }
        assert!(!is_closed(&mut socket).await);
    }

    #[tokio::test]
    async fn a_new_connection_over_the_limit_closes_the_oldest_not_running_a_request() {
        let all = Arc::new(OpenConnections::default());
        let (mut sockets, _clients) = pairs(4).await;
        let first = all.register(2, sockets[0].as_raw_fd());
        let second = all.register(2, sockets[1].as_raw_fd());
        first.set_busy(true);
        let third = all.register(2, sockets[2].as_raw_fd());
        assert!(!is_closed(&mut sockets[0]).await, "running a request: kept");
        assert!(is_closed(&mut sockets[1]).await, "the oldest idle one makes room");
        assert!(!is_closed(&mut sockets[2]).await);
        assert_eq!(all.len(), 2);
        drop(second);
        assert_eq!(all.len(), 2, "a closed one is counted once");
        drop(third);
        assert_eq!(all.len(), 1);
        first.set_busy(false);
        let _fourth = all.register(1, sockets[3].as_raw_fd());
        assert!(is_closed(&mut sockets[0]).await, "idle again: it may go");
        assert!(!is_closed(&mut sockets[3]).await);
    }
}
