//! Human approval (`[[approval]]`, docs/approvals.md): a call a rule holds
//! never reaches its tool server before a person approved it, runs once per
//! approval, and a denial or an expiry is final for that call.
//!
//! Callers are alice and bob, each with their own credentials; the hostile
//! party is bob (and his browser), who tries to read, approve or run
//! alice's held calls. With `approver = "caller"` the browsers sign in at
//! a real OpenID provider (`oidc-provider` from npm); MCP clients are the
//! official Python SDK's.

mod common;

use std::path::PathBuf;

use bytes::Bytes;
use common::fleet::Redis;
use common::mcp_peer::{mcp_upstream, McpPeer};
use common::oidc::{Browser, OidcProvider, Page};
use common::otlp::Receiver;
use common::{echo, jwt, send_with_headers, temp_file, tool, wait_until, Gateway, GatewayConfig, Resp, ToolServer};
use serde_json::{json, Value};

const ADMIN_TOKEN: &str = "approvals-admin-token-4be1";
const JWT_SECRET: &str = "approvals-jwt-secret-0123456789abcdef01";
const LOGIN_CLIENT: &str = "otc-approvals-login";
const LOGIN_SECRET: &str = "approvals-login-secret-2d7e";
const KEYS: &str = "[auth]\napi_keys = [{ key = \"env:AP_ALICE_KEY\", user_id = \"alice\" }, { key = \"env:AP_BOB_KEY\", user_id = \"bob\" }]\n";
const ENV: [(&str, &str); 3] = [("AP_ALICE_KEY", "alice-key"), ("AP_BOB_KEY", "bob-key"), ("AP_ADMIN", ADMIN_TOKEN)];

/// A repository host's tools: one destructive, one not.
async fn repos() -> ToolServer {
    let mut delete =
        tool("Repo.Delete", "1.0.0", json!({"type": "object", "properties": {"repo": {"type": "string"}}}));
    delete["description"] = json!("Deletes a repository.");
    let server =
        ToolServer::start(common::catalog(vec![delete, tool("Repo.List", "1.0.0", json!({"type": "object"}))])).await;
    server.on_call(echo);
    server
}

/// A gateway in front of `server` whose callers bring JWTs and whose
/// browsers sign in at `idp` (`[login]`), with `rest` of the config.
async fn signed_in_gateway(idp: &OidcProvider, server: &ToolServer, rest: &str) -> Gateway {
    let config = GatewayConfig::new()
        .server_line("admin_token = \"env:AP_ADMIN\"")
        .upstream("repos", &server.url())
        .raw(&format!(
            r#"
[auth]
mode = "jwt"
hs256_secret = "env:AP_JWT"

[login]
issuer = "{issuer}"
client_id = "{LOGIN_CLIENT}"
client_secret = "env:AP_LOGIN_SECRET"
user_id_claim = "sub"
{rest}"#,
            issuer = idp.issuer(),
        ));
    let env = [("AP_ADMIN", ADMIN_TOKEN), ("AP_JWT", JWT_SECRET), ("AP_LOGIN_SECRET", LOGIN_SECRET)];
    let gw = config.start_with_env(&env).await;
    idp.register_client(LOGIN_CLIENT, LOGIN_SECRET, &[format!("{}/oauth/login/callback", gw.url())]).await;
    gw
}

fn state_dir() -> PathBuf {
    let dir = temp_file("approvals-state", "d", "");
    std::fs::remove_file(&dir).expect("a fresh name");
    dir
}

/// API-key callers, an operator's rule on `Repo.Delete`, state in `state`.
fn operator_config(server: &ToolServer, state: &std::path::Path, timeout: &str) -> String {
    GatewayConfig::new()
        .server_line("admin_token = \"env:AP_ADMIN\"")
        .upstream("repos", &server.url())
        .raw(&format!(
            "{KEYS}\n[state]\ndir = \"{}\"\n\n[[approval]]\nname = \"repo-deletes\"\ntools = [\"Repo.Delete\"]\napprover = \"admin\"\ntimeout = \"{timeout}\"\n",
            state.display()
        ))
        .toml()
}

async fn call(gw: &Gateway, key: &str, input: Value, call_id: Option<&str>) -> Resp {
    call_tool(gw, key, "Repo.Delete", input, call_id).await
}

async fn call_tool(gw: &Gateway, key: &str, tool: &str, input: Value, call_id: Option<&str>) -> Resp {
    let mut request = json!({"tool_id": tool, "input": input});
    if let Some(id) = call_id {
        request["call_id"] = json!(id);
    }
    let body = Bytes::from(json!({ "request": request }).to_string());
    let headers = [("content-type", "application/json"), ("oxp-api-key", key)];
    send_with_headers(gw.addr, "POST", "/tools/call", body, &headers).await
}

