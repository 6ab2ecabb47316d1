//! Version resolution across upstreams and routing between them: exact
//! versions, `@x`, latest, invalid ids, priority, replicas with failover,
//! and conflicts settled by config order.

mod common;

use common::*;
use serde_json::json;

/// Two upstreams sharing Calculator.Add: "low" has 1.0.0, 1.5.0 and 9.0.0,
/// "high" has 2.0.0 and 10.0.0 (so string order and semver order differ).
async fn versions_on_two_upstreams() -> (ToolServer, ToolServer, Gateway) {
    let low = ToolServer::start(catalog(vec![
        tool("Calculator.Add", "1.0.0", add_schema()),
        tool("Calculator.Add", "1.5.0", add_schema()),
        tool("Calculator.Add", "9.0.0", add_schema()),
    ]))
    .await;
    let high = ToolServer::start(catalog(vec![
        tool("Calculator.Add", "2.0.0", add_schema()),
        tool("Calculator.Add", "10.0.0", add_schema()),
    ]))
    .await;
    low.on_call(add);
    high.on_call(add);
    let gw = GatewayConfig::new().upstream("low", &low.url()).upstream("high", &high.url()).start().await;
    gw.wait_for_tools("all five versions are listed", |items| {
        ["1.0.0", "1.5.0", "9.0.0", "2.0.0", "10.0.0"]
            .iter()
            .all(|v| find_tool(items, &format!("Calculator.Add@{v}")).is_some())
    })
    .await;
    (low, high, gw)
}

#[tokio::test]
async fn an_exact_version_is_called_on_the_upstream_that_has_it() {
    let (low, high, gw) = versions_on_two_upstreams().await;

    gw.call("Calculator.Add@1.5.0", json!({"a": 1, "b": 2})).await.result();
    assert_eq!(low.last_request()["tool_id"], "Calculator.Add@1.5.0");

    gw.call("Calculator.Add@2.0.0", json!({"a": 1, "b": 2})).await.result();
    assert_eq!(high.last_request()["tool_id"], "Calculator.Add@2.0.0");

    assert_eq!((low.call_count(), high.call_count()), (1, 1));
}

#[tokio::test]
async fn a_major_only_version_means_exactly_x_0_0() {
    let (low, high, gw) = versions_on_two_upstreams().await;

    gw.call("Calculator.Add@1", json!({"a": 1, "b": 2})).await.result();
    assert_eq!(low.last_request()["tool_id"], "Calculator.Add@1.0.0", "@1 is 1.0.0, never the latest 1.x (1.5.0)");

    gw.call("Calculator.Add@2", json!({"a": 1, "b": 2})).await.result();
    assert_eq!(high.last_request()["tool_id"], "Calculator.Add@2.0.0");

    gw.call("Calculator.Add@10", json!({"a": 1, "b": 2})).await.result();
    assert_eq!(high.last_request()["tool_id"], "Calculator.Add@10.0.0");
}

#[tokio::test]
async fn no_version_means_the_highest_across_all_upstreams() {
    let (low, high, gw) = versions_on_two_upstreams().await;

    let result = gw.call("Calculator.Add", json!({"a": 40, "b": 2})).await.result();

    assert_eq!(result["value"], 42);
    assert_eq!(high.call_count(), 1, "10.0.0 lives on `high`");
    assert_eq!(low.call_count(), 0, "9.0.0 is lower than 10.0.0 in semver");
    assert_eq!(high.last_request()["tool_id"], "Calculator.Add@10.0.0");
}

#[tokio::test]
async fn invalid_ids_are_400_before_any_call() {
    let (low, high, gw) = versions_on_two_upstreams().await;

    for id in [
        "Calculator.Add@1.2",
        "Calculator.Add@latest",
        "Calculator.Add@",
        "Calculator.Add@1.0.0.0",
        "Calculator.Add@v1",
        "Calculator.Add@1.0.0-beta",
        "Calculator",
        "Calculator.Add.More",
        ".Add",
        "Calc ulator.Add",
        "",
    ] {
        let resp = gw.call(id, json!({"a": 1, "b": 2})).await;
        assert_eq!(resp.status, 400, "tool_id {id:?} is invalid: got {} {}", resp.status, resp.text());
        resp.server_error(400);
    }
    assert_eq!(low.call_count() + high.call_count(), 0, "nothing is called for an invalid id");
}

