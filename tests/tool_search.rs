//! Tool search through the real gateway: `GET /tools/search` (ranking,
//! limits, versions, refusals, every auth mode, policy isolation between
//! callers, a catalog change) and the `/mcp` front's search mode, with the
//! official MCP Python SDK as the agent that searches, then calls.

mod common;

use bytes::Bytes;
use common::{echo, jwt, send_with_headers, wait_until, Gateway, GatewayConfig, Resp, ToolServer};
use serde_json::{json, Value};
use std::process::Command;

/// A definition with this description and these parameters (name: description).
fn described(key: &str, version: &str, description: &str, parameters: &[(&str, &str)]) -> Value {
    let properties: serde_json::Map<String, Value> = parameters
        .iter()
        .map(|(name, about)| ((*name).to_owned(), json!({"type": "string", "description": about})))
        .collect();
    let name = key.split_once('.').map_or(key, |(_, name)| name);
    json!({
        "id": format!("{key}@{version}"),
        "name": name,
        "description": description,
        "version": version,
        "input_schema": {"type": "object", "properties": properties},
    })
}

/// Tools from a few toolkits, some with overlapping words.
fn office() -> Vec<Value> {
    vec![
        described(
            "Sms.SendSms",
            "1.0.0",
            "Sends an SMS or MMS message to a phone number.",
            &[("to", "Phone number"), ("body", "Message text")],
        ),
        described("Sms.GetMessageStatus", "1.0.0", "Gets a message's delivery status.", &[("sid", "Message id")]),
        described(
            "Mail.send_email",
            "1.0.0",
            "Sends an email message with attachments.",
            &[("to", "Recipient addresses"), ("subject", "Subject line")],
        ),
        described(
            "Mail.search_emails",
            "1.0.0",
            "Searches the mailbox and returns matching messages.",
            &[("query", "Search query")],
        ),
        described(
            "Billing.Refund",
            "1.0.0",
            "Gives a customer their money back for a charge.",
            &[("charge", "Charge id")],
        ),
        described("Billing.ListCharges", "1.0.0", "Lists charges, refunds and disputes of an account.", &[]),
        described(
            "Calendar.CreateEvent",
            "1.0.0",
            "Creates an event on a calendar with attendees.",
            &[("start", "Start time")],
        ),
        described("Calc.Add", "1.0.0", "Adds two numbers.", &[("a", "First"), ("b", "Second")]),
        described("Calc.Add", "2.0.0", "Adds any amount of numbers.", &[("numbers", "The numbers")]),
    ]
}

async fn office_gateway(extra_toml: &str) -> (ToolServer, Gateway) {
    let server = ToolServer::start(common::catalog(office())).await;
    server.on_call(echo);
    let gw = GatewayConfig::new().upstream("office", &server.url()).raw(extra_toml).start().await;
    (server, gw)
}

/// GET /tools/search?QUERY with these headers.
async fn search_with(gw: &Gateway, query: &str, headers: &[(&str, &str)]) -> Resp {
    send_with_headers(gw.addr, "GET", &format!("/tools/search?{query}"), Bytes::new(), headers).await
}

/// The ids GET /tools/search?QUERY returns (checked for the envelope).
async fn ids_for(gw: &Gateway, query: &str, headers: &[(&str, &str)]) -> Vec<String> {
    let resp = search_with(gw, query, headers).await;
    resp.expect_status(200);
    let body = resp.json();
    assert_eq!(body["$schema"], "otc://1.0", "{body}");
    common::ids(body["items"].as_array().unwrap_or_else(|| panic!("no items: {body}")))
}

/// Polls until the search's best result is `best` (`None`: until it finds
/// nothing): a search follows the catalog.
async fn wait_for_search(gw: &Gateway, query: &str, headers: &[(&str, &str)], best: Option<&str>) {
    wait_until(&format!("the best result for {query} is {best:?}"), async || {
        let found = ids_for(gw, query, headers).await;
        if found.first().map(String::as_str) == best {
            Ok(())
        } else {
            Err(format!("{found:?}"))
        }
    })
    .await;
}