/// The approval a held call answered with.
fn held(resp: &Resp) -> Value {
    let body = resp.server_error(400);
    let approval = body["missing_requirements"]["approval"][0].clone();
    assert!(approval["id"].is_string() && approval["url"].is_string() && approval["check_url"].is_string(), "{body}");
    approval
}

async fn admin(gw: &Gateway, method: &str, path: &str, token: Option<&str>) -> Resp {
    let bearer = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = bearer.iter().map(|b| ("authorization", b.as_str())).collect();
    send_with_headers(gw.admin, method, path, Bytes::new(), &headers).await
}

/// A held call's state as its caller (`auth`: a header) checks it.
async fn check(gw: &Gateway, approval: &Value, auth: (&str, &str)) -> Resp {
    let url = approval["check_url"].as_str().unwrap();
    let path = url.strip_prefix(&gw.url()).expect("under the gateway's URL");
    send_with_headers(gw.addr, "GET", path, Bytes::new(), &[auth]).await
}

#[tokio::test]
async fn an_operator_approves_a_held_call_which_then_runs_once() {
    let server = repos().await;
    let gw = Gateway::start_with_env(&operator_config(&server, &state_dir(), "10m"), &ENV).await;
    gw.wait_for_tool("Repo.Delete@1.0.0").await;
    let input = json!({"repo": "payments"});

    // Held: the tool server sees nothing; the caller is told where it stands.
    let alice = held(&call(&gw, "alice-key", input.clone(), Some("c1")).await);
    assert_eq!(server.call_count(), 0, "a held call never reaches its tool server");
    assert!(alice["url"].as_str().unwrap().contains("/oauth/approval/"), "{alice}");
    let message = call(&gw, "alice-key", input.clone(), Some("c1")).await.server_error(400)["message"].clone();
    assert!(message.as_str().unwrap().contains("waits for an operator's approval"), "{message}");
    assert_eq!(check(&gw, &alice, ("oxp-api-key", "alice-key")).await.json()["status"], "pending");
    // Bob can neither read alice's request nor approve it; his own call is his own.
    assert_eq!(check(&gw, &alice, ("oxp-api-key", "bob-key")).await.status, 404);
    let bob = held(&call(&gw, "bob-key", input.clone(), Some("c1")).await);
    assert_ne!(bob["id"], alice["id"], "the same call_id is another request for another caller");
    let alice_id = alice["id"].as_str().unwrap();
    let approve = format!("/approvals/{alice_id}/approve");
    for token in [None, Some("bob-key"), Some("wrong")] {
        let refused = admin(&gw, "POST", &approve, token).await;
        assert!(matches!(refused.status, 401 | 403), "{token:?}: {}", refused.text());
    }

    // The operator's list shows what will run, as the caller sent it.
    let listed = admin(&gw, "GET", "/approvals", Some(ADMIN_TOKEN)).await.json();
    let pending = listed["approvals"].as_array().cloned().unwrap_or_default();
    assert_eq!(pending.len(), 2, "{listed}");
    let mine = pending.iter().find(|a| a["id"] == alice["id"]).expect("alice's request");
    assert_eq!(
        (&mine["tool"], &mine["caller"], &mine["input"], &mine["rule"], &mine["state"], &mine["call_id"]),
        (&json!("Repo.Delete@1.0.0"), &json!("alice"), &input, &json!("repo-deletes"), &json!("pending"), &json!("c1")),
        "{mine}"
    );

    let approved = admin(&gw, "POST", &approve, Some(ADMIN_TOKEN)).await;
    assert_eq!(approved.status, 200, "{}", approved.text());
    assert_eq!(approved.json()["state"], "approved");
    assert_eq!(admin(&gw, "POST", &approve, Some(ADMIN_TOKEN)).await.status, 409, "decided once");
    assert_eq!(check(&gw, &alice, ("oxp-api-key", "alice-key")).await.json()["status"], "approved");
    // Bob's request is still his and still pending: alice's approval is not his.
    held(&call(&gw, "bob-key", input.clone(), Some("c1")).await);

    // The same call runs once; its repeats are answered from that run.
    let first = call(&gw, "alice-key", input.clone(), Some("c1")).await;
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(server.call_count(), 1);
    let again = call(&gw, "alice-key", input.clone(), Some("c1")).await;
    assert_eq!((again.status, again.json()["output"].clone()), (200, first.json()["output"].clone()));
    assert_eq!(server.call_count(), 1, "one run per approval");
    // Another input under the call_id, or a new call_id: its own approval.
    let other = held(&call(&gw, "alice-key", json!({"repo": "billing"}), Some("c1")).await);
    let renamed = held(&call(&gw, "alice-key", input.clone(), Some("c2")).await);
    assert!(other["id"] != alice["id"] && renamed["id"] != alice["id"] && other["id"] != renamed["id"]);

    // A denial is final for that call, and says who and when.
    let bob_id = bob["id"].as_str().unwrap();
    assert_eq!(admin(&gw, "POST", &format!("/approvals/{bob_id}/deny"), Some(ADMIN_TOKEN)).await.status, 200);
    for _ in 0..2 {
        let denied = call(&gw, "bob-key", input.clone(), Some("c1")).await;
        let body = denied.server_error(403);
        let text = body["message"].as_str().unwrap_or_default();
        assert!(text.contains("denied by an operator at") && text.contains("UTC"), "{body}");
    }
    assert_eq!(server.call_count(), 1, "bob's denied call never ran");
    // Other tools are not held.
    let body = Bytes::from(json!({"request": {"tool_id": "Repo.List", "input": {}}}).to_string());
    let list = send_with_headers(gw.addr, "POST", "/tools/call", body, &[("oxp-api-key", "bob-key")]).await;
    assert_eq!(list.status, 200, "{}", list.text());

    // The audit trail: a log line per request and decision, a metric by rule and outcome.
    let logs = gw.wait_for_log(&["approval decided", "denied"]).await;
    assert!(logs.contains("approval requested") && logs.contains(alice_id), "{logs}");
    assert!(!logs.contains("alice-key") && !logs.contains(ADMIN_TOKEN), "no credential in the log");
    let metrics = admin(&gw, "GET", "/metrics", None).await.text();
    for (outcome, n) in [("requested", 4), ("approved", 1), ("denied", 1)] {
        let line = format!("otc_gateway_approvals_total{{outcome=\"{outcome}\",rule=\"repo-deletes\"}} {n}");
        assert!(metrics.contains(&line), "{line} in:\n{metrics}");
    }
    let status = admin(&gw, "GET", "/status", Some(ADMIN_TOKEN)).await.json();
    assert_eq!(status["approvals_pending"], 2, "alice's two new requests: {status}");
}

