//! Challenges in Redis (`[state] redis`): the same links, statuses and
//! records as `links.rs`, shared by every replica, so a link opened on one
//! and its callback answered by another complete the same challenge.
//!
//! Keys are digests of the ids (`otc-gateway:oauth:v1:{link,check,<record
//! kind>}:<sha256>`), so Redis never holds a usable link; values are JSON
//! and expire with the link (`link_ttl`, then ten minutes for its status)
//! or the record. A record is taken with one `GETDEL`, so a callback's
//! `state` is used once across the fleet. A flow holds its PKCE verifier,
//! useless without the provider's code.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::links::{LinkStatus, OpenLink, Refusal, STATUS_KEPT};
use super::seal::random_id;
use super::OAuthError;
use crate::redis_client::{self, SharedRedis};

/// The longest one Redis command of the flow may take.
const TIMEOUT: Duration = Duration::from_secs(2);

/// Records how a pending link ended. KEYS[1]: the link; ARGV[1]: the status.
const FINISH: &str = r"
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local link = cjson.decode(v)
if link.st ~= 'pending' then return 0 end
link.st = ARGV[1]
redis.call('SET', KEYS[1], cjson.encode(link), 'KEEPTTL')
return 1
";

/// A link as stored (the short member names are the stored format).
#[derive(Serialize, Deserialize)]
struct StoredLink {
    #[serde(rename = "p")]
    provider: String,
    #[serde(rename = "u")]
    user: String,
    #[serde(rename = "s")]
    scopes: BTreeSet<String>,
    /// Expiry, Unix milliseconds.
    #[serde(rename = "e")]
    expires_ms: u64,
    /// Lifetime, milliseconds.
    #[serde(rename = "t")]
    ttl_ms: u64,
    #[serde(rename = "st")]
    status: String,
}

/// The links and records of every provider, in Redis.
pub(super) struct RedisLinks {
    redis: Arc<SharedRedis>,
    finish: redis::Script,
}

impl std::fmt::Debug for RedisLinks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RedisLinks")
    }
}

