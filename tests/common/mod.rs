//! The integration-test harness: real tool servers on loopback, the real
//! `otc-gateway` binary in front of them, and a plain HTTP client to drive it.
//!
//! A test reads as a story:
//!
//! ```ignore
//! let calc = ToolServer::start(catalog(vec![tool("Calculator.Add", "1.0.0", add_schema())])).await;
//! calc.on_call(add);
//! let gw = GatewayConfig::new().upstream("calc", &calc.url()).start().await;
//! gw.wait_for_tool("Calculator.Add@1.0.0").await;
//! let resp = gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 2})).await;
//! ```
//!
//! Every test starts its own servers and its own gateway on port 0, so tests
//! are independent and may run in parallel.

#![allow(dead_code)]

pub mod kv2;

use std::collections::HashMap;
use std::convert::Infallible;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::HeaderMap;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// How long a gateway may take to print its listening line.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long `wait_for_*` keeps polling before the test fails.
pub const WAIT_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest any single request to the gateway may take: a hang is a bug.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

// ---------------------------------------------------------------------------
// Tool definitions and catalogs
// ---------------------------------------------------------------------------

/// A canonical tool definition: `tool("Calculator.Add", "1.0.0", schema)`
/// publishes id `Calculator.Add@1.0.0`, name `Calculator_Add`.
pub fn tool(key: &str, version: &str, input_schema: Value) -> Value {
    json!({
        "id": format!("{key}@{version}"),
        "name": key.replace('.', "_"),
        "description": format!("{key} version {version}"),
        "version": version,
        "input_schema": input_schema,
    })
}

/// The same as [`tool`] with another description (to tell definitions apart).
pub fn tool_described(key: &str, version: &str, input_schema: Value, description: &str) -> Value {
    let mut t = tool(key, version, input_schema);
    t["description"] = json!(description);
    t
}

/// `Toolkit.Name@1.0.0` taking any object and declaring `requirements`.
pub fn needing(key: &str, requirements: Value) -> Value {
    let mut t = tool(key, "1.0.0", json!({"type": "object"}));
    t["requirements"] = requirements;
    t
}

/// A JWK (the public half of a PEM private key) with a `kid`, for JWKS files.
pub fn jwk(pem: &str, alg: jsonwebtoken::Algorithm, kid: &str) -> jsonwebtoken::jwk::Jwk {
    let key = match alg {
        jsonwebtoken::Algorithm::ES256 => jsonwebtoken::EncodingKey::from_ec_pem(pem.as_bytes()),
        _ => jsonwebtoken::EncodingKey::from_rsa_pem(pem.as_bytes()),
    }
    .expect("key");
    let mut jwk = jsonwebtoken::jwk::Jwk::from_encoding_key(&key, alg).expect("jwk");
    jwk.common.key_id = Some(kid.to_owned());
    jwk
}

/// A catalog in the canonical dialect: `{"$schema": "otc://1.0", "items": [...]}`.
pub fn catalog(tools: Vec<Value>) -> Value {
    json!({"$schema": "otc://1.0", "items": tools})
}

/// `{a: number, b: number}`, both required.
pub fn add_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "a": {"type": "number", "description": "The first number."},
            "b": {"type": "number", "description": "The second number."}
        },
        "required": ["a", "b"]
    })
}

/// Any object.
pub fn any_object() -> Value {
    json!({"type": "object"})
}

// ---------------------------------------------------------------------------
// Upstream replies (what a tool server answers to POST /tools/call)
// ---------------------------------------------------------------------------

/// What a call handler returns: HTTP status and body text. A body starting
/// with `<` is served as text/html, anything else as application/json.
pub type Reply = (u16, String);

/// The request object the gateway forwarded (`body["request"]`).
pub fn forwarded(body: &Value) -> &Value {
    &body["request"]
}

/// Whether `seen`, the `call_id` an OTC upstream received, is the client's
/// `call_id` scoped to its caller as the gateway forwards it: 16 hex digits
/// of the caller's digest, a dot, then the id as sent.
pub fn is_scoped_call_id(seen: &Value, call_id: &str) -> bool {
    let Some((prefix, id)) = seen.as_str().and_then(|s| s.split_once('.')) else { return false };
    prefix.len() == 16 && prefix.bytes().all(|b| b.is_ascii_hexdigit()) && id == call_id
}

