//! Idempotent calls: the spec calls `call_id` "an idempotency key".
//!
//! A `call_id` belongs to its caller. A call whose client-sent `call_id` the
//! same caller used within the ttl, for the same resolved tool and input,
//! gets the first call's answer again without the tool
//! being called. A duplicate that arrives while the first is still running
//! waits for it. The same caller's `call_id` with another tool or input is
//! refused. Another caller's identical `call_id` is simply their own call:
//! entries are keyed by [`CallKey`], a digest of the caller ([`CallerScope`])
//! and the `call_id`, so nobody can read, plant, probe or block another
//! caller's answers. Entries live in memory ([`memory`]) or, to share them
//! between replicas, in Redis ([`redis`]); both implement [`Store`].
//!
//! The life of a key: [`IdempotencyStore::claim`] either hands back the
//! stored answer or a [`Pending`] claim. The caller runs the call and then
//! [`Pending::complete`]s it (its answer is stored) or
//! [`Pending::release`]s it (nothing is stored, a retry may run). A claim
//! that is dropped without either, because the request future was cancelled
//! or panicked, is released by its `Drop`, so a vanished client cannot block
//! its `call_id` for the whole ttl.

pub mod memory;
pub mod redis;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::auth::Caller;
use crate::config::IdempotencyConfig;
use crate::redis_client::SharedRedis;
use crate::wire::{CallContext, CallResult};

/// Who a `call_id` belongs to: the authenticated caller (how they were
/// identified and their user id), or for an anonymous caller everything
/// that identifies them to the tool, the `context` they sent (their
/// `user_id` included). A digest: secrets a client sent in its context are
/// never kept, only mixed into it.
#[derive(Clone, PartialEq, Eq)]
pub struct CallerScope([u8; 32]);

impl CallerScope {
    /// The scope of `caller`, who sent `context` (before the gateway
    /// injected anything into it).
    pub fn of(caller: &Caller, context: &CallContext) -> CallerScope {
        let mut hasher = Sha256::new();
        match caller {
            Caller::Jwt { user_id, .. } => feed(&mut hasher, &["jwt", user_id]),
            Caller::ApiKey { user_id } => feed(&mut hasher, &["api-key", user_id]),
            Caller::Anonymous => {
                feed(&mut hasher, &["anonymous"]);
                canonical(&mut hasher, &serde_json::to_value(context).unwrap_or_default());
            }
        }
        CallerScope(hasher.finalize().into())
    }

    /// The store key of this caller's `call_id`.
    pub fn key(&self, call_id: &str) -> CallKey {
        let mut hasher = Sha256::new();
        hasher.update(self.0);
        hasher.update(call_id.as_bytes());
        CallKey(hex(&hasher.finalize()))
    }

    /// The `call_id` an upstream sees for this caller's `call_id`: prefixed
    /// with 64 bits of the scope, so that two callers' equal ids never reach
    /// an upstream (which may deduplicate on them too) as one id.
    pub fn forwarded_call_id(&self, call_id: &str) -> String {
        format!("{}.{call_id}", hex(&self.0[..8]))
    }
}

impl std::fmt::Debug for CallerScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallerScope(..)")
    }
}

/// Where a caller's `call_id` is stored: 64 hex digits of a digest of the
/// caller's scope and the `call_id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallKey(String);

impl CallKey {
    /// As text, for storage.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Feeds length-prefixed parts, so that no two lists feed the same bytes.
fn feed(hasher: &mut Sha256, parts: &[&str]) {
    for part in parts {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part.as_bytes());
    }
}

/// Lower-case hex digits of `bytes`.
fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    out
}

/// What makes two calls with one `call_id` the same call: what the caller
/// sent, the resolved tool id and the input, hashed. Not what the gateway
/// injected: a retry after a token refresh or a secret rotation is the same
/// call (refusing it would invite a second run under a new id), and no
/// digest of a secret is stored beside the answer. Who the caller is lives
/// in the key ([`CallerScope`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint(String);

impl Fingerprint {
    /// Hashes the resolved tool id (version included) and the input in a
    /// canonical form: object keys sorted at every level. Sorting here
    /// rather than relying on serde_json's default `BTreeMap` keeps two
    /// equal inputs equal even if some dependency turns serde_json's
    /// `preserve_order` on.
    pub fn of(tool: &str, input: &Value) -> Fingerprint {
        let mut hasher = Sha256::new();
        // Told apart from the fingerprints of earlier releases, which
        // covered the injected context.
        hasher.update(b"call v3\0");
        hasher.update(tool.as_bytes());
        hasher.update([0]);
        canonical(&mut hasher, input);
        Fingerprint(hex(&hasher.finalize()))
    }

