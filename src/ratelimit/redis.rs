//! Rate-limit buckets in Redis, shared by every replica (`[state] redis`).
//!
//! One check is one `EVALSHA` of [`TAKE`]: the same GCRA as the in-memory
//! buckets, over every limit the call matches at once, all or nothing, with
//! Redis's own clock, so replicas never race and their clocks never matter.
//! A bucket is `otc-gateway:rl:v1:<limit digest>:<caller digest>` holding the
//! theoretical arrival time in microseconds, expiring when it is full again;
//! the limit digest covers its whole definition (a changed rate starts new
//! buckets, an unchanged one keeps its buckets across reloads), the caller
//! digest keeps user ids out of Redis.
//!
//! A check never waits on Redis longer than [`CHECK_TIMEOUT`]; after a
//! failure, checks skip Redis for [`DOWN_PAUSE`], so an outage costs calls
//! no time. What a call gets then is each limit's `fail` mode.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::Bucket;
use crate::config::RateLimitConfig;
use crate::redis_client::{self, SharedRedis};

/// The longest a check waits for Redis, connecting included.
pub(crate) const CHECK_TIMEOUT: Duration = Duration::from_millis(250);
/// After a failed check, checks skip Redis this long.
const DOWN_PAUSE: Duration = Duration::from_secs(1);
/// The store's unavailability is logged at most once per this long.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// GCRA over `#KEYS` buckets at once. `ARGV[2i-1]`, `ARGV[2i]`: bucket i's
/// interval and tolerance in microseconds. Returns `{0, 0}` when the call
/// was counted in every bucket, or `{i, wait}` when bucket i has no room
/// (nothing written): `wait` microseconds until it would.
const TAKE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local nexts = {}
for i, key in ipairs(KEYS) do
  local interval = tonumber(ARGV[2 * i - 1])
  local tolerance = tonumber(ARGV[2 * i])
  local tat = tonumber(redis.call('GET', key)) or now
  if tat < now then tat = now end
  local nxt = tat + interval
  if nxt - now > tolerance then
    return {i, nxt - now - tolerance}
  end
  nexts[i] = nxt
end
for i, key in ipairs(KEYS) do
  redis.call('SET', key, string.format('%.0f', nexts[i]), 'PX', math.ceil((nexts[i] - now) / 1000) + 1)
end
return {0, 0}
";

/// How far each bucket of `KEYS` runs ahead of Redis's clock, in
/// microseconds (0: full); reads only, so explaining a caller counts nothing.
const PEEK: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ahead = {}
for i, key in ipairs(KEYS) do
  local tat = tonumber(redis.call('GET', key)) or now
  if tat < now then tat = now end
  ahead[i] = string.format('%.0f', tat - now)
end
return ahead
";

/// Why the shared buckets could not answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SharedError {
    /// Redis did not answer in time, or answered with an error.
    #[error("redis: {0}")]
    Unavailable(String),
}

/// How a shared check came out.
pub(crate) enum Taken {
    /// Counted in every bucket.
    Counted,
    /// Bucket `index` (of the keys given) has no room for this long.
    Full { index: usize, wait: Duration },
}

/// The Redis the buckets live in, for one `[state] redis` URL.
pub struct SharedBuckets {
    /// The URL without its password, to compare and to show.
    shown: String,
    redis: Arc<SharedRedis>,
    script: redis::Script,
    down_until: Mutex<Option<Instant>>,
    last_logged: Mutex<Option<Instant>>,
    /// Calls served uncounted (`fail = "open"`) and refused (`"closed"`)
    /// while Redis could not answer.
    pub(crate) failed_open: AtomicU64,
    pub(crate) failed_closed: AtomicU64,
}

impl std::fmt::Debug for SharedBuckets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedBuckets").field("redis", &self.shown).finish_non_exhaustive()
    }
}

impl SharedBuckets {
    /// The buckets in `redis` (`shown` its URL without password, for the
    /// log). A Redis that does not answer yet is not an error: checks then
    /// follow each limit's `fail` mode until it does, and the connection
    /// manager reconnects by itself.
    pub(crate) fn new(redis: Arc<SharedRedis>, shown: String) -> SharedBuckets {
        SharedBuckets {
            shown,
            redis,
            script: redis::Script::new(TAKE),
            down_until: Mutex::new(None),
            last_logged: Mutex::new(None),
            failed_open: AtomicU64::new(0),
            failed_closed: AtomicU64::new(0),
        }
    }