#[tokio::test]
async fn search_ranks_the_name_above_the_description_and_answers_like_get_tools() {
    let (_server, gw) = office_gateway("").await;
    gw.wait_for_tool("Calc.Add@2.0.0").await;
    wait_for_search(&gw, "q=refund", &[], Some("Billing.Refund@1.0.0")).await;
    assert_eq!(ids_for(&gw, "q=refund", &[]).await, ["Billing.Refund@1.0.0", "Billing.ListCharges@1.0.0"]);
    // The name's words weigh more than the description's: SendSms before the
    // tools that only mention a message.
    let found = ids_for(&gw, "q=send+sms+message", &[]).await;
    assert_eq!(found[0], "Sms.SendSms@1.0.0", "{found:?}");
    assert_eq!(ids_for(&gw, "q=SendSms", &[]).await[0], "Sms.SendSms@1.0.0", "a name is split into its words");
    assert_eq!(ids_for(&gw, "q=email", &[]).await[0], "Mail.send_email@1.0.0");
    assert_eq!(ids_for(&gw, "q=phone", &[]).await, ["Sms.SendSms@1.0.0"], "parameters are searched");
    // Items are the definitions GET /tools lists, byte for byte.
    let listed = gw.tools().await;
    let body = search_with(&gw, "q=refund", &[]).await.json();
    assert_eq!(body["items"][0], *common::find_tool(&listed, "Billing.Refund@1.0.0").unwrap());
    // Words no tool holds: an empty list, not an error.
    assert_eq!(ids_for(&gw, "q=zebra+giraffe", &[]).await, Vec::<String>::new());
    assert_eq!(ids_for(&gw, "q=the+of", &[]).await, Vec::<String>::new());
    // HEAD as GET; other methods 405.
    let head = send_with_headers(gw.addr, "HEAD", "/tools/search?q=refund", Bytes::new(), &[]).await;
    assert_eq!(head.status, 200);
    let post = send_with_headers(gw.addr, "POST", "/tools/search?q=refund", Bytes::new(), &[]).await;
    assert_eq!(post.status, 405);
    assert_eq!(post.header("allow").as_deref(), Some("GET, HEAD"));
}

