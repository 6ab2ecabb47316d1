//! The KV v2 stand-in: a server answering as HashiCorp Vault's (and
//! OpenBao's) KV version 2 HTTP API does, kept only for the one fault a
//! real server cannot be made to produce. Every other Vault test talks to a
//! real OpenBao (`openbao.rs`).
//!
//! Who still uses it, and why:
//! - `tests/vault_backend.rs`,
//!   `a_cached_value_is_served_stale_while_connections_are_dropped`:
//!   connections accepted and closed without an answer
//!   ([`Kv2Server::set_unreachable`]), as a proxy or firewall between the
//!   gateway and its vault does. A real server answers, hangs when stopped
//!   (SIGSTOP) or refuses when killed, and those are tested against OpenBao;
//!   it never drops a request it read without answering.
//! - `tests/vault_backend.rs`, `the_stand_in_answers_as_openbao_does`: sends
//!   the same requests to the stand-in and to a real OpenBao and requires
//!   the same answers, so the stand-in cannot drift from the real API.
//!
//! What it serves, on a real socket at 127.0.0.1:<random port>:
//! - `GET /v1/{mount}/data/{path}[?version=N]` with `X-Vault-Token`:
//!   200 with the envelope (`request_id`, `lease_id`, `renewable`,
//!   `lease_duration`, `data: {data, metadata}`, `wrap_info`, `warnings`,
//!   `auth`, and Vault's `mount_type`); a missing or wrong token: 403
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
//!
//! Faults: [`Kv2Server::set_unreachable`] drops connections without an
//! answer; [`Kv2Server::set_down`] answers 503 `Vault is sealed` as a sealed
//! vault does (used to compare that answer with OpenBao's).
#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

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
    token: String,
    secrets: Mutex<Secrets>,
    mounts: HashSet<String>,
    sealed: AtomicBool,
    unreachable: AtomicBool,
    requests: AtomicUsize,
    next_id: AtomicU64,
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
            token: token.to_owned(),
            secrets: Mutex::new(Secrets::default()),
            mounts: HashSet::from(["secret".to_owned()]),
            sealed: AtomicBool::new(false),
            unreachable: AtomicBool::new(false),
            requests: AtomicUsize::new(0),
            next_id: AtomicU64::new(1),
        });
        let (shutdown, rx) = watch::channel(false);
        let accept = tokio::spawn(accept_loop(listener, state.clone(), rx));
        Kv2Server { addr, state, shutdown, accept: Some(accept) }
    }

    /// The base URL, e.g. `http://127.0.0.1:41234` (what `[vault] address`
    /// takes).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Writes a new version of a secret, like `vault kv put`: `mount_path`
    /// is `MOUNT/PATH` under the `secret/` mount (e.g.
    /// `secret/tools/twilio`), `data` a JSON object.
    pub fn put(&self, mount_path: &str, data: Value) {
        let (mount, path) = split_mount_path(mount_path);
        assert!(self.state.mounts.contains(&mount), "no mount {mount}");
        assert!(data.is_object(), "KV v2 data must be a JSON object");
        write_version(&self.state, &mount, &path, data);
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

    /// How many HTTP requests reached the server (any path, any answer).
    pub fn request_count(&self) -> usize {
        self.state.requests.load(Ordering::SeqCst)
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

fn write_version(state: &State, mount: &str, path: &str, data: Value) {
    let mut secrets = state.secrets.lock().expect("lock");
    let versions = secrets.mounts.entry(mount.to_owned()).or_default().entry(path.to_owned()).or_default();
    versions.push(Version { data, created_time: now_rfc3339(), deletion_time: String::new() });
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
    Some(metadata(versions.len(), &versions[versions.len() - 1]))
}

fn soft_delete(state: &State, mount: &str, path: &str) {
    let mut secrets = state.secrets.lock().expect("lock");
    if let Some(latest) = secrets.mounts.get_mut(mount).and_then(|m| m.get_mut(path)).and_then(|v| v.last_mut()) {
        if latest.deletion_time.is_empty() {
            latest.deletion_time = now_rfc3339();
        }
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
    if state.unreachable.load(Ordering::SeqCst) {
        return Err(Unreachable);
    }
    let path = req.uri().path().to_owned();
    if state.sealed.load(Ordering::SeqCst) {
        return Ok(errors(StatusCode::SERVICE_UNAVAILABLE, &["Vault is sealed"]));
    }
    let token_ok = req
        .headers()
        .get("x-vault-token")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| !t.is_empty() && t == state.token);
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
    if !state.mounts.contains(&mount) {
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
