//! A fake HashiCorp Vault (or OpenBao) server speaking the KV version 2 HTTP
//! API, for integration tests: a real server cannot be installed here, so
//! this one answers exactly as the KV v2 documentation and real servers do.
//!
//! What it serves, on a real socket at 127.0.0.1:<random port>:
//! - `GET /v1/{mount}/data/{path}[?version=N]` with `X-Vault-Token`:
//!   200 with the full envelope (`request_id`, `lease_id`, `renewable`,
//!   `lease_duration`, `data: {data, metadata}`, `wrap_info`, `warnings`,
//!   `auth`, `mount_type`); a missing or wrong token: 403
//!   `{"errors":["permission denied"]}`; an unknown path: 404
//!   `{"errors":[]}`; a soft-deleted latest version: 404 with
//!   `data: {data: null, metadata: {deletion_time: ..}}`; an unknown mount:
//!   404 "no handler for route".
//! - `POST`/`PUT /v1/{mount}/data/{path}` with `{"data": {...}}`: writes a
//!   new version, 200 with the version's metadata. With `"options": {"cas":
//!   N}` only when the latest version is N (0: no version yet); else 400
//!   `check-and-set parameter did not match the current version`.
//! - `DELETE /v1/{mount}/data/{path}`: soft-deletes the latest version, 204.
//! - `DELETE /v1/{mount}/metadata/{path}`: removes every version and the
//!   metadata, 204.
//! - `GET /v1/sys/health`: 200, or 503 while sealed.
//!
//! Failure modes: [`Kv2Server::set_down`] answers 503 `Vault is sealed` like a
//! sealed vault; [`Kv2Server::set_unreachable`] drops connections without an
//! answer; [`Kv2Server::set_hang`] accepts requests and never answers;
//! [`Kv2Server::stop`] closes the listener (connection refused).
#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// One version of a secret.
#[derive(Clone, Debug)]
struct Version {
    data: Value,
    created_time: String,
    deletion_time: String,
}

#[derive(Default)]
struct Secrets {
    /// mount -> path -> versions (index 0 is version 1).
    mounts: HashMap<String, HashMap<String, Vec<Version>>>,
}

struct State {
    token: Mutex<String>,
    secrets: Mutex<Secrets>,
    extra_mounts: Mutex<HashSet<String>>,
    sealed: AtomicBool,
    unreachable: AtomicBool,
    hang: AtomicBool,
    requests: AtomicUsize,
    paths: Mutex<Vec<String>>,
    next_id: AtomicU64,
    /// Writes through the API that were stored.
    writes: AtomicUsize,
}

/// A running fake KV v2 server. Dropping it shuts it down.
pub struct Kv2Server {
    addr: SocketAddr,
    state: Arc<State>,
    shutdown: watch::Sender<bool>,
    accept: Option<tokio::task::JoinHandle<()>>,
}