#[tokio::test]
async fn unknown_tools_and_versions_are_400_before_any_call() {
    let (low, high, gw) = versions_on_two_upstreams().await;

    for id in [
        "Calculator.Sub",
        "Calculator.Sub@1.0.0",
        "Calculator.Add@3.0.0",
        "Calculator.Add@3",
        "Calculator.Add@1.5.1",
        "Other.Add@1",
    ] {
        let resp = gw.call(id, json!({"a": 1, "b": 2})).await;
        assert_eq!(resp.status, 400, "tool_id {id:?} does not exist: got {} {}", resp.status, resp.text());
        resp.server_error(400);
    }
    assert_eq!(low.call_count() + high.call_count(), 0);
}

#[tokio::test]
async fn the_higher_priority_upstream_wins_a_shared_id() {
    let shared = |description: &str| catalog(vec![tool_described("Echo.Say", "1.0.0", any_object(), description)]);
    let first = ToolServer::start(shared("from first")).await;
    let preferred = ToolServer::start(shared("from preferred")).await;
    // `preferred` comes second in config order: priority, not order, decides.
    let gw = GatewayConfig::new()
        .upstream_with("first", &first.url(), "priority = 0")
        .upstream_with("preferred", &preferred.url(), "priority = 5")
        .start()
        .await;
    gw.wait_for_tool("Echo.Say@1.0.0").await;
    // Both catalogs have been fetched before we judge the winner.
    first.wait_until("its catalog was fetched", |s| !s.catalog_fetches().is_empty()).await;
    preferred.wait_until("its catalog was fetched", |s| !s.catalog_fetches().is_empty()).await;
    let items = gw
        .wait_for_tools("the preferred definition is listed", |items| {
            find_tool(items, "Echo.Say@1.0.0").is_some_and(|t| t["description"] == "from preferred")
        })
        .await;
    assert_eq!(items.iter().filter(|t| t["id"] == "Echo.Say@1.0.0").count(), 1, "one id, one listing entry");

    for i in 0..6 {
        gw.call("Echo.Say@1.0.0", json!({"n": i})).await.result();
    }

    assert_eq!(preferred.call_count(), 6);
    assert_eq!(first.call_count(), 0);
}

#[tokio::test]
async fn the_higher_priority_wins_even_against_a_replica_set() {
    let same = catalog(vec![tool("Echo.Say", "1.0.0", any_object())]);
    let a = ToolServer::start(same.clone()).await;
    let b = ToolServer::start(same.clone()).await;
    let c = ToolServer::start(same).await;
    let gw = GatewayConfig::new()
        .upstream_with("c", &c.url(), "priority = -1")
        .upstream("a", &a.url())
        .upstream("b", &b.url())
        .start()
        .await;
    gw.wait_for_tool("Echo.Say@1.0.0").await;
    c.wait_until("its catalog was fetched", |s| !s.catalog_fetches().is_empty()).await;

    for i in 0..10 {
        gw.call("Echo.Say@1.0.0", json!({"n": i})).await.result();
    }
    assert_eq!(a.call_count() + b.call_count(), 10);
    assert_eq!(c.call_count(), 0, "a lower priority is never used while a higher one serves the tool");
}

#[tokio::test]
async fn identical_definitions_at_equal_priority_are_load_balanced_replicas() {
    let same = catalog(vec![tool("Echo.Say", "1.0.0", any_object())]);
    let one = ToolServer::start(same.clone()).await;
    let two = ToolServer::start(same).await;
    let gw = GatewayConfig::new().upstream("one", &one.url()).upstream("two", &two.url()).start().await;
    gw.wait_for_tool("Echo.Say@1.0.0").await;
    one.wait_until("its catalog was fetched", |s| !s.catalog_fetches().is_empty()).await;
    two.wait_until("its catalog was fetched", |s| !s.catalog_fetches().is_empty()).await;
    // Let one more poll round publish both.
    let n = two.catalog_fetches().len();
    two.wait_until("another poll", |s| s.catalog_fetches().len() > n).await;
    assert_eq!(gw.tools().await.len(), 1, "replicas are listed once");

    for i in 0..20 {
        let result = gw.call("Echo.Say@1.0.0", json!({"n": i})).await.result();
        assert_eq!(result["value"], json!({"n": i}));
    }

    assert_eq!(one.call_count() + two.call_count(), 20);
    assert!(
        one.call_count() > 0 && two.call_count() > 0,
        "both replicas share the load: one={} two={}",
        one.call_count(),
        two.call_count()
    );
}

