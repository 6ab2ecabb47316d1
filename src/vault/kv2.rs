//! `vault:MOUNT/PATH#FIELD`: HashiCorp Vault / OpenBao KV version 2.
//!
//! A read is `GET {address}/v1/{MOUNT}/data/{PATH}` with the token in
//! `X-Vault-Token`; the secret's fields are at `data.data` of the answer.
//! Whole secrets (all their fields) are cached for `cache_ttl`, so several
//! fields of one secret cost one request. When the vault cannot answer
//! (unreachable, timeout, sealed, 5xx) an expired cached value is served
//! rather than failing calls, and [`VaultStats::stale_served`] counts it.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use http::{HeaderName, HeaderValue, StatusCode, Uri};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use super::{env, FileSource, SecretSource};
use super::{VaultError, VaultStats};
use crate::config::{check_token_ref, SecretRef, VaultConfig};
use crate::http_client::{self, HttpClient};
use crate::secret::SecretString;

/// At most this many secrets are cached; per-user paths (OAuth tokens) would
/// otherwise grow the cache without bound.
const MAX_CACHE_ENTRIES: usize = 10_000;

/// One field of one KV v2 secret, `{user_id}` already substituted.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Kv2Key {
    /// The mount (first segment of the reference).
    pub mount: String,
    /// The secret's path under the mount.
    pub path: String,
    /// The field within the secret's data.
    pub field: String,
}

impl fmt::Display for Kv2Key {
    /// The reference form, `vault:MOUNT/PATH#FIELD`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "vault:{}/{}#{}", self.mount, self.path, self.field)
    }
}

/// A secret's fields. `None` marks a field whose value is an object, array
/// or null: present, but not usable as a credential.
pub(crate) type SecretData = HashMap<String, Option<SecretString>>;

#[derive(Clone)]
struct CacheEntry {
    fetched_at: Instant,
    data: Arc<SecretData>,
}

/// Why one read did not produce data.
enum ReadError {
    /// 403.
    Forbidden,
    /// 404 (also: latest version soft-deleted or destroyed).
    NotFound,
    /// The vault could not answer: a stale value may stand in.
    Transient(String),
    /// The vault answered, but not in a way that can be used (e.g. 400):
    /// a stale value must not hide it.
    Rejected(String),
    /// The token reference could not be read.
    Token(VaultError),
}

/// The KV v2 backend: a pooled HTTP client, the token reference and a cache.
pub struct Kv2Source {
    /// `address` without a trailing slash.
    base: String,
    token: SecretRef,
    namespace: Option<HeaderValue>,
    cache_ttl: Duration,
    timeout: Duration,
    client: HttpClient,
    cache: Mutex<HashMap<(String, String), CacheEntry>>,
    requests_ok: AtomicU64,
    requests_error: AtomicU64,
    stale_served: AtomicU64,
    cache_hits: AtomicU64,
}

