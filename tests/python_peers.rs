//! Real third-party peers from PyPI: langchain-tool-server behind the
//! gateway (bare list, bare tool names, bare results, HTTP 500 on a raising
//! tool), and the official `oxp` client in front of it. `scripts/test.sh`
//! installs both into virtualenvs and exports their interpreters; a missing
//! interpreter fails the test, it never skips it.

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{
    add, add_schema, find_tool, forwarded, free_addr, peer_script, tool, tool_error, wait_listening, GatewayConfig,
    ToolServer,
};
use serde_json::{json, Value};

/// How long a Python peer may take to import and listen.
const PEER_START: Duration = Duration::from_secs(20);

/// A Python interpreter from a virtualenv `scripts/test.sh` made.
fn python(env_var: &str, venv: &str) -> PathBuf {
    let path = std::env::var_os(env_var)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(venv).join("bin/python"));
    assert!(
        path.exists(),
        "{} is missing: run scripts/test.sh, which installs the Python peers ({env_var} / {venv})",
        path.display()
    );
    path
}

/// A Python server process on 127.0.0.1:<free port>, killed on drop. Its
/// stderr goes to a file that is shown when it fails to come up.
struct PythonServer {
    child: Child,
    addr: SocketAddr,
}

impl PythonServer {
    fn start(python: PathBuf, script: &str) -> PythonServer {
        let addr = free_addr();
        let log = common::temp_file("python-peer", "log", "");
        let child = Command::new(&python)
            .arg(peer_script(script))
            .arg(addr.port().to_string())
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("peer log file"))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {} {script}: {e}", python.display()));
        let mut server = PythonServer { child, addr };
        wait_listening(&mut server.child, addr, script, PEER_START, || {
            std::fs::read_to_string(&log).unwrap_or_default()
        });
        server
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for PythonServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts langchain-tool-server (tests/peers/langchain_server.py) and a
/// gateway in front of it that names its bare ids `Math.<name>@1.0.0`.
async fn langchain_behind_gateway() -> (PythonServer, common::Gateway) {
    let lc = PythonServer::start(python("OTC_TEST_LANGCHAIN_PYTHON", ".venv-langchain"), "langchain_server.py");
    let gw =
        GatewayConfig::new().upstream_with("lc", &lc.url(), "toolkit = \"Math\"\nversion = \"1.0.0\"").start().await;
    gw.wait_for_tool("Math.add@1.0.0").await;
    (lc, gw)
}

#[tokio::test]
async fn langchain_bare_list_and_bare_ids_become_canonical_tools() {
    let (_lc, gw) = langchain_behind_gateway().await;
    let tools = gw.tools().await;
    let add = find_tool(&tools, "Math.add@1.0.0").expect("Math.add@1.0.0 in the catalog");
    assert_eq!(add["name"], "add", "{add}");
    assert_eq!(add["version"], "1.0.0", "{add}");
    assert_eq!(add["description"], "Adds two integers.", "{add}");
    // pydantic's schema, flat, with both parameters required.
    assert_eq!(add["input_schema"]["type"], "object", "{add}");
    assert_eq!(add["input_schema"]["properties"]["a"]["type"], "integer", "{add}");
    assert_eq!(add["input_schema"]["required"], json!(["a", "b"]), "{add}");
    assert!(add["input_schema"].get("parameters").is_none(), "{add}");
    let mut ids = common::ids(&tools);
    ids.sort();
    assert_eq!(ids, ["Math.add@1.0.0", "Math.explode@1.0.0", "Math.stats@1.0.0"]);
    // Resolution works on the completed ids: no version and @1 both mean 1.0.0.
    assert_eq!(gw.call("Math.add", json!({"a": 1, "b": 2})).await.result()["value"], json!(3));
}

#[tokio::test]
async fn langchain_results_come_back_wrapped_canonically() {
    let (_lc, gw) = langchain_behind_gateway().await;
    // The server answers a bare {"execution_id", "success", "value"} and
    // ignores call_id: the client's call_id is what comes back.
    let resp = gw
        .post_json(
            "/tools/call",
            &json!({"request": {"tool_id": "Math.add@1", "call_id": "lc-call-1", "trace_id": "lc-trace-1", "input": {"a": 2, "b": 40}}}),
        )
        .await;
    resp.expect_status(200);
    let body = resp.json();
    assert_eq!(body["$schema"], "otc://1.0", "{body}");
    let result = &body["result"];
    assert_eq!(result["success"], json!(true), "{body}");
    assert_eq!(result["value"], json!(42), "{body}");
    assert_eq!(result["call_id"], "lc-call-1", "{body}");
    assert!(result["duration"].is_number(), "{body}");

    // A structured value passes through unchanged.
    let stats = gw.call("Math.stats@1.0.0", json!({"numbers": [1, 2, 3, 4]})).await.result();
    assert_eq!(stats["success"], json!(true), "{stats}");
    assert_eq!(stats["value"], json!({"count": 4, "sum": 10}), "{stats}");
}

#[tokio::test]
async fn langchain_bad_input_is_the_gateways_422_and_a_raising_tool_is_a_tool_failure() {
    let (_lc, gw) = langchain_behind_gateway().await;
    // The gateway's own 422 (langchain would have answered 400 {"detail": ...}).
    let resp = gw.call("Math.add@1.0.0", json!({"a": "two"})).await;
    resp.expect_status(422);
    assert_eq!(resp.json()["$schema"], "otc://1.0", "{}", resp.text());
    let errors = resp.parameter_errors();
    assert!(errors.contains_key("a") && errors.contains_key("b"), "{errors:?}");

    // langchain answers a raising tool with HTTP 500 text/plain "Internal Server Error".
    let resp = gw.call("Math.explode@1.0.0", json!({"reason": "boom"})).await;
    resp.expect_status(200);
    let failed = resp.result();
    assert_eq!(failed["success"], json!(false), "{failed}");
    assert!(failed.get("value").is_none(), "{failed}");
    assert!(failed["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{failed}");
    let detail = failed["error"]["developer_message"].as_str().unwrap_or_default();
    assert!(detail.contains("500"), "the upstream's status belongs in developer_message: {failed}");
}

/// Runs tests/peers/oxp_client.py against `base_url` and parses what it prints.
async fn run_oxp_client(base_url: &str, ok_id: &str, failing_id: &str) -> Value {
    let run = tokio::process::Command::new(python("OTC_TEST_PYTHON", ".venv"))
        .arg(peer_script("oxp_client.py"))
        .args([base_url, ok_id, failing_id])
        .kill_on_drop(true)
        .output();
    // Async, so the in-process tool server keeps answering meanwhile.
    let output = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the oxp client finished within 60 s")
        .expect("run the oxp client");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "oxp client failed ({}):\n{stderr}", output.status);
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("the oxp client prints JSON ({e}): {}", String::from_utf8_lossy(&output.stdout)))
}