#[tokio::test]
async fn limits_versions_and_bad_queries() {
    let many: Vec<Value> = (0..120)
        .map(|i| described(&format!("Widgets.Widget{i:03}"), "1.0.0", "Polishes a widget.", &[]))
        .chain(office())
        .collect();
    let server = ToolServer::start(common::catalog(many)).await;
    let mut gw = GatewayConfig::new().upstream("many", &server.url()).start().await;
    gw.wait_for_tool("Widgets.Widget119@1.0.0").await;
    wait_for_search(&gw, "q=polish&limit=1", &[], Some("Widgets.Widget000@1.0.0")).await;
    assert_eq!(ids_for(&gw, "q=polish+widget", &[]).await.len(), 10, "default limit");
    assert_eq!(ids_for(&gw, "q=polish&limit=3", &[]).await.len(), 3);
    assert_eq!(ids_for(&gw, "q=polish&limit=100", &[]).await.len(), 100, "the most");
    // Each tool at its latest version, unless a version is asked for.
    assert_eq!(ids_for(&gw, "q=calc", &[]).await, ["Calc.Add@2.0.0"]);
    assert_eq!(ids_for(&gw, "q=calc&version=1.0.0", &[]).await, ["Calc.Add@1.0.0"]);
    assert_eq!(ids_for(&gw, "q=calc&version=%401", &[]).await, ["Calc.Add@1.0.0"], "@1 is 1.0.0");
    assert_eq!(ids_for(&gw, "q=calc&version=9.9.9", &[]).await, Vec::<String>::new());

    let huge = format!("q={}", "word+".repeat(400));
    let odd = "q=%F0%9F%A6%80+%E2%80%AE%00+caf%C3%A9+%E6%97%A5%E6%9C%AC+%CC%81%CC%81";
    for (query, words) in [
        ("", "query is empty"),
        ("q=", "query is empty"),
        ("q=+++", "query is empty"),
        ("limit=5", "query is empty"),
        ("q=polish&limit=abc", "limit must be a whole number from 1 to 100"),
        ("q=polish&limit=0", "limit must be"),
        ("q=polish&limit=101", "limit must be"),
        ("q=polish&limit=99999999999999999999999", "limit must be"),
        ("q=polish&version=latest", "version must be x.y.z"),
        ("q=a&q=b", "q is given more than once"),
        (huge.as_str(), "longer than 1024 bytes"),
        ("q=%FF%FE+polish", "not UTF-8"),
    ] {
        let body = search_with(&gw, query, &[]).await.server_error(400);
        let message = body["message"].as_str().unwrap_or_default();
        assert!(message.to_lowercase().contains(&words.to_lowercase()), "{query:?}: {message}");
    }
    // Odd characters are words like any other: searched, never a crash.
    assert_eq!(search_with(&gw, odd, &[]).await.status, 200);
    let metrics = common::send(gw.admin, "GET", "/metrics", Bytes::new(), None).await.text();
    assert!(metrics.contains("otc_gateway_tool_searches_total{front=\"otc\"}"), "{metrics}");
    assert!(metrics.contains("otc_gateway_tool_search_results_total{front=\"otc\"}"), "{metrics}");
    assert!(metrics.contains("otc_gateway_tool_search_duration_seconds_bucket{front=\"otc\""), "{metrics}");
    assert!(metrics.contains("otc_gateway_http_requests_total{route=\"/tools/search\",status=\"400\"}"), "{metrics}");
    let status = common::send(gw.admin, "GET", "/status", Bytes::new(), None).await.json();
    assert_eq!(status["search_index"]["documents"], 129, "every version of every tool: {status}");
    assert!(gw.is_alive(), "no query crashed the gateway");
}

#[tokio::test]
async fn a_tool_added_upstream_is_found_after_the_next_poll_and_a_removed_one_is_not() {
    let (server, gw) = office_gateway("").await;
    wait_for_search(&gw, "q=refund", &[], Some("Billing.Refund@1.0.0")).await;
    assert_eq!(ids_for(&gw, "q=weather", &[]).await, Vec::<String>::new());
    let mut tools = office();
    tools.push(described("Weather.GetForecast", "1.0.0", "Weather forecast for the coming days.", &[]));
    server.set_catalog(common::catalog(tools));
    wait_for_search(&gw, "q=weather", &[], Some("Weather.GetForecast@1.0.0")).await;
    server.set_catalog(common::catalog(office()));
    wait_for_search(&gw, "q=weather", &[], None).await;
}

const SECRET: &str = "tool-search-test-secret";

fn token(sub: &str, extra: Value) -> String {
    jwt::hs256(&jwt::claims(sub, extra), SECRET.as_bytes())
}

/// Mail for the mail group, SMS for the support group, the calculator for everyone.
const POLICIES: &str = r#"
[[policy]]
name = "mail"
when = { claim = "groups", contains = "mail" }
allow = ["Mail.*"]

[[policy]]
name = "sms"
when = { user_id = "sam" }
allow = ["Sms.*"]

[[policy]]
name = "everyone"
when = { any = true }
allow = ["Calc.*"]
"#;