/// Bob, the hostile caller, holds call after call to fill the journal and
/// the approvers' queue. Past the bound his calls open nothing more (429);
/// alice still opens hers, and his room comes back as his requests are decided.
#[tokio::test]
async fn one_caller_cannot_fill_the_approvers_queue() {
    const BOUND: usize = otc_gateway::approvals::MAX_WAITING_PER_CALLER;
    let server = repos().await;
    let state = state_dir();
    let gw = Gateway::start_with_env(&operator_config(&server, &state, "10m"), &ENV).await;
    gw.wait_for_tool("Repo.Delete@1.0.0").await;
    let input = json!({"repo": "payments"});
    let mut bobs = Vec::new();
    for n in 0..BOUND {
        bobs.push(held(&call(&gw, "bob-key", input.clone(), Some(&format!("b{n}"))).await));
    }
    let refused = call(&gw, "bob-key", input.clone(), Some("one-too-many")).await;
    let body = refused.server_error(429);
    assert!(body["message"].as_str().unwrap_or_default().contains(&format!("{BOUND} of your calls wait")), "{body}");
    // A call he has a request for already is still told where it stands.
    assert_eq!(held(&call(&gw, "bob-key", input.clone(), Some("b0")).await)["id"], bobs[0]["id"]);
    // Alice is not blocked by him.
    held(&call(&gw, "alice-key", input.clone(), Some("a1")).await);
    assert_eq!(server.call_count(), 0);
    let journal = std::fs::read_to_string(state.join("approvals.jsonl")).unwrap();
    assert_eq!(journal.lines().count(), BOUND + 1, "nothing written for the refused call");

    // One of his decided, he may open one more.
    let id = bobs[0]["id"].as_str().unwrap();
    assert_eq!(admin(&gw, "POST", &format!("/approvals/{id}/deny"), Some(ADMIN_TOKEN)).await.status, 200);
    held(&call(&gw, "bob-key", input.clone(), Some("one-too-many")).await);
    call(&gw, "bob-key", input.clone(), Some("two-too-many")).await.server_error(429);
}