fn digest(id: &str) -> String {
    Sha256::digest(id.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

fn key(kind: &str, digest: &str) -> String {
    format!("otc-gateway:oauth:v1:{kind}:{digest}")
}

fn store_error(reason: String) -> OAuthError {
    OAuthError::Store(format!("redis: {reason}"))
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl RedisLinks {
    /// Links in `redis`.
    pub(super) fn new(redis: Arc<SharedRedis>) -> RedisLinks {
        RedisLinks { redis, finish: redis::Script::new(FINISH) }
    }

    /// Whether these are the links of `redis`.
    pub(super) fn is_in(&self, redis: &Arc<SharedRedis>) -> bool {
        Arc::ptr_eq(&self.redis, redis)
    }

    async fn run<T: redis::FromRedisValue>(&self, command: &redis::Cmd) -> Result<T, OAuthError> {
        let mut connection = self.redis.connection();
        redis_client::bounded(TIMEOUT, command.query_async::<T>(&mut connection)).await.map_err(store_error)
    }

    async fn script<T: redis::FromRedisValue>(
        &self,
        script: &redis::Script,
        keys: &[String],
        args: &[String],
    ) -> Result<T, OAuthError> {
        let mut invocation = script.prepare_invoke();
        for k in keys {
            invocation.key(k);
        }
        for a in args {
            invocation.arg(a);
        }
        let mut connection = self.redis.connection();
        redis_client::bounded(TIMEOUT, invocation.invoke_async::<T>(&mut connection)).await.map_err(store_error)
    }

    /// A new link: (link id, check id).
    pub(super) async fn issue(
        &self,
        provider: &str,
        user: &str,
        scopes: BTreeSet<String>,
        ttl: Duration,
    ) -> Result<(String, String), OAuthError> {
        let (link_id, check_id) = (random_id(32)?, random_id(32)?);
        let link_digest = digest(&link_id);
        let stored = StoredLink {
            provider: provider.to_owned(),
            user: user.to_owned(),
            scopes,
            expires_ms: now_ms() + ms(ttl),
            ttl_ms: ms(ttl),
            status: LinkStatus::Pending.as_str().into(),
        };
        let json = serde_json::to_string(&stored).map_err(|e| OAuthError::Store(e.to_string()))?;
        let keep = ms(ttl) + ms(STATUS_KEPT);
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("SET")
            .arg(key("link", &link_digest))
            .arg(json)
            .arg("PX")
            .arg(keep)
            .ignore()
            .cmd("SET")
            .arg(key("check", &digest(&check_id)))
            .arg(&link_digest)
            .arg("PX")
            .arg(keep)
            .ignore();
        let mut connection = self.redis.connection();
        redis_client::bounded(TIMEOUT, pipe.query_async::<()>(&mut connection)).await.map_err(store_error)?;
        Ok((link_id, check_id))
    }

    /// The link as stored, by its digest.
    async fn stored(&self, link_digest: &str) -> Result<Option<StoredLink>, OAuthError> {
        let mut get = redis::cmd("GET");
        get.arg(key("link", link_digest));
        let json: Option<String> = self.run(&get).await?;
        json.map(|json| serde_json::from_str(&json).map_err(|e| OAuthError::Store(e.to_string()))).transpose()
    }

    /// A link that can still be opened, as it stands; nothing changes.
    pub(super) async fn open(&self, provider: &str, link_id: &str) -> Result<OpenLink, Refusal> {
        let link_digest = digest(link_id);
        let link = self.stored(&link_digest).await.map_err(Refusal::Unavailable)?;
        let link = link.filter(|l| l.provider == provider).ok_or(Refusal::Unknown)?;
        match LinkStatus::parse(&link.status) {
            LinkStatus::Pending if link.expires_ms > now_ms() => Ok(OpenLink {
                link: link_digest,
                user: link.user,
                scopes: link.scopes,
                ttl: Duration::from_millis(link.ttl_ms),
            }),
            LinkStatus::Pending | LinkStatus::Expired => Err(Refusal::Expired),
            LinkStatus::Completed | LinkStatus::Failed => Err(Refusal::Used),
        }
    }

    /// Records how a link ended (`link` is its digest; the first end counts).
    pub(super) async fn finish(&self, link: &str, status: LinkStatus) {
        let outcome: Result<i64, _> =
            self.script(&self.finish, &[key("link", link)], &[status.as_str().to_owned()]).await;
        if let Err(e) = outcome {
            tracing::warn!(error = %e, "could not record how an OAuth challenge ended");
        }
    }

    /// The status for its own caller only.
    pub(super) async fn status(&self, provider: &str, check_id: &str, user: &str) -> Option<LinkStatus> {
        let mut get = redis::cmd("GET");
        get.arg(key("check", &digest(check_id)));
        let link_digest: Option<String> = self.run(&get).await.ok()?;
        let link = self.stored(&link_digest?).await.ok()??;
        if link.provider != provider || link.user != user {
            return None;
        }
        Some(match LinkStatus::parse(&link.status) {
            LinkStatus::Pending if link.expires_ms <= now_ms() => LinkStatus::Expired,
            status => status,
        })
    }

    /// Keeps a record of `kind` under `id` for `ttl`.
    pub(super) async fn put(&self, kind: &str, id: &str, json: String, ttl: Duration) -> Result<(), OAuthError> {
        let mut set = redis::cmd("SET");
        set.arg(key(kind, &digest(id))).arg(json).arg("PX").arg(ms(ttl));
        self.run::<()>(&set).await
    }

    /// The record of `kind` under `id`, if it is there.
    pub(super) async fn get(&self, kind: &str, id: &str) -> Result<Option<String>, OAuthError> {
        let mut get = redis::cmd("GET");
        get.arg(key(kind, &digest(id)));
        self.run(&get).await
    }

    /// Takes the record of `kind` under `id`, once across the fleet.
    pub(super) async fn take(&self, kind: &str, id: &str) -> Result<Option<String>, OAuthError> {
        let mut getdel = redis::cmd("GETDEL");
        getdel.arg(key(kind, &digest(id)));
        self.run(&getdel).await
    }
}