impl Kv2Server {
    /// Starts a server accepting `token`, with the `secret/` KV v2 mount that
    /// `vault server -dev` creates. Must be called inside a Tokio runtime.
    pub async fn start(token: &str) -> Kv2Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let state = Arc::new(State {
            token: Mutex::new(token.to_owned()),
            secrets: Mutex::new(Secrets::default()),
            extra_mounts: Mutex::new(HashSet::from(["secret".to_owned()])),
            sealed: AtomicBool::new(false),
            unreachable: AtomicBool::new(false),
            hang: AtomicBool::new(false),
            requests: AtomicUsize::new(0),
            paths: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(1),
            writes: AtomicUsize::new(0),
        });
        let (shutdown, rx) = watch::channel(false);
        let accept = tokio::spawn(accept_loop(listener, state.clone(), rx));
        Kv2Server { addr, state, shutdown, accept: Some(accept) }
    }

    /// The socket address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL, e.g. `http://127.0.0.1:41234` (what `[vault] address`
    /// takes).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Writes a new version of a secret, like `vault kv put`: `mount_path`
    /// is `MOUNT/PATH` (e.g. `secret/tools/twilio`), `data` a JSON object.
    /// The mount is created if needed.
    pub fn put(&self, mount_path: &str, data: Value) {
        let (mount, path) = split_mount_path(mount_path);
        assert!(data.is_object(), "KV v2 data must be a JSON object");
        self.state.extra_mounts.lock().expect("lock").insert(mount.clone());
        write_version(&self.state, &mount, &path, data);
    }

    /// The latest data of a secret (`MOUNT/PATH`), deleted or not; `None`
    /// when it has no version.
    pub fn latest(&self, mount_path: &str) -> Option<Value> {
        let (mount, path) = split_mount_path(mount_path);
        let secrets = self.state.secrets.lock().expect("lock");
        secrets.mounts.get(&mount).and_then(|m| m.get(&path)).and_then(|v| v.last()).map(|v| v.data.clone())
    }

    /// How many writes through the API were stored.
    pub fn write_count(&self) -> usize {
        self.state.writes.load(Ordering::SeqCst)
    }

    /// Soft-deletes the latest version, like `vault kv delete`: reads then
    /// answer 404 with `data: null` and the version's `deletion_time`.
    pub fn delete(&self, mount_path: &str) {
        let (mount, path) = split_mount_path(mount_path);
        soft_delete(&self.state, &mount, &path);
    }

    /// Removes every version and the metadata, like `vault kv metadata
    /// delete`: reads then answer a bare 404 `{"errors":[]}`.
    pub fn purge(&self, mount_path: &str) {
        let (mount, path) = split_mount_path(mount_path);
        let mut secrets = self.state.secrets.lock().expect("lock");
        if let Some(m) = secrets.mounts.get_mut(&mount) {
            m.remove(&path);
        }
    }

    /// Mounts an (empty) KV v2 engine at `mount`.
    pub fn mount(&self, mount: &str) {
        self.state.extra_mounts.lock().expect("lock").insert(mount.to_owned());
    }

    /// While `down`, every request is answered 503 `{"errors":["Vault is
    /// sealed"]}`, as a sealed vault does.
    pub fn set_down(&self, down: bool) {
        self.state.sealed.store(down, Ordering::SeqCst);
    }

    /// While set, connections are closed without an answer (new ones at
    /// accept, pooled ones at their next request): the vault is unreachable.
    pub fn set_unreachable(&self, unreachable: bool) {
        self.state.unreachable.store(unreachable, Ordering::SeqCst);
    }

    /// While set, requests are read and never answered (a hung vault).
    pub fn set_hang(&self, hang: bool) {
        self.state.hang.store(hang, Ordering::SeqCst);
    }

    /// Replaces the accepted token (a rotated or revoked token).
    pub fn set_token(&self, token: &str) {
        *self.state.token.lock().expect("lock") = token.to_owned();
    }

    /// How many HTTP requests reached the server (any path, any answer).
    pub fn request_count(&self) -> usize {
        self.state.requests.load(Ordering::SeqCst)
    }

    /// The request paths (with query) seen so far, in order.
    pub fn request_paths(&self) -> Vec<String> {
        self.state.paths.lock().expect("lock").clone()
    }

    /// Closes the listener and every connection; returns once the port is
    /// closed, so later connections are refused.
    pub async fn stop(&mut self) {
        let _ = self.shutdown.send(true);
        if let Some(task) = self.accept.take() {
            task.abort();
            // The listener is dropped with the task; wait for that.
            let _ = task.await;
        }
    }
}

impl Drop for Kv2Server {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        if let Some(task) = self.accept.take() {
            task.abort();
        }
    }
}

fn split_mount_path(mount_path: &str) -> (String, String) {
    let trimmed = mount_path.trim_matches('/');
    match trimmed.split_once('/') {
        Some((m, p)) if !m.is_empty() && !p.is_empty() => (m.to_owned(), p.to_owned()),
        _ => panic!("expected MOUNT/PATH, got {mount_path:?}"),
    }
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_nanos(SystemTime::now()).to_string()
}

fn write_version(state: &State, mount: &str, path: &str, data: Value) -> Value {
    let mut secrets = state.secrets.lock().expect("lock");
    let versions = secrets.mounts.entry(mount.to_owned()).or_default().entry(path.to_owned()).or_default();
    versions.push(Version { data, created_time: now_rfc3339(), deletion_time: String::new() });
    metadata(versions.len(), &versions[versions.len() - 1])
}

