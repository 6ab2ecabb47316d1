//! `GET /explain` and `otc-gateway explain`: why a caller sees, or does not
//! see, a tool, through a real gateway with a real tool server, and a
//! property: over random policies and callers, the explanation agrees with
//! what real listings and calls do.

mod common;

use bytes::Bytes;
use common::{echo, ids, needing, send, send_with_headers, tool, wait_until, Gateway, Resp, ToolServer};
use proptest::prelude::*;
use serde_json::{json, Value};

const SECRET: &str = "explain-test-hs256-secret";
const ADMIN_TOKEN: &str = "explain-admin-token-5c1d";
const TWILIO_VALUE: &str = "twilio-canary-value-93ad";
const ECHO_TOOLS: [&str; 5] = ["Mail.Read", "Mail.Send", "Cal.List", "Calc.Add", "Admin.Wipe"];

/// `claims`, valid for ten minutes, signed with the gateway's secret.
fn jwt(claims: Value) -> String {
    common::jwt::hs256(&common::jwt::merged(claims, json!({"exp": common::jwt::now() + 600})), SECRET.as_bytes())
}

async fn org_tools() -> ToolServer {
    let mut tools: Vec<Value> = ECHO_TOOLS.iter().map(|key| tool(key, "1.0.0", json!({"type": "object"}))).collect();
    tools.push(needing("Sms.Send", json!({"user_id": true, "secrets": [{"id": "TWILIO"}, {"id": "MISSING_KEY"}]})));
    let server = ToolServer::start(common::catalog(tools)).await;
    server.on_call(echo);
    server
}

fn config(upstream: &str, rules: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\nadmin_token = \"env:EXPLAIN_ADMIN\"\n\n\
         [catalog]\npoll_interval = \"200ms\"\nrequest_timeout = \"1s\"\n\n\
         [[upstreams]]\nname = \"org\"\nurl = \"{upstream}\"\nsecrets = [\"TWILIO\"]\n\n\
         [auth]\nmode = \"jwt\"\nhs256_secret = \"env:EXPLAIN_HS256\"\n\n\
         [secrets]\nTWILIO = \"env:EXPLAIN_TWILIO\"\n\n{rules}"
    )
}

const RULES: &str = r#"
[[policy]]
name = "mail-team"
when = { claim = "groups", contains = "mail" }
allow = ["Mail.*", "Sms.*"]
deny = ["Mail.Send"]

[[policy]]
name = "everyone"
when = { any = true }
allow = ["Calc.*"]

[[rate_limit]]
name = "sms"
tools = ["Sms.*"]
per = "user"
rate = "5/h"
"#;

async fn start(rules: &str) -> (ToolServer, Gateway) {
    let server = org_tools().await;
    let env = [("EXPLAIN_HS256", SECRET), ("EXPLAIN_ADMIN", ADMIN_TOKEN), ("EXPLAIN_TWILIO", TWILIO_VALUE)];
    let gw = Gateway::start_with_env(&config(&server.url(), rules), &env).await;
    wait_until("the catalog arrived", async || {
        let seen = explain(&gw, "").await;
        let count = |list: &str| seen[list].as_array().map_or(0, Vec::len);
        if count("visible") + count("hidden") == 6 {
            Ok(())
        } else {
            Err(seen.to_string())
        }
    })
    .await;
    (server, gw)
}

async fn explain(gw: &Gateway, query: &str) -> Value {
    let resp = admin(gw, "GET", &format!("/explain?{query}"), Bytes::new()).await;
    assert_eq!(resp.status, 200, "{}", resp.text());
    resp.json()
}

/// A request to the admin listener with the admin token, which every read
/// there needs.
async fn admin(gw: &Gateway, method: &str, path: &str, body: Bytes) -> Resp {
    let auth = format!("Bearer {ADMIN_TOKEN}");
    send_with_headers(gw.admin, method, path, body, &[("authorization", &auth)]).await
}

fn claims_query(claims: &Value, tool: Option<&str>) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    query.append_pair("claims", &claims.to_string());
    if let Some(tool) = tool {
        query.append_pair("tool", tool);
    }
    query.finish()
}

async fn call(gw: &Gateway, token: &str, tool_id: &str) -> Resp {
    let auth = format!("Bearer {token}");
    let body = Bytes::from(json!({"request": {"tool_id": tool_id, "input": {}}}).to_string());
    let headers = [("authorization", auth.as_str()), ("content-type", "application/json")];
    send_with_headers(gw.addr, "POST", "/tools/call", body, &headers).await
}