    /// Whether these are the buckets in `redis`.
    pub(crate) fn is_in(&self, redis: &Arc<SharedRedis>) -> bool {
        Arc::ptr_eq(&self.redis, redis)
    }

    /// Counts one call in every bucket of `buckets` (limit, interval and
    /// tolerance in nanoseconds, bucket), or in none.
    pub(crate) async fn take(
        &self,
        buckets: &[(&RateLimitConfig, u64, u64, Bucket<'_>)],
    ) -> Result<Taken, SharedError> {
        if self.down_until.lock().unwrap_or_else(|p| p.into_inner()).is_some_and(|until| Instant::now() < until) {
            return Err(SharedError::Unavailable("paused after a recent failure".into()));
        }
        let mut invocation = self.script.prepare_invoke();
        for (limit, interval, tolerance, bucket) in buckets {
            invocation.key(key(limit, *bucket));
            invocation.arg(interval / 1000).arg(tolerance / 1000);
        }
        let mut connection = self.redis.connection();
        let answer = redis_client::bounded(CHECK_TIMEOUT, invocation.invoke_async::<(u64, u64)>(&mut connection)).await;
        let failure = match answer {
            Ok((0, _)) => return Ok(Taken::Counted),
            Ok((index, wait)) => {
                let index = usize::try_from(index - 1).unwrap_or(0);
                return Ok(Taken::Full { index, wait: Duration::from_micros(wait.max(1)) });
            }
            Err(e) => e,
        };
        *self.down_until.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now() + DOWN_PAUSE);
        Err(SharedError::Unavailable(failure))
    }

    /// How far each bucket of `buckets` runs ahead of now, in nanoseconds
    /// (`GET /explain`; nothing is counted). Unlike a check it is not
    /// skipped after a failure: it is no call's business.
    pub(crate) async fn peek(&self, buckets: &[(&RateLimitConfig, Bucket<'_>)]) -> Result<Vec<u64>, SharedError> {
        let script = redis::Script::new(PEEK);
        let mut invocation = script.prepare_invoke();
        for (limit, bucket) in buckets {
            invocation.key(key(limit, *bucket));
        }
        let mut connection = self.redis.connection();
        let ahead = redis_client::bounded(CHECK_TIMEOUT, invocation.invoke_async::<Vec<String>>(&mut connection))
            .await
            .map_err(SharedError::Unavailable)?;
        Ok(ahead.iter().map(|micros| micros.parse::<u64>().unwrap_or(0).saturating_mul(1000)).collect())
    }

    /// Logs the store's unavailability, at most once per [`LOG_EVERY`].
    pub(crate) fn log_unavailable(&self, error: &SharedError, closed: bool) {
        let mut last = self.last_logged.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_some_and(|at| at.elapsed() < LOG_EVERY) {
            return;
        }
        *last = Some(Instant::now());
        let what = if closed { "calls under a fail = \"closed\" limit get 429" } else { "calls are served uncounted" };
        tracing::warn!(redis = %self.shown, %error, "shared rate limits unavailable; {what} until Redis answers");
    }

    /// Counts a call decided without Redis.
    pub(crate) fn count_failure(&self, closed: bool) {
        let counter = if closed { &self.failed_closed } else { &self.failed_open };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// The Redis key of one bucket: a user's digest never equals the shared
/// bucket's (its input has a prefix the other lacks).
fn key(limit: &RateLimitConfig, bucket: Bucket<'_>) -> String {
    let definition = format!("{:?}", (&limit.name, limit.per, limit.rate, limit.burst, &limit.tools));
    let limit_digest = Sha256::digest(definition.as_bytes());
    let bucket_digest = match bucket {
        Bucket::Global | Bucket::Anonymous => Sha256::digest(b"shared"),
        Bucket::User(user) => Sha256::digest(format!("user:{user}").as_bytes()),
    };
    format!("otc-gateway:rl:v1:{}:{}", hex(&limit_digest[..8]), hex(&bucket_digest[..16]))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_user_shares_a_key_with_the_shared_bucket() {
        let limit: RateLimitConfig =
            toml::from_str("name = \"u\"\ntools = [\"A.*\"]\nper = \"user\"\nrate = \"1/s\"\n").expect("limit");
        let anonymous = key(&limit, Bucket::Anonymous);
        for user in ["anonymous", "", "shared"] {
            assert_ne!(key(&limit, Bucket::User(user)), anonymous, "{user:?}");
        }
        assert_ne!(key(&limit, Bucket::User("a")), key(&limit, Bucket::User("b")));
        assert!(!anonymous.contains("anonymous"), "digests only: {anonymous}");
    }
}