    /// As text (64 hex digits), for storage.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Feeds `value` as JSON with sorted object keys. Scalars are written by
/// serde_json (strings escaped), so no two different values feed the same
/// bytes. A number is fed as the client wrote it (serde_json's
/// `arbitrary_precision`): `98765432109876543210` and `98765432109876543211`
/// differ, as do `1e2` and `100`; before, numbers past 64 bits were rounded
/// to one float and such inputs were the same call. The depth is bounded:
/// serde_json refuses to parse deeper than 128.
fn canonical(hasher: &mut Sha256, value: &Value) {
    match value {
        Value::Object(map) => {
            let mut fields: Vec<_> = map.iter().collect();
            fields.sort_unstable_by(|a, b| a.0.cmp(b.0));
            hasher.update(b"{");
            for (key, field) in fields {
                hasher.update(Value::String(key.clone()).to_string().as_bytes());
                hasher.update(b":");
                canonical(hasher, field);
                hasher.update(b",");
            }
            hasher.update(b"}");
        }
        Value::Array(items) => {
            hasher.update(b"[");
            for item in items {
                canonical(hasher, item);
                hasher.update(b",");
            }
            hasher.update(b"]");
        }
        scalar => hasher.update(scalar.to_string().as_bytes()),
    }
}

/// A finished call as stored: what is replayed to a duplicate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredCall {
    /// The answer.
    pub result: CallResult,
    /// The upstream that answered.
    pub upstream: String,
}

/// Identifies one claim of a key, so that a claimer whose claim was lost
/// (expired, then claimed by another) never completes or releases someone
/// else's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Token(pub u128);

/// What a [`Store`] said about a call.
#[derive(Debug)]
pub enum Claim {
    /// First of its `call_id`: run it, then complete or release this claim.
    Run(Token),
    /// A duplicate: this is the first call's answer.
    Replay(Arc<StoredCall>),
    /// The `call_id` was used for another tool or input.
    Conflict,
    /// The first call with this `call_id` was still running when the wait
    /// ended.
    InProgress,
}

/// Why a store could not answer (the call then runs without deduplication).
#[derive(Debug, thiserror::Error)]
pub enum IdempotencyError {
    /// Redis could not be reached, answered an error, or held something
    /// unreadable.
    #[error("idempotency store unavailable: {0}")]
    Unavailable(String),
    /// `store` is not a usable `redis://` URL.
    #[error("idempotency store {0:?} is not a redis:// URL")]
    BadStore(String),
}

/// Where entries live: implemented in memory and in Redis.
#[async_trait::async_trait]
pub trait Store: Send + Sync {
    /// Claims `key` (a [`CallKey`]) for `fingerprint`, waiting up to `wait`
    /// for a concurrent first call to finish.
    async fn claim(&self, key: &str, fingerprint: &Fingerprint, wait: Duration) -> Result<Claim, IdempotencyError>;

    /// Stores the answer of the call claimed with `token`; its waiters get it.
    async fn complete(
        &self,
        key: &str,
        fingerprint: &Fingerprint,
        token: Token,
        call: &StoredCall,
    ) -> Result<(), IdempotencyError>;

    /// Gives the claim made with `token` up: the next claim of `key` runs.
    async fn release(&self, key: &str, fingerprint: &Fingerprint, token: Token) -> Result<(), IdempotencyError>;

    /// [`Store::release`] from synchronous code (a dropped [`Pending`]): at
    /// once, or on a spawned task.
    fn release_detached(self: Arc<Self>, key: String, fingerprint: Fingerprint, token: Token);
}

/// Counts of what the store decided, for `otc_gateway_idempotency_total`.
#[derive(Debug, Default)]
struct Counters {
    replayed: AtomicU64,
    conflict: AtomicU64,
    in_progress: AtomicU64,
    stored: AtomicU64,
    unavailable: AtomicU64,
}

impl Counters {
    fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Totals since the store was built, by the `result` label of
/// `otc_gateway_idempotency_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IdempotencyStats {
    /// Duplicates answered from a stored call.
    pub replayed: u64,
    /// `call_id`s reused for another call (400).
    pub conflict: u64,
    /// Duplicates whose first call was still running after the wait (400).
    pub in_progress: u64,
    /// Answers stored.
    pub stored: u64,
    /// Claims or stores the store could not answer (calls ran without
    /// deduplication).
    pub unavailable: u64,
}