async fn listing(gw: &Gateway, token: &str) -> Vec<String> {
    let auth = format!("Bearer {token}");
    let resp = send_with_headers(gw.addr, "GET", "/tools", Bytes::new(), &[("authorization", &auth)]).await;
    assert_eq!(resp.status, 200, "{}", resp.text());
    let mut seen = ids(resp.json()["items"].as_array().expect("items"));
    seen.sort();
    seen
}

fn strings(value: &Value) -> Vec<String> {
    value.as_array().expect("an array").iter().map(|v| v.as_str().expect("a string").to_owned()).collect()
}

fn hidden_entry<'v>(explanation: &'v Value, tool: &str) -> &'v Value {
    let hidden = explanation["hidden"].as_array().expect("hidden");
    hidden.iter().find(|h| h["tool"] == tool).unwrap_or_else(|| panic!("{tool} is not hidden: {explanation}"))
}

#[tokio::test]
async fn explain_names_the_rule_that_hid_a_tool_and_what_a_call_needs() {
    let (_server, gw) = start(RULES).await;
    let ann = json!({"sub": "ann", "groups": ["eng", "mail"]});
    let seen = explain(&gw, &claims_query(&ann, None)).await;
    assert_eq!(seen["caller"]["user_id"], "ann");
    assert_eq!(strings(&seen["caller"]["policies"]), ["mail-team", "everyone"]);
    assert_eq!(strings(&seen["visible"]), ["Calc.Add@1.0.0", "Mail.Read@1.0.0", "Sms.Send@1.0.0"]);
    assert_eq!(strings(&seen["visible"]), listing(&gw, &jwt(ann.clone())).await, "explain agrees with GET /tools");
    let send_hidden = hidden_entry(&seen, "Mail.Send@1.0.0");
    assert_eq!((&send_hidden["policy"], &send_hidden["pattern"]), (&json!("mail-team"), &json!("Mail.Send")));
    let wipe = hidden_entry(&seen, "Admin.Wipe@1.0.0");
    assert!(wipe["policy"].is_null() && wipe["pattern"].is_null(), "no policy allows it: {wipe}");

    // The same caller as a pasted JWT (decoded, not trusted), in a POST body.
    let token = jwt(ann.clone());
    let posted = admin(&gw, "POST", "/explain", Bytes::from(json!({"jwt": token}).to_string())).await;
    assert_eq!(posted.status, 200, "{}", posted.text());
    assert_eq!(posted.json()["visible"], seen["visible"]);
    assert!(!posted.text().contains(&token), "the pasted JWT is never echoed");

    // A tool reference: resolution, requirements, rate limits.
    let sms = explain(&gw, &claims_query(&ann, Some("Sms.Send"))).await;
    assert_eq!(sms["resolution"]["tool_id"], "Sms.Send@1.0.0", "{sms}");
    assert_eq!(sms["resolution"]["upstream"], "org", "{sms}");
    assert!(sms["resolution"]["why"].as_str().unwrap_or_default().contains("latest version"), "{sms}");
    let requirement = |kind: &str, id: &str| {
        let all = sms["requirements"].as_array().expect("requirements");
        all.iter().find(|r| r["kind"] == kind && r["id"] == id).cloned().unwrap_or_else(|| panic!("{kind} {id}: {sms}"))
    };
    assert_eq!(requirement("secret", "TWILIO")["met"], true);
    assert_eq!(requirement("secret", "MISSING_KEY")["met"], false);
    assert_eq!(requirement("user_id", "")["met"], true);
    assert_eq!(sms["rate_limits"], json!([{"name": "sms", "remaining": 5, "reset_ms": 0}]));
    assert!(!sms.to_string().contains(TWILIO_VALUE), "no secret value in an explanation");

    // A real call counts against the bucket explain reads (refused for the
    // missing secret, after admission), for this caller only.
    let refused = call(&gw, &token, "Sms.Send@1.0.0").await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert!(refused.text().contains("MISSING_KEY"), "{}", refused.text());
    let after = explain(&gw, &claims_query(&ann, Some("Sms.Send"))).await;
    assert_eq!(after["rate_limits"][0]["remaining"], 4, "{after}");
    let bob = json!({"sub": "bob", "groups": ["mail"]});
    assert_eq!(explain(&gw, &claims_query(&bob, Some("Sms.Send"))).await["rate_limits"][0]["remaining"], 5);

    // The name `/mcp` lists a tool by is a tool reference too: the same
    // resolution, requirements and buckets as its tool id.
    let mcp_names = mcp_tool_names(&gw, &ann).await;
    assert!(mcp_names.contains(&"Sms_Send".to_owned()), "{mcp_names:?}");
    let by_mcp_name = explain(&gw, &claims_query(&ann, Some("Sms_Send"))).await;
    assert_eq!(by_mcp_name["resolution"]["tool_id"], "Sms.Send@1.0.0", "{by_mcp_name}");
    assert_eq!(by_mcp_name["resolution"]["upstream"], "org", "{by_mcp_name}");
    let why = by_mcp_name["resolution"]["why"].as_str().unwrap_or_default();
    assert!(why.contains("the MCP name Sms_Send stands for Sms.Send"), "{by_mcp_name}");
    assert_eq!(by_mcp_name["requirements"], after["requirements"], "{by_mcp_name}");
    assert_eq!(by_mcp_name["rate_limits"][0]["remaining"], 4, "the same bucket: {by_mcp_name}");
    let hidden_by_name = explain(&gw, &claims_query(&ann, Some("Mail_Send"))).await;
    assert_eq!(hidden_by_name["resolution"]["tool_id"], "Mail.Send@1.0.0", "{hidden_by_name}");
    assert!(hidden_by_name["resolution"]["why"].as_str().unwrap_or_default().contains("hidden"), "{hidden_by_name}");
    let not_a_name = explain(&gw, &claims_query(&ann, Some("Sms_Nope"))).await;
    assert!(not_a_name["resolution"]["tool_id"].is_null(), "{not_a_name}");

    // A hidden tool resolves to nothing a call could reach; an unknown one
    // does not resolve.
    let hidden = explain(&gw, &claims_query(&ann, Some("Mail.Send@1.0.0"))).await;
    assert!(hidden["resolution"]["upstream"].is_null(), "{hidden}");
    assert!(hidden["resolution"]["why"].as_str().unwrap_or_default().contains("hidden"), "{hidden}");
    let unknown = explain(&gw, &claims_query(&ann, Some("Nope.Tool"))).await;
    assert!(unknown["resolution"]["tool_id"].is_null(), "{unknown}");
    assert!(unknown["resolution"]["why"].as_str().unwrap_or_default().contains("does not resolve"), "{unknown}");

    // Bad input: clear 400s that echo nothing secret.
    let bad_jwt = "eyJhbGciOiJIUzI1NiJ9.not-base64!.sig-canary";
    let refused = admin(&gw, "POST", "/explain", Bytes::from(json!({"jwt": bad_jwt}).to_string())).await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert!(refused.text().contains("not a JWT") && !refused.text().contains("sig-canary"), "{}", refused.text());
    for query in ["claims=%5B1%5D", "claims=%7Bnot", "nope=1"] {
        let resp = admin(&gw, "GET", &format!("/explain?{query}"), Bytes::new()).await;
        assert_eq!(resp.status, 400, "{query}: {}", resp.text());
    }
    // Claims that name no user describe a token the gateway refuses.
    let asked = format!("/explain?{}", claims_query(&json!({"groups": ["mail"]}), None));
    let nobody = admin(&gw, "GET", &asked, Bytes::new()).await;
    assert_eq!(nobody.status, 400, "{}", nobody.text());
    assert!(nobody.text().contains("user_id_claim"), "{}", nobody.text());
    let nobody = jwt(json!({"groups": ["mail"]}));
    let refused = admin(&gw, "POST", "/explain", Bytes::from(json!({"jwt": nobody}).to_string())).await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    let huge = Bytes::from(format!("{{\"user_id\": \"{}\"}}", "x".repeat(100_000)));
    assert_eq!(admin(&gw, "POST", "/explain", huge).await.status, 400);
    assert_eq!(admin(&gw, "DELETE", "/explain", Bytes::new()).await.status, 405);
    // Explain sits behind the admin listener's browser policy, token or not,
    // and needs the admin token.
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let rebound = [("host", "evil.example"), ("authorization", auth.as_str())];
    assert_eq!(send_with_headers(gw.admin, "GET", "/explain", Bytes::new(), &rebound).await.status, 421);
    let foreign = [("origin", "https://evil.example"), ("authorization", auth.as_str())];
    assert_eq!(send_with_headers(gw.admin, "GET", "/explain", Bytes::new(), &foreign).await.status, 403);
    for method in ["GET", "POST"] {
        let anyone = send(gw.admin, method, "/explain?user_id=ann", Bytes::from("{}"), None).await;
        assert_eq!(anyone.status, 401, "{method}: {}", anyone.text());
        assert!(!anyone.text().contains("Mail.Read"), "{}", anyone.text());
    }

    // The CLI asks the running gateway, with the admin token of the
    // gateway's own config, and says the same in words. (The config as an
    // operator keeps it: the admin port written out, not 0.)
    let written = std::fs::read_to_string(gw.config_path()).expect("the config");
    let written = written.replace("admin_listen = \"127.0.0.1:0\"", &format!("admin_listen = \"{}\"", gw.admin));
    let config = common::temp_file("explain-cli", "toml", &written).display().to_string();
    let out = std::process::Command::new(common::gateway_bin())
        .args(["explain", "--config", &config, "--claims", &ann.to_string(), "--tool", "Sms.Send"])
        .env("EXPLAIN_ADMIN", ADMIN_TOKEN)
        .output()
        .expect("run otc-gateway explain");
    let words = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{words}\n{}", String::from_utf8_lossy(&out.stderr));
    for expected in [
        "Caller: user ann (jwt)",
        "Mail.Send@1.0.0: denied by policy \"mail-team\" (pattern \"Mail.Send\")",
        "Admin.Wipe@1.0.0: no policy allows it",
        "a call goes to org",
        "secret MISSING_KEY: NOT met",
        "sms: 4 calls left now",
    ] {
        assert!(words.contains(expected), "{expected:?} missing from:\n{words}");
    }
    // Another address on the command line: the token named there.
    let by_name = std::process::Command::new(common::gateway_bin())
        .args(["explain", "--admin", &gw.admin.to_string(), "--claims", &ann.to_string(), "--tool", "Sms_Send"])
        .args(["--admin-token", "env:OPERATOR_TOKEN"])
        .env("OPERATOR_TOKEN", ADMIN_TOKEN)
        .output()
        .expect("run otc-gateway explain");
    let words = String::from_utf8_lossy(&by_name.stdout);
    assert!(by_name.status.success(), "{words}");
    for expected in ["Resolution: Sms.Send@1.0.0", "the MCP name Sms_Send stands for Sms.Send", "a call goes to org"] {
        assert!(words.contains(expected), "{expected:?} missing from:\n{words}");
    }
    // Without a token (the config's goes only to the config's own address),
    // with a wrong one, or with a value instead of a reference: refused,
    // saying what to give, echoing no value.
    let token_of = |extra: &[&str], env: &str| {
        let mut command = std::process::Command::new(common::gateway_bin());
        command.args(["explain", "--config", &config, "--admin", &gw.admin.to_string()]).args(extra);
        command.env("EXPLAIN_ADMIN", ADMIN_TOKEN).env("OPERATOR_TOKEN", env);
        command.output().expect("run otc-gateway explain")
    };
    for (extra, env, said) in [
        (&[][..], "", "--admin-token"),
        (&["--admin-token", "env:OPERATOR_TOKEN"][..], "wrong-token-value", "401"),
        (&["--admin-token", "pasted-token-value"][..], "", "env:OTC_ADMIN_TOKEN"),
    ] {
        let out = token_of(extra, env);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?}: {stderr}");
        assert!(stderr.contains(said), "{extra:?}: {stderr}");
        assert!(!stderr.contains("pasted-token-value") && !stderr.contains(ADMIN_TOKEN), "{stderr}");
    }
    let down = std::process::Command::new(common::gateway_bin())
        .args(["explain", "--admin", "127.0.0.1:1"])
        .output()
        .expect("run otc-gateway explain");
    assert!(!down.status.success(), "no gateway there: a failure exit");
    for text in [gw.logs(), gw.stdout()] {
        assert!(!text.contains(TWILIO_VALUE) && !text.contains(&token), "a secret or token reached the logs");
    }
}

