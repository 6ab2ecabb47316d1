//! A real Prometheus server scrapes our metrics and answers queries on them.
//!
//! Needs Debian's `prometheus` package (`scripts/test.sh` installs it): the
//! binary is taken from `OTC_TEST_PROMETHEUS`, else `prometheus` on PATH,
//! else /usr/bin/prometheus.
//!
//! The scrape target is one address, [`start_target`]'s; everything after it
//! (Prometheus's config, the queries) only knows that address: the real
//! gateway's admin listener.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{add, add_schema, catalog, tool, wait_within, Gateway, GatewayConfig, ToolServer};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

mod common;

/// A temp dir removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let dir = std::env::temp_dir().join(format!("otc-prometheus-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The Prometheus server process, killed on drop (so on a failed assertion too).
struct Prometheus {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
}

impl Prometheus {
    /// Starts Prometheus on a free loopback port, scraping `target` every second.
    fn start(dir: &Path, target: SocketAddr) -> Prometheus {
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: otc-gateway\n    metrics_path: /metrics\n    \
                 static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let addr = free_addr();
        let log = dir.join("prometheus.log");
        let log_file = std::fs::File::create(&log).unwrap();
        let child = Command::new(prometheus_binary())
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--log.level=warn")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start prometheus ({}): {e}", prometheus_binary().display()));
        Prometheus { child, addr, log }
    }

    /// Prometheus's own log, for failure messages.
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Panics (with the log) if the process has exited.
    fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("prometheus exited with {status}:\n{}", self.log());
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Prometheus binary to run.
fn prometheus_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("OTC_TEST_PROMETHEUS") {
        return PathBuf::from(path);
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join("prometheus"))
        .find(|candidate| candidate.is_file());
    let binary = on_path.unwrap_or_else(|| PathBuf::from("/usr/bin/prometheus"));
    assert!(
        binary.is_file(),
        "no prometheus binary: install Debian's `prometheus` package (scripts/test.sh does) or set OTC_TEST_PROMETHEUS"
    );
    binary
}

/// A loopback address with a port that was free a moment ago.
fn free_addr() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// What keeps the scrape target alive: the gateway and its tool servers.
struct Target {
    _gateway: Arc<Gateway>,
    _servers: Vec<ToolServer>,
}