impl fmt::Debug for Kv2Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The token reference is shown (it is not the token); cached values
        // are SecretStrings and are not shown at all.
        f.debug_struct("Kv2Source")
            .field("address", &self.base)
            .field("token", &self.token.to_string())
            .field("cache_ttl", &self.cache_ttl)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Kv2Source {
    /// Checks the config, reads the token once (so a missing token fails at
    /// startup, not on the first call) and builds the HTTP client. Each
    /// request to the vault is bounded by `timeout`.
    pub fn new(cfg: VaultConfig, timeout: Duration) -> Result<Self, VaultError> {
        let base = cfg.address.trim_end_matches('/').to_owned();
        let uri: Uri =
            base.parse().map_err(|e| VaultError::Config(format!("address {:?} is not a URL: {e}", cfg.address)))?;
        match (uri.scheme_str(), uri.authority()) {
            (Some("http" | "https"), Some(_)) => {}
            _ => {
                return Err(VaultError::Config(format!("address {:?} must be an http:// or https:// URL", cfg.address)))
            }
        }
        check_token_ref(&cfg.token).map_err(VaultError::Config)?;
        let token = read_token_blocking(&cfg.token)?;
        token_header(&token)?;
        let namespace = match cfg.namespace.as_deref() {
            None | Some("") => None,
            Some(ns) => Some(
                HeaderValue::from_str(ns)
                    .map_err(|_| VaultError::Config(format!("namespace {ns:?} is not a valid header value")))?,
            ),
        };
        let client = http_client::build(timeout).map_err(VaultError::Config)?;
        Ok(Self {
            base,
            token: cfg.token,
            namespace,
            cache_ttl: cfg.cache_ttl,
            timeout,
            client,
            cache: Mutex::new(HashMap::new()),
            requests_ok: AtomicU64::new(0),
            requests_error: AtomicU64::new(0),
            stale_served: AtomicU64::new(0),
            cache_hits: AtomicU64::new(0),
        })
    }

    /// The counters so far.
    pub fn stats(&self) -> VaultStats {
        VaultStats {
            requests_ok: self.requests_ok.load(Ordering::Relaxed),
            requests_error: self.requests_error.load(Ordering::Relaxed),
            stale_served: self.stale_served.load(Ordering::Relaxed),
            cache_hits: self.cache_hits.load(Ordering::Relaxed),
        }
    }

    /// Resolves one field: from a fresh cache entry, else from the vault,
    /// else (vault unavailable) from an expired cache entry.
    pub async fn get(&self, key: &Kv2Key) -> Result<SecretString, VaultError> {
        let data = self.get_secret(key).await?;
        field_of(&data, key)
    }

    /// Every field of the secret `key` names (its field is only used in
    /// messages), through the cache as [`Kv2Source::get`] reads.
    pub(crate) async fn get_secret(&self, key: &Kv2Key) -> Result<Arc<SecretData>, VaultError> {
        let cache_key = (key.mount.clone(), key.path.clone());
        if let Some(entry) = self.cached(&cache_key) {
            if entry.fetched_at.elapsed() < self.cache_ttl {
                self.cache_hits.fetch_add(1, Ordering::Relaxed);
                return Ok(entry.data);
            }
        }
        tracing::debug!(reference = %key, "reading secret from vault");
        match self.read(key).await {
            Ok((data, _version)) => {
                self.requests_ok.fetch_add(1, Ordering::Relaxed);
                let data = Arc::new(data);
                self.store(cache_key, data.clone());
                Ok(data)
            }
            Err(ReadError::NotFound) => {
                self.requests_error.fetch_add(1, Ordering::Relaxed);
                // Deleted upstream: forget it, so it is not served stale later.
                self.lock_cache().remove(&cache_key);
                Err(VaultError::NotFound { reference: key.to_string() })
            }
            Err(ReadError::Forbidden) => {
                self.requests_error.fetch_add(1, Ordering::Relaxed);
                Err(VaultError::Forbidden { reference: key.to_string() })
            }
            Err(ReadError::Rejected(reason)) => {
                self.requests_error.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(reference = %key, %reason, "vault rejected the read");
                Err(VaultError::Unavailable { reference: key.to_string(), reason })
            }
            Err(ReadError::Transient(reason)) => {
                self.requests_error.fetch_add(1, Ordering::Relaxed);
                self.stale_or(&cache_key, key, &reason, || VaultError::Unavailable {
                    reference: key.to_string(),
                    reason: reason.clone(),
                })
            }
            Err(ReadError::Token(source)) => {
                self.requests_error.fetch_add(1, Ordering::Relaxed);
                let reason = source.to_string();
                self.stale_or(&cache_key, key, &reason, || VaultError::Token { source: Box::new(source) })
            }
        }
    }

    /// Serves an expired cached value if there is one, else the error.
    fn stale_or(
        &self,
        cache_key: &(String, String),
        key: &Kv2Key,
        reason: &str,
        err: impl FnOnce() -> VaultError,
    ) -> Result<Arc<SecretData>, VaultError> {
        // Look again: a concurrent read may have refreshed the entry.
        match self.cached(cache_key) {
            Some(entry) => {
                self.stale_served.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    reference = %key,
                    %reason,
                    age_secs = entry.fetched_at.elapsed().as_secs(),
                    "vault unavailable; serving the cached value"
                );
                Ok(entry.data)
            }
            None => {
                tracing::warn!(reference = %key, %reason, "vault unavailable and nothing cached");
                Err(err())
            }
        }
    }

    fn lock_cache(&self) -> MutexGuard<'_, HashMap<(String, String), CacheEntry>> {
        // A panic while holding the lock cannot leave the map inconsistent
        // (every operation is a single insert/remove), so poison is ignored.
        self.cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn cached(&self, cache_key: &(String, String)) -> Option<CacheEntry> {
        self.lock_cache().get(cache_key).cloned()
    }

    fn store(&self, cache_key: (String, String), data: Arc<SecretData>) {
        let mut cache = self.lock_cache();
        if cache.len() >= MAX_CACHE_ENTRIES && !cache.contains_key(&cache_key) {
            let ttl = self.cache_ttl;
            cache.retain(|_, e| e.fetched_at.elapsed() < ttl);
            if cache.len() >= MAX_CACHE_ENTRIES {
                let oldest = cache.iter().min_by_key(|(_, e)| e.fetched_at).map(|(k, _)| k.clone());
                if let Some(k) = oldest {
                    cache.remove(&k);
                }
            }
        }
        cache.insert(cache_key, CacheEntry { fetched_at: Instant::now(), data });
    }

    /// Reads the latest version of a secret past the cache, with its version
    /// (for a check-and-set write); `None` when there is none.
    pub(crate) async fn read_versioned(&self, key: &Kv2Key) -> Result<Option<(SecretData, u64)>, VaultError> {
        match self.read(key).await {
            Ok((data, version)) => {
                self.requests_ok.fetch_add(1, Ordering::Relaxed);
                self.store((key.mount.clone(), key.path.clone()), Arc::new(data.clone()));
                Ok(Some((data, version)))
            }
            Err(ReadError::NotFound) => {
                self.requests_ok.fetch_add(1, Ordering::Relaxed);
                self.lock_cache().remove(&(key.mount.clone(), key.path.clone()));
                Ok(None)
            }
            Err(e) => {
                self.requests_error.fetch_add(1, Ordering::Relaxed);
                Err(e.into_error(key))
            }
        }
    }

    /// Writes a new version of a secret (`cas`: only if the latest version is
    /// this one; 0: only if there is none) and keeps it in the cache.
    pub(crate) async fn write(
        &self,
        key: &Kv2Key,
        data: serde_json::Map<String, serde_json::Value>,
        cas: Option<u64>,
    ) -> Result<Written, VaultError> {
        let mut body = serde_json::json!({ "data": data });
        if let Some(cas) = cas {
            body["options"] = serde_json::json!({ "cas": cas });
        }
        let uri = data_url(&self.base, &key.mount, &key.path)
            .map_err(|e| VaultError::Config(format!("cannot build the URL for {key}: {e}")))?;
        let (status, answer) = self.send(key, http::Method::POST, uri, bytes::Bytes::from(body.to_string())).await?;
        match status.as_u16() {
            200 | 204 => {
                let fields = parse_fields(&data);
                self.store((key.mount.clone(), key.path.clone()), Arc::new(fields));
                Ok(Written::Done)
            }
            // "check-and-set parameter did not match the current version"
            // (Not "check-and-set parameter required": a write without one
            // to a secret that requires it is an error, not a lost race.)
            400 if String::from_utf8_lossy(&answer).contains("did not match the current version") => {
                self.lock_cache().remove(&(key.mount.clone(), key.path.clone()));
                Ok(Written::CasMismatch)
            }
            _ => Err(ReadError::classify_status(status).into_error(key)),
        }
    }

    /// Deletes a secret with every version and its metadata (`DELETE
    /// /v1/{mount}/metadata/{path}`): nothing of it can be undeleted.
    pub(crate) async fn destroy(&self, key: &Kv2Key) -> Result<(), VaultError> {
        self.lock_cache().remove(&(key.mount.clone(), key.path.clone()));
        let uri = metadata_url(&self.base, &key.mount, &key.path)
            .map_err(|e| VaultError::Config(format!("cannot build the URL for {key}: {e}")))?;
        let (status, _) = self.send(key, http::Method::DELETE, uri, bytes::Bytes::new()).await?;
        match status.as_u16() {
            200 | 204 | 404 => Ok(()),
            _ => Err(ReadError::classify_status(status).into_error(key)),
        }
    }

    /// The names under folder `dir` of `mount` (`GET
    /// /v1/{mount}/metadata/{dir}?list=true`, KV v2's LIST): a folder's name
    /// ends with `/`. A folder with nothing in it is empty, not an error.
    pub(crate) async fn list(&self, mount: &str, dir: &str) -> Result<Vec<String>, VaultError> {
        let key = Kv2Key { mount: mount.to_owned(), path: dir.to_owned(), field: String::new() };
        let uri = metadata_url(&self.base, mount, dir)
            .and_then(|u| format!("{u}?list=true").parse())
            .map_err(|e| VaultError::Config(format!("cannot build the URL for {key}: {e}")))?;
        let headers = self.headers().await.map_err(|e| e.into_error(&key))?;
        let (status, body) = http_client::get(&self.client, uri, headers, self.timeout).await.map_err(|reason| {
            self.requests_error.fetch_add(1, Ordering::Relaxed);
            VaultError::Unavailable { reference: key.to_string(), reason }
        })?;
        let counter = if status.is_success() || status == StatusCode::NOT_FOUND {
            &self.requests_ok
        } else {
            &self.requests_error
        };
        counter.fetch_add(1, Ordering::Relaxed);
        match status.as_u16() {
            200 => {
                let doc: serde_json::Value = serde_json::from_slice(&body).map_err(|_| VaultError::Unavailable {
                    reference: key.to_string(),
                    reason: "the list is not JSON".into(),
                })?;
                let keys = doc.pointer("/data/keys").and_then(serde_json::Value::as_array);
                Ok(keys.into_iter().flatten().filter_map(|k| k.as_str().map(str::to_owned)).collect())
            }
            404 => Ok(Vec::new()),
            _ => Err(ReadError::classify_status(status).into_error(&key)),
        }
    }

    /// One request other than a read, counted like reads.
    async fn send(
        &self,
        key: &Kv2Key,
        method: http::Method,
        uri: Uri,
        body: bytes::Bytes,
    ) -> Result<(StatusCode, bytes::Bytes), VaultError> {
        let headers = self.headers().await.map_err(|e| e.into_error(key))?;
        match http_client::send(&self.client, method, uri, headers, body, self.timeout).await {
            Ok((status, _, answer)) => {
                let counter = if status.is_success() { &self.requests_ok } else { &self.requests_error };
                counter.fetch_add(1, Ordering::Relaxed);
                Ok((status, answer))
            }
            Err(reason) => {
                self.requests_error.fetch_add(1, Ordering::Relaxed);
                Err(VaultError::Unavailable { reference: key.to_string(), reason })
            }
        }
    }

    /// The token (read now, so a rotated one is used) and namespace headers.
    async fn headers(&self) -> Result<Vec<(HeaderName, HeaderValue)>, ReadError> {
        let token = match &self.token {
            SecretRef::Env { name } => env::read_now(name),
            SecretRef::File { path } => FileSource.read(std::path::Path::new(path)).await,
            SecretRef::Vault { .. } => Err(VaultError::Config("the vault token cannot be a vault: reference".into())),
        }
        .map_err(ReadError::Token)?;
        let token = token_header(&token).map_err(ReadError::Token)?;
        let mut headers = vec![(HeaderName::from_static("x-vault-token"), token)];
        if let Some(ns) = &self.namespace {
            headers.push((HeaderName::from_static("x-vault-namespace"), ns.clone()));
        }
        Ok(headers)
    }

    /// One GET to the vault.
    async fn read(&self, key: &Kv2Key) -> Result<(SecretData, u64), ReadError> {
        let headers = self.headers().await?;
        let uri = data_url(&self.base, &key.mount, &key.path)
            .map_err(|e| ReadError::Rejected(format!("cannot build the URL: {e}")))?;
        let (status, body) =
            http_client::get(&self.client, uri, headers, self.timeout).await.map_err(ReadError::Transient)?;
        classify(status, &body)
    }
}