#[tokio::test]
async fn an_expiry_is_final_and_requests_and_decisions_survive_a_restart() {
    let server = repos().await;
    let state = state_dir();
    let gw = Gateway::start_with_env(&operator_config(&server, &state, "1s"), &ENV).await;
    gw.wait_for_tool("Repo.Delete@1.0.0").await;
    let late = held(&call(&gw, "alice-key", json!({"repo": "a"}), Some("late")).await);
    // Time must pass for an expiry: the caller's own check says when it has.
    wait_until("the request expires", async || {
        check(&gw, &late, ("oxp-api-key", "alice-key")).await.json()["status"] == "expired"
    })
    .await;
    let late_id = late["id"].as_str().unwrap();
    let refused = admin(&gw, "POST", &format!("/approvals/{late_id}/approve"), Some(ADMIN_TOKEN)).await;
    assert_eq!(refused.status, 409, "an expired request cannot be approved: {}", refused.text());
    let expired = call(&gw, "alice-key", json!({"repo": "a"}), Some("late")).await.server_error(403);
    assert!(expired["message"].as_str().unwrap().contains("Nobody approved this call before"), "{expired}");
    drop(gw);

    // A new process on the same state, with a longer timeout: the expiry
    // holds; a request made before a restart is approved after it.
    let toml = operator_config(&server, &state, "10m");
    let gw = Gateway::start_with_env(&toml, &ENV).await;
    gw.wait_for_tool("Repo.Delete@1.0.0").await;
    call(&gw, "alice-key", json!({"repo": "a"}), Some("late")).await.server_error(403);
    let kept = held(&call(&gw, "alice-key", json!({"repo": "b"}), Some("kept")).await);
    drop(gw);
    let gw = Gateway::start_with_env(&toml, &ENV).await;
    gw.wait_for_tool("Repo.Delete@1.0.0").await;
    let listed = admin(&gw, "GET", "/approvals", Some(ADMIN_TOKEN)).await.json();
    assert_eq!(listed["approvals"][0]["id"], kept["id"], "{listed}");
    let all = admin(&gw, "GET", "/approvals?state=expired", Some(ADMIN_TOKEN)).await.json();
    assert_eq!(all["approvals"][0]["id"], late["id"], "{all}");
    let kept_id = kept["id"].as_str().unwrap();
    assert_eq!(admin(&gw, "POST", &format!("/approvals/{kept_id}/approve"), Some(ADMIN_TOKEN)).await.status, 200);
    drop(gw);
    let gw = Gateway::start_with_env(&toml, &ENV).await;
    gw.wait_for_tool("Repo.Delete@1.0.0").await;
    assert_eq!(call(&gw, "alice-key", json!({"repo": "b"}), Some("kept")).await.status, 200);
    assert_eq!(server.call_count(), 1);
    // Bad input: an unknown state, an unknown id.
    assert_eq!(admin(&gw, "GET", "/approvals?state=maybe", Some(ADMIN_TOKEN)).await.status, 400);
    assert_eq!(admin(&gw, "POST", "/approvals/nope/approve", Some(ADMIN_TOKEN)).await.status, 404);
}

