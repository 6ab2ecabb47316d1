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

use std::collections::BTreeMap;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};

/// The open connections, oldest first.
#[derive(Debug, Default)]
pub(super) struct OpenConnections {
    inner: Mutex<Registry>,
}

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
    /// The socket's descriptor (it changes when pingora's session hands the
    /// connection back).
    fd: AtomicI32,
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
                // SAFETY: shutdown(2) takes integers only. The descriptor is
                // still the victim's own socket: a connection leaves this
                // registry (under this lock) before it closes its socket.
                unsafe { libc::shutdown(slot.fd.load(Ordering::Relaxed), libc::SHUT_RDWR) };
            }
        }
        let id = registry.next;
        registry.next += 1;
        let slot = Arc::new(Slot { busy: AtomicBool::new(false), fd: AtomicI32::new(fd) });
        registry.open.insert(id, slot.clone());
        Registered { id, slot, all: self.clone() }
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

    /// Whether the gateway's side was shut down: its read ends at once.
    async fn is_closed(socket: &mut TcpStream) -> bool {
        let mut byte = [0u8; 1];
        matches!(tokio::time::timeout(Duration::from_millis(100), socket.read(&mut byte)).await, Ok(Ok(0)))
    }

    #[tokio::test]
    async fn a_new_connection_over_the_limit_closes_the_oldest_not_running_a_request() {
        let all = Arc::new(OpenConnections::default());
        let (mut sockets, mut clients) = (Vec::new(), Vec::new());
        for _ in 0..4 {
            let (socket, client) = pair().await;
            sockets.push(socket);
            clients.push(client);
        }
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