impl SecretSource for Kv2Source {
    type Key = Kv2Key;

    fn fetch(&self, key: &Kv2Key) -> impl Future<Output = Result<SecretString, VaultError>> + Send {
        self.get(key)
    }
}

/// What a check-and-set write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Written {
    /// The new version is stored.
    Done,
    /// Another writer got there first: nothing was written.
    CasMismatch,
}

impl ReadError {
    /// The failure a non-success status stands for.
    fn classify_status(status: StatusCode) -> ReadError {
        match classify(status, b"{}") {
            Err(e) => e,
            Ok(_) => ReadError::Rejected(format!("unexpected HTTP {status}")),
        }
    }

    /// As the error the rest of the gateway sees.
    fn into_error(self, key: &Kv2Key) -> VaultError {
        match self {
            ReadError::Forbidden => VaultError::Forbidden { reference: key.to_string() },
            ReadError::NotFound => VaultError::NotFound { reference: key.to_string() },
            ReadError::Transient(reason) | ReadError::Rejected(reason) => {
                VaultError::Unavailable { reference: key.to_string(), reason }
            }
            ReadError::Token(source) => VaultError::Token { source: Box::new(source) },
        }
    }
}

/// A secret's fields as the cache holds them.
fn parse_fields(map: &serde_json::Map<String, serde_json::Value>) -> SecretData {
    map.iter()
        .map(|(k, v)| {
            let value = match v {
                serde_json::Value::String(s) => Some(SecretString::from(s.clone())),
                serde_json::Value::Number(n) => Some(SecretString::from(n.to_string())),
                serde_json::Value::Bool(b) => Some(SecretString::from(b.to_string())),
                _ => None,
            };
            (k.clone(), value)
        })
        .collect()
}