/// The journal file is compacted when the gateway starts: a request that
/// ended more than a day ago leaves it, with its decision; what is kept
/// still stands, and the file still grows from there.
#[tokio::test]
async fn the_journal_file_drops_requests_ended_a_day_ago_at_start() {
    let server = repos().await;
    let state = state_dir();
    std::fs::create_dir_all(&state).unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let request = |id: &str, at: u64, expires: u64| {
        json!({"event": "requested", "id": id, "link": format!("link-{id}"), "rule": "repo-deletes",
               "approver": "admin", "tool": "Repo.Delete@1.0.0", "upstream": "repos", "caller": "alice",
               "owner": "o", "call_id": id, "input": {"repo": id}, "at": at, "expires": expires})
    };
    let old = 3 * 24 * 3600;
    let lines = [
        request("ended", now - old, now - old + 600),
        json!({"event": "decided", "id": "ended", "approve": true, "by": "admin", "at": now - old + 60}),
        json!({"event": "used", "id": "ended", "at": now - old + 61}),
        request("waiting", now - 60, now + 3600),
        request("waiting", now - 30, now + 9999),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(state.join("approvals.jsonl"), text).unwrap();

    let gw = Gateway::start_with_env(&operator_config(&server, &state, "10m"), &ENV).await;
    gw.wait_for_tool("Repo.Delete@1.0.0").await;
    let journal = std::fs::read_to_string(state.join("approvals.jsonl")).unwrap();
    let kept: Vec<Value> = journal.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(kept, [request("waiting", now - 60, now + 3600)], "{journal}");
    assert!(gw.logs().contains("approvals journal compacted"), "{}", gw.logs());
    let listed = admin(&gw, "GET", "/approvals?state=all", Some(ADMIN_TOKEN)).await.json();
    let ids: Vec<&Value> = listed["approvals"].as_array().unwrap().iter().map(|a| &a["id"]).collect();
    assert_eq!(ids, [&json!("waiting")], "{listed}");
    assert_eq!(admin(&gw, "POST", "/approvals/waiting/approve", Some(ADMIN_TOKEN)).await.status, 200);
    let journal = std::fs::read_to_string(state.join("approvals.jsonl")).unwrap();
    assert_eq!(journal.lines().count(), 2, "appended after the compacted entries: {journal}");
}

/// A caller's rule: alice approves her own call in her own signed-in
/// browser; bob's browser, a browser signed in as nobody, a forged form and
/// the operator cannot.
#[tokio::test]
async fn the_caller_approves_in_their_own_browser_and_nobody_else_can() {
    let idp = OidcProvider::start(json!({"scopes": []})).await;
    let server = repos().await;
    let rules = format!(
        r#"
[state]
dir = "{dir}"

[[approval]]
name = "repo-deletes"
tools = ["Repo.*"]
annotations = {{}}
when = {{ any = true }}
"#,
        dir = state_dir().display()
    );
    let gw = signed_in_gateway(&idp, &server, &rules).await;
    let bearer = |user: &str| jwt::bearer(&jwt::hs256(&jwt::claims(user, json!({})), JWT_SECRET.as_bytes()));
    gw.wait_listed(&[("authorization", &bearer("alice"))], "Repo.Delete@1.0.0").await;
    let jwt_call = |user: &'static str, call_id: &'static str| {
        let gw = &gw;
        async move {
            let bearer = bearer(user);
            let request =
                json!({"request": {"tool_id": "Repo.Delete", "input": {"repo": "payments"}, "call_id": call_id}});
            let headers = [("content-type", "application/json"), ("authorization", bearer.as_str())];
            send_with_headers(gw.addr, "POST", "/tools/call", Bytes::from(request.to_string()), &headers).await
        }
    };
    let approval = held(&jwt_call("alice", "c1").await);
    let link = approval["url"].as_str().unwrap().to_owned();
    let said = jwt_call("alice", "c1").await.server_error(400)["message"].as_str().unwrap_or_default().to_owned();
    assert!(said.contains("needs your approval") && said.contains(&link), "the model is told what to do: {said}");

    // A link preview's HEAD decides nothing and shows nothing.
    let head = send_with_headers(gw.addr, "HEAD", link.strip_prefix(&gw.url()).unwrap(), Bytes::new(), &[]).await;
    assert_eq!(head.status, 200);
    assert_eq!(jwt_call("alice", "c1").await.status, 400, "still held after a HEAD");
    // A browser signed in as nobody is sent to sign in; bob's sees nothing of alice's call.
    assert_eq!(Browser::new().get_no_follow(&link).await.status, 302);
    let bob = Browser::new();
    let bobs_view = bob.follow_as(&link, "bob").await;
    assert_eq!(bobs_view.status, 403, "{}", bobs_view.body);
    assert!(bobs_view.body.contains("another user") && !bobs_view.body.contains("payments"), "{}", bobs_view.body);

    // Alice's page: what will run, and a form with an anti-forgery field.
    let alice = Browser::new();
    let page = alice.follow_as(&link, "alice").await;
    assert_eq!(page.status, 200, "{}", page.body);
    for shown in ["Repo.Delete@1.0.0", "repos", "alice", "repo-deletes", "c1", "&quot;payments&quot;"] {
        assert!(page.body.contains(shown), "{shown} on the page: {}", page.body);
    }
    let header =
        |page: &Page, name: &str| page.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    assert!(header(&page, "content-security-policy").contains("frame-ancestors 'none'"), "{:?}", page.headers);
    // No Referer leaves the gateway (and the form's Origin stays the gateway's).
    assert_eq!(header(&page, "referrer-policy"), "same-origin");
    let csrf =
        page.body.split("name=\"csrf\" value=\"").nth(1).and_then(|r| r.split('"').next()).expect("a csrf field");

    // Forged forms decide nothing: no anti-forgery field, bob's session
    // with alice's field, and the operator (a caller's rule is the caller's).
    let missing = alice.post_form(&link, "decision=approve").await;
    assert_eq!(missing.status, 403, "{}", missing.body);
    let forged = bob.post_form(&link, &format!("decision=approve&csrf={csrf}")).await;
    assert_eq!(forged.status, 403, "{}", forged.body);
    let id = approval["id"].as_str().unwrap();
    assert_eq!(admin(&gw, "POST", &format!("/approvals/{id}/approve"), Some(ADMIN_TOKEN)).await.status, 403);
    assert_eq!(jwt_call("alice", "c1").await.status, 400, "still held");
    // Bob cannot run alice's approved call with her call_id either (below).

    let approved = alice.post_form(&link, &format!("decision=approve&csrf={csrf}")).await;
    assert_eq!(approved.status, 200, "{}", approved.body);
    assert!(approved.body.contains("Approved"), "{}", approved.body);
    held(&jwt_call("bob", "c1").await);
    assert_eq!(server.call_count(), 0);
    let ran = jwt_call("alice", "c1").await;
    assert_eq!(ran.status, 200, "{}", ran.text());
    assert_eq!(server.call_count(), 1);
    let after = alice.follow_as(&link, "alice").await;
    assert!(after.body.contains("This call is approved.") && !after.body.contains("name=\"csrf\""), "{}", after.body);

    // Alice denies another call: final, in her name.
    let second = held(&jwt_call("alice", "c2").await);
    let second_link = second["url"].as_str().unwrap();
    let page = alice.follow_as(second_link, "alice").await;
    let csrf =
        page.body.split("name=\"csrf\" value=\"").nth(1).and_then(|r| r.split('"').next()).expect("a csrf field");
    assert_eq!(alice.post_form(second_link, &format!("decision=deny&csrf={csrf}")).await.status, 200);
    let denied = jwt_call("alice", "c2").await.server_error(403);
    assert!(denied["message"].as_str().unwrap().contains("denied by alice at"), "{denied}");
    assert_eq!(server.call_count(), 1);
}

async fn sdk_client(gw: &Gateway, mode: &str, scenario: &Value) -> Value {
    common::mcp_peer::mcp_front_client(format!("{}/mcp", gw.url()), mode, scenario).await
}

/// MCP clients get the held call as a URL-mode elicitation: 2026-07-28's
/// `input_required` (the SDK retries once the operator approved), 2025-11-25's
/// error -32042, and a tool error with the link for a client without them.
#[tokio::test]
async fn mcp_clients_are_asked_through_a_url_elicitation() {
    let server = repos().await;
    let gw = Gateway::start_with_env(&operator_config(&server, &state_dir(), "10m"), &ENV).await;
    gw.wait_for_tool("Repo.Delete@1.0.0").await;
    let call = json!([{"name": "Repo_Delete", "arguments": {"repo": "payments"}}]);
    let operator = json!({"admin": format!("http://{}", gw.admin), "token": ADMIN_TOKEN});

    let report = sdk_client(
        &gw,
        "2026-07-28",
        &json!({"headers": {"OXP-API-Key": "alice-key"}, "calls": call, "elicitation": {"approve": operator}}),
    )
    .await;
    let elicited = &report["elicitations"][0];
    assert_eq!(elicited["mode"], "url", "{report}");
    assert!(elicited["url"].as_str().unwrap_or_default().contains("/oauth/approval/"), "{report}");
    assert_eq!(report["calls"][0]["result"]["isError"], false, "it ran once approved: {report}");
    assert_eq!(server.call_count(), 1);
    // Its repeat is answered from that run.
    let again = sdk_client(&gw, "2026-07-28", &json!({"headers": {"OXP-API-Key": "alice-key"}, "calls": call})).await;
    assert_eq!(again["calls"][0]["result"]["isError"], false, "{again}");
    assert_eq!(server.call_count(), 1, "one run per approval");

    // Bob's same call is his own request: 2025-11-25 with URL elicitation, -32042.
    let bob = json!({"headers": {"OXP-API-Key": "bob-key"}, "calls": call, "elicitation": {"action": "accept"}});
    let report = sdk_client(&gw, "legacy", &bob).await;
    assert_eq!(report["calls"][0]["error"]["code"], -32042, "{report}");
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "Repo_Delete", "arguments": {"repo": "payments"}}});
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("oxp-api-key", "bob-key"),
        ("mcp-session-id", "0123456789abcdef0123456789abcdef.url"),
    ];
    let raw = send_with_headers(gw.addr, "POST", "/mcp", Bytes::from(body.to_string()), &headers).await.json();
    let elicitation = &raw["error"]["data"]["elicitations"][0];
    assert!(elicitation["url"].as_str().unwrap_or_default().contains("/oauth/approval/"), "{raw}");
    assert!(elicitation["elicitationId"].is_string() && elicitation["mode"] == "url", "{raw}");
    // A client without URL elicitation: a tool error whose text carries the link.
    let report = sdk_client(&gw, "legacy", &json!({"headers": {"OXP-API-Key": "bob-key"}, "calls": call})).await;
    let result = &report["calls"][0]["result"];
    assert_eq!(result["isError"], true, "{report}");
    assert!(result["content"][0]["text"].as_str().is_some_and(|t| t.contains("/oauth/approval/")), "{report}");
    assert_eq!(server.call_count(), 1, "bob's call never ran");
}