impl IdempotencyStats {
    /// `(result label, total)` pairs.
    pub fn by_result(&self) -> [(&'static str, u64); 5] {
        [
            ("replayed", self.replayed),
            ("conflict", self.conflict),
            ("in_progress", self.in_progress),
            ("stored", self.stored),
            ("store_unavailable", self.unavailable),
        ]
    }
}

/// What to do with a call, as [`IdempotencyStore::claim`] decided.
#[derive(Debug)]
pub enum Decision {
    /// Run it, then [`Pending::complete`] or [`Pending::release`].
    Run(Pending),
    /// A duplicate: the first call's answer.
    Replay(Arc<StoredCall>),
    /// The `call_id` was used for another tool or input.
    Conflict,
    /// The first call with this `call_id` is still running.
    InProgress,
}

/// The configured store, with counters.
pub struct IdempotencyStore {
    store: Arc<dyn Store>,
    kind: &'static str,
    counters: Arc<Counters>,
}

impl IdempotencyStore {
    /// Builds the store the config names. A Redis that cannot be reached yet
    /// is not an error (see [`redis::RedisStore::connect`]); a URL that is
    /// not one is.
    pub async fn build(config: &IdempotencyConfig) -> Result<IdempotencyStore, IdempotencyError> {
        IdempotencyStore::build_sharing(config, None).await
    }

    /// As [`IdempotencyStore::build`], in `shared` when the store is that
    /// Redis (`[state] redis`): one connection for every store in it.
    pub(crate) async fn build_sharing(
        config: &IdempotencyConfig,
        shared: Option<&Arc<SharedRedis>>,
    ) -> Result<IdempotencyStore, IdempotencyError> {
        let Some(url) = &config.store else {
            return Ok(IdempotencyStore::memory(config.ttl.0, config.max_entries, config.max_bytes));
        };
        let shown = crate::config::redact(url);
        let redis = match shared.filter(|r| r.is_for(url)) {
            Some(shared) => shared.clone(),
            None if url.starts_with("redis://") => {
                Arc::new(SharedRedis::connect(url).map_err(|e| IdempotencyError::BadStore(format!("{shown}: {e}")))?)
            }
            None => return Err(IdempotencyError::BadStore(shown)),
        };
        Ok(IdempotencyStore::with(Arc::new(redis::RedisStore::connect(redis, shown, config.ttl.0).await), "redis"))
    }

    /// An in-memory store.
    pub fn memory(ttl: Duration, max_entries: usize, max_bytes: usize) -> IdempotencyStore {
        IdempotencyStore::with(Arc::new(memory::MemoryStore::new(ttl, max_entries, max_bytes)), "memory")
    }

    fn with(store: Arc<dyn Store>, kind: &'static str) -> IdempotencyStore {
        IdempotencyStore { store, kind, counters: Arc::default() }
    }

    /// Claims a caller's `call_id` (its `key`) for this fingerprint,
    /// waiting up to `wait` for a concurrent first call to finish. An error
    /// means the store could not answer; the caller decides what to do (the
    /// gateway runs the call).
    pub async fn claim(
        &self,
        key: &CallKey,
        fingerprint: &Fingerprint,
        wait: Duration,
    ) -> Result<Decision, IdempotencyError> {
        let counters = &self.counters;
        match self.store.claim(key.as_str(), fingerprint, wait).await {
            Ok(Claim::Run(token)) => Ok(Decision::Run(Pending {
                store: self.store.clone(),
                counters: self.counters.clone(),
                key: key.as_str().to_owned(),
                fingerprint: fingerprint.clone(),
                token,
                settled: false,
            })),
            Ok(Claim::Replay(call)) => {
                Counters::bump(&counters.replayed);
                Ok(Decision::Replay(call))
            }
            Ok(Claim::Conflict) => {
                Counters::bump(&counters.conflict);
                Ok(Decision::Conflict)
            }
            Ok(Claim::InProgress) => {
                Counters::bump(&counters.in_progress);
                Ok(Decision::InProgress)
            }
            Err(e) => {
                Counters::bump(&counters.unavailable);
                Err(e)
            }
        }
    }

    /// Totals since this store was built.
    pub fn stats(&self) -> IdempotencyStats {
        let c = &self.counters;
        IdempotencyStats {
            replayed: c.replayed.load(Ordering::Relaxed),
            conflict: c.conflict.load(Ordering::Relaxed),
            in_progress: c.in_progress.load(Ordering::Relaxed),
            stored: c.stored.load(Ordering::Relaxed),
            unavailable: c.unavailable.load(Ordering::Relaxed),
        }
    }
}

impl std::fmt::Debug for IdempotencyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotencyStore").field("kind", &self.kind).finish_non_exhaustive()
    }
}

/// A claimed `call_id` whose call is running. Released when dropped unless
/// completed or released first.
pub struct Pending {
    store: Arc<dyn Store>,
    counters: Arc<Counters>,
    key: String,
    fingerprint: Fingerprint,
    token: Token,
    settled: bool,
}