/// Reads the token reference synchronously (startup only).
fn read_token_blocking(r: &SecretRef) -> Result<SecretString, VaultError> {
    let result = match r {
        SecretRef::Env { name } => env::read_now(name),
        SecretRef::File { path } => match std::fs::read_to_string(path) {
            Ok(mut s) => {
                if s.ends_with('\n') {
                    s.pop();
                    if s.ends_with('\r') {
                        s.pop();
                    }
                }
                Ok(SecretString::from(s))
            }
            Err(e) => Err(VaultError::FileUnreadable { path: path.clone(), kind: e.kind() }),
        },
        SecretRef::Vault { .. } => {
            return Err(VaultError::Config("the vault token cannot be a vault: reference".into()))
        }
    };
    result.map_err(|source| VaultError::Token { source: Box::new(source) })
}

/// The token as a header value marked sensitive (so hyper and any header
/// dump treat it as such).
fn token_header(token: &SecretString) -> Result<HeaderValue, VaultError> {
    if token.is_empty() {
        return Err(VaultError::Config("the vault token is empty".into()));
    }
    let mut value = HeaderValue::from_str(token.expose())
        .map_err(|_| VaultError::Config("the vault token contains characters not allowed in a header".into()))?;
    value.set_sensitive(true);
    Ok(value)
}