/// The names `/mcp`'s `tools/list` gives the caller with `claims` (in a
/// token for `/mcp`: its `aud`).
async fn mcp_tool_names(gw: &Gateway, claims: &Value) -> Vec<String> {
    let mut claims = claims.clone();
    claims["aud"] = json!(format!("{}/mcp", gw.url()));
    let auth = format!("Bearer {}", jwt(claims));
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
    let headers = [
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2025-06-18"),
    ];
    let resp = send_with_headers(gw.addr, "POST", "/mcp", Bytes::from(list.to_string()), &headers).await;
    assert_eq!(resp.status, 200, "{}", resp.text());
    let body = resp.json();
    let tools = body["result"]["tools"].as_array().unwrap_or_else(|| panic!("{body}"));
    tools.iter().filter_map(|t| t["name"].as_str().map(str::to_owned)).collect()
}

/// With `[state] redis`, explain reads each caller's bucket from Redis,
/// counting nothing; when Redis is gone it says it does not know.
#[tokio::test]
async fn explain_reads_redis_held_buckets_without_counting() {
    let redis = common::fleet::Redis::start();
    let rules = format!("{RULES}\n[state]\nredis = \"{}\"\n", redis.url());
    let (_server, gw) = start(&rules).await;
    let ann = json!({"sub": "ann", "groups": ["mail"]});
    let bob = json!({"sub": "bob", "groups": ["mail"]});
    let buckets = |claims: &Value| {
        let query = claims_query(claims, Some("Sms.Send"));
        let gw = &gw;
        async move { explain(gw, &query).await["rate_limits"].clone() }
    };
    assert_eq!(buckets(&ann).await, json!([{"name": "sms", "remaining": 5, "reset_ms": 0}]));
    // Two calls by ann count in her bucket in Redis (refused after
    // admission for the missing secret, as above).
    for _ in 0..2 {
        assert_eq!(call(&gw, &jwt(ann.clone()), "Sms.Send@1.0.0").await.status, 400);
    }
    for _ in 0..3 {
        let seen = buckets(&ann).await;
        assert_eq!(seen[0]["remaining"], 3, "asking counts nothing: {seen}");
        // Two calls at 5/h with a burst of 5: full again in about 24 minutes.
        let reset = seen[0]["reset_ms"].as_u64().expect("a reset time");
        assert!(reset > 23 * 60 * 1000 && reset <= 24 * 60 * 1000, "{seen}");
    }
    assert_eq!(buckets(&bob).await[0]["remaining"], 5, "bob's bucket is his own");
    // The buckets are Redis's, not this process's: they are in Redis.
    let mut connection =
        redis::Client::open(redis.url()).expect("client").get_multiplexed_async_connection().await.expect("connect");
    let keys: Vec<String> =
        redis::cmd("KEYS").arg("otc-gateway:rl:*").query_async(&mut connection).await.expect("keys");
    assert_eq!(keys.len(), 1, "ann's bucket only: {keys:?}");
    drop(redis);
    let gone = buckets(&ann).await;
    assert_eq!(gone, json!([{"name": "sms", "remaining": null, "reset_ms": null}]), "unknown, not made up");
}

