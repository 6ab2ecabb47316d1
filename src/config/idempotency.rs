//! `[idempotency]`: repeated `call_id`s answered from the first call.

use std::time::Duration;

use serde::Deserialize;

use super::duration::Dur;

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

/// The URL without its password, for logs and errors.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => format!("{}***{}", &url[..scheme + 3], &url[at..]),
        _ => url.to_owned(),
    }
}
