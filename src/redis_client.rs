//! The Redis connection of every store replicas share (idempotency, rate
//! limits, OAuth challenges): one per Redis, set up lazily, and every
//! request bounded by its store's own deadline, so a Redis that is down or
//! silent never holds a call up.

use std::future::Future;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::RedisResult;
use sha2::{Digest, Sha256};

/// The longest any store's command may take; each store bounds its own
/// commands tighter with [`bounded`].
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// One Redis, as every store that uses it shares it: the connection
/// manager (cloned per command, as the `redis` crate intends) and which
/// Redis it is.
pub(crate) struct SharedRedis {
    url_digest: [u8; 32],
    connection: ConnectionManager,
}

impl std::fmt::Debug for SharedRedis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedRedis")
    }
}

impl SharedRedis {
    /// The Redis at `url`, connected on first use. Errors only for a URL
    /// that is not a Redis URL.
    pub(crate) fn connect(url: &str) -> Result<SharedRedis, String> {
        let connection = connect(url, RESPONSE_TIMEOUT, 1)?;
        Ok(SharedRedis { url_digest: Sha256::digest(url.as_bytes()).into(), connection })
    }

    /// Whether this is the Redis at `url` (to keep it across a reload).
    pub(crate) fn is_for(&self, url: &str) -> bool {
        self.url_digest == <[u8; 32]>::from(Sha256::digest(url.as_bytes()))
    }

    /// A handle on the connection, for one command.
    pub(crate) fn connection(&self) -> ConnectionManager {
        self.connection.clone()
    }
}

/// A connection to `url`, made on first use and remade after a failure;
/// connecting and each answer bounded by `timeout`. Errors only for a URL
/// that is not a Redis URL.
fn connect(url: &str, timeout: Duration, retries: usize) -> Result<ConnectionManager, String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(retries);
    ConnectionManager::new_lazy_with_config(client, config).map_err(|e| e.to_string())
}

/// `request`'s answer, or why there is none within `timeout`.
pub(crate) async fn bounded<T>(timeout: Duration, request: impl Future<Output = RedisResult<T>>) -> Result<T, String> {
    match tokio::time::timeout(timeout, request).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {timeout:?}")),
    }
}
