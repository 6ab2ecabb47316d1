//! Operating the gateway for months without a restart: hot reload of
//! gateway.toml, what /metrics and /status say, and tracing upstream.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{
    add, add_schema, catalog, echo, find_tool, send, send_with_headers, tool, wait_until, Gateway, ToolServer,
};
use serde_json::{json, Value};

/// A config with both listeners on port 0 and these upstreams.
fn config(poll: &str, upstreams: &[(&str, &str)]) -> String {
    let mut s = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\n[catalog]\npoll_interval = \"{poll}\"\nrequest_timeout = \"1s\"\n"
    );
    for (name, url) in upstreams {
        s.push_str(&format!("\n[[upstreams]]\nname = \"{name}\"\nurl = \"{url}\"\n"));
    }
    s
}

async fn server_with(key: &str) -> ToolServer {
    let server = ToolServer::start(catalog(vec![tool(key, "1.0.0", add_schema())])).await;
    server.on_call(add);
    server
}

async fn status(gw: &Gateway) -> Value {
    send(gw.admin, "GET", "/status", Bytes::new(), None).await.json()
}

async fn metrics(gw: &Gateway) -> String {
    send(gw.admin, "GET", "/metrics", Bytes::new(), None).await.text()
}

/// Waits until /status reports this generation.
async fn wait_generation(gw: &Gateway, generation: u64) -> Value {
    wait_until(&format!("/status reports generation {generation}"), async || {
        let s = status(gw).await;
        if s["generation"].as_u64() >= Some(generation) {
            Ok(s)
        } else {
            Err(s.to_string())
        }
    })
    .await
}

/// Waits until /status shows a failed last reload.
async fn wait_failed_reload(gw: &Gateway) -> Value {
    wait_until("/status shows the failed reload", async || {
        let s = status(gw).await;
        if s["last_reload"]["ok"] == json!(false) {
            Ok(s)
        } else {
            Err(s.to_string())
        }
    })
    .await
}

#[tokio::test]
async fn an_edited_config_adds_and_removes_upstreams_without_a_restart() {
    let calc = server_with("Calculator.Add").await;
    let text = server_with("Text.Count").await;
    // A long poll interval: only the reload can explain what changes.
    let gw = Gateway::start(&config("30s", &[("calc", &calc.url())])).await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;
    assert_eq!(status(&gw).await["generation"], json!(1));

    gw.rewrite_config(&config("30s", &[("calc", &calc.url()), ("text", &text.url())]));
    wait_generation(&gw, 2).await;
    gw.wait_for_tool("Text.Count@1.0.0").await;
    assert!(metrics(&gw).await.contains("otc_gateway_config_reloads_total{result=\"success\"} 1"));

    gw.rewrite_config(&config("30s", &[("text", &text.url())]));
    wait_generation(&gw, 3).await;
    let items = gw.tools().await;
    assert!(find_tool(&items, "Calculator.Add@1.0.0").is_none(), "a removed upstream's tools leave at once");
    assert!(find_tool(&items, "Text.Count@1.0.0").is_some());
    let m = metrics(&gw).await;
    assert!(!m.contains("upstream=\"calc\""), "a removed upstream's series go too:\n{m}");
    assert!(m.contains("otc_gateway_config_generation 3"), "{m}");
}

#[tokio::test]
async fn a_removed_upstream_s_connections_close_at_the_reload() {
    let calc = server_with("Calculator.Add").await;
    let text = server_with("Text.Count").await;
    let gw = Gateway::start(&config("30s", &[("calc", &calc.url()), ("text", &text.url())])).await;
    gw.wait_for_tool("Text.Count@1.0.0").await;
    // The call's connection is kept for the next call (for 90 s), as is
    // the catalog fetch's; the ring of recent calls records the call.
    let r = gw.call("Text.Count@1.0.0", json!({"a": 1, "b": 2})).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(text.open_connections() >= 1, "a connection is kept open");
    assert_eq!(send(gw.admin, "GET", "/calls", Bytes::new(), None).await.json()["calls"][0]["upstream"], json!("text"));

    gw.rewrite_config(&config("30s", &[("calc", &calc.url())]));
    wait_generation(&gw, 2).await;
    text.wait_until("the removed upstream's connections are closed", |t| t.open_connections() == 0).await;
    // The record of its call stays.
    assert_eq!(send(gw.admin, "GET", "/calls", Bytes::new(), None).await.json()["calls"][0]["upstream"], json!("text"));
}