#[tokio::test]
async fn two_callers_under_different_policies_each_find_only_their_tools_with_jwts_and_api_keys() {
    let auth = "[auth]\nmode = \"jwt\"\nhs256_secret = \"env:TOOL_SEARCH_SECRET\"\n\
                api_keys = [{ key = \"env:TOOL_SEARCH_SAM_KEY\", user_id = \"sam\" }]\n";
    let server = ToolServer::start(common::catalog(office())).await;
    let config = GatewayConfig::new().upstream("office", &server.url()).raw(auth).raw(POLICIES);
    let gw = config.start_with_env(&[("TOOL_SEARCH_SECRET", SECRET), ("TOOL_SEARCH_SAM_KEY", "sam-key")]).await;
    let ann = format!("Bearer {}", token("ann", json!({"groups": ["mail"]})));
    let ann = [("authorization", ann.as_str())];
    let sam = [("oxp-api-key", "sam-key")];
    wait_for_search(&gw, "q=calc", &ann, Some("Calc.Add@2.0.0")).await;

    // The same words find each caller's own tools, and nothing else.
    let for_ann = ids_for(&gw, "q=send+message&limit=100", &ann).await;
    let for_sam = ids_for(&gw, "q=send+message&limit=100", &sam).await;
    assert_eq!(for_ann, ["Mail.send_email@1.0.0", "Mail.search_emails@1.0.0"]);
    assert_eq!(for_sam, ["Sms.SendSms@1.0.0", "Sms.GetMessageStatus@1.0.0"]);
    // Words only hidden tools hold find nothing: no count, no hint.
    assert_eq!(ids_for(&gw, "q=phone+sms+delivery", &ann).await, Vec::<String>::new());
    assert_eq!(ids_for(&gw, "q=mailbox+attachments", &sam).await, Vec::<String>::new());
    let hidden = search_with(&gw, "q=refund+charge", &ann).await;
    let unknown = search_with(&gw, "q=zebra+giraffe", &ann).await;
    assert_eq!(hidden.text(), unknown.text(), "hidden tools answer as words no tool holds");
    // A JWT naming the API key's user is not that user: refused.
    let sam_jwt = format!("Bearer {}", token("sam", json!({})));
    assert_eq!(search_with(&gw, "q=SendSms", &[("authorization", sam_jwt.as_str())]).await.status, 401);
    // No credentials: 401, as on every route.
    let refused = search_with(&gw, "q=sms", &[]).await;
    assert_eq!(refused.status, 401);
    assert!(refused.header("www-authenticate").is_some());
    let bad_key = search_with(&gw, "q=sms", &[("oxp-api-key", "wrong")]).await;
    assert_eq!(bad_key.status, 401);
}

#[tokio::test]
async fn anonymous_callers_and_api_keys_in_mode_none() {
    let auth = "[auth]\nmode = \"none\"\napi_keys = [{ key = \"env:TOOL_SEARCH_NONE_KEY\", user_id = \"sam\" }]\n";
    let server = ToolServer::start(common::catalog(office())).await;
    let config = GatewayConfig::new().upstream("office", &server.url()).raw(auth).raw(POLICIES);
    let gw = config.start_with_env(&[("TOOL_SEARCH_NONE_KEY", "none-key")]).await;
    wait_for_search(&gw, "q=calc", &[], Some("Calc.Add@2.0.0")).await;
    assert_eq!(ids_for(&gw, "q=sms", &[]).await, Vec::<String>::new(), "anonymous: only what everyone gets");
    let sms = ["Sms.SendSms@1.0.0", "Sms.GetMessageStatus@1.0.0"];
    assert_eq!(ids_for(&gw, "q=sms", &[("oxp-api-key", "none-key")]).await, sms);
    assert_eq!(ids_for(&gw, "q=sms", &[("authorization", "Bearer none-key")]).await, sms);
}

// ---------------------------------------------------------------------------
// /mcp in search mode
// ---------------------------------------------------------------------------

async fn mcp(gw: &Gateway, method: &str, params: Value, headers: &[(&str, &str)]) -> Value {
    let mut all = vec![("content-type", "application/json"), ("accept", "application/json, text/event-stream")];
    all.extend_from_slice(headers);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let resp = send_with_headers(gw.addr, "POST", "/mcp", Bytes::from(body.to_string()), &all).await;
    resp.expect_status(200);
    resp.json()
}