/// A write with an optional check-and-set version; `None` when it does not
/// match the latest version (deleted ones count, as in Vault).
fn write_version_cas(state: &State, mount: &str, path: &str, data: Value, cas: Option<u64>) -> Option<Value> {
    let mut secrets = state.secrets.lock().expect("lock");
    let versions = secrets.mounts.entry(mount.to_owned()).or_default().entry(path.to_owned()).or_default();
    if cas.is_some_and(|cas| cas != versions.len() as u64) {
        return None;
    }
    versions.push(Version { data, created_time: now_rfc3339(), deletion_time: String::new() });
    state.writes.fetch_add(1, Ordering::SeqCst);
    Some(metadata(versions.len(), &versions[versions.len() - 1]))
}

fn soft_delete(state: &State, mount: &str, path: &str) -> bool {
    let mut secrets = state.secrets.lock().expect("lock");
    match secrets.mounts.get_mut(mount).and_then(|m| m.get_mut(path)).and_then(|v| v.last_mut()) {
        Some(latest) => {
            if latest.deletion_time.is_empty() {
                latest.deletion_time = now_rfc3339();
            }
            true
        }
        None => false,
    }
}

fn metadata(version: usize, v: &Version) -> Value {
    json!({
        "created_time": v.created_time,
        "custom_metadata": null,
        "deletion_time": v.deletion_time,
        "destroyed": false,
        "version": version,
    })
}

async fn accept_loop(listener: TcpListener, state: Arc<State>, shutdown: watch::Receiver<bool>) {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(conn) => conn,
            Err(_) => continue,
        };
        if state.unreachable.load(Ordering::SeqCst) {
            drop(stream);
            continue;
        }
        let state = state.clone();
        let mut shutdown = shutdown.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| handle(state.clone(), req));
            let conn = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = conn => {}
                _ = shutdown.wait_for(|stop| *stop) => {}
            }
        });
    }
}

/// The error returned from the service to make hyper drop the connection
/// without an answer.
#[derive(Debug)]
struct Unreachable;

impl std::fmt::Display for Unreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("simulated network failure")
    }
}

impl std::error::Error for Unreachable {}

fn json_response(status: StatusCode, body: Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .header("cache-control", "no-store")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("response")
}

fn errors(status: StatusCode, errors: &[&str]) -> Response<Full<Bytes>> {
    json_response(status, json!({ "errors": errors }))
}

fn envelope(state: &State, data: Value) -> Value {
    let n = state.next_id.fetch_add(1, Ordering::SeqCst);
    json!({
        "request_id": format!("00000000-0000-4000-8000-{n:012x}"),
        "lease_id": "",
        "renewable": false,
        "lease_duration": 0,
        "data": data,
        "wrap_info": null,
        "warnings": null,
        "auth": null,
        "mount_type": "kv",
    })
}

