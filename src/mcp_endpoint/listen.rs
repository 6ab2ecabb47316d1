//! Event streams: `notifications/tools/list_changed` to clients that asked
//! for them, sent when the list of tools *that caller* may see changes (a
//! catalog change or a policy reload that leaves it alone is not announced).
//!
//! - 2026-07-28: the response to `subscriptions/listen` is the stream. Its
//!   first event acknowledges the filter the gateway honours (only
//!   `toolsListChanged`: the gateway lists no prompts or resources), every
//!   event carries the subscription id (the request's JSON-RPC id), and a
//!   stream the gateway ends (shutdown) ends with the request's result.
//! - 2025-11-25: the stream opened by `GET /mcp`.
//!
//! Open streams are bounded per caller and in all (`[mcp] max_streams_per_caller`,
//! `max_streams`), so one caller's streams cannot use up another's.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Map, Value};
use tokio::sync::watch;

use super::error::RpcError;
use super::tools::NameCache;
use super::{complete, NOTIFICATION_TOOLS_CHANGED};
use crate::auth::Caller;
use crate::gateway::Gateway;
use crate::mcp::jsonrpc::OutgoingResponse;
use crate::mcp::v2026_07_28::META_SUBSCRIPTION_ID;

/// How often an idle stream sends an SSE comment, so that proxies and
/// clients with idle timeouts keep it open.
pub const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(15);

/// An SSE comment: keeps a quiet stream open.
pub fn keep_alive() -> Bytes {
    Bytes::from_static(b":\n\n")
}

/// One JSON-RPC message as an SSE event.
fn event(message: &Value) -> Bytes {
    Bytes::from(format!("event: message\ndata: {message}\n\n"))
}

/// An open event stream for one caller.
pub struct Listen {
    names: Arc<NameCache>,
    gateway: Arc<Gateway>,
    caller: Caller,
    changes: watch::Receiver<u64>,
    /// 2026-07-28: the `subscriptions/listen` request's id; `None` for a
    /// 2025-11-25 GET stream.
    subscription: Option<Value>,
    /// Whether tool list changes were asked for.
    tools: bool,
    /// The virtual server whose list it follows; `None` at `/mcp`.
    server: Option<String>,
    /// The digest of the caller's tools last announced (or found at open).
    seen: u64,
    _slot: StreamSlot,
}

impl std::fmt::Debug for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listen").field("subscription", &self.subscription).field("tools", &self.tools).finish()
    }
}

impl Listen {
    /// A stream for `caller`; `subscription` is the modern request's id and
    /// the filter it asked for, and the virtual server it listens at.
    pub(super) fn open(
        names: Arc<NameCache>,
        gateway: Arc<Gateway>,
        caller: Caller,
        (subscription, server): (Option<(Value, bool)>, Option<String>),
        slot: StreamSlot,
    ) -> Listen {
        // Subscribed before the first digest: a change in between is seen.
        let changes = gateway.catalog.subscribe();
        let (subscription, tools) = match subscription {
            Some((id, tools)) => (Some(id), tools),
            None => (None, true),
        };
        let mut listen = Listen { names, gateway, caller, changes, subscription, tools, server, seen: 0, _slot: slot };
        listen.seen = listen.digest();
        listen
    }

    /// The digest of the tools the caller may see now.
    fn digest(&self) -> u64 {
        let generation = self.gateway.generation();
        let catalog = self.gateway.catalog.load();
        let catalog = match &self.server {
            // A server's view changes with the catalog it is published with.
            Some(name) => match catalog.server(name) {
                Some(view) => view,
                None => return 0,
            },
            None => &*catalog,
        };
        let names = self.names.of(catalog);
        names.visible_digest(&generation.access, generation.access.matching(&self.caller))
    }

    /// What the stream starts with: a modern stream's acknowledgment.
    pub fn opening(&self) -> Option<Bytes> {
        let id = self.subscription.as_ref()?;
        let mut honoured = Map::new();
        if self.tools {
            honoured.insert("toolsListChanged".into(), Value::Bool(true));
        }
        Some(event(&json!({
            "jsonrpc": "2.0",
            "method": "notifications/subscriptions/acknowledged",
            "params": {"_meta": {META_SUBSCRIPTION_ID: id}, "notifications": honoured},
        })))
    }