/// A successful OTC result carrying `value`, with the forwarded call_id and no duration.
pub fn success(req: &Value, value: Value) -> Reply {
    let body = json!({
        "$schema": "otc://1.0",
        "result": {"call_id": forwarded(req)["call_id"], "success": true, "value": value}
    });
    (200, body.to_string())
}

/// A tool execution error: 200 with `success: false` and `error`.
pub fn tool_error(req: &Value, error: Value) -> Reply {
    let body = json!({
        "$schema": "otc://1.0",
        "result": {"call_id": forwarded(req)["call_id"], "duration": 60, "success": false, "error": error}
    });
    (200, body.to_string())
}

/// Echoes the forwarded input back as the value.
pub fn echo(req: &Value) -> Reply {
    success(req, forwarded(req)["input"].clone())
}

/// Adds `a` and `b` (integers stay integers).
pub fn add(req: &Value) -> Reply {
    let input = &forwarded(req)["input"];
    match (input["a"].as_i64(), input["b"].as_i64()) {
        (Some(a), Some(b)) => success(req, json!(a + b)),
        _ => success(req, json!(input["a"].as_f64().unwrap_or(0.0) + input["b"].as_f64().unwrap_or(0.0))),
    }
}

/// An HTML error page, the way a crashed framework answers.
pub fn html_500(_req: &Value) -> Reply {
    (
        500,
        "<html><head><title>500 Internal Server Error</title></head><body><h1>Internal Server Error</h1></body></html>"
            .into(),
    )
}

// ---------------------------------------------------------------------------
// ToolServer: a real OTC tool server on loopback
// ---------------------------------------------------------------------------

/// How a [`ToolServer`] answers GET /tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CatalogMode {
    /// The current catalog (with ETag / 304 when enabled).
    Serve,
    /// 500 with an HTML page.
    Html500,
    /// 200 with a body that is not JSON.
    Garbage,
    /// Never answers.
    Hang,
}

/// One HTTP request a [`ToolServer`] received.
#[derive(Clone, Debug)]
pub struct Seen {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The path with query.
    pub path: String,
    /// Headers, names lower-cased.
    pub headers: HashMap<String, String>,
    /// The status the server answered (0 while still hanging).
    pub status: u16,
}

type Handler = Arc<dyn Fn(&Value) -> Reply + Send + Sync>;

struct ServerState {
    catalog: Mutex<Value>,
    catalog_mode: Mutex<CatalogMode>,
    etag: AtomicBool,
    catalog_version: AtomicU64,
    handler: Mutex<Handler>,
    call_delay: Mutex<Duration>,
    calls: Mutex<Vec<Value>>,
    /// Each call body as the bytes received (a `Value` may have rounded its numbers).
    raw_calls: Mutex<Vec<Bytes>>,
    requests: Mutex<Vec<Seen>>,
}

/// A real HTTP/1 OTC tool server on 127.0.0.1: GET /tools from a replaceable
/// catalog, POST /tools/call answered by a per-test handler. It records every
/// call body and every request's headers.
pub struct ToolServer {
    addr: SocketAddr,
    state: Arc<ServerState>,
    accept: Option<JoinHandle<()>>,
}

impl ToolServer {
    /// Starts a server on a free port, serving `catalog` and echoing calls.
    pub async fn start(catalog: Value) -> ToolServer {
        Self::start_on("127.0.0.1:0".parse().unwrap(), catalog).await
    }

    /// Starts a server on `addr` (e.g. one from [`free_addr`]).
    pub async fn start_on(addr: SocketAddr, catalog: Value) -> ToolServer {
        let state = Arc::new(ServerState {
            catalog: Mutex::new(catalog),
            catalog_mode: Mutex::new(CatalogMode::Serve),
            etag: AtomicBool::new(false),
            catalog_version: AtomicU64::new(1),
            handler: Mutex::new(Arc::new(echo)),
            call_delay: Mutex::new(Duration::ZERO),
            calls: Mutex::new(Vec::new()),
            raw_calls: Mutex::new(Vec::new()),
            requests: Mutex::new(Vec::new()),
        });
        let mut server = ToolServer { addr, state, accept: None };
        server.listen().await;
        server
    }

