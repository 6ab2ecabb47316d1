//! ToolServer: a real OTC tool server on loopback.

use super::*;

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
    /// The current catalog with every tool's description rewritten at each
    /// fetch (" (fetch N)" appended): a server that changes its definitions
    /// at every poll.
    RewriteEachFetch,
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
    /// Connections accepted and not yet closed.
    open: AtomicUsize,
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
            open: AtomicUsize::new(0),
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
                            state.open.fetch_add(1, Ordering::SeqCst);
                            conns.spawn(async move {
                                let served = state.clone();
                                let svc = service_fn(move |req| handle(req, served.clone()));
                                let _ = hyper::server::conn::http1::Builder::new()
                                    .serve_connection(TokioIo::new(stream), svc)
                                    .await;
                                state.open.fetch_sub(1, Ordering::SeqCst);
                            });
                        }
                    }
                    Some(_) = conns.join_next(), if !conns.is_empty() => {}
                }
            }
        }));
    }

    /// Connections open to this server now (the client has not closed them).
    pub fn open_connections(&self) -> usize {
        self.state.open.load(Ordering::SeqCst)
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
        wait_until(
            what,
            async || if pred(self) { Ok(()) } else { Err(format!("requests seen: {:#?}", self.requests())) },
        )
        .await
    }
}

/// A tool server publishing `Calculator.Add@1.0.0` and answering it with the sum.
pub async fn calculator() -> ToolServer {
    let server = ToolServer::start(catalog(vec![tool("Calculator.Add", "1.0.0", add_schema())])).await;
    server.on_call(add);
    server
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
                CatalogMode::RewriteEachFetch => {
                    let mut catalog = state.catalog.lock().unwrap().clone();
                    for tool in catalog["items"].as_array_mut().into_iter().flatten() {
                        let description = tool["description"].as_str().unwrap_or_default();
                        tool["description"] = Value::String(format!("{description} (fetch {index})"));
                    }
                    full(200, "application/json", catalog.to_string())
                }
                CatalogMode::Hang => {
                    // On purpose: the catalog that never comes.
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
                // On purpose: the slow tool a test asked for.
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
