//! The most recent calls, in a bounded ring in memory, for the admin
//! listener (`GET /calls`) and the console: when, who, which tool, which
//! upstream, how it ended, how long it took, its `call_id`. Never an input,
//! an output, a secret or a token: the record has no field for one.
//!
//! On the call path a record costs one atomic increment and one slot's
//! uncontended lock: each call writes its own slot (the counter modulo the
//! capacity), so concurrent calls do not wait on one another. It copies no
//! string and reads no clock: the tool and the upstream are shared with the
//! catalog, the call id is the call's own, and the time is the call's end as
//! its duration already measured it (turned into wall-clock time when read).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::{Serialize, Serializer};

use crate::dialect::CatalogTool;

/// How many calls the ring keeps.
pub const CAPACITY: usize = 512;

/// One finished call.
#[derive(Debug, Clone, Serialize)]
pub struct CallRecord {
    /// When it finished; shown in milliseconds since the Unix epoch (`at_ms`).
    #[serde(rename = "at_ms", serialize_with = "epoch_ms")]
    pub at: Instant,
    /// The caller's user id; `None` for an anonymous caller.
    pub caller: Option<String>,
    /// The resolved tool (its id is what is shown). Shared with the
    /// catalog, so a call copies no string for it.
    #[serde(serialize_with = "tool_id")]
    pub tool: Arc<CatalogTool>,
    /// The upstream that answered (else the route's first), by its name.
    #[serde(serialize_with = "text")]
    pub upstream: Arc<str>,
    /// The HTTP status the call was answered with (200 for a tool error too).
    pub status: u16,
    /// `success`, `tool_error`, `denied`, `validation_error`, `rate_limited`
    /// or `server_error`.
    pub outcome: &'static str,
    /// How long it took, in milliseconds.
    pub duration_ms: f64,
    /// The call id (the client's, or the one the gateway made).
    pub call_id: String,
}

/// One slot of the ring: the record and its sequence number, or nothing yet.
type Slot = Mutex<Option<(u64, CallRecord)>>;

/// The ring.
#[derive(Debug)]
pub struct RecentCalls {
    slots: Box<[Slot]>,
    next: AtomicU64,
}

impl Default for RecentCalls {
    fn default() -> Self {
        RecentCalls { slots: (0..CAPACITY).map(|_| Mutex::new(None)).collect(), next: AtomicU64::new(0) }
    }
}

impl RecentCalls {
    /// Keeps `record`, forgetting the oldest when full.
    pub fn record(&self, record: CallRecord) {
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        let slot = &self.slots[(seq % CAPACITY as u64) as usize];
        // A poisoned slot holds a whole record or none: still usable.
        *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some((seq, record));
    }

    /// Up to `limit` records, newest first.
    pub fn newest(&self, limit: usize) -> Vec<CallRecord> {
        let mut all: Vec<(u64, CallRecord)> =
            self.slots.iter().filter_map(|slot| slot.lock().unwrap_or_else(|p| p.into_inner()).clone()).collect();
        all.sort_by_key(|(seq, _)| std::cmp::Reverse(*seq));
        all.into_iter().take(limit).map(|(_, record)| record).collect()
    }

    /// How many calls were recorded since start (kept or not).
    pub fn total(&self) -> u64 {
        self.next.load(Ordering::Relaxed)
    }
}

fn text<S: Serializer>(text: &Arc<str>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(text)
}

fn tool_id<S: Serializer>(tool: &Arc<CatalogTool>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&tool.definition.id)
}

/// `at` in milliseconds since the Unix epoch: now, less how long ago it was.
fn epoch_ms<S: Serializer>(at: &Instant, serializer: S) -> Result<S::Ok, S::Error> {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let at = now.saturating_sub(at.elapsed());
    serializer.serialize_u64(u64::try_from(at.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(n: usize) -> CallRecord {
        let definition =
            serde_json::json!({"id": "Calc.Add@1.0.0", "description": "Adds.", "input_schema": {"type": "object"}});
        let tool = crate::dialect::normalise_tool(definition, Default::default()).expect("a tool");
        CallRecord {
            at: Instant::now(),
            caller: Some(format!("user-{n}")),
            tool: Arc::new(tool),
            upstream: "calc".into(),
            status: 200,
            outcome: "success",
            duration_ms: 1.0,
            call_id: format!("call-{n}"),
        }
    }

    #[test]
    fn the_ring_keeps_the_newest_and_stays_bounded() {
        let ring = RecentCalls::default();
        assert!(ring.newest(10).is_empty());
        for n in 0..CAPACITY + 100 {
            ring.record(record(n));
        }
        let kept = ring.newest(usize::MAX);
        assert_eq!(kept.len(), CAPACITY, "bounded");
        assert_eq!(kept[0].call_id, format!("call-{}", CAPACITY + 99), "newest first");
        assert_eq!(kept[CAPACITY - 1].call_id, "call-100", "the oldest were forgotten");
        assert_eq!(ring.newest(3).len(), 3);
        assert_eq!(ring.total(), (CAPACITY + 100) as u64);
        let shown = serde_json::to_value(&kept[0]).expect("json");
        assert_eq!(shown["tool"], "Calc.Add@1.0.0", "the tool by its id");
        assert_eq!(shown["upstream"], "calc", "the upstream by its name");
        let epoch_ms = SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_millis() as u64;
        let at_ms = shown["at_ms"].as_u64().expect("a number");
        assert!(at_ms <= epoch_ms && at_ms + 60_000 > epoch_ms, "wall-clock time: {at_ms} against {epoch_ms}");
    }
}