impl Pending {
    /// Stores the call's answer for its duplicates. A store that fails here
    /// is logged and counted; the claim is then released (by `Drop`) so that
    /// duplicates are not left waiting for an answer that never comes.
    pub async fn complete(mut self, call: &StoredCall) {
        match self.store.complete(&self.key, &self.fingerprint, self.token, call).await {
            Ok(()) => {
                Counters::bump(&self.counters.stored);
                self.settled = true;
            }
            Err(e) => {
                Counters::bump(&self.counters.unavailable);
                tracing::warn!(error = %e, "could not store a call's answer for idempotency");
            }
        }
    }

    /// Gives the claim up: the call ended before the tool answered, so a
    /// retry with the same `call_id` may run it.
    pub async fn release(mut self) {
        // Marked first: if this fails there is nothing better to do than the
        // same attempt again in `Drop`; the claim expires in the store anyway.
        self.settled = true;
        if let Err(e) = self.store.release(&self.key, &self.fingerprint, self.token).await {
            Counters::bump(&self.counters.unavailable);
            tracing::warn!(error = %e, "could not release an idempotency claim");
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.settled {
            let key = std::mem::take(&mut self.key);
            let fingerprint = self.fingerprint.clone();
            self.store.clone().release_detached(key, fingerprint, self.token);
        }
    }
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending").field("key", &self.key).field("token", &self.token).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_fingerprint_ignores_key_order_and_sees_everything_else() {
        let a = Fingerprint::of("T.t@1.0.0", &json!({"a": 1, "b": {"x": [1, 2], "y": "s"}}));
        let reordered: Value = serde_json::from_str(r#"{"b": {"y": "s", "x": [1, 2]}, "a": 1}"#).expect("json");
        assert_eq!(a, Fingerprint::of("T.t@1.0.0", &reordered));
        assert_ne!(a, Fingerprint::of("T.t@1.0.1", &reordered), "the version counts");
        assert_ne!(a, Fingerprint::of("T.t@1.0.0", &json!({"a": 1, "b": {"x": [2, 1], "y": "s"}})));
        assert_ne!(a, Fingerprint::of("T.t@1.0.0", &json!({"a": "1", "b": {"x": [1, 2], "y": "s"}})));
        // A key that looks like a separator cannot fake another structure.
        assert_ne!(
            Fingerprint::of("T", &json!({"a": {"b": 1}})),
            Fingerprint::of("T", &serde_json::from_str(r#"{"a\":{\"b": 1}"#).expect("json"))
        );
        assert_eq!(a.as_str().len(), 64);
    }

    fn context(json: Value) -> CallContext {
        serde_json::from_value(json).expect("a context")
    }

    #[test]
    fn a_scope_is_who_the_caller_is() {
        let jwt = Caller::Jwt { user_id: "ann".into(), claims: Value::Null };
        let key = Caller::ApiKey { user_id: "ann".into() };
        let empty = CallContext::default();
        let claims_ann = context(json!({"user_id": "ann"}));
        let scopes = [
            CallerScope::of(&jwt, &empty),
            CallerScope::of(&key, &empty),
            CallerScope::of(&Caller::Anonymous, &claims_ann),
            CallerScope::of(&Caller::Anonymous, &empty),
            CallerScope::of(&Caller::Anonymous, &context(json!({"user_id": "ann", "tenant": "x"}))),
        ];
        for (i, a) in scopes.iter().enumerate() {
            for b in &scopes[i + 1..] {
                assert_ne!(a.key("c-1"), b.key("c-1"));
            }
        }
        // An authenticated caller is themselves whatever context they send.
        assert_eq!(CallerScope::of(&jwt, &claims_ann).key("c-1"), scopes[0].key("c-1"));
        assert_eq!(
            CallerScope::of(&Caller::Anonymous, &context(json!({"user_id": "ann"}))).key("c-1"),
            scopes[2].key("c-1")
        );
        assert_ne!(scopes[0].key("c-1"), scopes[0].key("c-2"));
        assert_eq!(scopes[0].key("c-1").as_str().len(), 64);
        let forwarded = scopes[0].forwarded_call_id("c-1");
        assert!(forwarded.ends_with(".c-1") && forwarded.len() == 16 + 1 + 3, "{forwarded}");
        assert_ne!(forwarded, scopes[1].forwarded_call_id("c-1"));
    }

    #[test]
    fn numbers_count_digit_for_digit() {
        let of = |text: &str| Fingerprint::of("T", &serde_json::from_str(text).expect("json"));
        assert_eq!(of(r#"{"n": 98765432109876543210}"#), of(r#"{"n": 98765432109876543210}"#));
        assert_ne!(of(r#"{"n": 98765432109876543210}"#), of(r#"{"n": 98765432109876543211}"#));
        assert_ne!(of(r#"{"n": 1.000000000000000000001}"#), of(r#"{"n": 1.000000000000000000002}"#));
        // Numbers are compared as written.
        assert_ne!(of(r#"{"n": 100}"#), of(r#"{"n": 1e2}"#));
    }
}