/// One random `[[policy]]`.
#[derive(Debug, Clone)]
struct Policy {
    when: &'static str,
    allow: Vec<&'static str>,
    deny: Vec<&'static str>,
}

const WHENS: [&str; 6] = [
    "{ any = true }",
    "{ user_id = \"u1\" }",
    "{ user_id = \"u2\" }",
    "{ claim = \"groups\", contains = \"g1\" }",
    "{ claim = \"groups\", contains = \"g2\" }",
    "{ claim = \"role\", equals = \"admin\" }",
];
const PATTERNS: [&str; 8] = ["*", "Mail.*", "Mail.Read", "Mail.Send", "Cal.*", "Calc.Add", "Admin.*", "Sms.Send"];

fn policy() -> impl Strategy<Value = Policy> {
    let patterns = || proptest::sample::subsequence(PATTERNS.to_vec(), 0..=3);
    (proptest::sample::select(WHENS.to_vec()), patterns(), patterns()).prop_map(|(when, allow, deny)| Policy {
        when,
        allow,
        deny,
    })
}

fn caller() -> impl Strategy<Value = Value> {
    let user = proptest::sample::select(vec!["u1", "u2", "u3"]);
    let groups = proptest::sample::subsequence(vec!["g1", "g2"], 0..=2);
    (user, groups, any::<bool>()).prop_map(|(user, groups, admin)| {
        let mut claims = json!({"sub": user, "groups": groups});
        if admin {
            claims["role"] = json!("admin");
        }
        claims
    })
}