    async fn listen(&mut self) {
        let listener =
            TcpListener::bind(self.addr).await.unwrap_or_else(|e| panic!("tool server cannot bind {}: {e}", self.addr));
        self.addr = listener.local_addr().unwrap();
        let state = self.state.clone();
        self.accept = Some(tokio::spawn(async move {
            let mut conns = JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        if let Ok((stream, _)) = accepted {
                            let state = state.clone();
                            conns.spawn(async move {
                                let svc = service_fn(move |req| handle(req, state.clone()));
                                let _ = hyper::server::conn::http1::Builder::new()
                                    .serve_connection(TokioIo::new(stream), svc)
                                    .await;
                            });
                        }
                    }
                    Some(_) = conns.join_next(), if !conns.is_empty() => {}
                }
            }
        }));
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, the upstream url for gateway.toml.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Replaces the catalog served from now on (and changes the ETag).
    pub fn set_catalog(&self, catalog: Value) {
        *self.state.catalog.lock().unwrap() = catalog;
        self.state.catalog_version.fetch_add(1, Ordering::SeqCst);
    }

    /// Serves an ETag with the catalog and answers 304 to a matching If-None-Match.
    pub fn enable_etag(&self) {
        self.state.etag.store(true, Ordering::SeqCst);
    }

    /// The ETag the current catalog is served with.
    pub fn current_etag(&self) -> String {
        format!("\"catalog-v{}\"", self.state.catalog_version.load(Ordering::SeqCst))
    }

    /// How GET /tools answers from now on.
    pub fn set_catalog_mode(&self, mode: CatalogMode) {
        *self.state.catalog_mode.lock().unwrap() = mode;
    }

    /// Answers POST /tools/call with `handler(body)` from now on.
    pub fn on_call(&self, handler: impl Fn(&Value) -> Reply + Send + Sync + 'static) {
        *self.state.handler.lock().unwrap() = Arc::new(handler);
    }

    /// Waits this long before answering each call.
    pub fn set_call_delay(&self, delay: Duration) {
        *self.state.call_delay.lock().unwrap() = delay;
    }

    /// Every POST /tools/call body received, in order (a non-JSON body is
    /// recorded as a JSON string).
    pub fn calls(&self) -> Vec<Value> {
        self.state.calls.lock().unwrap().clone()
    }

    /// The last POST /tools/call body as the bytes received, as text.
    pub fn last_raw_call(&self) -> String {
        let calls = self.state.raw_calls.lock().unwrap();
        String::from_utf8_lossy(calls.last().expect("the tool server received no call")).into_owned()
    }

    /// How many calls arrived.
    pub fn call_count(&self) -> usize {
        self.state.calls.lock().unwrap().len()
    }

    /// The `request` object of the last call received.
    pub fn last_request(&self) -> Value {
        let calls = self.calls();
        let last = calls.last().expect("the tool server received no call");
        forwarded(last).clone()
    }

    /// Every request received (catalog fetches and calls).
    pub fn requests(&self) -> Vec<Seen> {
        self.state.requests.lock().unwrap().clone()
    }

    /// The GET /tools requests received.
    pub fn catalog_fetches(&self) -> Vec<Seen> {
        self.requests().into_iter().filter(|r| r.method == "GET" && r.path == "/tools").collect()
    }

    /// Stops listening and drops every open connection. The port stays free
    /// for [`ToolServer::restart`].
    pub async fn stop(&mut self) {
        if let Some(task) = self.accept.take() {
            task.abort();
            let _ = task.await;
        }
        // Let the aborted connection tasks run their drop (closing sockets).
        tokio::task::yield_now().await;
    }

    /// Listens again on the same port, with the same catalog, handler and records.
    pub async fn restart(&mut self) {
        assert!(self.accept.is_none(), "restart() on a running tool server");
        self.listen().await;
    }

    /// Waits until `pred(self)` holds, polling; panics with `what` after [`WAIT_TIMEOUT`].
    pub async fn wait_until(&self, what: &str, pred: impl Fn(&ToolServer) -> bool) {
        let deadline = Instant::now() + WAIT_TIMEOUT;
        while !pred(self) {
            if Instant::now() > deadline {
                panic!("timed out waiting until {what}; requests seen: {:#?}", self.requests());
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

impl Drop for ToolServer {
    fn drop(&mut self) {
        if let Some(task) = self.accept.take() {
            task.abort();
        }
    }
}

fn full(status: u16, content_type: &str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap())
        .header("content-type", content_type)
        .body(Full::new(body.into()))
        .unwrap()
}

fn record(state: &ServerState, seen: Seen) -> usize {
    let mut requests = state.requests.lock().unwrap();
    requests.push(seen);
    requests.len() - 1
}

fn set_status(state: &ServerState, index: usize, status: u16) {
    state.requests.lock().unwrap()[index].status = status;
}

async fn handle(req: Request<Incoming>, state: Arc<ServerState>) -> Result<Response<Full<Bytes>>, Infallible> {
    let method = req.method().to_string();
    let path = req.uri().path_and_query().map(|p| p.to_string()).unwrap_or_default();
    let headers: HashMap<String, String> = req
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_ascii_lowercase(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
        .collect();
    let index =
        record(&state, Seen { method: method.clone(), path: path.clone(), headers: headers.clone(), status: 0 });
    let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();

    let response = match (method.as_str(), path.as_str()) {
        ("GET", "/tools") => {
            let mode = *state.catalog_mode.lock().unwrap();
            match mode {
                CatalogMode::Serve => {
                    let etag = format!("\"catalog-v{}\"", state.catalog_version.load(Ordering::SeqCst));
                    let with_etag = state.etag.load(Ordering::SeqCst);
                    if with_etag && headers.get("if-none-match").is_some_and(|v| v.split(',').any(|t| t.trim() == etag))
                    {
                        Response::builder().status(304).header("etag", etag).body(Full::new(Bytes::new())).unwrap()
                    } else {
                        let text = state.catalog.lock().unwrap().to_string();
                        let mut resp = full(200, "application/json", text);
                        if with_etag {
                            resp.headers_mut().insert("etag", etag.parse().unwrap());
                        }
                        resp
                    }
                }
                CatalogMode::Html500 => {
                    full(500, "text/html", "<html><body><h1>500 Internal Server Error</h1></body></html>")
                }
                CatalogMode::Garbage => full(200, "application/json", "this is {not json at all"),
                CatalogMode::Hang => {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    full(504, "text/plain", "hung")
                }
            }
        }
        ("POST", "/tools/call") => {
            let value: Value = serde_json::from_slice(&body)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
            state.calls.lock().unwrap().push(value.clone());
            state.raw_calls.lock().unwrap().push(body.clone());
            let delay = *state.call_delay.lock().unwrap();
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let handler = state.handler.lock().unwrap().clone();
            let (status, text) = handler(&value);
            let content_type = if text.trim_start().starts_with('<') { "text/html" } else { "application/json" };
            full(status, content_type, text)
        }
        _ => full(404, "application/json", r#"{"message":"not found"}"#),
    };
    set_status(&state, index, response.status().as_u16());
    Ok(response)
}

/// An address on loopback where nothing listens (connections are refused).
pub fn dead_addr() -> SocketAddr {
    free_addr()
}

/// A free loopback port, for a server that starts later (the port is
/// released at once; nothing listens on it until someone binds it).
pub fn free_addr() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// A loopback port held without listening: connections to it are refused,
/// and until the reservation is dropped nothing else (another test's server,
/// or an outgoing connection's own port) can take it, as a port from
/// [`free_addr`] can.
pub struct ReservedAddr {
    /// The reserved address.
    pub addr: SocketAddr,
    _socket: tokio::net::TcpSocket,
}

/// Reserves a loopback port; see [`ReservedAddr`].
pub fn reserve_addr() -> ReservedAddr {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    ReservedAddr { addr: socket.local_addr().unwrap(), _socket: socket }
}

// ---------------------------------------------------------------------------
// gateway.toml
// ---------------------------------------------------------------------------

/// Builds a gateway.toml for tests: both listeners on port 0, catalog polled
/// every 200ms with a 1s fetch timeout.
#[derive(Clone, Debug)]
pub struct GatewayConfig {
    max_body_bytes: Option<usize>,
    upstreams: Vec<String>,
    extra: Vec<String>,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl GatewayConfig {
    /// No upstreams yet.
    pub fn new() -> GatewayConfig {
        GatewayConfig { max_body_bytes: None, upstreams: Vec::new(), extra: Vec::new() }
    }

    /// Sets `[server] max_body_bytes`.
    pub fn max_body_bytes(mut self, n: usize) -> Self {
        self.max_body_bytes = Some(n);
        self
    }

    /// Adds an OTC upstream.
    pub fn upstream(self, name: &str, url: &str) -> Self {
        self.upstream_with(name, url, "")
    }

    /// Adds an OTC upstream with extra key lines (`priority = 5`, `call_timeout = "300ms"`, ...).
    pub fn upstream_with(mut self, name: &str, url: &str, extra: &str) -> Self {
        let mut s = format!("[[upstreams]]\nname = \"{name}\"\nurl = \"{url}\"\nprotocol = \"otc\"\n");
        for line in extra.lines().map(str::trim).filter(|l| !l.is_empty()) {
            s.push_str(line);
            s.push('\n');
        }
        self.upstreams.push(s);
        self
    }

    /// Appends raw TOML after the upstreams.
    pub fn raw(mut self, toml: &str) -> Self {
        self.extra.push(toml.to_owned());
        self
    }

    /// The TOML text.
    pub fn toml(&self) -> String {
        let mut s = String::from("[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n");
        if let Some(n) = self.max_body_bytes {
            s.push_str(&format!("max_body_bytes = {n}\n"));
        }
        s.push_str("\n[catalog]\npoll_interval = \"200ms\"\nrequest_timeout = \"1s\"\n");
        for u in &self.upstreams {
            s.push('\n');
            s.push_str(u);
        }
        for e in &self.extra {
            s.push('\n');
            s.push_str(e);
        }
        s
    }

    /// Starts a gateway with this config.
    pub async fn start(&self) -> Gateway {
        Gateway::start(&self.toml()).await
    }

    /// Starts a gateway with this config and extra environment variables.
    pub async fn start_with_env(&self, env: &[(&str, &str)]) -> Gateway {
        Gateway::start_with_env(&self.toml(), env).await
    }
}

// ---------------------------------------------------------------------------
// Gateway: the real binary
// ---------------------------------------------------------------------------

/// Writes `text` to a fresh file in the temp dir and returns its path.
pub fn temp_file(stem: &str, ext: &str, text: &str) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().subsec_nanos();
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let path = std::env::temp_dir().join(format!("otc-gw-test-{stem}-{}-{n}-{nanos}.{ext}", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

/// The path of the binary under test.
pub fn gateway_bin() -> &'static str {
    env!("CARGO_BIN_EXE_otc-gateway")
}

/// A running `otc-gateway --config PATH`, killed on drop. When the test
/// panics, the gateway's stderr is printed.
pub struct Gateway {
    /// The OTC front.
    pub addr: SocketAddr,
    /// The admin listener (/metrics, /status).
    pub admin: SocketAddr,
    child: Child,
    config_path: PathBuf,
    log_path: PathBuf,
    /// Everything the gateway wrote to stdout (the reader thread appends).
    stdout_text: Arc<Mutex<String>>,
}

const LISTENING: &str = "otc-gateway listening on ";

impl Gateway {
    /// Starts the gateway with this gateway.toml text.
    pub async fn start(toml: &str) -> Gateway {
        Self::start_with_env(toml, &[]).await
    }

    /// Starts the gateway with extra environment variables (e.g. `RUST_LOG`).
    pub async fn start_with_env(toml: &str, env: &[(&str, &str)]) -> Gateway {
        let config_path = temp_file("config", "toml", toml);
        Self::start_at(config_path, env).await
    }

    /// Starts the gateway on a config file prepared by the test (e.g. behind
    /// a ConfigMap-style symlink). The file is removed on drop.
    pub async fn start_at(config_path: PathBuf, env: &[(&str, &str)]) -> Gateway {
        let toml = std::fs::read_to_string(&config_path).unwrap_or_default();
        let log_path = temp_file("stderr", "log", "");
        let log = std::fs::File::create(&log_path).unwrap();
        let mut cmd = Command::new(gateway_bin());
        cmd.arg("--config").arg(&config_path).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::from(log));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {}: {e}", gateway_bin()));
        let stdout = child.stdout.take().unwrap();

        // Read stdout on a thread: the first listening line goes through the
        // channel, the rest is drained so the gateway never blocks on a full pipe.
        let (tx, rx) = tokio::sync::oneshot::channel::<String>();
        let stdout_text = Arc::new(Mutex::new(String::new()));
        let captured = stdout_text.clone();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Ok(mut text) = captured.lock() {
                    text.push_str(&line);
                    text.push('\n');
                }
                if line.starts_with(LISTENING) {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(line);
                    }
                }
            }
        });

        let mut gw = Gateway {
            addr: "0.0.0.0:0".parse().unwrap(),
            admin: "0.0.0.0:0".parse().unwrap(),
            child,
            config_path,
            log_path,
            stdout_text,
        };
        let line = match tokio::time::timeout(START_TIMEOUT, rx).await {
            Ok(Ok(line)) => line,
            Ok(Err(_)) => {
                let status = gw.child.wait().ok();
                panic!("otc-gateway exited before listening ({status:?}).\nconfig:\n{toml}\nstderr:\n{}", gw.logs())
            }
            Err(_) => panic!(
                "otc-gateway printed no listening line within {START_TIMEOUT:?}.\nconfig:\n{toml}\nstderr:\n{}",
                gw.logs()
            ),
        };
        let (front, admin) =
            parse_listening(&line).unwrap_or_else(|| panic!("cannot parse the listening line {line:?}"));
        gw.addr = front;
        gw.admin = admin;
        gw
    }

    /// The config file the gateway was started with.
    pub fn config_path(&self) -> &std::path::Path {
        &self.config_path
    }

    /// Replaces the config file atomically (write a sibling, rename over),
    /// as editors and config management do.
    pub fn rewrite_config(&self, toml: &str) {
        let tmp = self.config_path.with_extension("toml.tmp");
        std::fs::write(&tmp, toml).unwrap();
        std::fs::rename(&tmp, &self.config_path).unwrap();
    }

    /// The gateway's process id (to send it signals).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal (e.g. "TERM", "HUP") to the gateway process.
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill").arg(format!("-{name}")).arg(self.pid().to_string()).status().unwrap();
        assert!(status.success(), "kill -{name} failed");
    }

    /// Waits up to `limit` for the process to exit; its status, or None.
    pub async fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Whether the process is still running.
    pub fn is_alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Everything the gateway wrote to stderr so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Everything the gateway wrote to stdout so far (line by line).
    pub fn stdout(&self) -> String {
        self.stdout_text.lock().map(|t| t.clone()).unwrap_or_default()
    }

    /// Everything the gateway wrote so far: stdout, then stderr.
    pub fn output(&self) -> String {
        format!("{}{}", self.stdout(), self.logs())
    }

    /// Waits until the gateway's stderr contains every one of `needles`.
    pub async fn wait_for_log(&self, needles: &[&str]) -> String {
        let deadline = Instant::now() + WAIT_TIMEOUT;
        loop {
            let logs = self.logs();
            if needles.iter().all(|n| logs.contains(n)) {
                return logs;
            }
            if Instant::now() > deadline {
                panic!("the gateway never logged all of {needles:?}; stderr:\n{logs}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `http://ADDR` of the front.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Any request to the front.
    pub async fn request(&self, method: &str, path: &str, body: impl Into<Bytes>, content_type: Option<&str>) -> Resp {
        send(self.addr, method, path, body.into(), content_type).await
    }

    /// GET `path`.
    pub async fn get(&self, path: &str) -> Resp {
        self.request("GET", path, Bytes::new(), None).await
    }

    /// POST `path` with a JSON body.
    pub async fn post_json(&self, path: &str, body: &Value) -> Resp {
        self.request("POST", path, body.to_string(), Some("application/json")).await
    }

    /// POST `path` with these exact bytes.
    pub async fn post_raw(&self, path: &str, body: impl Into<Bytes>, content_type: &str) -> Resp {
        self.request("POST", path, body, Some(content_type)).await
    }

    /// POST /tools/call `{"$schema": "otc://1.0", "request": {"tool_id", "input"}}`.
    pub async fn call(&self, tool_id: &str, input: Value) -> Resp {
        self.post_json("/tools/call", &json!({"$schema": "otc://1.0", "request": {"tool_id": tool_id, "input": input}}))
            .await
    }

    /// GET /tools, checked for the canonical envelope; returns the items.
    pub async fn tools(&self) -> Vec<Value> {
        let resp = self.get("/tools").await;
        resp.expect_status(200);
        let body = resp.json();
        assert_eq!(body["$schema"], "otc://1.0", "GET /tools must carry $schema otc://1.0: {body}");
        body["items"].as_array().unwrap_or_else(|| panic!("GET /tools has no items array: {body}")).clone()
    }

    /// Polls GET /tools until `pred(items)` holds; returns those items.
    pub async fn wait_for_tools(&self, what: &str, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + WAIT_TIMEOUT;
        loop {
            let items = self.tools().await;
            if pred(&items) {
                return items;
            }
            if Instant::now() > deadline {
                panic!(
                    "timed out waiting until {what}; GET /tools items: {}",
                    serde_json::to_string_pretty(&items).unwrap()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until GET /tools lists `id`; returns its definition.
    pub async fn wait_for_tool(&self, id: &str) -> Value {
        let items = self.wait_for_tools(&format!("{id} is listed"), |items| find_tool(items, id).is_some()).await;
        find_tool(&items, id).unwrap().clone()
    }

    /// Waits until GET /tools no longer lists `id`.
    pub async fn wait_for_tool_gone(&self, id: &str) {
        self.wait_for_tools(&format!("{id} is no longer listed"), |items| find_tool(items, id).is_none()).await;
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        // Whether it was still running tells a crash from a wrong answer.
        let exited = self.child.try_wait().ok().flatten();
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            if let Some(status) = exited {
                eprintln!("---- otc-gateway had already exited: {status} ----");
            }
            let logs = self.logs();
            let tail: Vec<&str> = logs.lines().rev().take(200).collect();
            eprintln!("---- otc-gateway stderr (last {} lines) ----", tail.len());
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
            eprintln!("---- end of otc-gateway stderr ----");
        }
        let _ = std::fs::remove_file(&self.config_path);
        let _ = std::fs::remove_file(&self.log_path);
    }
}

fn parse_listening(line: &str) -> Option<(SocketAddr, SocketAddr)> {
    let rest = line.strip_prefix(LISTENING)?;
    let (front, admin) = rest.split_once(" (admin ")?;
    let admin = admin.trim_end().strip_suffix(')')?;
    Some((front.trim().parse().ok()?, admin.trim().parse().ok()?))
}

/// The item of a GET /tools listing with this id.
pub fn find_tool<'a>(items: &'a [Value], id: &str) -> Option<&'a Value> {
    items.iter().find(|t| t["id"] == id)
}

/// The ids of a GET /tools listing.
pub fn ids(items: &[Value]) -> Vec<String> {
    items.iter().filter_map(|t| t["id"].as_str().map(str::to_owned)).collect()
}

// ---------------------------------------------------------------------------
// A plain HTTP/1 client
// ---------------------------------------------------------------------------

/// A response from the gateway.
#[derive(Debug)]
pub struct Resp {
    /// The status code.
    pub status: u16,
    /// The headers.
    pub headers: HeaderMap,
    /// The whole body.
    pub body: Bytes,
}

impl Resp {
    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON; panics (showing the body) when it is not.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("response ({}) is not JSON ({e}): {}", self.status, self.text()))
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.get(name).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    }

    /// Panics with the body unless the status is `status`.
    pub fn expect_status(&self, status: u16) -> &Self {
        assert_eq!(self.status, status, "expected HTTP {status}, got {} with body: {}", self.status, self.text());
        self
    }

    /// The `result` object of a 200 call response, after checking the envelope.
    pub fn result(&self) -> Value {
        self.expect_status(200);
        let body = self.json();
        assert_eq!(body["$schema"], "otc://1.0", "a call response must carry $schema otc://1.0: {body}");
        assert!(body["result"].is_object(), "a call response must be wrapped in result: {body}");
        body["result"].clone()
    }

    /// Checks a ServerErrorResponse: this status, JSON, `$schema`, a
    /// non-empty `message` and a non-empty `developer_message`. Returns the body.
    pub fn server_error(&self, status: u16) -> Value {
        self.expect_status(status);
        let body = self.json();
        assert_eq!(body["$schema"], "otc://1.0", "error body must carry $schema otc://1.0: {body}");
        assert!(
            body["message"].as_str().is_some_and(|m| !m.trim().is_empty()),
            "error body must have a non-empty message: {body}"
        );
        assert!(
            body["developer_message"].as_str().is_some_and(|m| !m.trim().is_empty()),
            "error body must have a non-empty developer_message: {body}"
        );
        body
    }

    /// Checks a 422 ValidationErrorResponse and returns its `parameter_errors`.
    pub fn parameter_errors(&self) -> serde_json::Map<String, Value> {
        self.expect_status(422);
        let body = self.json();
        assert_eq!(body["$schema"], "otc://1.0", "422 body must carry $schema otc://1.0: {body}");
        assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()), "422 body must have a message: {body}");
        body["parameter_errors"]
            .as_object()
            .unwrap_or_else(|| panic!("422 body must have a parameter_errors object: {body}"))
            .clone()
    }
}

/// One request on a fresh connection, bounded by [`REQUEST_TIMEOUT`].
/// Reads a raw connection until the gateway closes it or `limit` passes:
/// what came back, and whether it was closed.
pub async fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> (String, bool) {
    use tokio::io::AsyncReadExt;
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (String::from_utf8_lossy(&out).into_owned(), true),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Err(_) => return (String::from_utf8_lossy(&out).into_owned(), false),
        }
    }
}

