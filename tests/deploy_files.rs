//! The deployment files in deploy/ are checked, so CI catches a broken one.
//!
//! - `deploy/check.sh` (YAML parses, promtool on the alert rules, their unit
//!   tests, the example Prometheus configs and every Grafana query, the Helm
//!   chart linted (`--strict`) and rendered by Helm's own engine and checked
//!   against the plain manifests and the Kubernetes schemas,
//!   `otc-gateway check` on every shipped gateway.toml, hadolint,
//!   systemd-analyze) must pass.
//! - Every query of the Grafana dashboard returns data from a real Prometheus
//!   scraping a real gateway (the built-in demo), which loads the alert rules.
//! - The container's health check script tells a serving gateway from a
//!   closed port.
//!
//! Needs promtool and prometheus (Debian's `prometheus` package) and python3
//! with PyYAML; `scripts/test.sh` installs them and the optional linters.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::wait_blocking;
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The path of `name` on PATH, if any.
fn on_path(name: &str) -> Option<PathBuf> {
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths).map(|dir| dir.join(name)).find(|candidate| candidate.is_file())
}

#[test]
fn deploy_check_script_passes() {
    assert!(
        on_path("promtool").is_some(),
        "promtool not found: deploy/check.sh needs it. Install Debian's `prometheus` package \
         (apt-get install prometheus; scripts/test.sh does it through need_prometheus)"
    );
    let output = Command::new("bash")
        .arg(root().join("deploy/check.sh"))
        .env("OTC_GATEWAY_BIN", env!("CARGO_BIN_EXE_otc-gateway"))
        .current_dir(root())
        .stdin(Stdio::null())
        .output()
        .expect("cannot run bash deploy/check.sh");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "deploy/check.sh failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        output.status
    );
    // Under CI, scripts/test.sh has installed every optional tool: a skip
    // there means a check silently stopped running.
    if std::env::var_os("CI").is_some() {
        let skipped: Vec<&str> =
            stdout.lines().filter(|line| line.starts_with("skip ") && !line.contains("systemd-analyze")).collect();
        assert!(skipped.is_empty(), "deploy/check.sh skipped checks under CI:\n{}\n\n{stdout}", skipped.join("\n"));
    }
    for line in stdout.lines().filter(|line| line.starts_with("skip ")) {
        eprintln!("deploy/check.sh: {line}");
    }
}

/// A child process killed on drop, so a failed assertion leaves nothing behind.
struct Process {
    child: Child,
    what: &'static str,
    log: Option<PathBuf>,
}

impl Process {
    fn log(&self) -> String {
        self.log.as_ref().and_then(|path| std::fs::read_to_string(path).ok()).unwrap_or_default()
    }

    fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("{} exited with {status}:\n{}", self.what, self.log());
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A temp dir removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let dir = std::env::temp_dir().join(format!("otc-deploy-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The demo gateway (two example tool servers behind it) on free loopback
/// ports: its main and admin addresses, from its ready line.
fn start_demo_gateway() -> (Process, SocketAddr, SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_otc-gateway"))
        .args(["demo", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("cannot start otc-gateway demo");
    let stdout = child.stdout.take().unwrap();
    let mut process = Process { child, what: "otc-gateway demo", log: None };
    let mut line = String::new();
    let mut reader = BufReader::new(stdout);
    reader.read_line(&mut line).unwrap();
    // Keep reading: the demo prints more, and a closed pipe would fail its writes.
    std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
    // "otc-gateway listening on 127.0.0.1:P (admin 127.0.0.1:Q)"
    let parse = || -> Option<(SocketAddr, SocketAddr)> {
        let rest = line.trim().strip_prefix("otc-gateway listening on ")?;
        let (main, admin) = rest.split_once(" (admin ")?;
        Some((main.parse().ok()?, admin.strip_suffix(')')?.parse().ok()?))
    };
    let Some((main, admin)) = parse() else {
        process.assert_running();
        panic!("unexpected ready line from otc-gateway demo: {line:?}");
    };
    (process, main, admin)
}

/// One HTTP/1.0 exchange (the server closes the connection after it): status and body.
fn http(addr: SocketAddr, method: &str, target: &str, body: &str) -> (u16, String) {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        stream,
        "{method} {target} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    let response = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, body.to_owned())
}

fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An instant query, or None while Prometheus is not up or not ready (it
/// answers 503 until its storage is open).
fn try_query(prometheus: SocketAddr, promql: &str) -> Option<Vec<Value>> {
    let mut stream = TcpStream::connect_timeout(&prometheus, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET /api/v1/query?query={} HTTP/1.0\r\nHost: {prometheus}\r\n\r\n", percent_encode(promql)).ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let response = String::from_utf8_lossy(&response);
    let (_, body) = response.split_once("\r\n\r\n")?;
    let json: Value = serde_json::from_str(body).ok()?;
    (json["status"] == "success").then(|| json["data"]["result"].as_array().cloned().unwrap_or_default())
}

/// An instant query against Prometheus's HTTP API: the result vector.
fn query(prometheus: SocketAddr, promql: &str) -> Vec<Value> {
    let (status, body) = http(prometheus, "GET", &format!("/api/v1/query?query={}", percent_encode(promql)), "");
    let json: Value =
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{promql}: bad answer {status} ({e}): {body}"));
    assert_eq!(json["status"], "success", "{promql}: {body}");
    match &json["data"]["result"] {
        Value::Array(items) => items.clone(),
        other => vec![other.clone()],
    }
}

/// Every PromQL query of the dashboard: (where, query as Grafana would send
/// it with every variable at "All").
fn dashboard_queries() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(root().join("deploy/grafana/otc-gateway.json")).unwrap();
    let dashboard: Value = serde_json::from_str(&text).unwrap();
    let mut out = Vec::new();
    fn walk(panels: &Value, out: &mut Vec<(String, String)>) {
        for panel in panels.as_array().into_iter().flatten() {
            for target in panel["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = target["expr"].as_str() {
                    out.push((
                        format!("panel {:?} {}", panel["title"].as_str().unwrap_or(""), target["refId"]),
                        expr.to_owned(),
                    ));
                }
            }
            walk(&panel["panels"], out);
        }
    }
    walk(&dashboard["panels"], &mut out);
    for annotation in dashboard["annotations"]["list"].as_array().into_iter().flatten() {
        if let Some(expr) = annotation["expr"].as_str() {
            out.push((format!("annotation {}", annotation["name"]), expr.to_owned()));
        }
    }
    for variable in dashboard["templating"]["list"].as_array().into_iter().flatten() {
        if let Some(q) = variable["query"]["query"].as_str() {
            let selector =
                q.strip_prefix("label_values(").and_then(|s| s.rsplit_once(',')).map(|(sel, _)| sel.to_owned());
            out.push((
                format!("variable {}", variable["name"]),
                selector.unwrap_or_else(|| panic!("variable query {q}")),
            ));
        }
    }
    assert!(out.len() > 10, "too few queries found in the dashboard: {out:?}");
    out.into_iter()
        .map(|(at, expr)| {
            let expr = expr
                .replace("$__rate_interval", "1m")
                .replace("$__interval", "15s")
                .replace("$__range", "1h")
                .replace("$instance", ".*")
                .replace("$upstream", ".*")
                .replace("$tool", ".*");
            assert!(!expr.contains('$'), "{at}: a Grafana variable this test does not know: {expr}");
            (at, expr)
        })
        .collect()
}

#[test]
fn dashboard_queries_return_data_from_a_real_gateway() {
    let prometheus_bin = std::env::var_os("OTC_TEST_PROMETHEUS")
        .map(PathBuf::from)
        .or_else(|| on_path("prometheus"))
        .unwrap_or_else(|| PathBuf::from("/usr/bin/prometheus"));
    assert!(
        prometheus_bin.is_file(),
        "no prometheus binary: install Debian's `prometheus` package (scripts/test.sh does) or set OTC_TEST_PROMETHEUS"
    );
    let (mut gateway, main, admin) = start_demo_gateway();

    let dir = TempDir::new("prometheus");
    let config = dir.0.join("prometheus.yml");
    let alerts = root().join("deploy/prometheus/alerts.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: otc-gateway\n    static_configs:\n      - targets: ['{admin}']\n",
            alerts.display()
        ),
    )
    .unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let prometheus_addr = listener.local_addr().unwrap();
    drop(listener);
    let log = dir.0.join("prometheus.log");
    let log_file = std::fs::File::create(&log).unwrap();
    let child = Command::new(&prometheus_bin)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", dir.0.join("data").display()))
        .arg(format!("--web.listen-address={prometheus_addr}"))
        .arg("--log.level=warn")
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().unwrap())
        .stderr(log_file)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", prometheus_bin.display()));
    let mut prometheus = Process { child, what: "prometheus", log: Some(log) };

    // Wait for a first scrape, so that the calls below show as increases.
    wait_blocking(Duration::from_secs(30), "prometheus scraped the gateway", || {
        prometheus.assert_running();
        gateway.assert_running();
        let ready = try_query(prometheus_addr, r#"otc_gateway_config_generation{job="otc-gateway"}"#)
            .is_some_and(|result| !result.is_empty());
        if ready {
            Ok(())
        } else {
            Err(prometheus.log())
        }
    });

    // The demo's catalogs are in (its tool servers answer at once, but polled).
    wait_blocking(Duration::from_secs(20), "the demo gateway loaded its catalogs", || {
        let (status, body) = http(main, "GET", "/health", "");
        let tools = serde_json::from_str::<Value>(&body).ok().and_then(|v| v["tools"].as_u64()).unwrap_or(0);
        if status == 200 && tools > 0 {
            Ok(())
        } else {
            Err(format!("{status} {body}"))
        }
    });

    // Every outcome the demo can produce: success, tool error, validation error, and HTTP 400 / 404.
    let calls = [
        (r#"{"request": {"tool_id": "Calculator.Add@1", "input": {"a": 10, "b": 5}}}"#, 200),
        (r#"{"request": {"tool_id": "Calculator.Add", "input": {"a": 1, "b": 2}}}"#, 200),
        (r#"{"request": {"tool_id": "Calculator.Divide", "input": {"a": 1, "b": 0}}}"#, 200),
        (r#"{"request": {"tool_id": "Calculator.Add@1", "input": {"a": 10, "b": "five"}}}"#, 422),
        (r#"{"request": {"tool_id": "System.GetTimestamp"}}"#, 200),
        (r#"{"request": {"tool_id": "Nope.Nothing"}}"#, 400),
    ];
    for _ in 0..3 {
        for (body, want) in calls {
            let (status, answer) = http(main, "POST", "/tools/call", body);
            assert_eq!(status, want, "{body}: {answer}");
        }
        assert_eq!(http(main, "GET", "/tools", "").0, 200);
        assert_eq!(http(main, "GET", "/health", "").0, 200);
        assert_eq!(http(main, "GET", "/nowhere", "").0, 404);
    }
    // A few scrapes after the calls (on purpose: the dashboards' rates need
    // samples spread over time).
    std::thread::sleep(Duration::from_secs(4));
    prometheus.assert_running();

    let mut empty = Vec::new();
    for (at, expr) in dashboard_queries() {
        let result = query(prometheus_addr, &expr);
        // Nothing the demo does produces these: no vault, no server error,
        // no reload (the annotation shows reloads only).
        let may_be_empty =
            expr.contains("vault") || expr.contains(r#"outcome="server_error""#) || at.starts_with("annotation");
        if result.is_empty() && !may_be_empty {
            empty.push(format!("{at}: {expr}"));
        }
    }
    assert!(
        empty.is_empty(),
        "dashboard queries that return nothing from a real gateway (wrong metric or label?):\n{}",
        empty.join("\n")
    );

    // Prometheus loaded deploy/prometheus/alerts.yml, and its rules evaluate without error.
    let (_, body) = http(prometheus_addr, "GET", "/api/v1/rules", "");
    let rules: Value = serde_json::from_str(&body).unwrap();
    let groups = rules["data"]["groups"].as_array().cloned().unwrap_or_default();
    let loaded: Vec<&Value> = groups.iter().flat_map(|g| g["rules"].as_array().into_iter().flatten()).collect();
    assert!(loaded.len() >= 5, "prometheus did not load the alert rules: {body}");
    for rule in loaded {
        assert_ne!(rule["health"], "err", "rule {} fails to evaluate: {}", rule["name"], rule["lastError"]);
    }
    // The demo's upstreams are up: no upstream alert fires.
    assert!(query(prometheus_addr, r#"ALERTS{alertname="OtcGatewayUpstreamDown"}"#).is_empty());
}

#[test]
fn container_healthcheck_script_tells_serving_from_closed() {
    let script = root().join("deploy/docker/healthcheck");
    let (mut gateway, main, _admin) = start_demo_gateway();
    let run = |addr: &str| Command::new("bash").arg(&script).arg(addr).stdin(Stdio::null()).output().unwrap();
    let up = run(&main.to_string());
    assert!(up.status.success(), "health check failed on a serving gateway: {}", String::from_utf8_lossy(&up.stderr));
    gateway.assert_running();
    // A port nothing listens on.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let down = run(&free.to_string());
    assert!(!down.status.success(), "health check passed on a closed port");
    assert!(String::from_utf8_lossy(&down.stderr).contains("unhealthy"));
    // The default address is the container's: 127.0.0.1:8080 (OTC_GATEWAY_HEALTH_ADDR moves it).
    let text = std::fs::read_to_string(&script).unwrap();
    assert!(text.contains("127.0.0.1:8080"));
}
