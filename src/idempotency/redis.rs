//! Idempotency entries in Redis, shared by every replica.
//!
//! A key `otc-gateway:idem:v2:<key>` (the call's [`super::CallKey`]: a digest
//! of its caller and `call_id`, so neither is stored in clear) holds
//! `P <fingerprint> <token>` while
//! its first call runs and `D <fingerprint> <answer JSON>` once it answered.
//! The claim is `SET key P… NX PX <wait>`: exactly one replica wins it, and
//! a replica that dies mid-call leaves a claim that expires once the call
//! could no longer be running (the upstream's call timeout plus a margin),
//! not after the whole ttl. The answer is stored with `PX <ttl>`. Duplicates,
//! on any replica, poll the key with backoff until it holds the answer.
//!
//! Completing and releasing are compare-and-set scripts on the claim's
//! token, so a replica whose claim expired never overwrites or deletes
//! another replica's.
//!
//! Redis trouble never fails a call: every command is bounded by
//! [`COMMAND_TIMEOUT`], an error is returned to the caller (which runs the
//! call without deduplication), and for [`DOWN_PAUSE`] after a failure claims
//! do not even try, so an outage adds no latency to every call.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::FromRedisValue;

use super::{Claim, Fingerprint, IdempotencyError, Store, StoredCall, Token};
use crate::redis_client::{self, SharedRedis};

/// Every key this store writes starts with this. `v2`: keys are scoped to
/// their caller; entries written before (`otc-gateway:idem:<call_id>`, for
/// anyone with the `call_id`) are never read.
pub const PREFIX: &str = "otc-gateway:idem:v2:";

/// The longest one Redis command may take, connecting included.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(1);

/// After a failed command, claims skip Redis this long.
pub const DOWN_PAUSE: Duration = Duration::from_secs(1);

/// First and longest pause between two polls of a running call's key.
const POLL_FIRST: Duration = Duration::from_millis(10);
const POLL_MAX: Duration = Duration::from_millis(100);

/// Stores the answer if the key still holds this claim, or nothing (the
/// claim expired while the call ran and nobody claimed it since).
const COMPLETE: &str = r"
local v = redis.call('GET', KEYS[1])
if v == false or v == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
";

/// Deletes the key if it still holds this claim.
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

/// The Redis store.
pub struct RedisStore {
    redis: Arc<SharedRedis>,
    ttl: Duration,
    /// Until when claims skip Redis after a failure.
    down_until: Mutex<Option<Instant>>,
}

impl RedisStore {
    /// The store in `redis` (`shown`: its URL without password, for the
    /// log). A Redis that does not answer yet is not an error: it is logged,
    /// and calls run without deduplication until it answers (the connection
    /// manager reconnects). Refusing to start would make a cache outage stop
    /// deploys and restarts of a gateway that works fine without it.
    pub(crate) async fn connect(redis: Arc<SharedRedis>, shown: String, ttl: Duration) -> RedisStore {
        let store = RedisStore { redis, ttl, down_until: Mutex::new(None) };
        match store.run::<String>(&redis::cmd("PING")).await {
            Ok(_) => tracing::info!(store = %shown, "idempotency store connected"),
            Err(e) => tracing::error!(
                store = %shown,
                error = %e,
                "idempotency store unreachable; calls run without deduplication until it answers"
            ),
        }
        store
    }

    /// Runs one command within [`COMMAND_TIMEOUT`]; a failure pauses claims.
    async fn run<T: FromRedisValue>(&self, command: &redis::Cmd) -> Result<T, IdempotencyError> {
        let mut connection = self.redis.connection();
        let error = match redis_client::bounded(COMMAND_TIMEOUT, command.query_async::<T>(&mut connection)).await {
            Ok(value) => return Ok(value),
            Err(e) => IdempotencyError::Unavailable(e),
        };
        *self.down_until.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now() + DOWN_PAUSE);
        Err(error)
    }

    fn paused(&self) -> bool {
        self.down_until.lock().unwrap_or_else(|p| p.into_inner()).is_some_and(|until| Instant::now() < until)
    }
}

fn redis_key(key: &str) -> String {
    format!("{PREFIX}{key}")
}