pub async fn send(addr: SocketAddr, method: &str, path: &str, body: Bytes, content_type: Option<&str>) -> Resp {
    let headers: Vec<(&str, &str)> = content_type.map(|ct| ("content-type", ct)).into_iter().collect();
    send_with_headers(addr, method, path, body, &headers).await
}

/// One request with extra headers (e.g. `authorization`) on a fresh connection.
pub async fn send_with_headers(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Bytes,
    extra_headers: &[(&str, &str)],
) -> Resp {
    let what = format!("{method} {path} to {addr}");
    let fut = async {
        let stream = TcpStream::connect(addr).await.unwrap_or_else(|e| panic!("{what}: cannot connect: {e}"));
        let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(stream))
            .await
            .unwrap_or_else(|e| panic!("{what}: handshake: {e}"));
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut req = Request::builder().method(method).uri(path).header("host", addr.to_string());
        for (name, value) in extra_headers {
            req = req.header(*name, *value);
        }
        let resp = sender
            .send_request(req.body(Full::new(body)).unwrap())
            .await
            .unwrap_or_else(|e| panic!("{what}: no response: {e}"));
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp.into_body().collect().await.unwrap_or_else(|e| panic!("{what}: body: {e}")).to_bytes();
        Resp { status, headers, body }
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, fut).await {
        Ok(resp) => resp,
        Err(_) => panic!("{what}: no answer within {REQUEST_TIMEOUT:?} (the gateway hung)"),
    }
}