    /// Waits for the next notification to send: `None` when no more can
    /// come (the gateway is going away).
    pub async fn next(&mut self) -> Option<Bytes> {
        loop {
            self.changes.changed().await.ok()?;
            let digest = self.digest();
            if digest == self.seen {
                continue;
            }
            self.seen = digest;
            if !self.tools {
                continue;
            }
            let mut message = json!({"jsonrpc": "2.0", "method": NOTIFICATION_TOOLS_CHANGED});
            if let Some(id) = &self.subscription {
                message["params"] = json!({"_meta": {META_SUBSCRIPTION_ID: id}});
            }
            return Some(event(&message));
        }
    }

    /// What a stream the gateway ends sends last: a modern stream's result,
    /// which tells the client the end was graceful.
    pub fn closing(&self) -> Option<Bytes> {
        let id = self.subscription.as_ref()?;
        let mut result = Map::new();
        result.insert("_meta".into(), json!({META_SUBSCRIPTION_ID: id}));
        let response = OutgoingResponse::result(id.clone(), Value::Object(complete(result)));
        Some(event(&serde_json::to_value(&response).unwrap_or_default()))
    }
}

/// Open streams by caller.
type PerCaller = Arc<Mutex<HashMap<String, usize>>>;

/// The count of open streams, in all and per caller.
#[derive(Debug, Default)]
pub(crate) struct StreamCounts {
    total: Arc<AtomicUsize>,
    per_caller: PerCaller,
}

/// A place among the open streams, given back when dropped.
#[derive(Debug)]
pub(crate) struct StreamSlot {
    total: Arc<AtomicUsize>,
    caller: Option<(PerCaller, String)>,
}

impl StreamCounts {
    /// A slot for one more stream of `caller`, within both limits.
    /// Anonymous callers share the total only: nothing tells them apart.
    pub(crate) fn take(
        &self,
        caller: &Caller,
        max_total: usize,
        max_per_caller: usize,
    ) -> Result<StreamSlot, RpcError> {
        if self.total.fetch_add(1, Ordering::AcqRel) >= max_total {
            self.total.fetch_sub(1, Ordering::AcqRel);
            return Err(RpcError::TooManyStreams { limit: max_total });
        }
        let mut slot = StreamSlot { total: self.total.clone(), caller: None };
        let Some(user) = caller.authenticated_user() else { return Ok(slot) };
        let key = format!("{}:{user}", caller.kind());
        let mut counts = self.per_caller.lock().unwrap_or_else(|p| p.into_inner());
        let count = counts.entry(key.clone()).or_default();
        if *count >= max_per_caller {
            // (The slot's drop gives the total back.)
            return Err(RpcError::TooManyStreams { limit: max_per_caller });
        }
        *count += 1;
        slot.caller = Some((self.per_caller.clone(), key));
        Ok(slot)
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.total.fetch_sub(1, Ordering::AcqRel);
        if let Some((counts, key)) = &self.caller {
            let mut counts = counts.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(count) = counts.get_mut(key) {
                *count -= 1;
                if *count == 0 {
                    counts.remove(key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str) -> Caller {
        Caller::ApiKey { user_id: name.into() }
    }

    #[test]
    fn one_callers_streams_leave_room_for_anothers() {
        let counts = StreamCounts::default();
        let alice: Vec<StreamSlot> = (0..2).map(|_| counts.take(&user("alice"), 10, 2).expect("room")).collect();
        assert!(counts.take(&user("alice"), 10, 2).is_err(), "alice is at her limit");
        let bob = counts.take(&user("bob"), 10, 2).expect("bob is not blocked by alice");
        drop(alice);
        assert!(counts.take(&user("alice"), 10, 2).is_ok(), "closed streams give their slots back");
        drop(bob);
        let all: Vec<StreamSlot> = (0..3).map(|_| counts.take(&Caller::Anonymous, 3, 1).expect("room")).collect();
        assert!(counts.take(&user("carol"), 3, 1).is_err(), "the total bounds everyone");
        drop(all);
        assert_eq!(counts.total.load(Ordering::Acquire), 0);
        assert!(counts.per_caller.lock().expect("lock").is_empty());
    }
}