#[tokio::test]
async fn an_invalid_config_keeps_the_old_one_serving() {
    let calc = server_with("Calculator.Add").await;
    let good = config("200ms", &[("calc", &calc.url())]);
    let gw = Gateway::start(&good).await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;

    let bad_configs = [
        format!("{good}\n[[upstreams]]\nname = \"calc\"\nurl = \"http://127.0.0.1:1\"\n"),
        format!("{good}\n[[upstreams]]\nname = \"other\"\nurl = \"http://127.0.0.1:1\"\nprotocol = \"grpc\"\n"),
        format!("{good}\nthis is not toml\n"),
    ];
    for (i, bad) in bad_configs.iter().enumerate() {
        gw.rewrite_config(bad);
        let s = wait_failed_reload(&gw).await;
        let error = s["last_reload"]["error"].as_str().unwrap_or_default().to_owned();
        assert!(error.contains("line"), "the error names the line: {error}");
        assert_eq!(s["generation"], json!(1 + i as u64), "nothing was applied: {s}\n{}", gw.logs());
        let resp = gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 2})).await;
        assert_eq!(resp.status, 200, "the old config keeps serving");
        assert!(metrics(&gw)
            .await
            .contains(&format!("otc_gateway_config_reloads_total{{result=\"error\"}} {}", i + 1)));
        gw.wait_for_log(&["config reload refused"]).await;
        // Back to good, so the next bad one is a change again.
        gw.rewrite_config(&good);
        wait_generation(&gw, 2 + i as u64).await;
    }
}

#[tokio::test]
async fn files_churning_beside_the_config_trigger_nothing() {
    let one = server_with("One.Add").await;
    let toml = config("60s", &[("one", &one.url())]);
    // Logged at trace level into the config's own directory: a log that
    // made the watcher wake made more log.
    let gw = Gateway::start_with_env(&toml, &[("RUST_LOG", "trace")]).await;
    gw.wait_for_tool("One.Add@1.0.0").await;
    let dir = gw.config_path().parent().expect("a directory").to_path_buf();
    let lines_before = gw.logs().lines().count();
    let churn_until = Instant::now() + Duration::from_secs(3);
    let mut n = 0u64;
    while Instant::now() < churn_until {
        n += 1;
        std::fs::write(dir.join(format!("churn-{}.log", n % 7)), format!("line {n}\n").repeat(50)).expect("write");
        std::fs::write(dir.join("trace.log"), format!("{n}\n")).expect("write");
        if n.is_multiple_of(100) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    // On purpose: longer than the watcher's debounce, so a reload the
    // writes caused would have happened (an absence is seen only by waiting).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let status = status(&gw).await;
    assert_eq!(status["generation"], 1, "{n} writes beside the config reloaded it: {status}");
    assert!(status["last_reload"].is_null(), "{status}");
    assert!(!gw.logs().contains("config changed on disk"));
    // Nothing woke for them: the watcher said nothing, where a watch of
    // the directory logged each write (and its own log's writes) at trace.
    let logged = gw.logs().lines().count() - lines_before;
    assert!(logged < 100, "{logged} log lines for {n} writes beside the config");
    // The config itself is still watched.
    let two = server_with("Two.Add").await;
    gw.rewrite_config(&config("60s", &[("one", &one.url()), ("two", &two.url())]));
    wait_generation(&gw, 2).await;
}

#[tokio::test]
async fn sighup_reloads_the_config() {
    let calc = server_with("Calculator.Add").await;
    let gw = Gateway::start(&config("200ms", &[("calc", &calc.url())])).await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;
    gw.signal("HUP");
    let s = wait_generation(&gw, 2).await;
    assert_eq!(s["last_reload"]["ok"], json!(true));
}

#[tokio::test]
async fn a_configmap_symlink_swap_is_picked_up() {
    let calc = server_with("Calculator.Add").await;
    let text = server_with("Text.Count").await;
    // The layout Kubernetes mounts a ConfigMap as.
    let dir = std::env::temp_dir().join(format!("otc-configmap-{}-{}", std::process::id(), calc.addr().port()));
    let _ = std::fs::remove_dir_all(&dir);
    let first = dir.join("..2026_11_22_01");
    std::fs::create_dir_all(&first).unwrap();
    std::fs::write(first.join("gateway.toml"), config("30s", &[("calc", &calc.url())])).unwrap();
    std::os::unix::fs::symlink("..2026_11_22_01", dir.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/gateway.toml", dir.join("gateway.toml")).unwrap();
    let gw = Gateway::start_at(dir.join("gateway.toml"), &[]).await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;

    let second = dir.join("..2026_11_22_02");
    std::fs::create_dir_all(&second).unwrap();
    std::fs::write(second.join("gateway.toml"), config("30s", &[("text", &text.url())])).unwrap();
    std::os::unix::fs::symlink("..2026_11_22_02", dir.join("..data_tmp")).unwrap();
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    std::fs::remove_dir_all(&first).unwrap();

    wait_generation(&gw, 2).await;
    gw.wait_for_tool("Text.Count@1.0.0").await;
    gw.wait_for_tool_gone("Calculator.Add@1.0.0").await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_changed_listen_address_is_logged_and_the_old_one_kept() {
    let calc = server_with("Calculator.Add").await;
    let gw = Gateway::start(&config("200ms", &[("calc", &calc.url())])).await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;
    let moved = config("200ms", &[("calc", &calc.url())])
        .replace("listen = \"127.0.0.1:0\"\nadmin", "listen = \"127.0.0.1:1\"\nadmin");
    gw.rewrite_config(&moved);
    wait_generation(&gw, 2).await;
    gw.wait_for_log(&["cannot move without a restart"]).await;
    assert_eq!(gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 1})).await.status, 200);
}