/// `{base}/v1/{mount}/data/{path}`, each segment percent-encoded so a user id
/// with `?`, `%` or spaces stays inside its segment.
fn data_url(base: &str, mount: &str, path: &str) -> Result<Uri, http::uri::InvalidUri> {
    let mut url = format!("{base}/v1/{}/data", encode_segment(mount));
    for seg in path.split('/') {
        url.push('/');
        url.push_str(&encode_segment(seg));
    }
    url.parse()
}

/// `{base}/v1/{mount}/metadata/{path}`, encoded as [`data_url`].
fn metadata_url(base: &str, mount: &str, path: &str) -> Result<Uri, http::uri::InvalidUri> {
    let data = data_url(base, mount, path)?.to_string();
    let prefix = format!("{base}/v1/{}/data", encode_segment(mount));
    format!("{base}/v1/{}/metadata{}", encode_segment(mount), &data[prefix.len()..]).parse()
}

/// What a path segment keeps unescaped: RFC 3986's unreserved characters.
const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

fn encode_segment(seg: &str) -> String {
    utf8_percent_encode(seg, UNRESERVED).to_string()
}

/// Turns the vault's answer into data or a classified failure.
fn classify(status: StatusCode, body: &[u8]) -> Result<(SecretData, u64), ReadError> {
    match status.as_u16() {
        200 => parse_data(body),
        403 => Err(ReadError::Forbidden),
        404 => Err(ReadError::NotFound),
        // 429: rate limited or a performance standby; 412: eventual
        // consistency; 472/473: DR / performance standby redirects; 5xx:
        // sealed, uninitialised, overloaded. All "ask again later".
        429 | 412 | 472 | 473 | 500..=599 => Err(ReadError::Transient(format!("HTTP {status}"))),
        _ => Err(ReadError::Rejected(format!("unexpected HTTP {status}"))),
    }
}