async fn handle(state: Arc<State>, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Unreachable> {
    state.requests.fetch_add(1, Ordering::SeqCst);
    let path_and_query = req.uri().path_and_query().map(|p| p.as_str().to_owned()).unwrap_or_default();
    state.paths.lock().expect("lock").push(path_and_query);
    if state.unreachable.load(Ordering::SeqCst) {
        return Err(Unreachable);
    }
    if state.hang.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    let path = req.uri().path().to_owned();
    if path == "/v1/sys/health" {
        return Ok(if state.sealed.load(Ordering::SeqCst) {
            json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({"initialized": true, "sealed": true, "standby": true}),
            )
        } else {
            json_response(
                StatusCode::OK,
                json!({"initialized": true, "sealed": false, "standby": false,
                       "version": "1.15.0", "cluster_name": "fake-kv2"}),
            )
        });
    }
    if state.sealed.load(Ordering::SeqCst) {
        return Ok(errors(StatusCode::SERVICE_UNAVAILABLE, &["Vault is sealed"]));
    }
    let token_ok = {
        let expected = state.token.lock().expect("lock");
        req.headers()
            .get("x-vault-token")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| !t.is_empty() && t == expected.as_str())
    };
    if !token_ok {
        return Ok(errors(StatusCode::FORBIDDEN, &["permission denied"]));
    }
    let Some(rest) = path.strip_prefix("/v1/") else {
        return Ok(errors(StatusCode::NOT_FOUND, &[]));
    };
    let Some((mount, api_path)) = rest.split_once('/') else {
        return Ok(no_handler(rest));
    };
    let mount = percent_decode(mount);
    if !state.extra_mounts.lock().expect("lock").contains(&mount) {
        return Ok(no_handler(rest));
    }
    if let Some(secret_path) = api_path.strip_prefix("metadata/") {
        if req.method() == Method::DELETE {
            let secret_path = secret_path.split('/').map(percent_decode).collect::<Vec<_>>().join("/");
            if let Some(m) = state.secrets.lock().expect("lock").mounts.get_mut(&mount) {
                m.remove(&secret_path);
            }
            return Ok(Response::builder()
                .status(StatusCode::NO_CONTENT)
                .body(Full::new(Bytes::new()))
                .expect("response"));
        }
    }
    let Some(secret_path) = api_path.strip_prefix("data/") else {
        // delete/, config ... and reading metadata/ are not needed by the gateway.
        return Ok(errors(StatusCode::METHOD_NOT_ALLOWED, &["1 error occurred:\n\t* unsupported operation\n\n"]));
    };
    let secret_path = secret_path.split('/').map(percent_decode).collect::<Vec<_>>().join("/");
    if secret_path.is_empty() {
        return Ok(errors(StatusCode::NOT_FOUND, &[]));
    }
    let version = req
        .uri()
        .query()
        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("version=")).and_then(|v| v.parse::<usize>().ok()));
    match *req.method() {
        Method::GET => Ok(read(&state, &mount, &secret_path, version)),
        Method::POST | Method::PUT => {
            let body = match req.into_body().collect().await {
                Ok(b) => b.to_bytes(),
                Err(_) => return Err(Unreachable),
            };
            let Ok(doc) = serde_json::from_slice::<Value>(&body) else {
                return Ok(errors(StatusCode::BAD_REQUEST, &["error parsing JSON"]));
            };
            let Some(data) = doc.get("data").filter(|d| d.is_object()).cloned() else {
                return Ok(errors(StatusCode::BAD_REQUEST, &["no data provided"]));
            };
            let cas = doc.pointer("/options/cas").and_then(Value::as_u64);
            match write_version_cas(&state, &mount, &secret_path, data, cas) {
                Some(meta) => Ok(json_response(StatusCode::OK, envelope(&state, meta))),
                None => {
                    Ok(errors(StatusCode::BAD_REQUEST, &["check-and-set parameter did not match the current version"]))
                }
            }
        }
        Method::DELETE => {
            soft_delete(&state, &mount, &secret_path);
            Ok(Response::builder().status(StatusCode::NO_CONTENT).body(Full::new(Bytes::new())).expect("response"))
        }
        _ => Ok(errors(StatusCode::METHOD_NOT_ALLOWED, &[])),
    }
}

fn read(state: &State, mount: &str, path: &str, version: Option<usize>) -> Response<Full<Bytes>> {
    let secrets = state.secrets.lock().expect("lock");
    let Some(versions) = secrets.mounts.get(mount).and_then(|m| m.get(path)) else {
        return errors(StatusCode::NOT_FOUND, &[]);
    };
    // version=0 (or absent) means the latest.
    let n = match version {
        None | Some(0) => versions.len(),
        Some(n) => n,
    };
    let Some(v) = n.checked_sub(1).and_then(|i| versions.get(i)) else {
        return errors(StatusCode::NOT_FOUND, &[]);
    };
    if !v.deletion_time.is_empty() {
        return json_response(
            StatusCode::NOT_FOUND,
            envelope(state, json!({ "data": null, "metadata": metadata(n, v) })),
        );
    }
    json_response(StatusCode::OK, envelope(state, json!({ "data": v.data, "metadata": metadata(n, v) })))
}

fn no_handler(rest: &str) -> Response<Full<Bytes>> {
    let route = rest.to_owned();
    errors(StatusCode::NOT_FOUND, &[format!("no handler for route \"{route}\". route entry not found.").as_str()])
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = |b: u8| (b as char).to_digit(16);
            if let (Some(hi), Some(lo)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((hi * 16 + lo) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod self_tests {
    use super::*;

    #[test]
    fn decodes_percent_escapes() {
        assert_eq!(percent_decode("a%20b%3Fc"), "a b?c");
        assert_eq!(percent_decode("plain"), "plain");
        assert_eq!(percent_decode("bad%zz%"), "bad%zz%");
        assert_eq!(percent_decode("end%41"), "endA");
    }
}
