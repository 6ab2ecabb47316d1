//! Gateway: the real binary, started and driven.

use super::*;

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
    /// Set by the reader thread once stdout is read to its end.
    stdout_closed: Arc<AtomicBool>,
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
        // Its own working directory, so a relative path in the config (the
        // default `[state] dir`) is never the repository's, nor another
        // gateway's.
        let work_dir = config_path.with_extension("cwd");
        std::fs::create_dir_all(&work_dir).unwrap();
        let mut cmd = Command::new(gateway_bin());
        cmd.current_dir(&work_dir);
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
        let stdout_closed = Arc::new(AtomicBool::new(false));
        let closed = stdout_closed.clone();
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
            closed.store(true, Ordering::Release);
        });

        let mut gw = Gateway {
            addr: "0.0.0.0:0".parse().unwrap(),
            admin: "0.0.0.0:0".parse().unwrap(),
            child,
            config_path,
            log_path,
            stdout_text,
            stdout_closed,
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
        // (Not `wait_within`: running on is an answer here, not a failure.)
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.child.try_wait().unwrap()
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

    /// Waits until all the gateway wrote to stdout has been read (the
    /// process has exited and closed it).
    pub async fn wait_stdout_closed(&self) {
        wait_until("the gateway's stdout is read to its end", async || self.stdout_closed.load(Ordering::Acquire))
            .await;
    }

    /// Everything the gateway wrote so far: stdout, then stderr.
    pub fn output(&self) -> String {
        format!("{}{}", self.stdout(), self.logs())
    }

    /// Waits until the gateway's stderr contains every one of `needles`.
    pub async fn wait_for_log(&self, needles: &[&str]) -> String {
        wait_until(&format!("the gateway logged all of {needles:?}"), async || {
            let logs = self.logs();
            if needles.iter().all(|n| logs.contains(n)) {
                Ok(logs)
            } else {
                Err(format!("stderr:\n{logs}"))
            }
        })
        .await
    }

    /// `http://ADDR` of the front.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Any request to the front.
    pub async fn request(&self, method: &str, path: &str, body: impl Into<Bytes>, content_type: Option<&str>) -> Resp {
        send(self.addr, method, path, body.into(), content_type).await
    }

    /// Writes raw bytes on a new connection to the front and reads until the
    /// gateway closes it (or 5 s pass): what came back, and whether it closed.
    pub async fn exchange(&self, request: &[u8]) -> (String, bool) {
        raw_exchange(self.addr, request, Duration::from_secs(5)).await
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

    /// One upstream's entry in the admin `/status` (`up`, `last_error`,
    /// `tools`, ...).
    pub async fn upstream_status(&self, name: &str) -> Value {
        let status = send(self.admin, "GET", "/status", Bytes::new(), None).await.json();
        let upstreams = status["upstreams"].as_array().cloned().unwrap_or_default();
        upstreams.into_iter().find(|u| u["name"] == name).unwrap_or_else(|| panic!("no upstream {name} in {status}"))
    }

    /// Polls GET /tools until `pred(items)` holds; returns those items.
    pub async fn wait_for_tools(&self, what: &str, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        wait_until(what, async || {
            let items = self.tools().await;
            if pred(&items) {
                Ok(items)
            } else {
                Err(format!("GET /tools items: {}", serde_json::to_string_pretty(&items).unwrap()))
            }
        })
        .await
    }

    /// Polls GET /tools, sent with these headers (a token, an API key), until
    /// it answers 200 and lists `id`; returns the items.
    pub async fn wait_listed(&self, headers: &[(&str, &str)], id: &str) -> Vec<Value> {
        wait_until(&format!("{id} is listed"), async || {
            let resp = send_with_headers(self.addr, "GET", "/tools", Bytes::new(), headers).await;
            let items = (resp.status == 200).then(|| resp.json()["items"].as_array().cloned()).flatten();
            match items {
                Some(items) if find_tool(&items, id).is_some() => Ok(items),
                _ => Err(format!("GET /tools: {} {}", resp.status, resp.text())),
            }
        })
        .await
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

/// A gateway in front of `calc` (upstream `calc`), `server_lines` added to
/// its `[server]` table (may be empty), once `Calculator.Add@1.0.0` is listed.
pub async fn gateway_for(calc: &ToolServer, server_lines: &str) -> Gateway {
    let gw = GatewayConfig::new().server_line(server_lines).upstream("calc", &calc.url()).start().await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;
    gw
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
        let _ = std::fs::remove_dir_all(self.config_path.with_extension("cwd"));
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
