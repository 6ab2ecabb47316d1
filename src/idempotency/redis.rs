//! Idempotency entries in Redis, shared by every replica.
//!
//! A key holds `P <fingerprint>` while its first call runs (set with NX, so
//! exactly one replica claims it) and `D <fingerprint> <answer JSON>` once it
//! finished, both expiring after the ttl. Duplicates poll until the answer is
//! there.

use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;
use redis::AsyncCommands;

use super::{Claim, Fingerprint, IdempotencyError, StoredCall};

const PREFIX: &str = "otc-gateway:idem:";

/// The Redis store.
pub struct RedisStore {
    connection: ConnectionManager,
    ttl: Duration,
}

impl RedisStore {
    /// Connects (with reconnection handled by the connection manager).
    pub async fn connect(url: &str, ttl: Duration) -> Result<RedisStore, IdempotencyError> {
        if !url.starts_with("redis://") {
            return Err(IdempotencyError::BadStore(url.to_owned()));
        }
        let client = redis::Client::open(url).map_err(|e| IdempotencyError::BadStore(format!("{url}: {e}")))?;
        let connection = tokio::time::timeout(Duration::from_secs(5), ConnectionManager::new(client))
            .await
            .map_err(|_| IdempotencyError::Unavailable(format!("{url}: no connection within 5s")))?
            .map_err(|e| IdempotencyError::Unavailable(e.to_string()))?;
        Ok(RedisStore { connection, ttl })
    }

    fn ttl_ms(&self) -> u64 {
        u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX).max(1)
    }

    /// See [`super::IdempotencyStore::claim`].
    pub async fn claim(&self, call_id: &str, fingerprint: &Fingerprint, wait: Duration) -> Result<Claim, IdempotencyError> {
        let key = format!("{PREFIX}{call_id}");
        let pending = format!("P {}", fingerprint.as_str());
        let deadline = Instant::now() + wait;
        let mut connection = self.connection.clone();
        loop {
            let claimed: Option<String> = redis::cmd("SET")
                .arg(&key)
                .arg(&pending)
                .arg("NX")
                .arg("PX")
                .arg(self.ttl_ms())
                .query_async(&mut connection)
                .await
                .map_err(unavailable)?;
            if claimed.is_some() {
                return Ok(Claim::Run);
            }
            let current: Option<String> = connection.get(&key).await.map_err(unavailable)?;
            match current.as_deref().map(parse) {
                // Released or expired between the two commands: claim again.
                None => continue,
                Some(Stored::Other) => return Ok(Claim::Conflict),
                Some(Stored::Pending(fp)) if fp != fingerprint.as_str() => return Ok(Claim::Conflict),
                Some(Stored::Done(fp, _)) if fp != fingerprint.as_str() => return Ok(Claim::Conflict),
                Some(Stored::Done(_, answer)) => {
                    return serde_json::from_str(answer)
                        .map(Claim::Replay)
                        .map_err(|e| IdempotencyError::Unavailable(format!("unreadable stored answer: {e}")))
                }
                Some(Stored::Pending(_)) => {
                    if Instant::now() > deadline {
                        return Ok(Claim::InProgress);
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }

    /// Stores the answer of a claimed call.
    pub async fn complete(&self, call_id: &str, fingerprint: &Fingerprint, call: &StoredCall) {
        let Ok(answer) = serde_json::to_string(call) else { return };
        let mut connection = self.connection.clone();
        let stored: Result<(), _> = redis::cmd("SET")
            .arg(format!("{PREFIX}{call_id}"))
            .arg(format!("D {} {answer}", fingerprint.as_str()))
            .arg("PX")
            .arg(self.ttl_ms())
            .query_async(&mut connection)
            .await;
        if let Err(e) = stored {
            tracing::warn!(error = %e, "could not store a call's answer for idempotency");
        }
    }

    /// Drops a claim so a retry may run.
    pub async fn release(&self, call_id: &str) {
        let mut connection = self.connection.clone();
        let removed: Result<(), _> = connection.del(format!("{PREFIX}{call_id}")).await;
        if let Err(e) = removed {
            tracing::warn!(error = %e, "could not release an idempotency claim");
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
        (Some("P"), Some(fp), None) => Stored::Pending(fp),
        (Some("D"), Some(fp), Some(answer)) => Stored::Done(fp, answer),
        _ => Stored::Other,
    }
}

fn unavailable(e: redis::RedisError) -> IdempotencyError {
    IdempotencyError::Unavailable(e.to_string())
}
