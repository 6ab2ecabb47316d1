//! Idempotent calls: the spec calls `call_id` "an idempotency key".
//!
//! A call whose client-sent `call_id` was seen within the ttl, for the same
//! resolved tool and the same input, gets the first call's answer again
//! without the tool being called. A duplicate that arrives while the first is
//! still running waits for it. The same `call_id` with another tool or input
//! is refused. Entries live in memory ([`memory`]) or, to share them between
//! replicas, in Redis ([`redis`]).

pub mod memory;
pub mod redis;

use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::config::Dur;
use crate::wire::CallResult;

/// `[idempotency]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IdempotencyConfig {
    /// How long a call's answer is kept for its `call_id`.
    pub ttl: Dur,
    /// `redis://host:port[/db]` to share entries between replicas; in memory
    /// when absent.
    pub store: Option<String>,
    /// In memory: the most entries kept (the oldest go first).
    pub max_entries: usize,
    /// In memory: the most bytes of answers kept (the oldest go first).
    pub max_bytes: usize,
}

impl Default for IdempotencyConfig {
    fn default() -> Self {
        IdempotencyConfig {
            ttl: Dur(Duration::from_secs(600)),
            store: None,
            max_entries: 100_000,
            max_bytes: 64 * 1024 * 1024,
        }
    }
}

/// What makes two calls with one `call_id` the same call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint(String);

impl Fingerprint {
    /// The resolved tool id and a hash of the input (serde_json writes object
    /// keys in sorted order, so equal inputs hash equally).
    pub fn of(tool: &str, input: &serde_json::Value) -> Fingerprint {
        let mut hasher = Sha256::new();
        hasher.update(tool.as_bytes());
        hasher.update([0]);
        hasher.update(serde_json::to_vec(input).unwrap_or_default());
        let digest = hasher.finalize();
        Fingerprint(digest.iter().map(|b| format!("{b:02x}")).collect())
    }

    /// As text, for storage.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A finished call as stored: what is replayed to a duplicate.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredCall {
    /// The answer.
    pub result: CallResult,
    /// The upstream that answered.
    pub upstream: String,
}

/// What to do with a call.
#[derive(Debug)]
pub enum Claim {
    /// First of its `call_id`: run it, then `complete` or `release`.
    Run,
    /// A duplicate: this is the first call's answer.
    Replay(StoredCall),
    /// The `call_id` was used for another tool or input.
    Conflict,
    /// The first call with this `call_id` is still running after the wait.
    InProgress,
}

/// Why the store could not answer (the call then runs without deduplication).
#[derive(Debug, thiserror::Error)]
pub enum IdempotencyError {
    /// Redis could not be reached or answered an error.
    #[error("idempotency store unavailable: {0}")]
    Unavailable(String),
    /// `store` is not a `redis://` URL.
    #[error("idempotency store {0:?} is not a redis:// URL")]
    BadStore(String),
}

/// Where entries live.
pub enum IdempotencyStore {
    /// This process only.
    Memory(memory::MemoryStore),
    /// Shared by every replica using the same Redis.
    Redis(redis::RedisStore),
}

impl IdempotencyStore {
    /// Builds the store the config names.
    pub async fn build(config: &IdempotencyConfig) -> Result<IdempotencyStore, IdempotencyError> {
        match &config.store {
            None => Ok(IdempotencyStore::Memory(memory::MemoryStore::new(config.ttl.0, config.max_entries, config.max_bytes))),
            Some(url) => Ok(IdempotencyStore::Redis(redis::RedisStore::connect(url, config.ttl.0).await?)),
        }
    }

    /// Claims `call_id` for this fingerprint, waiting up to `wait` for a
    /// concurrent first call to finish.
    pub async fn claim(&self, call_id: &str, fingerprint: &Fingerprint, wait: Duration) -> Result<Claim, IdempotencyError> {
        match self {
            IdempotencyStore::Memory(m) => Ok(m.claim(call_id, fingerprint, wait).await),
            IdempotencyStore::Redis(r) => r.claim(call_id, fingerprint, wait).await,
        }
    }

    /// Stores the answer of a claimed call.
    pub async fn complete(&self, call_id: &str, fingerprint: &Fingerprint, call: &StoredCall) {
        match self {
            IdempotencyStore::Memory(m) => m.complete(call_id, call),
            IdempotencyStore::Redis(r) => r.complete(call_id, fingerprint, call).await,
        }
    }

    /// Gives a claim up (the call failed before the tool ran): a retry with
    /// the same `call_id` may run.
    pub async fn release(&self, call_id: &str) {
        match self {
            IdempotencyStore::Memory(m) => m.release(call_id),
            IdempotencyStore::Redis(r) => r.release(call_id).await,
        }
    }
}

impl std::fmt::Debug for IdempotencyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IdempotencyStore::Memory(_) => f.write_str("IdempotencyStore::Memory"),
            IdempotencyStore::Redis(_) => f.write_str("IdempotencyStore::Redis"),
        }
    }
}
