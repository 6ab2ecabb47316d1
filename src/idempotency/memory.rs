//! Idempotency entries in this process's memory, bounded in count and bytes.
//!
//! One map from `key` to its entry, and a queue of keys in claim order
//! for evicting the oldest first. A running call's entry holds a
//! `tokio::sync::watch` sender that its duplicates wait on; completing the
//! call sends the answer, releasing it drops the sender (the waiters then try
//! to claim the key themselves).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
// tokio's clock (std's outside tests), so the tests can advance it.
use tokio::time::Instant;

use super::{Claim, Fingerprint, IdempotencyError, Store, StoredCall, Token};

/// What an entry costs beyond its answer's JSON: the key twice (map and
/// queue), the fingerprint, the channel. An estimate, so that many tiny
/// answers still count against `max_bytes`.
const ENTRY_OVERHEAD: usize = 256;

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
    /// `(key, claim)` in claim order, for evicting the oldest first. A
    /// pair whose entry is gone or was claimed again is stale and skipped.
    order: VecDeque<(String, u64)>,
    /// Bytes of the answers held (see [`ENTRY_OVERHEAD`]).
    bytes: usize,
    next_claim: u64,
}

struct Entry {
    fingerprint: Fingerprint,
    /// Which claim made this entry.
    claim: u64,
    /// When it was claimed, then when it was answered: the ttl counts from
    /// the answer, as it does in Redis.
    at: Instant,
    /// What the answer counts against `max_bytes`; 0 while running.
    size: usize,
    /// `None` while the first call runs; then its answer.
    answer: watch::Sender<Option<Arc<StoredCall>>>,
}

impl Entry {
    fn is_answered(&self) -> bool {
        self.answer.borrow().is_some()
    }
}

