//! The catalog: every upstream dialect merged into one listing, bad
//! definitions skipped one by one, ETag / 304, the last good catalog kept
//! through failures, late upstreams joining and removed tools leaving.

mod common;

use bytes::Bytes;
use common::*;
use serde_json::{json, Value};

#[tokio::test]
async fn every_dialect_is_merged_into_one_canonical_listing() {
    // items + flat schema, the canonical dialect.
    let canonical =
        ToolServer::start(json!({"$schema": "otc://1.0", "items": [tool("Calculator.Add", "1.0.0", add_schema())]}))
            .await;
    // tools + parameters-wrapped schema, the earlier draft.
    let mut doorbell = tool("Doorbell.Ring", "0.1.0", json!({}));
    doorbell["input_schema"] = json!({"parameters": {"type": "object", "properties": {"doorbell_id": {"type": "string"}}, "required": ["doorbell_id"]}});
    let draft = ToolServer::start(json!({"tools": [doorbell]})).await;
    // A bare array.
    let bare = ToolServer::start(json!([tool("System.GetTimestamp", "1.0.0", any_object())])).await;

    let gw = GatewayConfig::new()
        .upstream("canonical", &canonical.url())
        .upstream("draft", &draft.url())
        .upstream("bare", &bare.url())
        .start()
        .await;

    let items = gw
        .wait_for_tools("all three dialects are listed", |items| {
            ["Calculator.Add@1.0.0", "Doorbell.Ring@0.1.0", "System.GetTimestamp@1.0.0"]
                .iter()
                .all(|id| find_tool(items, id).is_some())
        })
        .await;

    assert_eq!(items.len(), 3, "exactly the three tools: {:?}", ids(&items));
    let ring = find_tool(&items, "Doorbell.Ring@0.1.0").unwrap();
    assert_eq!(
        ring["input_schema"],
        json!({"type": "object", "properties": {"doorbell_id": {"type": "string"}}, "required": ["doorbell_id"]}),
        "a parameters-wrapped schema is served flat"
    );
    for item in &items {
        assert!(item["input_schema"].get("parameters").is_none(), "no wrapped schema may leak out: {item}");
    }

    // Each tool is routed to the upstream that serves it.
    gw.call("Doorbell.Ring@0.1.0", json!({"doorbell_id": "front"})).await.result();
    gw.call("System.GetTimestamp@1.0.0", json!({})).await.result();
    assert_eq!(draft.call_count(), 1);
    assert_eq!(bare.call_count(), 1);
    assert_eq!(canonical.call_count(), 0);
    assert_eq!(draft.last_request()["tool_id"], "Doorbell.Ring@0.1.0");

    // The wrapped schema is the one validated against.
    let resp = gw.call("Doorbell.Ring@0.1.0", json!({})).await;
    assert!(resp.parameter_errors().contains_key("doorbell_id"));
    assert_eq!(draft.call_count(), 1);
}

#[tokio::test]
async fn bare_tool_names_take_toolkit_and_version_from_config_and_keep_their_id_upstream() {
    // The way langchain-tool-server lists tools: a bare array, bare names, no version.
    let lts = ToolServer::start(json!([
        {"id": "add", "name": "add", "description": "Adds two numbers", "input_schema": add_schema()},
        {"id": "multiply", "name": "multiply", "description": "Multiplies", "input_schema": {"parameters": add_schema()}}
    ]))
    .await;
    lts.on_call(add);
    let gw = GatewayConfig::new()
        .upstream_with("langchain", &lts.url(), "toolkit = \"Math\"\nversion = \"1.0.0\"")
        .start()
        .await;

    let listed = gw.wait_for_tool("Math.add@1.0.0").await;
    assert_eq!(listed["version"], "1.0.0");
    let items = gw.wait_for_tool("Math.multiply@1.0.0").await;
    assert_eq!(items["input_schema"], add_schema());

    let result = gw.call("Math.add@1.0.0", json!({"a": 20, "b": 22})).await.result();
    assert_eq!(result["value"], 42);
    assert_eq!(lts.last_request()["tool_id"], "add", "the upstream's own id is what gets forwarded");

    gw.call("Math.add", json!({"a": 1, "b": 1})).await.result();
    assert_eq!(lts.last_request()["tool_id"], "add");
}

