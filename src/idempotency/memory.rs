//! Idempotency entries in this process's memory, bounded in count and bytes.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::{Claim, Fingerprint, StoredCall};

/// The in-memory store.
pub struct MemoryStore {
    ttl: Duration,
    max_entries: usize,
    max_bytes: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    entries: HashMap<String, Entry>,
    /// Insertion order, for evicting the oldest first.
    order: VecDeque<(String, u64)>,
    bytes: usize,
    next_seq: u64,
}

struct Entry {
    fingerprint: Fingerprint,
    seq: u64,
    at: Instant,
    /// `None` while the first call runs; then its answer.
    done: watch::Sender<Option<(StoredCall, usize)>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new(ttl: Duration, max_entries: usize, max_bytes: usize) -> MemoryStore {
        MemoryStore { ttl, max_entries: max_entries.max(1), max_bytes, state: Mutex::new(State::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// See [`super::IdempotencyStore::claim`].
    pub async fn claim(&self, call_id: &str, fingerprint: &Fingerprint, wait: Duration) -> Claim {
        let deadline = Instant::now() + wait;
        loop {
            let mut waiting = {
                let mut state = self.lock();
                let expired = state.entries.get(call_id).is_some_and(|e| e.at.elapsed() > self.ttl);
                if expired {
                    remove(&mut state, call_id);
                }
                match state.entries.get(call_id) {
                    None => {
                        let seq = state.next_seq;
                        state.next_seq += 1;
                        let (done, _) = watch::channel(None);
                        state.entries.insert(call_id.to_owned(), Entry { fingerprint: fingerprint.clone(), seq, at: Instant::now(), done });
                        state.order.push_back((call_id.to_owned(), seq));
                        self.evict(&mut state);
                        return Claim::Run;
                    }
                    Some(entry) if entry.fingerprint != *fingerprint => return Claim::Conflict,
                    Some(entry) => {
                        if let Some((call, _)) = entry.done.borrow().as_ref() {
                            return Claim::Replay(call.clone());
                        }
                        entry.done.subscribe()
                    }
                }
            };
            // The first call is still running: wait for its answer, or for
            // its release (then try to claim again).
            let left = deadline.saturating_duration_since(Instant::now());
            let answer = match tokio::time::timeout(left, waiting.wait_for(|v| v.is_some())).await {
                Ok(Ok(answer)) => answer.as_ref().map(|(call, _)| call.clone()),
                // Released: try to claim again.
                Ok(Err(_released)) => None,
                Err(_timeout) => return Claim::InProgress,
            };
            if let Some(call) = answer {
                return Claim::Replay(call);
            }
        }
    }

    /// Stores the answer of a claimed call and wakes its waiters.
    pub fn complete(&self, call_id: &str, call: &StoredCall) {
        let size = serde_json::to_vec(call).map_or(0, |b| b.len()) + call_id.len();
        let mut state = self.lock();
        if let Some(entry) = state.entries.get(call_id) {
            entry.done.send_replace(Some((call.clone(), size)));
            state.bytes += size;
            self.evict(&mut state);
        }
    }

    /// Drops a claim; waiters try again.
    pub fn release(&self, call_id: &str) {
        let mut state = self.lock();
        remove(&mut state, call_id);
    }

    /// Oldest first, until within both bounds.
    fn evict(&self, state: &mut State) {
        while state.entries.len() > self.max_entries || state.bytes > self.max_bytes {
            let Some((key, seq)) = state.order.pop_front() else { break };
            if state.entries.get(&key).is_some_and(|e| e.seq == seq) {
                remove(state, &key);
            }
        }
    }

    /// How many entries are held (for tests).
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn remove(state: &mut State, key: &str) {
    if let Some(entry) = state.entries.remove(key) {
        if let Some((_, size)) = entry.done.borrow().as_ref() {
            state.bytes = state.bytes.saturating_sub(*size);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::CallResult;
    use serde_json::json;
    use std::sync::Arc;

    fn stored(value: i64) -> StoredCall {
        StoredCall {
            result: CallResult { call_id: "c".into(), duration: 1.0, success: true, value: Some(json!(value)), error: None },
            upstream: "u".into(),
        }
    }

    fn fp(input: i64) -> Fingerprint {
        Fingerprint::of("T.t@1.0.0", &json!({"x": input}))
    }

    #[tokio::test]
    async fn a_duplicate_replays_and_a_mismatch_conflicts() {
        let store = MemoryStore::new(Duration::from_secs(60), 10, 1 << 20);
        assert!(matches!(store.claim("a", &fp(1), Duration::from_secs(1)).await, Claim::Run));
        store.complete("a", &stored(7));
        match store.claim("a", &fp(1), Duration::from_secs(1)).await {
            Claim::Replay(call) => assert_eq!(call.result.value, Some(json!(7))),
            other => panic!("{other:?}"),
        }
        assert!(matches!(store.claim("a", &fp(2), Duration::from_secs(1)).await, Claim::Conflict));
    }

    #[tokio::test]
    async fn a_concurrent_duplicate_waits_for_the_first() {
        let store = Arc::new(MemoryStore::new(Duration::from_secs(60), 10, 1 << 20));
        assert!(matches!(store.claim("a", &fp(1), Duration::from_secs(1)).await, Claim::Run));
        let waiter = {
            let store = store.clone();
            tokio::spawn(async move { store.claim("a", &fp(1), Duration::from_secs(5)).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        store.complete("a", &stored(9));
        match waiter.await.expect("join") {
            Claim::Replay(call) => assert_eq!(call.result.value, Some(json!(9))),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_released_claim_lets_a_retry_run() {
        let store = MemoryStore::new(Duration::from_secs(60), 10, 1 << 20);
        assert!(matches!(store.claim("a", &fp(1), Duration::from_secs(1)).await, Claim::Run));
        store.release("a");
        assert!(matches!(store.claim("a", &fp(1), Duration::from_secs(1)).await, Claim::Run));
    }

    #[tokio::test]
    async fn the_oldest_go_first_by_count_by_bytes_and_by_ttl() {
        let store = MemoryStore::new(Duration::from_secs(60), 2, 1 << 20);
        for id in ["a", "b", "c"] {
            assert!(matches!(store.claim(id, &fp(1), Duration::from_secs(1)).await, Claim::Run));
            store.complete(id, &stored(1));
        }
        assert_eq!(store.len(), 2);
        assert!(matches!(store.claim("a", &fp(1), Duration::from_secs(1)).await, Claim::Run), "a was evicted");

        let small = MemoryStore::new(Duration::from_secs(60), 100, 300);
        for id in ["a", "b", "c", "d"] {
            assert!(matches!(small.claim(id, &fp(1), Duration::from_secs(1)).await, Claim::Run));
            small.complete(id, &stored(1));
        }
        assert!(small.len() < 4, "bytes bound evicts");

        let short = MemoryStore::new(Duration::from_millis(20), 10, 1 << 20);
        assert!(matches!(short.claim("a", &fp(1), Duration::from_secs(1)).await, Claim::Run));
        short.complete("a", &stored(1));
        tokio::time::sleep(Duration::from_millis(40)).await;
        assert!(matches!(short.claim("a", &fp(2), Duration::from_secs(1)).await, Claim::Run), "expired");
    }
}