#[tokio::test]
async fn no_call_fails_while_the_config_flips_back_and_forth() {
    let calc = server_with("Calculator.Add").await;
    let text = server_with("Text.Count").await;
    let one = config("200ms", &[("calc", &calc.url())]);
    let two = config("200ms", &[("calc", &calc.url()), ("text", &text.url())])
        .replace("request_timeout = \"1s\"", "request_timeout = \"2s\"");
    let gw = Arc::new(Gateway::start(&one).await);
    gw.wait_for_tool("Calculator.Add@1.0.0").await;

    let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let until = Instant::now() + Duration::from_secs(3);
    let mut callers = Vec::new();
    for i in 0..4 {
        let (gw, ok, failed) = (gw.clone(), ok.clone(), failed.clone());
        callers.push(tokio::spawn(async move {
            while Instant::now() < until {
                let resp = gw.call("Calculator.Add@1.0.0", json!({"a": i, "b": 1})).await;
                if resp.status == 200 && resp.result()["value"] == json!(i + 1) {
                    ok.fetch_add(1, Ordering::Relaxed);
                } else {
                    failed.fetch_add(1, Ordering::Relaxed);
                    eprintln!("failed during reload: {} {}", resp.status, resp.text());
                }
            }
        }));
    }
    let mut flips = 0;
    while Instant::now() < until {
        gw.rewrite_config(if flips % 2 == 0 { &two } else { &one });
        flips += 1;
        // Each flip applied before the next (the watcher would merge them).
        wait_generation(&gw, flips + 1).await;
    }
    for caller in callers {
        caller.await.unwrap();
    }
    let applied = status(&gw).await["generation"].as_u64().unwrap_or(0);
    assert!(applied >= 5, "the config really flipped ({applied} generations)");
    assert!(ok.load(Ordering::Relaxed) > 20, "calls were made");
    assert_eq!(failed.load(Ordering::Relaxed), 0, "no call may fail because of a reload");
}