#[tokio::test]
async fn the_official_oxp_client_lists_and_calls_through_the_gateway() {
    let calc = ToolServer::start(common::catalog(vec![
        tool("Calc.Add", "1.0.0", add_schema()),
        tool("Calc.Flaky", "1.0.0", json!({"type": "object"})),
    ]))
    .await;
    let tool_err = json!({
        "message": "The quota is exhausted",
        "developer_message": "429 from the billing API",
        "can_retry": true,
        "retry_after_ms": 1500,
        "additional_prompt_content": "Try again in a moment."
    });
    let err = tool_err.clone();
    calc.on_call(move |body| match forwarded(body)["tool_id"].as_str() {
        Some("Calc.Flaky@1.0.0") => tool_error(body, err.clone()),
        _ => add(body),
    });
    let gw = GatewayConfig::new().upstream("calc", &calc.url()).start().await;
    gw.wait_for_tool("Calc.Flaky@1.0.0").await;

    let seen = run_oxp_client(&gw.url(), "Calc.Add@1.0.0", "Calc.Flaky@1").await;

    // Health and list-tools parse into the client's models.
    assert_eq!(seen["health"], "ok", "{seen}");
    assert_eq!(seen["list_schema"], "otc://1.0", "{seen}");
    let tools = seen["tools"].as_array().expect("tools");
    let ids: Vec<&str> = tools.iter().filter_map(|t| t["id"].as_str()).collect();
    assert_eq!(ids, ["Calc.Add@1.0.0", "Calc.Flaky@1.0.0"], "{seen}");
    assert_eq!(tools[0]["name"], "Calc_Add", "{seen}");
    assert_eq!(tools[0]["version"], "1.0.0", "{seen}");
    assert_eq!(tools[0]["input_schema"]["required"], json!(["a", "b"]), "{seen}");

    // call-tool: the client's success model, its call_id kept, "$schema": "urn:oxp:1.0" accepted.
    assert_eq!(seen["call"]["type"], "ResultUnionMember0", "parsed as a success: {seen}");
    let call = &seen["call"]["body"];
    assert_eq!(call["$schema"], "otc://1.0", "{seen}");
    assert_eq!(call["result"]["success"], json!(true), "{seen}");
    assert_eq!(call["result"]["value"].as_f64(), Some(42.0), "{seen}"); // the client's model reads floats
    assert_eq!(call["result"]["call_id"], "oxp-call-1", "{seen}");
    assert!(call["result"]["duration"].is_number(), "{seen}");

    // What reached the tool server: the ids and trace the client sent (its call_id scoped to it), not its credentials.
    let add_call = calc.calls().into_iter().find(|c| forwarded(c)["tool_id"] == "Calc.Add@1.0.0").expect("Add called");
    assert!(common::is_scoped_call_id(&forwarded(&add_call)["call_id"], "oxp-call-1"), "{add_call}");
    assert_eq!(forwarded(&add_call)["trace_id"], "oxp-trace-1", "{add_call}");
    assert_eq!(forwarded(&add_call)["input"], json!({"a": 2, "b": 40}), "{add_call}");
    for seen_req in calc.requests() {
        let auth = seen_req.headers.get("authorization").map(String::as_str).unwrap_or("");
        assert!(!auth.contains("client-secret-token"), "the client's bearer token leaked upstream: {seen_req:?}");
    }

    // A tool failure parses as the client's error model, the error passed through unchanged.
    assert_eq!(seen["failure"]["type"], "ResultUnionMember1", "parsed as a failure: {seen}");
    let failure = &seen["failure"]["body"]["result"];
    assert_eq!(failure["success"], json!(false), "{seen}");
    assert_eq!(failure["error"], tool_err, "{seen}");
    assert!(failure["call_id"].as_str().is_some_and(|id| !id.is_empty()), "a call_id is generated: {seen}");

    // Errors before the call: the client's typed exceptions, with the gateway's bodies.
    assert_eq!(seen["unknown"]["status"], json!(400), "{seen}");
    assert_eq!(seen["unknown"]["exception"], "BadRequestError", "{seen}");
    assert!(seen["unknown"]["body"]["message"].is_string(), "{seen}");
    assert_eq!(seen["invalid"]["status"], json!(422), "{seen}");
    assert_eq!(seen["invalid"]["exception"], "UnprocessableEntityError", "{seen}");
    let params = seen["invalid"]["body"]["parameter_errors"].as_object().expect("parameter_errors");
    assert!(params.contains_key("a") && params.contains_key("b"), "{seen}");
    // Neither reached the tool server: Add once, Flaky once.
    assert_eq!(calc.call_count(), 2, "{:#?}", calc.calls());
}