fn parse_data(body: &[u8]) -> Result<(SecretData, u64), ReadError> {
    let mut doc: serde_json::Value =
        serde_json::from_slice(body).map_err(|_| ReadError::Transient("the response is not JSON".into()))?;
    let version = doc.pointer("/data/metadata/version").and_then(serde_json::Value::as_u64).unwrap_or(0);
    match doc.pointer_mut("/data/data").map(serde_json::Value::take) {
        Some(serde_json::Value::Object(map)) => Ok((parse_fields(&map), version)),
        // A deleted or destroyed latest version reads as data: null.
        Some(serde_json::Value::Null) => Err(ReadError::NotFound),
        _ => Err(ReadError::Transient("the response has no data.data object (is the mount KV version 2?)".into())),
    }
}

fn field_of(data: &SecretData, key: &Kv2Key) -> Result<SecretString, VaultError> {
    match data.get(&key.field) {
        Some(Some(v)) => Ok(v.clone()),
        Some(None) => Err(VaultError::FieldNotString { reference: key.to_string(), field: key.field.clone() }),
        None => Err(VaultError::MissingField { reference: key.to_string(), field: key.field.clone() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_shape_and_encoding() {
        let u = data_url("http://127.0.0.1:8200", "secret", "tools/twilio").expect("uri");
        assert_eq!(u.to_string(), "http://127.0.0.1:8200/v1/secret/data/tools/twilio");
        let u = data_url("https://v.example/prefix", "kv", "oauth/a b?c%d@e").expect("uri");
        assert_eq!(u.to_string(), "https://v.example/prefix/v1/kv/data/oauth/a%20b%3Fc%25d%40e");
    }

    #[test]
    fn classifies_statuses() {
        let body = br#"{"data":{"data":{"a":"x","n":42,"b":true,"o":{"k":1},"z":null},"metadata":{}}}"#;
        let data = match classify(StatusCode::OK, body) {
            Ok((d, _)) => d,
            Err(_) => panic!("200 with data"),
        };
        let key = |f: &str| Kv2Key { mount: "m".into(), path: "p".into(), field: f.into() };
        assert_eq!(field_of(&data, &key("a")).expect("a").expose(), "x");
        assert_eq!(field_of(&data, &key("n")).expect("n").expose(), "42");
        assert_eq!(field_of(&data, &key("b")).expect("b").expose(), "true");
        assert!(matches!(field_of(&data, &key("o")), Err(VaultError::FieldNotString { .. })));
        assert!(matches!(field_of(&data, &key("z")), Err(VaultError::FieldNotString { .. })));
        assert!(matches!(field_of(&data, &key("nope")), Err(VaultError::MissingField { .. })));

        assert!(matches!(classify(StatusCode::FORBIDDEN, b"{}"), Err(ReadError::Forbidden)));
        assert!(matches!(classify(StatusCode::NOT_FOUND, b"{}"), Err(ReadError::NotFound)));
        for s in [500u16, 502, 503, 429, 412, 473] {
            let st = StatusCode::from_u16(s).expect("status");
            assert!(matches!(classify(st, b"{}"), Err(ReadError::Transient(_))), "{s}");
        }
        assert!(matches!(classify(StatusCode::BAD_REQUEST, b"{}"), Err(ReadError::Rejected(_))));
        assert!(matches!(classify(StatusCode::OK, b"<html>"), Err(ReadError::Transient(_))));
        assert!(matches!(classify(StatusCode::OK, br#"{"data":{"foo":"kv v1 shape"}}"#), Err(ReadError::Transient(_))));
        assert!(matches!(
            classify(StatusCode::OK, br#"{"data":{"data":null,"metadata":{"deletion_time":"x"}}}"#),
            Err(ReadError::NotFound)
        ));
    }

    #[test]
    fn config_errors() {
        std::env::set_var("OTC_KV2_UNIT_TOKEN", "t0k");
        let tok = SecretRef::Env { name: "OTC_KV2_UNIT_TOKEN".into() };
        let t = Duration::from_secs(1);
        for bad in ["not a url", "ftp://x", "/just/a/path"] {
            let err = Kv2Source::new(VaultConfig::new(bad, tok.clone()), t).expect_err(bad);
            assert!(matches!(err, VaultError::Config(_)), "{bad}: {err:?}");
        }
        let missing = SecretRef::Env { name: "OTC_KV2_UNIT_TOKEN_UNSET".into() };
        let err = Kv2Source::new(VaultConfig::new("http://127.0.0.1:1", missing), t).expect_err("unset token");
        assert!(matches!(err, VaultError::Token { .. }), "{err:?}");
        assert!(err.to_string().contains("OTC_KV2_UNIT_TOKEN_UNSET"));
        let vault_tok = SecretRef::Vault { mount: "a".into(), path: "b".into(), field: "c".into() };
        assert!(Kv2Source::new(VaultConfig::new("http://127.0.0.1:1", vault_tok), t).is_err());
        std::env::set_var("OTC_KV2_UNIT_TOKEN_BAD", "line\nbreak");
        let bad_tok = SecretRef::Env { name: "OTC_KV2_UNIT_TOKEN_BAD".into() };
        let err = Kv2Source::new(VaultConfig::new("http://127.0.0.1:1", bad_tok), t).expect_err("bad token chars");
        assert!(!err.to_string().contains("line"), "{err}");
    }

    #[tokio::test]
    async fn debug_never_shows_the_token() {
        std::env::set_var("OTC_KV2_UNIT_TOKEN2", "s.supersecret-token");
        let src = Kv2Source::new(
            VaultConfig::new("http://127.0.0.1:8200/", SecretRef::Env { name: "OTC_KV2_UNIT_TOKEN2".into() }),
            Duration::from_secs(1),
        )
        .expect("source");
        let shown = format!("{src:?}");
        assert!(!shown.contains("supersecret"), "{shown}");
        assert!(shown.contains("env:OTC_KV2_UNIT_TOKEN2"), "{shown}");
        assert!(shown.contains("http://127.0.0.1:8200\""), "{shown}");
    }

    #[tokio::test]
    async fn unreachable_and_never_fetched_is_unavailable_quickly() {
        std::env::set_var("OTC_KV2_UNIT_TOKEN3", "tok");
        // Port 1 on loopback: connection refused at once.
        let src = Kv2Source::new(
            VaultConfig::new("http://127.0.0.1:1", SecretRef::Env { name: "OTC_KV2_UNIT_TOKEN3".into() }),
            Duration::from_millis(500),
        )
        .expect("source");
        let key = Kv2Key { mount: "secret".into(), path: "x".into(), field: "f".into() };
        let started = Instant::now();
        let err = src.fetch(&key).await.expect_err("unreachable");
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(matches!(err, VaultError::Unavailable { .. }), "{err:?}");
        assert!(err.is_transient());
        assert!(err.to_string().contains("vault:secret/x#f"), "{err}");
        assert_eq!(src.stats().requests_error, 1);
    }
}