#[tokio::test]
async fn bad_definitions_are_skipped_one_by_one_with_a_log_line() {
    let mut bad_version = tool("Broken.Version", "1.0.0", any_object());
    bad_version["id"] = json!("Broken.Version@1.0");
    bad_version["version"] = json!("1.0");
    let mut bad_id = tool("Broken.Id", "1.0.0", any_object());
    bad_id["id"] = json!("not an id!");
    let bad_schema = tool("Broken.Schema", "1.0.0", json!({"type": 5}));
    let mut bad_name = tool("Broken.Name", "1.0.0", any_object());
    bad_name["name"] = json!("has spaces and / slashes");

    let shaky = ToolServer::start(catalog(vec![
        bad_version,
        tool("Good.One", "1.0.0", add_schema()),
        bad_id,
        bad_schema,
        bad_name,
        tool("Good.Two", "2.0.0", any_object()),
    ]))
    .await;
    let gw = GatewayConfig::new().upstream("shaky-defs", &shaky.url()).start_with_env(&[("RUST_LOG", "info")]).await;

    let items = gw
        .wait_for_tools("both good tools are listed", |items| {
            find_tool(items, "Good.One@1.0.0").is_some() && find_tool(items, "Good.Two@2.0.0").is_some()
        })
        .await;

    assert_eq!(ids(&items).len(), 2, "only the good definitions are listed: {:?}", ids(&items));
    gw.call("Good.One@1.0.0", json!({"a": 1, "b": 2})).await.result();
    gw.call("Broken.Schema@1.0.0", json!({})).await.server_error(400);
    gw.call("Broken.Version", json!({})).await.server_error(400);
    assert_eq!(shaky.call_count(), 1);

    // The operator learns which upstream and which definition.
    gw.wait_for_log(&["shaky-defs", "Broken.Version", "Broken.Schema", "not an id!"]).await;
}

#[tokio::test]
async fn the_gateway_revalidates_with_if_none_match_and_accepts_304() {
    let upstream = ToolServer::start(catalog(vec![tool("Calculator.Add", "1.0.0", add_schema())])).await;
    upstream.enable_etag();
    let gw = GatewayConfig::new().upstream("etagged", &upstream.url()).start().await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;

    // A later poll sends the ETag back and is answered 304.
    let etag = upstream.current_etag();
    upstream
        .wait_until("the gateway revalidated with If-None-Match and got a 304", |s| {
            s.catalog_fetches().iter().any(|r| r.headers.get("if-none-match") == Some(&etag) && r.status == 304)
        })
        .await;
    // Several 304s later, the catalog is intact.
    let seen = upstream.catalog_fetches().len();
    upstream.wait_until("two more polls", |s| s.catalog_fetches().len() >= seen + 2).await;
    let items = gw.tools().await;
    assert_eq!(ids(&items), vec!["Calculator.Add@1.0.0".to_string()], "a 304 keeps the catalog as it was");
    gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 2})).await.result();

    // A changed catalog (new ETag) is picked up.
    upstream.set_catalog(catalog(vec![
        tool("Calculator.Add", "1.0.0", add_schema()),
        tool("Calculator.Add", "2.0.0", add_schema()),
    ]));
    gw.wait_for_tool("Calculator.Add@2.0.0").await;
    let new_etag = upstream.current_etag();
    upstream
        .wait_until("the gateway revalidated with the new ETag", |s| {
            s.catalog_fetches().iter().any(|r| r.headers.get("if-none-match") == Some(&new_etag) && r.status == 304)
        })
        .await;
}

#[tokio::test]
async fn no_if_none_match_is_sent_to_an_upstream_without_etag() {
    let upstream = ToolServer::start(catalog(vec![tool("Calculator.Add", "1.0.0", add_schema())])).await;
    let gw = GatewayConfig::new().upstream("plain", &upstream.url()).start().await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;

    upstream.wait_until("three catalog polls", |s| s.catalog_fetches().len() >= 3).await;

    for fetch in upstream.catalog_fetches() {
        assert!(!fetch.headers.contains_key("if-none-match"), "no ETag was given, so none is sent: {fetch:?}");
        assert_eq!(fetch.status, 200);
    }
}

/// Waits until the admin `/status` shows that the last catalog fetch of
/// upstream `name` failed; its entry there.
async fn wait_for_failed_poll(gw: &Gateway, name: &str) -> Value {
    wait_until(&format!("/status shows a failed catalog fetch of {name}"), async || {
        let status = gw.upstream_status(name).await;
        if status["up"] == false && status["last_error"].is_string() {
            Ok(status)
        } else {
            Err(status.to_string())
        }
    })
    .await
}