#[tokio::test]
async fn a_dead_replica_fails_over_to_the_live_one() {
    let same = catalog(vec![tool("Echo.Say", "1.0.0", any_object())]);
    let live = ToolServer::start(same.clone()).await;
    let mut doomed = ToolServer::start(same).await;
    let gw = GatewayConfig::new().upstream("doomed", &doomed.url()).upstream("live", &live.url()).start().await;
    gw.wait_for_tool("Echo.Say@1.0.0").await;
    doomed.wait_until("its catalog was fetched", |s| s.catalog_fetches().iter().any(|r| r.status == 200)).await;
    live.wait_until("its catalog was fetched", |s| s.catalog_fetches().iter().any(|r| r.status == 200)).await;
    // Both replicas serve calls while alive.
    let n = live.catalog_fetches().len();
    live.wait_until("another poll", |s| s.catalog_fetches().len() > n).await;
    for i in 0..10 {
        gw.call("Echo.Say@1.0.0", json!({"n": i})).await.result();
    }
    assert!(doomed.call_count() > 0, "the doomed replica was in rotation before it died");

    // One replica dies; its last good catalog keeps it a replica.
    doomed.stop().await;
    let before = doomed.call_count();
    for i in 0..10 {
        let result = gw.call("Echo.Say@1.0.0", json!({"n": i})).await.result();
        assert_eq!(result["success"], true, "call {i} must fail over to the live replica: {result}");
    }

    assert_eq!(doomed.call_count(), before);
    assert_eq!(live.call_count() + before, 20);
}

#[tokio::test]
async fn different_definitions_at_equal_priority_go_to_the_first_in_config_order() {
    let narrow = catalog(vec![tool_described(
        "Echo.Say",
        "1.0.0",
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
        "narrow",
    )]);
    let loose = catalog(vec![tool_described("Echo.Say", "1.0.0", any_object(), "loose")]);

    // narrow first
    {
        let a = ToolServer::start(narrow.clone()).await;
        let b = ToolServer::start(loose.clone()).await;
        let gw = GatewayConfig::new().upstream("narrow", &a.url()).upstream("loose", &b.url()).start().await;
        gw.wait_for_tool("Echo.Say@1.0.0").await;
        b.wait_until("its catalog was fetched", |s| s.catalog_fetches().iter().any(|r| r.status == 200)).await;
        a.wait_until("its catalog was fetched", |s| s.catalog_fetches().iter().any(|r| r.status == 200)).await;
        let n = b.catalog_fetches().len();
        b.wait_until("another poll", |s| s.catalog_fetches().len() > n).await;

        let listed = gw.wait_for_tool("Echo.Say@1.0.0").await;
        assert_eq!(listed["description"], "narrow");
        for i in 0..5 {
            gw.call("Echo.Say@1.0.0", json!({"text": format!("hi {i}")})).await.result();
        }
        // The winner's schema is the one validated against.
        gw.call("Echo.Say@1.0.0", json!({})).await.parameter_errors();
        assert_eq!((a.call_count(), b.call_count()), (5, 0));
    }

    // loose first
    {
        let a = ToolServer::start(loose).await;
        let b = ToolServer::start(narrow).await;
        let gw = GatewayConfig::new().upstream("loose", &a.url()).upstream("narrow", &b.url()).start().await;
        gw.wait_for_tool("Echo.Say@1.0.0").await;
        b.wait_until("its catalog was fetched", |s| s.catalog_fetches().iter().any(|r| r.status == 200)).await;
        let n = b.catalog_fetches().len();
        b.wait_until("another poll", |s| s.catalog_fetches().len() > n).await;

        let listed = gw.wait_for_tool("Echo.Say@1.0.0").await;
        assert_eq!(listed["description"], "loose");
        for _ in 0..5 {
            gw.call("Echo.Say@1.0.0", json!({})).await.result();
        }
        assert_eq!((a.call_count(), b.call_count()), (5, 0));
    }
}

#[tokio::test]
async fn a_version_only_on_a_lower_priority_upstream_is_still_reachable() {
    let old = ToolServer::start(catalog(vec![tool("Calculator.Add", "1.0.0", add_schema())])).await;
    let new = ToolServer::start(catalog(vec![tool("Calculator.Add", "2.0.0", add_schema())])).await;
    let gw = GatewayConfig::new()
        .upstream_with("old", &old.url(), "priority = 0")
        .upstream_with("new", &new.url(), "priority = 9")
        .start()
        .await;
    gw.wait_for_tools("both versions listed", |items| items.len() == 2).await;

    gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 2})).await.result();
    gw.call("Calculator.Add", json!({"a": 1, "b": 2})).await.result();

    assert_eq!(old.call_count(), 1, "priority settles a shared id, not different versions");
    assert_eq!(new.last_request()["tool_id"], "Calculator.Add@2.0.0");
}