/// The scrape target: the real gateway's admin listener, fronting two tool
/// servers, with calls flowing through it (successes, tool errors and
/// validation errors) for as long as the test runs.
async fn start_target() -> (SocketAddr, tokio::task::JoinHandle<()>, Target) {
    let math = ToolServer::start(catalog(vec![
        tool("Calculator.Add", "1.0.0", add_schema()),
        tool("Calculator.Fail", "1.0.0", serde_json::json!({"type": "object"})),
    ]))
    .await;
    math.on_call(|req| {
        if common::forwarded(req)["tool_id"] == "Calculator.Fail@1.0.0" {
            common::tool_error(req, serde_json::json!({"message": "failed on purpose"}))
        } else {
            add(req)
        }
    });
    let math_v2 = ToolServer::start(catalog(vec![tool("Calculator.Add", "2.0.0", add_schema())])).await;
    math_v2.on_call(add);
    let gateway =
        Arc::new(GatewayConfig::new().upstream("math", &math.url()).upstream("math-v2", &math_v2.url()).start().await);
    gateway.wait_for_tool("Calculator.Add@2.0.0").await;
    gateway.wait_for_tool("Calculator.Fail@1.0.0").await;
    let load = {
        let gateway = gateway.clone();
        tokio::spawn(async move {
            for i in 0u64.. {
                let (tool_id, input) = match i % 4 {
                    0 => ("Calculator.Add@2.0.0", serde_json::json!({"a": i, "b": 1})),
                    1 => ("Calculator.Fail@1.0.0", serde_json::json!({})),
                    2 => ("Calculator.Add@1.0.0", serde_json::json!({"a": "not a number"})),
                    _ => ("Calculator.Add@1.0.0", serde_json::json!({"a": i, "b": 2})),
                };
                gateway.call(tool_id, input).await;
                // On purpose: a steady load for the scrapes, not a flood.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let admin = gateway.admin;
    (admin, load, Target { _gateway: gateway, _servers: vec![math, math_v2] })
}

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>;

/// GETs `url`, returning the status and body (None if it could not connect).
async fn get(client: &HttpClient, url: &str) -> Option<(u16, String)> {
    let response = tokio::time::timeout(Duration::from_secs(5), client.get(url.parse().unwrap())).await.ok()?.ok()?;
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.ok()?.to_bytes();
    Some((status, String::from_utf8_lossy(&body).into_owned()))
}

/// Percent-encodes a PromQL query for a URL's query string.
fn encode(query: &str) -> String {
    query
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Runs an instant query; the `data.result` vector, if the query succeeded.
async fn query(client: &HttpClient, prometheus: SocketAddr, promql: &str) -> Option<Vec<Value>> {
    let (status, body) = get(client, &format!("http://{prometheus}/api/v1/query?query={}", encode(promql))).await?;
    assert!(status == 200 || status == 503, "query {promql:?} answered {status}: {body}");
    let body: Value = serde_json::from_str(&body).ok()?;
    if body["status"] != "success" {
        return None;
    }
    body["data"]["result"].as_array().cloned()
}

/// The number in a vector sample's `value: [time, "number"]`.
fn sample_value(sample: &Value) -> f64 {
    sample["value"][1].as_str().and_then(|v| v.parse().ok()).unwrap_or(f64::NAN)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_calls_and_computes_a_quantile() {
    let (target, load, _keep) = start_target().await;

    let dir = TempDir::new();
    let mut prometheus = Prometheus::start(&dir.0, target);
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();

    // Ready.
    wait_within(Duration::from_secs(30), "prometheus is ready", async || {
        prometheus.assert_running();
        match get(&client, &format!("http://{}/-/ready", prometheus.addr)).await {
            Some((200, _)) => Ok(()),
            other => Err(format!("{other:?}\nlog:\n{}", prometheus.log())),
        }
    })
    .await;

    // Scraped: the call counter with its labels, then a quantile over the histogram.
    let calls_query = "otc_gateway_tool_calls_total";
    let quantile_query =
        "histogram_quantile(0.5, sum by (le) (rate(otc_gateway_tool_call_duration_seconds_bucket[1m])))";
    let mut calls = Vec::new();
    let median = wait_within(Duration::from_secs(30), "Prometheus has the calls and a median", async || {
        prometheus.assert_running();
        if calls.is_empty() {
            calls = query(&client, prometheus.addr, calls_query).await.unwrap_or_default();
        }
        let median = match calls.is_empty() {
            true => None,
            false => query(&client, prometheus.addr, quantile_query).await,
        };
        match median.and_then(|result| result.first().map(sample_value)).filter(|v| v.is_finite()) {
            Some(median) => Ok(median),
            None => {
                let targets = get(&client, &format!("http://{}/api/v1/targets", prometheus.addr)).await;
                let missing = if calls.is_empty() { calls_query } else { quantile_query };
                Err(format!("no number for {missing}\ntargets: {targets:?}\nlog:\n{}", prometheus.log()))
            }
        }
    })
    .await;

    eprintln!("prometheus at {} scraped {target}: {} call series, median {median:.4} s", prometheus.addr, calls.len());

    // The series carry the labels dashboards group by.
    let success = calls
        .iter()
        .find(|s| {
            s["metric"]["tool"] == "Calculator.Add@1.0.0"
                && s["metric"]["upstream"] == "math"
                && s["metric"]["outcome"] == "success"
        })
        .unwrap_or_else(|| panic!("no success series for Calculator.Add@1.0.0 on math: {calls:?}"));
    assert_eq!(success["metric"]["job"], "otc-gateway");
    assert!(sample_value(success) >= 1.0, "{success}");
    for outcome in ["tool_error", "validation_error"] {
        assert!(calls.iter().any(|s| s["metric"]["outcome"] == outcome), "no {outcome} series: {calls:?}");
    }
    // Calls last 0.8 ms to 200 ms; the median lies in that range (bucket interpolation included).
    assert!(median > 0.0 && median <= 0.25, "median {median}");

    // The other metrics made it too.
    let up = query(&client, prometheus.addr, "otc_gateway_upstream_up").await.unwrap_or_default();
    assert_eq!(up.len(), 2, "{up:?}");
    assert!(up.iter().all(|s| sample_value(s) == 1.0), "{up:?}");
    let http = query(&client, prometheus.addr, r#"otc_gateway_http_requests_total{route="/tools/call",status="200"}"#)
        .await
        .unwrap_or_default();
    assert_eq!(http.len(), 1, "{http:?}");

    load.abort();
    drop(prometheus);
}