#[tokio::test]
async fn metrics_count_calls_by_tool_upstream_and_outcome_with_bounded_labels() {
    let calc = ToolServer::start(catalog(vec![
        tool("Calculator.Add", "1.0.0", add_schema()),
        tool("Calculator.Fail", "1.0.0", json!({"type": "object"})),
    ]))
    .await;
    calc.on_call(|req| {
        if common::forwarded(req)["tool_id"] == "Calculator.Fail@1.0.0" {
            common::tool_error(req, json!({"message": "no"}))
        } else {
            add(req)
        }
    });
    let gw = Gateway::start(&config("200ms", &[("calc", &calc.url()), ("gone", "http://127.0.0.1:1")])).await;
    gw.wait_for_tool("Calculator.Fail@1.0.0").await;
    gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 2})).await.expect_status(200);
    gw.call("Calculator.Fail@1.0.0", json!({})).await.expect_status(200);
    gw.call("Calculator.Add@1.0.0", json!({"a": "x"})).await.expect_status(422);
    gw.call("Made.Up@9.9.9", json!({})).await.expect_status(400);
    let m = metrics(&gw).await;
    for line in [
        "otc_gateway_tool_calls_total{outcome=\"success\",tool=\"Calculator.Add@1.0.0\",upstream=\"calc\"} 1",
        "otc_gateway_tool_calls_total{outcome=\"tool_error\",tool=\"Calculator.Fail@1.0.0\",upstream=\"calc\"} 1",
        "otc_gateway_tool_calls_total{outcome=\"validation_error\",tool=\"Calculator.Add@1.0.0\",upstream=\"calc\"} 1",
        "otc_gateway_http_requests_total{route=\"/tools/call\",status=\"200\"} 2",
        "otc_gateway_http_requests_total{route=\"/tools/call\",status=\"422\"} 1",
        "otc_gateway_upstream_up{upstream=\"calc\"} 1",
        "otc_gateway_upstream_up{upstream=\"gone\"} 0",
        "otc_gateway_catalog_tools{upstream=\"calc\"} 2",
        "otc_gateway_tool_call_duration_seconds_bucket{tool=\"Calculator.Add@1.0.0\",upstream=\"calc\",le=\"+Inf\"}",
    ] {
        assert!(m.contains(line), "missing {line} in:\n{m}");
    }
    assert!(!m.contains("Made.Up"), "a client's made-up tool id never becomes a label");

    let s = status(&gw).await;
    let gone = s["upstreams"].as_array().unwrap().iter().find(|u| u["name"] == "gone").unwrap().clone();
    assert_eq!(gone["up"], json!(false));
    assert!(gone["last_error"].is_string(), "{gone}");
    gw.wait_for_log(&["tool call", "outcome=\"success\"", "Calculator.Add@1.0.0"]).await;
}

#[tokio::test]
async fn each_call_is_logged_once_and_traced_upstream() {
    let server = ToolServer::start(catalog(vec![tool("Calc.Echo", "1.0.0", json!({"type": "object"}))])).await;
    server.on_call(echo);
    let gw = Gateway::start(&config("200ms", &[("calc", &server.url())])).await;
    gw.wait_for_tool("Calc.Echo@1.0.0").await;
    let body = Bytes::from(
        json!({"request": {"tool_id": "Calc.Echo@1.0.0", "call_id": "call-log-once-1", "trace_id": "trace-abc"}})
            .to_string(),
    );
    let incoming = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    send_with_headers(gw.addr, "POST", "/tools/call", body, &[("traceparent", incoming)]).await.expect_status(200);

    assert_eq!(server.last_request()["trace_id"], "trace-abc");
    let call = server.requests().into_iter().rfind(|r| r.method == "POST").expect("a call");
    let traceparent = call.headers.get("traceparent").expect("a traceparent header").clone();
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "{traceparent}");
    assert_eq!(parts[1], "4bf92f3577b34da6a3ce929d0e0e4736", "the client's trace continues");
    assert_eq!(parts[2].len(), 16);
    assert_ne!(parts[2], "00f067aa0ba902b7", "with the gateway's own span as parent");

    let logs = gw.wait_for_log(&["call-log-once-1"]).await;
    let lines: Vec<&str> = logs.lines().filter(|l| l.contains("call-log-once-1")).collect();
    assert_eq!(lines.len(), 1, "logged exactly once: {lines:?}");
    for field in ["trace-abc", "Calc.Echo@1.0.0", "upstream=\"calc\"", "outcome=\"success\"", "duration_ms"] {
        assert!(lines[0].contains(field), "{field} missing from {}", lines[0]);
    }
}