fn found_names(result: &Value) -> Vec<String> {
    result["result"]["structuredContent"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools found: {result}"))
        .iter()
        .map(|tool| tool["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn mcp_search_mode_lists_meta_tools_and_keeps_each_callers_tools_apart() {
    let auth = "[auth]\nmode = \"none\"\napi_keys = [{ key = \"env:TOOL_SEARCH_MCP_KEY\", user_id = \"sam\" }]\n";
    let server = ToolServer::start(common::catalog(office())).await;
    server.on_call(echo);
    let config = GatewayConfig::new()
        .upstream("office", &server.url())
        .raw("[mcp]\ntool_listing = \"search\"\n")
        .raw(auth)
        .raw(POLICIES);
    let gw = config.start_with_env(&[("TOOL_SEARCH_MCP_KEY", "mcp-key")]).await;
    let sam = [("oxp-api-key", "mcp-key")];
    wait_for_search(&gw, "q=SendSms", &sam, Some("Sms.SendSms@1.0.0")).await;

    let listed = mcp(&gw, "tools/list", json!({}), &sam).await;
    let names: Vec<&str> =
        listed["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["search_tools", "describe_tool"], "{listed}");
    assert!(listed["result"].get("nextCursor").is_none());
    let init = mcp(&gw, "initialize", json!({"protocolVersion": "2025-11-25"}), &[]).await;
    assert!(init["result"]["instructions"].as_str().is_some_and(|i| i.contains("search_tools")), "{init}");

    // Sam (API key) finds and calls the SMS tool by the name search gave.
    let found =
        mcp(&gw, "tools/call", json!({"name": "search_tools", "arguments": {"query": "send a text"}}), &sam).await;
    assert_eq!(found_names(&found), ["Sms_SendSms", "Sms_GetMessageStatus"], "{found}");
    let tool = &found["result"]["structuredContent"]["tools"][0];
    assert_eq!(tool["description"], "Sends an SMS or MMS message to a phone number.");
    assert_eq!(tool["inputSchema"]["properties"]["to"]["description"], "Phone number");
    let text: Value = serde_json::from_str(found["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(text, found["result"]["structuredContent"], "the text is the structured content as JSON");
    let called = mcp(&gw, "tools/call", json!({"name": "Sms_SendSms", "arguments": {"to": "+1555"}}), &sam).await;
    assert_eq!(called["result"]["isError"], false, "{called}");
    assert_eq!(called["result"]["structuredContent"], json!({"to": "+1555"}));
    let described =
        mcp(&gw, "tools/call", json!({"name": "describe_tool", "arguments": {"name": "Sms_SendSms"}}), &sam).await;
    assert_eq!(described["result"]["structuredContent"]["title"], "Sms.SendSms", "{described}");

    // The anonymous caller may not see SMS: not found, not described, not callable.
    let found =
        mcp(&gw, "tools/call", json!({"name": "search_tools", "arguments": {"query": "send a text"}}), &[]).await;
    assert_eq!(found_names(&found), Vec::<String>::new(), "{found}");
    let hidden =
        mcp(&gw, "tools/call", json!({"name": "describe_tool", "arguments": {"name": "Sms_SendSms"}}), &[]).await;
    let unknown =
        mcp(&gw, "tools/call", json!({"name": "describe_tool", "arguments": {"name": "Sms_Nope"}}), &[]).await;
    assert_eq!(hidden["result"]["isError"], true, "{hidden}");
    assert_eq!(
        hidden.to_string().replace("Sms_SendSms", "X"),
        unknown.to_string().replace("Sms_Nope", "X"),
        "a hidden tool is described as an unknown one"
    );
    let calls = server.call_count();
    let refused = mcp(&gw, "tools/call", json!({"name": "Sms_SendSms", "arguments": {}}), &[]).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert_eq!(server.call_count(), calls, "never reaches the upstream");

    // Bad arguments are tool errors a model can fix.
    for (arguments, words) in [
        (json!({}), "query: is required"),
        (json!({"query": 5}), "query: must be a string"),
        (json!({"query": ""}), "query is empty"),
        (json!({"query": "sms", "limit": 0}), "limit must be"),
        (json!({"query": "sms", "limit": "ten"}), "limit: must be"),
        (json!({"query": "sms", "limit": 1e300}), "limit"),
    ] {
        let answer = mcp(&gw, "tools/call", json!({"name": "search_tools", "arguments": arguments}), &sam).await;
        assert_eq!(answer["result"]["isError"], true, "{answer}");
        assert!(answer["result"]["content"][0]["text"].as_str().is_some_and(|t| t.contains(words)), "{answer}");
    }
    let metrics = common::send(gw.admin, "GET", "/metrics", Bytes::new(), None).await.text();
    assert!(metrics.contains("otc_gateway_tool_searches_total{front=\"mcp\"} 2"), "{metrics}");
}

#[tokio::test]
async fn tools_list_is_the_catalog_by_default_and_a_reload_turns_search_mode_on() {
    let server = ToolServer::start(common::catalog(office())).await;
    let config = GatewayConfig::new().upstream("office", &server.url());
    let gw = config.start().await;
    gw.wait_for_tool("Calc.Add@2.0.0").await;
    let listed = mcp(&gw, "tools/list", json!({}), &[]).await;
    assert_eq!(listed["result"]["tools"].as_array().unwrap().len(), 8, "{listed}");
    // Without search mode, a tool named like a meta-tool is not one.
    let answer = mcp(&gw, "tools/call", json!({"name": "search_tools", "arguments": {"query": "sms"}}), &[]).await;
    assert_eq!(answer["error"]["code"], -32602, "{answer}");

    gw.rewrite_config(&config.raw("[mcp]\ntool_listing = \"search\"\n").toml());
    wait_until("search mode applies (tools/list shows the two meta-tools)", async || {
        let listed = mcp(&gw, "tools/list", json!({}), &[]).await;
        if listed["result"]["tools"].as_array().map(Vec::len) == Some(2) {
            Ok(())
        } else {
            Err(format!("{listed}\nlogs:\n{}", gw.logs()))
        }
    })
    .await;
    let found = mcp(&gw, "tools/call", json!({"name": "search_tools", "arguments": {"query": "refund"}}), &[]).await;
    assert_eq!(found_names(&found)[0], "Billing_Refund", "{found}");
}

#[tokio::test]
async fn the_python_sdk_client_searches_then_calls() {
    let policy = "[[policy]]\nname = \"everyone\"\nwhen = { any = true }\nallow = [\"*\"]\ndeny = [\"Billing.*\"]\n";
    let (server, gw) = office_gateway(&format!("[mcp]\ntool_listing = \"search\"\n\n{policy}")).await;
    wait_for_search(&gw, "q=SendSms", &[], Some("Sms.SendSms@1.0.0")).await;
    let mut command = Command::new(common::sdk_python());
    command
        .arg(common::peer_script("mcp_search_client.py"))
        .arg(format!("{}/mcp", gw.url()))
        .arg("text a phone number, or refund a charge")
        .arg(json!({"to": "+15551234567", "body": "running late"}).to_string())
        .arg("Billing_Refund");
    let output = tokio::task::spawn_blocking(move || command.output()).await.expect("join").expect("run the client");
    assert!(output.status.success(), "mcp_search_client.py failed: {}", String::from_utf8_lossy(&output.stderr));
    let seen: Value = serde_json::from_slice(&output.stdout).expect("a JSON report");

    let listed: Vec<&str> = seen["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(listed, ["search_tools", "describe_tool"], "{seen}");
    let found = &seen["search"]["result"]["structuredContent"]["tools"];
    assert_eq!(found[0]["name"], "Sms_SendSms", "{seen}");
    assert_eq!(seen["called"]["result"]["isError"], false, "{seen}");
    assert_eq!(seen["called"]["result"]["structuredContent"]["body"], "running late", "{seen}");
    assert_eq!(server.last_request()["tool_id"], "Sms.SendSms@1.0.0");
    assert_eq!(seen["described"]["result"]["structuredContent"]["name"], "Sms_SendSms", "{seen}");
    // Billing is denied: not found, not described, not callable.
    assert!(!seen.to_string().contains("Gives a customer their money back"), "{seen}");
    assert_eq!(seen["describe_hidden"]["result"]["isError"], true, "{seen}");
    assert_eq!(seen["call_hidden"]["error"]["code"], -32602, "{seen}");
}