impl MemoryStore {
    /// An empty store keeping answers for `ttl`, at most `max_entries` of
    /// them and `max_bytes` in all.
    pub fn new(ttl: Duration, max_entries: usize, max_bytes: usize) -> MemoryStore {
        MemoryStore { ttl, max_entries: max_entries.max(1), max_bytes, state: Mutex::new(State::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Nothing below panics while holding the lock; a poisoned lock's
        // data is still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// See [`Store::claim`].
    pub async fn claim_now(&self, key: &str, fingerprint: &Fingerprint, wait: Duration) -> Claim {
        let deadline = Instant::now() + wait;
        loop {
            let mut answer = {
                let mut state = self.lock();
                let expired = state.entries.get(key).is_some_and(|e| e.is_answered() && e.at.elapsed() > self.ttl);
                if expired {
                    remove(&mut state, key);
                }
                match state.entries.get(key) {
                    None => {
                        let claim = state.next_claim;
                        state.next_claim += 1;
                        let (answer, _) = watch::channel(None);
                        let entry =
                            Entry { fingerprint: fingerprint.clone(), claim, at: Instant::now(), size: 0, answer };
                        state.entries.insert(key.to_owned(), entry);
                        state.order.push_back((key.to_owned(), claim));
                        self.evict(&mut state);
                        return Claim::Run(Token(u128::from(claim)));
                    }
                    Some(entry) if entry.fingerprint != *fingerprint => return Claim::Conflict,
                    Some(entry) => {
                        if let Some(call) = entry.answer.borrow().as_ref() {
                            return Claim::Replay(call.clone());
                        }
                        entry.answer.subscribe()
                    }
                }
            };
            // The first call is still running: wait for its answer, or for
            // its release (then try to claim the key again).
            let answered = match tokio::time::timeout_at(deadline, answer.wait_for(Option::is_some)).await {
                Ok(Ok(answer)) => answer.as_ref().cloned(),
                Ok(Err(_released)) => None,
                Err(_timeout) => return Claim::InProgress,
            };
            if let Some(call) = answered {
                return Claim::Replay(call);
            }
        }
    }

    /// Stores the answer of claim `token` and wakes its waiters. A claim that
    /// is no longer the key's (which cannot happen in memory, as running
    /// entries are neither expired nor evicted) stores nothing.
    pub fn complete_now(&self, key: &str, token: Token, call: &StoredCall) {
        let size = serde_json::to_vec(call).map_or(0, |b| b.len()) + key.len() + ENTRY_OVERHEAD;
        let mut state = self.lock();
        let Some(entry) = state.entries.get_mut(key).filter(|e| u128::from(e.claim) == token.0) else {
            return;
        };
        entry.answer.send_replace(Some(Arc::new(call.clone())));
        entry.size = size;
        entry.at = Instant::now();
        state.bytes += size;
        self.evict(&mut state);
    }

    /// Drops claim `token` if it is still the key's; its waiters try again.
    pub fn release_now(&self, key: &str, token: Token) {
        let mut state = self.lock();
        let ours = state.entries.get(key).is_some_and(|e| u128::from(e.claim) == token.0 && !e.is_answered());
        if ours {
            remove(&mut state, key);
        }
    }

    /// Drops expired answers and stale queue pairs at the front, then the
    /// oldest answers until within both bounds. Running calls are never
    /// evicted: their duplicates would run the tool again. They are few (one
    /// per call in flight) and hold no answer bytes.
    fn evict(&self, state: &mut State) {
        let State { entries, order, bytes, .. } = state;
        loop {
            // `Some(size)`: an expired answer to drop; `None`: a stale pair.
            let expired = match order.front() {
                None => break,
                Some((key, claim)) => match entries.get(key) {
                    Some(e) if e.claim == *claim && e.is_answered() && e.at.elapsed() > self.ttl => Some(e.size),
                    Some(e) if e.claim == *claim => break,
                    _ => None,
                },
            };
            let Some((key, _)) = order.pop_front() else { break };
            if let Some(size) = expired {
                *bytes = bytes.saturating_sub(size);
                entries.remove(&key);
            }
        }
        let mut running = Vec::new();
        while entries.len() > self.max_entries || *bytes > self.max_bytes {
            let Some((key, claim)) = order.pop_front() else { break };
            match entries.get(&key) {
                Some(e) if e.claim == claim && !e.is_answered() => running.push((key, claim)),
                Some(e) if e.claim == claim => {
                    *bytes = bytes.saturating_sub(e.size);
                    entries.remove(&key);
                }
                _ => {}
            }
        }
        for pair in running.into_iter().rev() {
            order.push_front(pair);
        }
        // Released claims leave stale pairs behind live ones; keep the queue
        // within a small multiple of the map so it cannot grow without bound.
        if order.len() > 2 * entries.len() + 1024 {
            order.retain(|(key, claim)| entries.get(key).is_some_and(|e| e.claim == *claim));
        }
    }

    /// How many entries are held, running calls included.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes counted against `max_bytes`, and the length of the eviction
    /// queue (for tests of the bounds).
    pub fn footprint(&self) -> (usize, usize) {
        let state = self.lock();
        (state.bytes, state.order.len())
    }
}

fn remove(state: &mut State, key: &str) {
    if let Some(entry) = state.entries.remove(key) {
        state.bytes = state.bytes.saturating_sub(entry.size);
    }
}

#[async_trait::async_trait]
impl Store for MemoryStore {
    async fn claim(&self, key: &str, fingerprint: &Fingerprint, wait: Duration) -> Result<Claim, IdempotencyError> {
        Ok(self.claim_now(key, fingerprint, wait).await)
    }

    async fn complete(
        &self,
        key: &str,
        _fingerprint: &Fingerprint,
        token: Token,
        call: &StoredCall,
    ) -> Result<(), IdempotencyError> {
        self.complete_now(key, token, call);
        Ok(())
    }

    async fn release(&self, key: &str, _fingerprint: &Fingerprint, token: Token) -> Result<(), IdempotencyError> {
        self.release_now(key, token);
        Ok(())
    }

    fn release_detached(self: Arc<Self>, key: String, _fingerprint: Fingerprint, token: Token) {
        self.release_now(&key, token);
    }
}

#[cfg(test)]
mod tests {
    use super::super::{CallKey, CallerScope, Decision, IdempotencyStore};
    use super::*;
    use crate::auth::Caller;
    use crate::wire::{CallContext, CallResult};
    use serde_json::json;

    fn key(call_id: &str) -> CallKey {
        CallerScope::of(&Caller::Anonymous, &CallContext::default()).key(call_id)
    }

    const WAIT: Duration = Duration::from_secs(1);

    fn stored(value: i64) -> StoredCall {
        StoredCall {
            result: CallResult {
                call_id: "c".into(),
                duration: 1.0,
                success: true,
                value: Some(json!(value).into()),
                error: None,
            },
            upstream: "u".into(),
        }
    }

    fn fp(input: i64) -> Fingerprint {
        Fingerprint::of("T.t@1.0.0", &json!({"x": input}))
    }

    fn run(claim: Claim) -> Token {
        match claim {
            Claim::Run(token) => token,
            other => panic!("expected Run, got {other:?}"),
        }
    }

    fn replayed(claim: Claim) -> i64 {
        match claim {
            Claim::Replay(call) => call.result.value.as_ref().and_then(|v| v.to_value().as_i64()).expect("a number"),
            other => panic!("expected Replay, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_duplicate_replays_and_a_mismatch_conflicts() {
        let store = MemoryStore::new(Duration::from_secs(60), 10, 1 << 20);
        let token = run(store.claim_now("a", &fp(1), WAIT).await);
        store.complete_now("a", token, &stored(7));
        assert_eq!(replayed(store.claim_now("a", &fp(1), WAIT).await), 7);
        assert!(matches!(store.claim_now("a", &fp(2), WAIT).await, Claim::Conflict));
        // Another tool with the same input is another call too.
        let other_tool = Fingerprint::of("T.t@2.0.0", &json!({"x": 1}));
        assert!(matches!(store.claim_now("a", &other_tool, WAIT).await, Claim::Conflict));
        // The conflict changed nothing.
        assert_eq!(replayed(store.claim_now("a", &fp(1), WAIT).await), 7);
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_duplicates_wait_for_the_first() {
        let store = Arc::new(MemoryStore::new(Duration::from_secs(60), 10, 1 << 20));
        let token = run(store.claim_now("a", &fp(1), WAIT).await);
        let waiters: Vec<_> = (0..5)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move { store.claim_now("a", &fp(1), Duration::from_secs(5)).await })
            })
            .collect();
        // Paused time: the clock moves on only once every waiter is parked
        // on the claim, so this returns when all five are waiting.
        tokio::time::sleep(Duration::from_millis(50)).await;
        store.complete_now("a", token, &stored(9));
        for waiter in waiters {
            assert_eq!(replayed(waiter.await.expect("join")), 9);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_duplicate_gives_up_waiting_at_its_deadline() {
        let store = MemoryStore::new(Duration::from_secs(60), 10, 1 << 20);
        run(store.claim_now("a", &fp(1), WAIT).await);
        let started = Instant::now();
        assert!(matches!(store.claim_now("a", &fp(1), Duration::from_millis(50)).await, Claim::InProgress));
        // On the paused clock: it gave up at its own 50 ms deadline.
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_released_claim_lets_a_retry_or_a_waiter_run() {
        let store = Arc::new(MemoryStore::new(Duration::from_secs(60), 10, 1 << 20));
        let token = run(store.claim_now("a", &fp(1), WAIT).await);
        store.release_now("a", token);
        let token = run(store.claim_now("a", &fp(1), WAIT).await);
        // A waiter on a claim that is then released claims the key itself.
        let waiter = {
            let store = store.clone();
            tokio::spawn(async move { store.claim_now("a", &fp(1), Duration::from_secs(5)).await })
        };
        // Paused time: returns once the waiter is parked on the claim.
        tokio::time::sleep(Duration::from_millis(50)).await;
        store.release_now("a", token);
        let second = run(waiter.await.expect("join"));
        // The first claimer's stale token neither releases nor completes the
        // waiter's claim.
        store.release_now("a", token);
        store.complete_now("a", token, &stored(1));
        assert_eq!(store.len(), 1);
        store.complete_now("a", second, &stored(2));
        assert_eq!(replayed(store.claim_now("a", &fp(1), WAIT).await), 2);
        // Releasing after completion keeps the answer.
        store.release_now("a", second);
        assert_eq!(replayed(store.claim_now("a", &fp(1), WAIT).await), 2);
    }

    #[tokio::test]
    async fn the_oldest_go_first_by_count() {
        let store = MemoryStore::new(Duration::from_secs(60), 2, 1 << 20);
        for id in ["a", "b", "c"] {
            let token = run(store.claim_now(id, &fp(1), WAIT).await);
            store.complete_now(id, token, &stored(1));
        }
        assert_eq!(store.len(), 2);
        assert_eq!(replayed(store.claim_now("c", &fp(1), WAIT).await), 1);
        assert_eq!(replayed(store.claim_now("b", &fp(1), WAIT).await), 1);
        run(store.claim_now("a", &fp(2), WAIT).await);
    }

    #[tokio::test]
    async fn the_oldest_go_first_by_bytes() {
        let one = serde_json::to_vec(&stored(1)).expect("json").len() + 1 + ENTRY_OVERHEAD;
        // Room for three answers, not four.
        let store = MemoryStore::new(Duration::from_secs(60), 100, 3 * one + one / 2);
        for id in ["a", "b", "c", "d"] {
            let token = run(store.claim_now(id, &fp(1), WAIT).await);
            store.complete_now(id, token, &stored(1));
        }
        assert_eq!(store.len(), 3);
        assert_eq!(store.footprint().0, 3 * one);
        assert_eq!(replayed(store.claim_now("d", &fp(1), WAIT).await), 1);
        run(store.claim_now("a", &fp(2), WAIT).await);
        // An answer bigger than the whole budget is not kept.
        let tiny = MemoryStore::new(Duration::from_secs(60), 100, 10);
        let token = run(tiny.claim_now("a", &fp(1), WAIT).await);
        tiny.complete_now("a", token, &stored(1));
        assert_eq!(tiny.footprint().0, 0);
        run(tiny.claim_now("a", &fp(1), WAIT).await);
    }

    #[tokio::test]
    async fn running_calls_are_not_evicted() {
        let store = MemoryStore::new(Duration::from_secs(60), 2, 1 << 20);
        let running = run(store.claim_now("slow", &fp(1), WAIT).await);
        for id in ["a", "b", "c"] {
            let token = run(store.claim_now(id, &fp(1), WAIT).await);
            store.complete_now(id, token, &stored(1));
        }
        assert!(matches!(store.claim_now("slow", &fp(1), Duration::from_millis(10)).await, Claim::InProgress));
        store.complete_now("slow", running, &stored(5));
        assert_eq!(replayed(store.claim_now("slow", &fp(1), WAIT).await), 5);
    }

    #[tokio::test(start_paused = true)]
    async fn answers_expire_after_the_ttl() {
        let store = MemoryStore::new(Duration::from_millis(30), 10, 1 << 20);
        let token = run(store.claim_now("a", &fp(1), WAIT).await);
        store.complete_now("a", token, &stored(1));
        assert_eq!(replayed(store.claim_now("a", &fp(1), WAIT).await), 1);
        // Past the ttl, on the paused clock.
        tokio::time::advance(Duration::from_millis(60)).await;
        // Expired: the id is free again, even for another input.
        let token = run(store.claim_now("a", &fp(2), WAIT).await);
        store.complete_now("a", token, &stored(2));
        // Expired answers at the front are dropped by any later claim too.
        let token = run(store.claim_now("b", &fp(1), WAIT).await);
        store.complete_now("b", token, &stored(1));
        // Past the ttl, on the paused clock.
        tokio::time::advance(Duration::from_millis(60)).await;
        run(store.claim_now("c", &fp(1), WAIT).await);
        assert_eq!(store.len(), 1, "a and b expired; c runs");
        assert_eq!(store.footprint(), (0, 1));
    }

    #[tokio::test]
    async fn released_claims_do_not_grow_the_queue() {
        let store = MemoryStore::new(Duration::from_secs(60), 10, 1 << 20);
        // One answer stays at the front of the queue for the whole test.
        let token = run(store.claim_now("keep", &fp(1), WAIT).await);
        store.complete_now("keep", token, &stored(1));
        for i in 0..10_000 {
            let id = format!("failing-{i}");
            let token = run(store.claim_now(&id, &fp(1), WAIT).await);
            store.release_now(&id, token);
        }
        assert_eq!(store.len(), 1);
        assert!(store.footprint().1 < 1100, "queue {}", store.footprint().1);
    }

    #[tokio::test]
    async fn a_dropped_claim_is_released() {
        let store = IdempotencyStore::memory(Duration::from_secs(60), 10, 1 << 20);
        let Ok(Decision::Run(pending)) = store.claim(&key("a"), &fp(1), WAIT).await else { panic!("expected Run") };
        // The request future was dropped (client gone): nothing stored, and
        // the next call with the id runs.
        drop(pending);
        let Ok(Decision::Run(pending)) = store.claim(&key("a"), &fp(1), WAIT).await else { panic!("expected Run") };
        pending.complete(&stored(3)).await;
        match store.claim(&key("a"), &fp(1), WAIT).await {
            Ok(Decision::Replay(call)) => assert_eq!(call.result.value, Some(json!(3).into())),
            other => panic!("{other:?}"),
        }
        assert!(matches!(store.claim(&key("a"), &fp(2), WAIT).await, Ok(Decision::Conflict)));
        let stats = store.stats();
        assert_eq!((stats.stored, stats.replayed, stats.conflict), (1, 1, 1));
    }
}