/// A config with one upstream (`upstream_extra` in its table) and `rest` after it.
fn config_with(url: &str, upstream_extra: &str, rest: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\n[catalog]\npoll_interval = \"200ms\"\nrequest_timeout = \"1s\"\n\n\
         [[upstreams]]\nname = \"calc\"\nurl = \"{url}\"\n{upstream_extra}\n\n{rest}"
    )
}

#[tokio::test]
async fn an_unrelated_reload_keeps_a_limited_caller_limited() {
    let calc = server_with("Calculator.Add").await;
    let limit = "[[rate_limit]]\nname = \"calc\"\ntools = [\"Calculator.*\"]\nper = \"global\"\nrate = \"1/h\"\n";
    let gw = Gateway::start(&config_with(&calc.url(), "", limit)).await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;
    assert_eq!(gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 1})).await.status, 200);
    assert_eq!(gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 1})).await.status, 429);
    // Only a comment changes: the bucket is the same bucket.
    gw.rewrite_config(&format!("# edited\n{}", config_with(&calc.url(), "", limit)));
    wait_generation(&gw, 2).await;
    assert_eq!(
        gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 1})).await.status,
        429,
        "a reload is no fresh burst"
    );
    // A changed limit is a new limit.
    gw.rewrite_config(&config_with(&calc.url(), "", &limit.replace("1/h", "2/h")));
    wait_generation(&gw, 3).await;
    assert_eq!(gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 1})).await.status, 200);
    assert_eq!(calc.call_count(), 2);
}

#[tokio::test]
async fn an_unrelated_reload_keeps_an_open_circuit_open() {
    let mut calc = server_with("Calculator.Add").await;
    let circuit = "circuit_failures = 3\ncircuit_cooldown = \"60s\"";
    let gw = Gateway::start(&config_with(&calc.url(), circuit, "")).await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;
    calc.stop().await;
    let developer_message =
        |resp: &common::Resp| resp.json()["developer_message"].as_str().unwrap_or_default().to_owned();
    let mut opened = false;
    for _ in 0..6 {
        let resp = gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 1})).await;
        if developer_message(&resp).contains("circuit open") {
            opened = true;
            break;
        }
    }
    assert!(opened, "the circuit opens after connection failures");
    gw.rewrite_config(&format!("# edited\n{}", config_with(&calc.url(), circuit, "")));
    wait_generation(&gw, 2).await;
    let resp = gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 1})).await;
    assert!(developer_message(&resp).contains("circuit open"), "still open after the reload: {}", resp.text());
}

#[tokio::test]
async fn a_reload_that_keeps_an_upstream_keeps_one_poller_for_it() {
    let calc = server_with("Calculator.Add").await;
    let gw = Gateway::start(&config("300ms", &[("calc", &calc.url())])).await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;
    // Five reloads that keep `calc` as it is (another upstream comes and goes).
    let other = server_with("Text.Count").await;
    for generation in 2..=6 {
        let upstreams: &[(&str, &str)] = if generation % 2 == 0 {
            &[("calc", &calc.url()), ("other", &other.url())]
        } else {
            &[("calc", &calc.url())]
        };
        gw.rewrite_config(&config("300ms", upstreams));
        wait_generation(&gw, generation).await;
    }
    // One poller fetches about 10 times in 3 s; one more per reload would be
    // about 60. A slow machine fetches less, never more.
    let before = calc.catalog_fetches().len();
    // On purpose: a poll rate is counted over time.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let fetched = calc.catalog_fetches().len() - before;
    assert!(fetched <= 20, "{fetched} fetches of calc in 3 s at a 300 ms poll interval");
}
