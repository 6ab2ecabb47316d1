//! Who may see and call which tool, and how often: `[[policy]]` and
//! `[[rate_limit]]` through the real gateway, with JWTs signed here.

mod common;

use bytes::Bytes;
use common::{echo, ids, jwt, send_with_headers, tool, wait_until, Gateway, Resp, ToolServer};
use serde_json::{json, Value};

const SECRET: &str = "policy-test-secret";

/// A token for `sub` (with any `extra` claims), signed with the gateway's secret.
fn token(sub: &str, extra: Value) -> String {
    jwt::hs256(&jwt::claims(sub, extra), SECRET.as_bytes())
}

async fn org_tools() -> ToolServer {
    let any = json!({"type": "object"});
    let server = ToolServer::start(common::catalog(vec![
        tool("Gmail.Send", "1.0.0", any.clone()),
        tool("Gmail.Read", "1.0.0", any.clone()),
        tool("Calendar.List", "1.0.0", any.clone()),
        tool("Calculator.Add", "1.0.0", any.clone()),
        tool("Admin.Wipe", "1.0.0", any),
    ]))
    .await;
    server.on_call(echo);
    server
}

fn config(upstream: &str, rules: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\n\
         [catalog]\npoll_interval = \"200ms\"\nrequest_timeout = \"1s\"\n\n\
         [[upstreams]]\nname = \"org\"\nurl = \"{upstream}\"\n\n\
         [auth]\nmode = \"jwt\"\nhs256_secret = \"env:TEST_POLICY_SECRET\"\n\n{rules}"
    )
}

const TEAM_POLICIES: &str = r#"
[[policy]]
name = "mail-team"
when = { claim = "groups", contains = "mail" }
allow = ["Gmail.*", "Calendar.List"]
deny = ["Gmail.Send"]

[[policy]]
name = "calendar-scope"
when = { claim = "scope", contains = "calendar:read" }
allow = ["Calendar.*"]

[[policy]]
name = "everyone"
when = { any = true }
allow = ["Calculator.*"]
"#;

async fn start(rules: &str) -> (ToolServer, Gateway) {
    let server = org_tools().await;
    let gw = Gateway::start_with_env(&config(&server.url(), rules), &[("TEST_POLICY_SECRET", SECRET)]).await;
    // The catalog is in once someone allowed everything... wait via a caller who sees Calculator.
    let everyone = token("probe", json!({}));
    wait_until("the catalog arrived", async || {
        listing(&gw, &everyone).await.contains(&"Calculator.Add@1.0.0".to_owned())
    })
    .await;
    (server, gw)
}

async fn listing(gw: &Gateway, token: &str) -> Vec<String> {
    let auth = format!("Bearer {token}");
    let resp = send_with_headers(gw.addr, "GET", "/tools", Bytes::new(), &[("authorization", &auth)]).await;
    assert_eq!(resp.status, 200, "{}", resp.text());
    let mut seen = ids(resp.json()["items"].as_array().expect("items"));
    seen.sort();
    seen
}

async fn call(gw: &Gateway, token: &str, tool_id: &str) -> Resp {
    let auth = format!("Bearer {token}");
    let body = Bytes::from(json!({"request": {"tool_id": tool_id, "input": {}}}).to_string());
    send_with_headers(
        gw.addr,
        "POST",
        "/tools/call",
        body,
        &[("authorization", &auth), ("content-type", "application/json")],
    )
    .await
}

#[tokio::test]
async fn two_callers_see_different_catalogs_by_their_claims() {
    let (_server, gw) = start(TEAM_POLICIES).await;
    let mail = token("ann", json!({"groups": ["eng", "mail"]}));
    let scoped = token("bob", json!({"scope": "openid calendar:read"}));
    let nothing = token("cid", json!({}));
    assert_eq!(listing(&gw, &mail).await, ["Calculator.Add@1.0.0", "Calendar.List@1.0.0", "Gmail.Read@1.0.0"]);
    assert_eq!(listing(&gw, &scoped).await, ["Calculator.Add@1.0.0", "Calendar.List@1.0.0"]);
    assert_eq!(listing(&gw, &nothing).await, ["Calculator.Add@1.0.0"], "claims missing: only what everyone gets");
}