/// Switches the upstream's catalog to `mode`, waits until the gateway has
/// seen a poll fail on it, and checks the tool is still listed and callable.
async fn survives(upstream: &ToolServer, gw: &Gateway, name: &str, mode: CatalogMode) {
    let before = upstream.catalog_fetches().len();
    upstream.set_catalog_mode(mode);
    // An upstream's polls are sequential: the second request after the
    // switch only comes once the first one has been answered (or, for Hang,
    // timed out by request_timeout) and its failure recorded, so the failure
    // /status shows is this mode's, not an earlier one's.
    upstream
        .wait_until(&format!("a catalog poll answered {mode:?} and the next one"), |s| {
            s.catalog_fetches().len() >= before + 2
        })
        .await;
    let status = wait_for_failed_poll(gw, name).await;
    assert_eq!(status["tools"], 1, "after {mode:?} /status counts the last good catalog's tools: {status}");
    let items = gw.tools().await;
    assert!(
        find_tool(&items, "Calculator.Add@1.0.0").is_some(),
        "after {mode:?} the last good catalog is kept: {:?}",
        ids(&items)
    );
    let result = gw.call("Calculator.Add@1.0.0", json!({"a": 2, "b": 2})).await.result();
    assert_eq!(result["value"], 4);
}

#[tokio::test]
async fn an_upstream_answering_garbage_keeps_its_last_good_catalog() {
    let upstream = ToolServer::start(catalog(vec![tool("Calculator.Add", "1.0.0", add_schema())])).await;
    upstream.on_call(add);
    let gw = GatewayConfig::new().upstream("flaky", &upstream.url()).start().await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;

    survives(&upstream, &gw, "flaky", CatalogMode::Garbage).await;
    survives(&upstream, &gw, "flaky", CatalogMode::Html500).await;

    // Valid JSON that is no catalog at all is garbage too.
    upstream.set_catalog(json!({"hello": "world"}));
    survives(&upstream, &gw, "flaky", CatalogMode::Serve).await;
    upstream.set_catalog(json!(42));
    survives(&upstream, &gw, "flaky", CatalogMode::Serve).await;

    // Back to health: a change is picked up again.
    upstream.set_catalog(catalog(vec![
        tool("Calculator.Add", "1.0.0", add_schema()),
        tool("Calculator.Sub", "1.0.0", add_schema()),
    ]));
    gw.wait_for_tool("Calculator.Sub@1.0.0").await;
}

#[tokio::test]
async fn an_upstream_that_hangs_keeps_its_last_good_catalog() {
    let upstream = ToolServer::start(catalog(vec![tool("Calculator.Add", "1.0.0", add_schema())])).await;
    upstream.on_call(add);
    let gw = GatewayConfig::new().upstream("sleepy", &upstream.url()).start().await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;

    survives(&upstream, &gw, "sleepy", CatalogMode::Hang).await;

    upstream.set_catalog_mode(CatalogMode::Serve);
    upstream.set_catalog(catalog(vec![
        tool("Calculator.Add", "1.0.0", add_schema()),
        tool("Calculator.Sub", "1.0.0", add_schema()),
    ]));
    gw.wait_for_tool("Calculator.Sub@1.0.0").await;
}