/// The approval page and the console's Approvals page in Chromium, clicked
/// as people click them (tests/peers/approval_browser.py).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn people_approve_in_chromium_on_the_approval_page_and_the_console() {
    let idp = OidcProvider::start(json!({"scopes": []})).await;
    let mut wipe = tool("Repo.Wipe", "1.0.0", json!({"type": "object"}));
    wipe["description"] = json!("Wipes a repository's history.");
    let server = ToolServer::start(common::catalog(vec![
        tool("Repo.Delete", "1.0.0", json!({"type": "object", "properties": {"repo": {"type": "string"}}})),
        wipe,
    ]))
    .await;
    server.on_call(echo);
    let rules = r#"
[[approval]]
name = "repo-deletes"
tools = ["Repo.Delete"]

[[approval]]
name = "repo-wipes"
tools = ["Repo.Wipe"]
approver = "admin"
"#;
    let gw = signed_in_gateway(&idp, &server, rules).await;
    let alice = jwt::bearer(&jwt::hs256(&jwt::claims("alice", json!({})), JWT_SECRET.as_bytes()));
    gw.wait_listed(&[("authorization", &alice)], "Repo.Wipe@1.0.0").await;
    let call = |tool: &str, input: Value| {
        let body = json!({"request": {"tool_id": tool, "input": input}}).to_string();
        let (gw, alice) = (&gw, alice.clone());
        async move {
            let headers = [("content-type", "application/json"), ("authorization", alice.as_str())];
            send_with_headers(gw.addr, "POST", "/tools/call", Bytes::from(body), &headers).await
        }
    };
    let link = |resp: Resp| held(&resp)["url"].as_str().unwrap().to_owned();
    let alice_link = link(call("Repo.Delete", json!({"repo": "payments"})).await);
    let alice_other_link = link(call("Repo.Delete", json!({"repo": "billing"})).await);
    let hostile =
        json!({"note": "<script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\">"});
    held(&call("Repo.Wipe", hostile.clone()).await);

    let admin = format!("http://{}", gw.admin);
    let args = [
        "--admin",
        &admin,
        "--gateway",
        &gw.url(),
        "--alice-link",
        &alice_link,
        "--alice-other-link",
        &alice_other_link,
        "--admin-token",
        ADMIN_TOKEN,
    ];
    let seen = common::chromium::selenium("approval_browser.py", &args, &gw).await;
    let text = |key: &str| seen[key].as_str().unwrap_or_default().to_owned();
    assert!(text("alice_page").contains("\"payments\"") && text("alice_page").contains("repo-deletes"), "{seen}");
    assert!(text("alice_approved").contains("runs once"), "{seen}");
    assert!(text("bob_page").contains("another user") && !text("bob_page").contains("billing"), "{seen}");
    assert!(text("console").contains("<script>document.title='pwned'</script>"), "markup shown as text: {seen}");
    assert!(text("confirm").starts_with("Approve this call of Repo.Wipe@1.0.0"), "{seen}");
    assert_eq!(text("console_result"), "Repo.Wipe@1.0.0: approved.", "{seen}");

    // What the gateway did: alice's approved call and the operator's run; her other one waits.
    assert_eq!(call("Repo.Delete", json!({"repo": "payments"})).await.status, 200);
    assert_eq!(call("Repo.Wipe", hostile).await.status, 200);
    held(&call("Repo.Delete", json!({"repo": "billing"})).await);
    assert_eq!(server.call_count(), 2);
}