#[tokio::test]
async fn a_denied_call_is_answered_exactly_like_an_unknown_tool_and_never_reaches_the_upstream() {
    let (server, gw) = start(TEAM_POLICIES).await;
    let mail = token("ann", json!({"groups": "mail"}));
    call(&gw, &mail, "Gmail.Read@1.0.0").await.expect_status(200);
    let calls = server.call_count();

    let denied = call(&gw, &mail, "Gmail.Send@1.0.0").await;
    let unknown = call(&gw, &mail, "Gmail.Nope@1.0.0").await;
    assert_eq!(denied.status, 400);
    assert_eq!(
        denied.text().replace("Gmail.Send", "X"),
        unknown.text().replace("Gmail.Nope", "X"),
        "a denied tool must be indistinguishable from an unknown one"
    );
    let admin = call(&gw, &token("cid", json!({})), "Admin.Wipe").await;
    assert_eq!(admin.status, 400);
    assert_eq!(server.call_count(), calls, "denied calls never reach the upstream");

    let metrics = common::send(gw.admin, "GET", "/metrics", Bytes::new(), None).await.text();
    assert!(metrics.contains("outcome=\"denied\",tool=\"Gmail.Send@1.0.0\""), "{metrics}");
    gw.wait_for_log(&["call denied by policy", "Gmail.Send"]).await;
}

#[tokio::test]
async fn a_hot_reload_widens_a_policy() {
    let (server, gw) = start(TEAM_POLICIES).await;
    let cid = token("cid", json!({}));
    assert_eq!(call(&gw, &cid, "Calendar.List@1.0.0").await.status, 400);
    let wider = TEAM_POLICIES.replace("allow = [\"Calculator.*\"]", "allow = [\"Calculator.*\", \"Calendar.List\"]");
    gw.rewrite_config(&config(&server.url(), &wider));
    wait_until("the wider policy applied", async || {
        listing(&gw, &cid).await.contains(&"Calendar.List@1.0.0".to_owned())
    })
    .await;
    call(&gw, &cid, "Calendar.List@1.0.0").await.expect_status(200);
}

#[tokio::test]
async fn a_burst_over_a_per_user_limit_gets_429_for_that_caller_only() {
    let limits = r#"
[[rate_limit]]
name = "calculator-per-user"
tools = ["Calculator.*"]
per = "user"
rate = "1/m"
burst = 3
"#;
    let (server, gw) = start(limits).await;
    let ann = token("ann", json!({}));
    let bob = token("bob", json!({}));
    let calls_before = server.call_count();
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(call(&gw, &ann, "Calculator.Add@1.0.0").await);
    }
    let ok = statuses.iter().filter(|r| r.status == 200).count();
    let limited: Vec<&Resp> = statuses.iter().filter(|r| r.status == 429).collect();
    assert_eq!((ok, limited.len()), (3, 2), "burst 3, then 429");
    let retry_after: f64 = limited[0].header("retry-after").expect("Retry-After").parse().expect("seconds");
    assert!(retry_after >= 1.0, "{retry_after}");
    assert!(limited[0].json()["message"].is_string());
    assert_eq!(server.call_count(), calls_before + 3, "limited calls never reach the upstream");
    // Another caller has a bucket of their own; other tools are not limited.
    call(&gw, &bob, "Calculator.Add@1.0.0").await.expect_status(200);
    assert_eq!(call(&gw, &ann, "Gmail.Read@1.0.0").await.status, 200);
}

#[tokio::test]
async fn a_global_limit_is_shared_by_everyone() {
    let limits = r#"
[[rate_limit]]
name = "gmail-global"
tools = ["Gmail.Read"]
per = "global"
rate = "1/h"
burst = 2
"#;
    let (_server, gw) = start(limits).await;
    let (ann, bob) = (token("ann", json!({})), token("bob", json!({})));
    call(&gw, &ann, "Gmail.Read@1.0.0").await.expect_status(200);
    call(&gw, &bob, "Gmail.Read@1.0.0").await.expect_status(200);
    assert_eq!(call(&gw, &ann, "Gmail.Read@1.0.0").await.status, 429);
    assert_eq!(call(&gw, &bob, "Gmail.Read@1.0.0").await.status, 429);
}
