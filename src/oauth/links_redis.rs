//! Challenges in Redis (`[state] redis`): the same links, statuses and
//! flows as `links.rs`, shared by every replica, so a link opened on one and
//! its callback answered by another complete the same challenge.
//!
//! Keys are digests of the ids (`otc-gateway:oauth:v1:{link,check,flow}:<sha256>`),
//! so Redis never holds a usable link; values are JSON and expire with the
//! link (`link_ttl`, then ten minutes for its status) or the flow. Opening a
//! link is one script, so a link opens once across the fleet. A flow holds
//! its PKCE verifier, useless without the provider's code.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::aio::ConnectionManager;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::links::{Flow, LinkStatus, Refusal, STATUS_KEPT};
use super::seal::random_id;
use super::OAuthError;
use crate::redis_client;

/// The longest one Redis command of the flow may take.
const TIMEOUT: Duration = Duration::from_secs(2);

/// Claims a link: `unknown`, `used`, `expired`, or the link's JSON, now
/// opened with a fresh lifetime. KEYS[1]: the link; ARGV: provider, now (ms),
/// how long a status is kept after (ms).
const OPEN: &str = r"
local v = redis.call('GET', KEYS[1])
if not v then return 'unknown' end
local link = cjson.decode(v)
if link.p ~= ARGV[1] then return 'unknown' end
if link.o then return 'used' end
local now = tonumber(ARGV[2])
if link.e <= now then return 'expired' end
link.o = true
link.e = now + link.t
redis.call('SET', KEYS[1], cjson.encode(link), 'PX', link.t + tonumber(ARGV[3]))
return cjson.encode(link)
";

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

/// A link as stored.
#[derive(Serialize, Deserialize)]
struct StoredLink {
    /// Provider.
    p: String,
    /// User.
    u: String,
    /// Scopes.
    s: BTreeSet<String>,
    /// Expiry, Unix milliseconds.
    e: u64,
    /// Lifetime, milliseconds.
    t: u64,
    /// Opened.
    o: bool,
    /// Status.
    st: String,
}

/// A flow as stored.
#[derive(Serialize, Deserialize)]
struct StoredFlow {
    /// The link's key digest.
    l: String,
    p: String,
    u: String,
    s: BTreeSet<String>,
    v: String,
    r: String,
    e: u64,
}

/// The links and flows of every provider, in Redis.
pub(super) struct RedisLinks {
    url_digest: [u8; 32],
    connection: ConnectionManager,
    open: redis::Script,
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
    /// Links in the Redis at `url` (connected lazily).
    pub(super) fn connect(url: &str) -> Result<RedisLinks, OAuthError> {
        let connection =
            redis_client::connect(url, TIMEOUT, 1).map_err(|e| OAuthError::Setup(format!("[state] redis: {e}")))?;
        Ok(RedisLinks {
            url_digest: Sha256::digest(url.as_bytes()).into(),
            connection,
            open: redis::Script::new(OPEN),
            finish: redis::Script::new(FINISH),
        })
    }

    /// Whether these are the links of the Redis at `url`.
    pub(super) fn is_for(&self, url: &str) -> bool {
        self.url_digest == <[u8; 32]>::from(Sha256::digest(url.as_bytes()))
    }

    async fn run<T: redis::FromRedisValue>(&self, command: &redis::Cmd) -> Result<T, OAuthError> {
        let mut connection = self.connection.clone();
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
        let mut connection = self.connection.clone();
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
            p: provider.to_owned(),
            u: user.to_owned(),
            s: scopes,
            e: now_ms() + ms(ttl),
            t: ms(ttl),
            o: false,
            st: "pending".into(),
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
        let mut connection = self.connection.clone();
        redis_client::bounded(TIMEOUT, pipe.query_async::<()>(&mut connection)).await.map_err(store_error)?;
        Ok((link_id, check_id))
    }

    /// Opens a link once across the fleet: (state, flow).
    pub(super) async fn open(
        &self,
        provider: &str,
        link_id: &str,
        verifier: String,
        redirect_uri: String,
    ) -> Result<(String, Flow), Refusal> {
        let link_digest = digest(link_id);
        let answer: String = self
            .script(
                &self.open,
                &[key("link", &link_digest)],
                &[provider.to_owned(), now_ms().to_string(), ms(STATUS_KEPT).to_string()],
            )
            .await
            .map_err(Refusal::Unavailable)?;
        let link: StoredLink = match answer.as_str() {
            "unknown" => return Err(Refusal::Unknown),
            "used" => return Err(Refusal::Used),
            "expired" => return Err(Refusal::Expired),
            json => serde_json::from_str(json).map_err(|e| Refusal::Unavailable(OAuthError::Store(e.to_string())))?,
        };
        let state = random_id(32).map_err(Refusal::Unavailable)?;
        let stored = StoredFlow {
            l: link_digest.clone(),
            p: provider.to_owned(),
            u: link.u.clone(),
            s: link.s.clone(),
            v: verifier.clone(),
            r: redirect_uri.clone(),
            e: link.e,
        };
        let json =
            serde_json::to_string(&stored).map_err(|e| Refusal::Unavailable(OAuthError::Store(e.to_string())))?;
        let mut set = redis::cmd("SET");
        set.arg(key("flow", &digest(&state))).arg(json).arg("PX").arg(link.t);
        self.run::<()>(&set).await.map_err(Refusal::Unavailable)?;
        let flow =
            Flow::new(link_digest, provider, &link.u, link.s, verifier, redirect_uri, Duration::from_millis(link.t));
        Ok((state, flow))
    }

    /// Takes the flow a callback's `state` names, once across the fleet.
    pub(super) async fn take_flow(&self, provider: &str, state: &str) -> Result<Flow, Refusal> {
        let mut getdel = redis::cmd("GETDEL");
        getdel.arg(key("flow", &digest(state)));
        let found: Option<String> = self.run(&getdel).await.map_err(Refusal::Unavailable)?;
        let stored: StoredFlow = match found {
            None => return Err(Refusal::Unknown),
            Some(json) => {
                serde_json::from_str(&json).map_err(|e| Refusal::Unavailable(OAuthError::Store(e.to_string())))?
            }
        };
        if stored.p != provider {
            return Err(Refusal::Unknown);
        }
        if stored.e <= now_ms() {
            self.finish(&stored.l, LinkStatus::Expired).await;
            return Err(Refusal::Expired);
        }
        let left = Duration::from_millis(stored.e - now_ms());
        Ok(Flow::new(stored.l, provider, &stored.u, stored.s, stored.v, stored.r, left))
    }

    /// Records how a flow ended (`link` is the link's digest).
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
        let mut get = redis::cmd("GET");
        get.arg(key("link", &link_digest?));
        let json: Option<String> = self.run(&get).await.ok()?;
        let link: StoredLink = serde_json::from_str(&json?).ok()?;
        if link.p != provider || link.u != user {
            return None;
        }
        Some(match link.st.as_str() {
            "completed" => LinkStatus::Completed,
            "failed" => LinkStatus::Failed,
            "expired" => LinkStatus::Expired,
            _ if link.e <= now_ms() => LinkStatus::Expired,
            _ => LinkStatus::Pending,
        })
    }
}