/// Two replicas sharing one Redis: the request made on one is the one the
/// other shows; approved on the second, the call runs on the first, once.
#[tokio::test]
async fn a_fleet_shares_requests_and_decisions_through_redis() {
    let redis = Redis::start();
    let server = repos().await;
    let toml = GatewayConfig::new()
        .server_line("admin_token = \"env:AP_ADMIN\"")
        .upstream("repos", &server.url())
        .raw(&format!(
            "{KEYS}\n[state]\nredis = \"{}\"\n\n[[approval]]\nname = \"repo-deletes\"\ntools = [\"Repo.Delete\"]\napprover = \"admin\"\n",
            redis.url()
        ))
        .toml();
    let one = Gateway::start_with_env(&toml, &ENV).await;
    let two = Gateway::start_with_env(&toml, &ENV).await;
    one.wait_for_tool("Repo.Delete@1.0.0").await;
    two.wait_for_tool("Repo.Delete@1.0.0").await;
    let input = json!({"repo": "payments"});
    let asked = held(&call(&one, "alice-key", input.clone(), Some("f1")).await);
    let again = held(&call(&two, "alice-key", input.clone(), Some("f1")).await);
    assert_eq!(asked["id"], again["id"], "one request for one call, whichever replica answered");
    let listed = admin(&two, "GET", "/approvals", Some(ADMIN_TOKEN)).await.json();
    assert_eq!(listed["approvals"].as_array().map(Vec::len), Some(1), "{listed}");
    let id = asked["id"].as_str().unwrap();
    assert_eq!(admin(&two, "POST", &format!("/approvals/{id}/approve"), Some(ADMIN_TOKEN)).await.status, 200);
    assert_eq!(check(&one, &asked, ("oxp-api-key", "alice-key")).await.json()["status"], "approved");
    assert_eq!(call(&one, "alice-key", input.clone(), Some("f1")).await.status, 200);
    assert_eq!(call(&two, "alice-key", input.clone(), Some("f1")).await.status, 200);
    assert_eq!(server.call_count(), 1, "one run in the fleet");
    // Bob's same call on either replica is his own request.
    held(&call(&two, "bob-key", input, Some("f1")).await);
}