fn rules(policies: &[Policy]) -> String {
    let list = |patterns: &[&str]| patterns.iter().map(|p| format!("\"{p}\"")).collect::<Vec<_>>().join(", ");
    policies
        .iter()
        .enumerate()
        .map(|(i, p)| {
            format!(
                "[[policy]]\nname = \"p{i}\"\nwhen = {}\nallow = [{}]\ndeny = [{}]\n\n",
                p.when,
                list(&p.allow),
                list(&p.deny)
            )
        })
        .collect()
}

/// Over random policies and callers, what explain says a caller sees is
/// exactly what GET /tools lists and what calls reach, and each hidden
/// tool's rule is one that applies to it.
#[test]
fn explain_agrees_with_real_listings_and_calls() {
    let tokio = tokio::runtime::Runtime::new().expect("tokio");
    let (server, gw) = tokio.block_on(start(RULES));
    let cases = std::env::var("OTC_EXPLAIN_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(24);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig { cases, ..ProptestConfig::default() });
    let strategy = (proptest::collection::vec(policy(), 1..4), proptest::collection::vec(caller(), 1..3));
    let outcome = runner.run(&strategy, |(policies, callers)| {
        tokio.block_on(async {
            gw.rewrite_config(&config(&server.url(), &rules(&policies)));
            let auth = format!("Bearer {ADMIN_TOKEN}");
            let reload =
                send_with_headers(gw.admin, "POST", "/reload", Bytes::new(), &[("authorization", &auth)]).await;
            assert_eq!(reload.status, 200, "{}", reload.text());
            for claims in &callers {
                let said = explain(&gw, &claims_query(claims, None)).await;
                let visible = strings(&said["visible"]);
                let token = jwt(claims.clone());
                assert_eq!(visible, listing(&gw, &token).await, "{policies:?} {claims}");
                for key in ECHO_TOOLS {
                    let id = format!("{key}@1.0.0");
                    let answer = call(&gw, &token, &id).await;
                    if visible.contains(&id) {
                        assert_eq!(answer.status, 200, "{id} visible per explain: {}", answer.text());
                    } else {
                        assert!(answer.text().contains("was not found"), "{id} hidden per explain: {}", answer.text());
                        let entry = hidden_entry(&said, &id);
                        if let Some(pattern) = entry["pattern"].as_str() {
                            let glob = pattern.trim_end_matches('*');
                            assert!(key.starts_with(glob), "{pattern} does not match {key}");
                        }
                    }
                }
            }
        });
        Ok(())
    });
    if let Err(e) = outcome {
        panic!("{e}");
    }
}

#[tokio::test]
async fn explain_through_a_server_says_why_each_tool_is_in_it_or_not_and_who_may_use_it() {
    let servers = format!(
        "{RULES}\n[[servers]]\nname = \"desk\"\ntools = [\"Mail.*\", \"Calc.Add\"]\nexclude = [\"Mail.Send\"]\n\
         when = {{ claim = \"groups\", contains = \"mail\" }}\nrename = {{ \"Mail.Read\" = \"Desk.Read\" }}\n"
    );
    let (_server, gw) = start(&servers).await;
    let ann = json!({"sub": "ann", "groups": ["mail"]});
    let query = |claims: &Value, tool: Option<&str>| format!("{}&server=desk", claims_query(claims, tool));
    let seen = explain(&gw, &query(&ann, Some("Desk.Read"))).await;
    assert_eq!(seen["server"]["usable"], true, "{seen}");
    assert_eq!(strings(&seen["visible"]), ["Calc.Add@1.0.0", "Desk.Read@1.0.0"], "{seen}");
    let why = |tool: &str| {
        let tools = seen["server"]["tools"].as_array().expect("tools");
        tools.iter().find(|t| t["tool"] == tool).unwrap_or_else(|| panic!("{tool}: {seen}")).clone()
    };
    assert_eq!(why("Mail.Read@1.0.0")["served_as"], "Desk.Read@1.0.0");
    assert_eq!(why("Mail.Send@1.0.0")["why"], "`exclude` has \"Mail.Send\"");
    assert_eq!(why("Admin.Wipe@1.0.0")["why"], "no `tools` pattern of the server matches it");
    assert_eq!(seen["resolution"]["tool_id"], "Desk.Read@1.0.0", "{seen}");
    // The tool's original name is not the server's.
    let original = explain(&gw, &query(&ann, Some("Mail.Read"))).await;
    assert_eq!(original["resolution"]["tool_id"], Value::Null, "{original}");
    // A caller outside its `when` may use none of it.
    let bob = json!({"sub": "bob", "groups": ["eng"]});
    let kept_out = explain(&gw, &query(&bob, None)).await;
    assert_eq!(kept_out["server"]["usable"], false, "{kept_out}");
    assert!(kept_out["visible"].as_array().unwrap().is_empty(), "{kept_out}");
    let nowhere = explain(&gw, &format!("{}&server=nowhere", claims_query(&ann, None))).await;
    assert!(nowhere["server"]["why"].as_str().unwrap().contains("no server \"nowhere\""), "{nowhere}");
}
