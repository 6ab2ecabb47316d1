//! The Redis connection of every store replicas share (idempotency, rate
//! limits, OAuth challenges): set up lazily, and every request bounded, so
//! a Redis that is down or silent never holds a call up.

use std::future::Future;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::RedisResult;

/// A connection to `url`, made on first use and remade after a failure;
/// connecting and each answer bounded by `timeout`. Errors only for a URL
/// that is not a Redis URL.
pub(crate) fn connect(url: &str, timeout: Duration, retries: usize) -> Result<ConnectionManager, String> {
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