/// A rule on MCP annotations, and a tool server that drops its
/// `destructiveHint` to slip out of it: the change waits for an operator
/// (the pin), and its calls stay held meanwhile.
#[tokio::test]
async fn a_tool_server_dropping_its_destructive_hint_stays_held() {
    let peer = McpPeer::start(false);
    peer.redescribe_annotated("add", "Adds two integers.", json!({"destructiveHint": true})).await;
    let toml = GatewayConfig::new()
        .server_line("admin_token = \"env:AP_ADMIN\"")
        .raw(&mcp_upstream("calc", &peer.url(), "Calc", ""))
        .raw(&format!(
            "{KEYS}\n[state]\ndir = \"{}\"\n\n[[approval]]\nname = \"destructive\"\nannotations = {{ destructiveHint = true }}\napprover = \"admin\"\n",
            state_dir().display()
        ))
        .toml();
    let gw = Gateway::start_with_env(&toml, &ENV).await;
    gw.wait_for_tool("Calc.add@1.0.0").await;
    let first = held(&call_tool(&gw, "alice-key", "Calc.add", json!({"a": 1, "b": 2}), None).await);
    assert_eq!(first["rule"], "destructive", "{first}");
    // Tools without the hint are not held.
    let echo = call_tool(&gw, "alice-key", "Calc.echo", json!({"text": "hi"}), None).await;
    assert_eq!(echo.status, 200, "{}", echo.text());

    peer.redescribe("add", "Adds two integers.").await;
    wait_until("the dropped hint waits for review", async || {
        let changes = admin(&gw, "GET", "/changes", Some(ADMIN_TOKEN)).await.json();
        changes["changes"].as_array().is_some_and(|c| c.len() == 1)
    })
    .await;
    held(&call_tool(&gw, "alice-key", "Calc.add", json!({"a": 2, "b": 3}), None).await);
    let id = first["id"].as_str().unwrap();
    assert_eq!(admin(&gw, "POST", &format!("/approvals/{id}/approve"), Some(ADMIN_TOKEN)).await.status, 200);
    let ran = call_tool(&gw, "alice-key", "Calc.add", json!({"a": 1, "b": 2}), None).await;
    assert_eq!(ran.status, 200, "{}", ran.text());
}

/// With `[tracing]`, a held call's `approve` step carries an `approval`
/// event (its id, rule and state); a call no rule holds has no such step.
#[tokio::test]
async fn a_held_call_is_an_approve_step_with_an_event_in_its_trace() {
    let receiver = Receiver::start("ok");
    let server = repos().await;
    let toml = operator_config(&server, &state_dir(), "10m")
        + &format!("\n[tracing]\notlp_endpoint = \"{}\"\n", receiver.endpoint());
    let gw = Gateway::start_with_env(&toml, &ENV).await;
    gw.wait_for_tool("Repo.Delete@1.0.0").await;
    let asked = held(&call(&gw, "alice-key", json!({"repo": "secret-name"}), Some("t1")).await);
    let steps = receiver.wait_for_any("the approve step", |s| s["name"] == "approve").await;
    let step = &steps[0];
    let event = &step["events"][0];
    assert_eq!(event["name"], "approval", "{step}");
    assert_eq!(event["attributes"]["otc.approval.id"], asked["id"], "{step}");
    assert_eq!(event["attributes"]["otc.approval.rule"], "repo-deletes");
    assert_eq!(event["attributes"]["otc.approval.state"], "pending");
    assert!(receiver.spans().await.iter().all(|s| !s.to_string().contains("secret-name")), "no input in a span");
    let body = Bytes::from(json!({"request": {"tool_id": "Repo.List", "input": {}}}).to_string());
    send_with_headers(gw.addr, "POST", "/tools/call", body, &[("oxp-api-key", "bob-key")]).await.expect_status(200);
    let list = receiver.wait_for_any("the list call", |s| s["name"] == "execute_tool Repo.List@1.0.0").await;
    let execute = &list[0];
    let trace = execute["trace_id"].as_str().unwrap();
    let spans = receiver.wait_for(trace, "its steps", |s| s.iter().any(|s| s["name"] == "validate")).await;
    assert!(
        !spans.iter().any(|s| s["parent_span_id"] == execute["span_id"] && s["name"] == "approve"),
        "no approve step for a call no rule holds"
    );
}

/// Once the idempotency store no longer keeps the approved call's answer, a
/// repeat is refused, never run again: the journal knows the call ran.
#[tokio::test]
async fn an_approved_call_whose_answer_is_gone_does_not_run_again() {
    let server = repos().await;
    let toml = operator_config(&server, &state_dir(), "10m") + "\n[idempotency]\nttl = \"1s\"\n";
    let gw = Gateway::start_with_env(&toml, &ENV).await;
    gw.wait_for_tool("Repo.Delete@1.0.0").await;
    let input = json!({"repo": "payments"});
    let asked = held(&call(&gw, "alice-key", input.clone(), Some("once")).await);
    let id = asked["id"].as_str().unwrap();
    assert_eq!(admin(&gw, "POST", &format!("/approvals/{id}/approve"), Some(ADMIN_TOKEN)).await.status, 200);
    assert_eq!(call(&gw, "alice-key", input.clone(), Some("once")).await.status, 200);
    // Time must pass for the stored answer to go (its ttl); until then a
    // repeat is answered from it.
    let refused = wait_until("the stored answer is gone and the repeat refused", async || {
        let repeat = call(&gw, "alice-key", input.clone(), Some("once")).await;
        if repeat.status == 403 {
            Ok(repeat)
        } else {
            Err(format!("{} {}", repeat.status, repeat.text()))
        }
    })
    .await;
    assert!(refused.text().contains("approved once and has run"), "{}", refused.text());
    assert_eq!(server.call_count(), 1, "one run per approval");
}
