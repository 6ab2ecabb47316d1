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

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

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
#[derive(Debug, Default)]
struct Slot {
    /// Running a request (its head and body read): never closed for room.
    busy: AtomicBool,
    /// Told when the connection is closed to make room.
    closed: Notify,
}

/// A connection's place among the open ones; leaves when dropped.
#[derive(Debug)]
pub(super) struct Registered {
    id: u64,
    slot: Arc<Slot>,
    all: Arc<OpenConnections>,
}

impl OpenConnections {
    /// Counts a new connection in, first closing the oldest one not running
    /// a request when `max` are open already.
    pub(super) fn register(self: &Arc<Self>, max: usize) -> Registered {
        let mut registry = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if registry.open.len() >= max.max(1) {
            let oldest_idle =
                registry.open.iter().find(|(_, slot)| !slot.busy.load(Ordering::Relaxed)).map(|(&id, _)| id);
            if let Some(slot) = oldest_idle.and_then(|id| registry.open.remove(&id)) {
                // (A permit is kept if it is between two waits.)
                slot.closed.notify_one();
            }
        }
        let id = registry.next;
        registry.next += 1;
        let slot = Arc::new(Slot::default());
        registry.open.insert(id, slot.clone());
        Registered { id, slot, all: self.clone() }
    }

    /// How many connections are counted in.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).open.len()
    }
}

impl Registered {
    /// Marks the connection as running a request (or no longer).
    pub(super) fn set_busy(&self, busy: bool) {
        self.slot.busy.store(busy, Ordering::Relaxed);
    }

    /// Completes once the connection has been closed to make room: the
    /// connection polls it while it waits for its client.
    pub(super) fn closed(&self) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let slot = self.slot.clone();
        Box::pin(async move { slot.closed.notified().await })
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut registry = self.all.inner.lock().unwrap_or_else(|p| p.into_inner());
        registry.open.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn is_closed(registered: &Registered) -> bool {
        tokio::time::timeout(Duration::from_millis(50), registered.closed()).await.is_ok()
    }

    #[tokio::test]
    async fn a_new_connection_over_the_limit_closes_the_oldest_not_running_a_request() {
        let all = Arc::new(OpenConnections::default());
        let first = all.register(2);
        let second = all.register(2);
        first.set_busy(true);
        let third = all.register(2);
        assert!(!is_closed(&first).await, "running a request: kept");
        assert!(is_closed(&second).await, "the oldest idle one makes room");
        assert!(!is_closed(&third).await);
        assert_eq!(all.len(), 2);
        drop(second);
        assert_eq!(all.len(), 2, "a closed one is counted once");
        drop(third);
        assert_eq!(all.len(), 1);
        first.set_busy(false);
        let _fourth = all.register(1);
        assert!(is_closed(&first).await, "idle again: it may go");
    }
}