#[tokio::test]
async fn an_upstream_that_goes_down_keeps_its_last_good_catalog() {
    let mut upstream = ToolServer::start(catalog(vec![tool("Calculator.Add", "1.0.0", add_schema())])).await;
    let gw = GatewayConfig::new().upstream("mortal", &upstream.url()).start().await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;

    upstream.stop().await;
    // A poll fails on the refused connection, and the gateway shows it.
    let status = wait_for_failed_poll(&gw, "mortal").await;
    assert!(status["last_success"].is_u64(), "it was fetched once: {status}");
    assert_eq!(status["tools"], 1, "/status counts the last good catalog's tools: {status}");

    let items = gw.tools().await;
    assert!(
        find_tool(&items, "Calculator.Add@1.0.0").is_some(),
        "a failed fetch keeps the last good catalog: {:?}",
        ids(&items)
    );
    let metrics = send(gw.admin, "GET", "/metrics", Bytes::new(), None).await.text();
    for (series, value) in [
        (r#"otc_gateway_upstream_up{upstream="mortal"} "#, "0"),
        (r#"otc_gateway_catalog_tools{upstream="mortal"} "#, "1"),
    ] {
        let sample = metrics.lines().find_map(|l| l.strip_prefix(series));
        assert_eq!(sample, Some(value), "{series}in /metrics:\n{metrics}");
    }
}

#[tokio::test]
async fn an_upstream_down_at_start_joins_when_it_comes_up() {
    let late_addr = free_addr();
    let early = ToolServer::start(catalog(vec![tool("Early.Bird", "1.0.0", any_object())])).await;
    let gw = GatewayConfig::new()
        .upstream("late", &format!("http://{late_addr}"))
        .upstream("early", &early.url())
        .start()
        .await;

    gw.wait_for_tool("Early.Bird@1.0.0").await;
    assert!(find_tool(&gw.tools().await, "Late.Comer@1.0.0").is_none());
    gw.call("Late.Comer@1.0.0", json!({})).await.server_error(400);

    let late = ToolServer::start_on(late_addr, catalog(vec![tool("Late.Comer", "1.0.0", any_object())])).await;

    gw.wait_for_tool("Late.Comer@1.0.0").await;
    gw.call("Late.Comer@1.0.0", json!({"x": 1})).await.result();
    assert_eq!(late.call_count(), 1);
    assert_eq!(late.last_request()["input"], json!({"x": 1}));
}

#[tokio::test]
async fn an_upstream_down_at_start_is_retried_within_seconds_even_with_a_long_poll_interval() {
    let late_addr = free_addr();
    let toml = GatewayConfig::new()
        .upstream("late", &format!("http://{late_addr}"))
        .toml()
        .replace("poll_interval = \"200ms\"", "poll_interval = \"300s\"");
    let gw = Gateway::start(&toml).await;
    wait_for_failed_poll(&gw, "late").await;
    assert!(gw.tools().await.is_empty());

    let _late = ToolServer::start_on(late_addr, catalog(vec![tool("Late.Comer", "1.0.0", any_object())])).await;

    // The first retry is 1 s after the failed fetch, not 300 s.
    gw.wait_for_tool("Late.Comer@1.0.0").await;
}

#[tokio::test]
async fn an_unreadable_bearer_token_is_a_failed_fetch_and_retried_as_one() {
    let server = ToolServer::start(catalog(vec![tool("Guarded.Tool", "1.0.0", any_object())])).await;
    let token = std::env::temp_dir().join(format!("otc-catalog-bearer-{}", std::process::id()));
    let _ = std::fs::remove_file(&token);
    let toml = GatewayConfig::new()
        .upstream_with("guarded", &server.url(), &format!("bearer_token = \"file:{}\"", token.display()))
        .toml()
        .replace("poll_interval = \"200ms\"", "poll_interval = \"300s\"");
    let gw = Gateway::start(&toml).await;
    gw.wait_for_log(&["cannot read the upstream's bearer_token; catalog not fetched"]).await;
    assert!(gw.tools().await.is_empty(), "no token, no fetch");
    assert!(server.catalog_fetches().is_empty(), "no token, no fetch");

    std::fs::write(&token, "catalog-token").expect("write the token");

    gw.wait_for_tool("Guarded.Tool@1.0.0").await;
    let fetch = server.catalog_fetches().pop().expect("a fetch");
    assert_eq!(fetch.headers.get("authorization").map(String::as_str), Some("Bearer catalog-token"));
    let _ = std::fs::remove_file(&token);
}

#[tokio::test]
async fn a_tool_removed_upstream_disappears_at_the_next_poll() {
    let upstream = ToolServer::start(catalog(vec![
        tool("Calculator.Add", "1.0.0", add_schema()),
        tool("Calculator.Sub", "1.0.0", add_schema()),
    ]))
    .await;
    let gw = GatewayConfig::new().upstream("calculator", &upstream.url()).start().await;
    gw.wait_for_tools("both tools listed", |items| items.len() == 2).await;

    upstream.set_catalog(catalog(vec![tool("Calculator.Add", "1.0.0", add_schema())]));

    gw.wait_for_tool_gone("Calculator.Sub@1.0.0").await;
    assert_eq!(ids(&gw.tools().await), vec!["Calculator.Add@1.0.0".to_string()]);
    let calls_before = upstream.call_count();
    gw.call("Calculator.Sub@1.0.0", json!({"a": 1, "b": 2})).await.server_error(400);
    gw.call("Calculator.Sub", json!({"a": 1, "b": 2})).await.server_error(400);
    assert_eq!(upstream.call_count(), calls_before, "a removed tool is never called");

    // An upstream that empties its catalog (a valid, empty one) leaves nothing behind.
    upstream.set_catalog(catalog(vec![]));
    gw.wait_for_tool_gone("Calculator.Add@1.0.0").await;
}

#[tokio::test]
async fn a_new_version_published_upstream_appears_at_the_next_poll() {
    let upstream = ToolServer::start(catalog(vec![tool("Calculator.Add", "1.0.0", add_schema())])).await;
    let gw = GatewayConfig::new().upstream("calculator", &upstream.url()).start().await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;
    gw.call("Calculator.Add", json!({"a": 1, "b": 2})).await.result();
    assert_eq!(upstream.last_request()["tool_id"], "Calculator.Add@1.0.0");

    upstream.set_catalog(catalog(vec![
        tool("Calculator.Add", "1.0.0", add_schema()),
        tool("Calculator.Add", "1.1.0", add_schema()),
    ]));
    gw.wait_for_tool("Calculator.Add@1.1.0").await;

    gw.call("Calculator.Add", json!({"a": 1, "b": 2})).await.result();
    assert_eq!(upstream.last_request()["tool_id"], "Calculator.Add@1.1.0", "no version now means 1.1.0");
}