fn pending_value(fingerprint: &Fingerprint, token: Token) -> String {
    format!("P {} {:032x}", fingerprint.as_str(), token.0)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

#[async_trait::async_trait]
impl Store for RedisStore {
    async fn claim(&self, key: &str, fingerprint: &Fingerprint, wait: Duration) -> Result<Claim, IdempotencyError> {
        if self.paused() {
            return Err(IdempotencyError::Unavailable("paused after a recent failure".into()));
        }
        let key = redis_key(key);
        let token = Token(uuid::Uuid::new_v4().as_u128());
        let pending = pending_value(fingerprint, token);
        let deadline = Instant::now() + wait;
        let mut pause = POLL_FIRST;
        loop {
            let mut set = redis::cmd("SET");
            set.arg(&key).arg(&pending).arg("NX").arg("PX").arg(millis(wait));
            if self.run::<Option<String>>(&set).await?.is_some() {
                return Ok(Claim::Run(token));
            }
            let current: Option<String> = self.run(redis::cmd("GET").arg(&key)).await?;
            match current.as_deref().map(parse) {
                // Released or expired between the two commands: claim again.
                None => continue,
                Some(Stored::Pending(fp)) if fp == fingerprint.as_str() => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(Claim::InProgress);
                    }
                    tokio::time::sleep(pause.min(left)).await;
                    pause = (pause * 2).min(POLL_MAX);
                }
                Some(Stored::Done(fp, answer)) if fp == fingerprint.as_str() => {
                    return serde_json::from_str::<StoredCall>(answer)
                        .map(|call| Claim::Replay(Arc::new(call)))
                        .map_err(|e| IdempotencyError::Unavailable(format!("unreadable stored answer: {e}")));
                }
                // Another fingerprint, or a value this store did not write:
                // either way not this call's, so not to be run as if it were.
                Some(_) => return Ok(Claim::Conflict),
            }
        }
    }

    async fn complete(
        &self,
        key: &str,
        fingerprint: &Fingerprint,
        token: Token,
        call: &StoredCall,
    ) -> Result<(), IdempotencyError> {
        let answer = serde_json::to_string(call).map_err(|e| IdempotencyError::Unavailable(e.to_string()))?;
        let mut script = redis::cmd("EVAL");
        script
            .arg(COMPLETE)
            .arg(1)
            .arg(redis_key(key))
            .arg(pending_value(fingerprint, token))
            .arg(format!("D {} {answer}", fingerprint.as_str()))
            .arg(millis(self.ttl));
        if self.run::<i64>(&script).await? == 0 {
            // Our claim expired and another call claimed the id: its answer
            // is the one duplicates will get.
            tracing::debug!(key, "idempotency claim lost before the answer; not stored");
        }
        Ok(())
    }

    async fn release(&self, key: &str, fingerprint: &Fingerprint, token: Token) -> Result<(), IdempotencyError> {
        let mut script = redis::cmd("EVAL");
        script.arg(RELEASE).arg(1).arg(redis_key(key)).arg(pending_value(fingerprint, token));
        self.run::<i64>(&script).await.map(drop)
    }

    fn release_detached(self: Arc<Self>, key: String, fingerprint: Fingerprint, token: Token) {
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move {
                    if let Err(e) = self.release(&key, &fingerprint, token).await {
                        tracing::warn!(error = %e, "could not release an abandoned idempotency claim; it expires by itself");
                    }
                });
            }
            Err(_) => tracing::debug!("no tokio runtime to release an idempotency claim; it expires by itself"),
        }
    }
}

enum Stored<'a> {
    Pending(&'a str),
    Done(&'a str, &'a str),
    Other,
}

fn parse(value: &str) -> Stored<'_> {
    let mut parts = value.splitn(3, ' ');
    match (parts.next(), parts.next(), parts.next()) {
        (Some("P"), Some(fp), Some(_token)) => Stored::Pending(fp),
        (Some("D"), Some(fp), Some(answer)) => Stored::Done(fp, answer),
        _ => Stored::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_and_passwords_are_hidden() {
        let fp = Fingerprint::of("T", &serde_json::json!({}));
        let pending = pending_value(&fp, Token(7));
        assert!(matches!(parse(&pending), Stored::Pending(f) if f == fp.as_str()));
        assert!(matches!(parse("D abc {\"x\": 1}"), Stored::Done("abc", "{\"x\": 1}")));
        assert!(matches!(parse("junk"), Stored::Other));
        assert_eq!(crate::config::redact("redis://:hunter2@cache:6379/1"), "redis://***@cache:6379/1");
        assert_eq!(crate::config::redact("redis://cache:6379"), "redis://cache:6379");
    }
}
