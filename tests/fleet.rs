//! A fleet on loopback: three gateways sharing one real `redis-server`
//! (`[state] redis`), behind Debian's nginx balancing round-robin. The fleet
//! must behave as one gateway: one global limit, one bucket per user
//! wherever their calls land, one run per `call_id`, buckets kept across a
//! reload, a chosen behaviour while Redis is down, and no failed calls when a
//! replica dies.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::fleet::{Nginx, Redis};
use common::{
    add, add_schema, catalog, send_with_headers, tool, wait_within, Gateway, GatewayConfig, Resp, ToolServer,
};
use serde_json::json;

const ALICE: &str = "fleet-alice-key";
const BOB: &str = "fleet-bob-key";
const ENV: [(&str, &str); 2] = [("FLEET_ALICE_KEY", ALICE), ("FLEET_BOB_KEY", BOB)];

/// `Calc.Add` and `Open.Add` on one tool server; the limits in `limits`.
fn config(tools: &ToolServer, redis: &str, limits: &str) -> GatewayConfig {
    GatewayConfig::new().upstream("calc", &tools.url()).raw(&format!(
        r#"
[auth]
api_keys = [{{ key = "env:FLEET_ALICE_KEY", user_id = "alice" }}, {{ key = "env:FLEET_BOB_KEY", user_id = "bob" }}]

[state]
redis = "{redis}"

{limits}
"#
    ))
}

async fn tools() -> ToolServer {
    let server = ToolServer::start(catalog(vec![
        tool("Calc.Add", "1.0.0", add_schema()),
        tool("Open.Add", "1.0.0", add_schema()),
    ]))
    .await;
    server.on_call(add);
    server
}

/// Three gateways with this config, and nginx in front of them.
async fn fleet(config: &GatewayConfig) -> (Vec<Gateway>, Nginx) {
    let mut gateways = Vec::new();
    for _ in 0..3 {
        let gw = Gateway::start_with_env(&config.toml(), &ENV).await;
        gw.wait_for_tool("Open.Add@1.0.0").await;
        gateways.push(gw);
    }
    let nginx = Nginx::start(&gateways.iter().map(|g| g.addr).collect::<Vec<_>>());
    (gateways, nginx)
}

/// One call of `tool` to `addr` as the caller with `key`, with a `call_id`
/// when given.
async fn call(addr: SocketAddr, key: &str, tool: &str, call_id: Option<&str>) -> Resp {
    let mut request = json!({"tool_id": tool, "input": {"a": 1, "b": 2}});
    if let Some(id) = call_id {
        request["call_id"] = json!(id);
    }
    let body = Bytes::from(json!({"request": request}).to_string());
    let headers = [("content-type", "application/json"), ("oxp-api-key", key)];
    send_with_headers(addr, "POST", "/tools/call", body, &headers).await
}

/// How many of `n` calls through `addr` were served (200) and limited (429).
async fn count(addr: SocketAddr, key: &str, tool: &str, n: usize) -> (usize, usize) {
    let (mut ok, mut limited) = (0, 0);
    for _ in 0..n {
        match call(addr, key, tool, None).await.status {
            200 => ok += 1,
            429 => limited += 1,
            other => panic!("unexpected status {other}"),
        }
    }
    (ok, limited)
}

/// The value of a metric series on a gateway, 0 when absent.
async fn metric(gw: &Gateway, series: &str) -> u64 {
    let text = common::send(gw.admin, "GET", "/metrics", Bytes::new(), None).await.text();
    text.lines().find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok())).unwrap_or(0)
}

const GLOBAL: &str = r#"
[[rate_limit]]
name = "calc-global"
tools = ["Calc.*"]
per = "global"
rate = "30/h"
burst = 30
"#;

#[tokio::test]
async fn a_global_limit_is_one_limit_for_the_fleet() {
    let redis = Redis::start();
    let tools = tools().await;
    let (gateways, nginx) = fleet(&config(&tools, &redis.url(), GLOBAL)).await;
    let (ok, limited) = count(nginx.addr, ALICE, "Calc.Add", 90).await;
    // 30 for the fleet, not 30 per replica (an hourly rate: a slow machine
    // refills nothing while the calls run).
    assert_eq!(ok, 30, "{ok} served, {limited} limited: not one fleet-wide limit");
    // Every replica took part, and every one refused some.
    for gw in &gateways {
        let served = metric(gw, r#"otc_gateway_http_requests_total{route="/tools/call",status="200"}"#).await;
        let refused = metric(gw, r#"otc_gateway_http_requests_total{route="/tools/call",status="429"}"#).await;
        assert!(served > 0 && refused > 0, "a replica served {served} and refused {refused}");
    }
    // Unlimited tools are untouched.
    assert_eq!(count(nginx.addr, BOB, "Open.Add", 10).await, (10, 0));
}

#[tokio::test]
async fn a_per_user_limit_follows_the_user_to_every_replica() {
    let redis = Redis::start();
    let tools = tools().await;
    let limits =
        "[[rate_limit]]\nname = \"per-user\"\ntools = [\"Calc.*\"]\nper = \"user\"\nrate = \"6/h\"\nburst = 6\n";
    let (_gateways, nginx) = fleet(&config(&tools, &redis.url(), limits)).await;
    let (ok, _) = count(nginx.addr, ALICE, "Calc.Add", 18).await;
    assert_eq!(ok, 6, "alice's six calls, across three replicas");
    let (ok, _) = count(nginx.addr, BOB, "Calc.Add", 18).await;
    assert_eq!(ok, 6, "bob has his own bucket");
}

#[tokio::test]
async fn a_call_id_runs_once_whichever_replica_gets_it() {
    let redis = Redis::start();
    let tools = tools().await;
    let (gateways, _nginx) = fleet(&config(&tools, &redis.url(), "")).await;
    // No [idempotency] store: it uses [state] redis.
    for gw in &gateways {
        let resp = call(gw.addr, ALICE, "Open.Add", Some("fleet-once")).await;
        assert_eq!(resp.result()["value"], json!(3));
    }
    assert_eq!(tools.call_count(), 1, "three replicas, one run");
}

#[tokio::test]
async fn a_reload_on_every_replica_keeps_the_shared_buckets() {
    let redis = Redis::start();
    let tools = tools().await;
    let config = config(&tools, &redis.url(), GLOBAL);
    let (gateways, nginx) = fleet(&config).await;
    let (ok, _) = count(nginx.addr, ALICE, "Calc.Add", 40).await;
    assert_eq!(ok, 30);
    // An unrelated change, applied to every replica.
    let changed =
        config.raw("[[rate_limit]]\nname = \"unrelated\"\ntools = [\"Nothing.*\"]\nper = \"global\"\nrate = \"1/s\"\n");
    for gw in &gateways {
        gw.rewrite_config(&changed.toml());
        gw.signal("HUP");
    }
    for gw in &gateways {
        wait_within(Duration::from_secs(20), "a replica reloaded", async || {
            metric(gw, "otc_gateway_config_generation").await >= 2
        })
        .await;
    }
    let (ok, limited) = count(nginx.addr, ALICE, "Calc.Add", 6).await;
    assert_eq!((ok, limited), (0, 6), "the reload refilled the shared bucket");
}

#[tokio::test]
async fn redis_down_serves_or_refuses_as_each_limit_says_and_recovers() {
    let mut redis = Some(Redis::start());
    let addr = redis.as_ref().expect("redis").addr;
    let tools = tools().await;
    let limits = r#"
[[rate_limit]]
name = "closed"
tools = ["Calc.*"]
per = "global"
rate = "3/h"
fail = "closed"

[[rate_limit]]
name = "open"
tools = ["Open.*"]
per = "global"
rate = "3/h"
"#;
    let (gateways, nginx) = fleet(&config(&tools, &format!("redis://{addr}"), limits)).await;
    assert_eq!(count(nginx.addr, ALICE, "Open.Add", 5).await, (3, 2), "counted while Redis is up");

    drop(redis.take());
    let started = Instant::now();
    assert_eq!(count(nginx.addr, ALICE, "Open.Add", 6).await, (6, 0), "fail open: served");
    assert_eq!(count(nginx.addr, ALICE, "Calc.Add", 6).await, (0, 6), "fail closed: refused");
    assert!(started.elapsed() < Duration::from_secs(8), "calls waited on a dead Redis: {:?}", started.elapsed());
    let mut served = 0;
    for gw in &gateways {
        served += metric(gw, r#"otc_gateway_rate_limit_store_unavailable_total{decision="served"}"#).await;
    }
    assert_eq!(served, 6, "every uncounted call is counted in the metrics");

    // Redis back where it was: counting resumes without a restart.
    let _redis = Redis::start_on(addr);
    wait_within(Duration::from_secs(20), "shared limits came back with Redis", async || {
        call(nginx.addr, ALICE, "Calc.Add", None).await.status == 200
    })
    .await;
    let (ok, limited) = count(nginx.addr, ALICE, "Calc.Add", 6).await;
    assert!(ok <= 2 && limited >= 4, "counted again: {ok} served, {limited} limited");
}

#[tokio::test]
async fn a_dead_replica_costs_no_calls() {
    let redis = Redis::start();
    let tools = tools().await;
    let (mut gateways, nginx) = fleet(&config(&tools, &redis.url(), "")).await;
    assert_eq!(count(nginx.addr, ALICE, "Open.Add", 9).await, (9, 0));
    let mut dead = gateways.remove(1);
    dead.signal("KILL");
    dead.wait_exit(Duration::from_secs(10)).await;
    assert_eq!(count(nginx.addr, ALICE, "Open.Add", 30).await, (30, 0), "nginx moved on to the live replicas");
}

#[tokio::test]
async fn a_redis_that_accepts_and_never_answers_holds_no_call_up() {
    // A black hole: connections are accepted and never answered.
    let hole = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let hole_addr = hole.local_addr().expect("addr");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = hole.accept().await {
            held.push(stream);
        }
    });
    let tools = tools().await;
    let limits = "[[rate_limit]]\nname = \"open\"\ntools = [\"Open.*\"]\nper = \"global\"\nrate = \"1/m\"\n";
    let gw = config(&tools, &format!("redis://{hole_addr}"), limits).start_with_env(&ENV).await;
    gw.wait_for_tool("Open.Add@1.0.0").await;
    let started = Instant::now();
    for _ in 0..20 {
        call(gw.addr, ALICE, "Open.Add", None).await.expect_status(200);
    }
    // At most a 250 ms wait after each failure, and a second's pause between
    // tries: twenty calls in well under 20 x 250 ms.
    assert!(started.elapsed() < Duration::from_secs(4), "calls waited on Redis: {:?}", started.elapsed());
}

#[tokio::test]
async fn one_connection_to_redis_serves_every_shared_store() {
    let redis = Redis::start();
    let server = ToolServer::start(catalog(vec![
        tool("Calc.Add", "1.0.0", add_schema()),
        common::needing("Mail.Read", serde_json::json!({"authorization": [{"id": "idp"}]})),
    ]))
    .await;
    server.on_call(add);
    // Rate-limit buckets, call_ids and OAuth challenges, all in [state] redis.
    // (An hourly rate: a bucket's key lives one interval, and at 100/s that
    // is 11 ms, gone before a loaded machine lists the keys.)
    let config = GatewayConfig::new().upstream_with("calc", &server.url(), "authorization = [\"idp\"]").raw(&format!(
        r#"
[auth]
api_keys = [{{ key = "env:FLEET_ALICE_KEY", user_id = "alice" }}, {{ key = "env:FLEET_BOB_KEY", user_id = "bob" }}]

[authorization.idp]
authorize_endpoint = "http://127.0.0.1:9/authorize"
token_endpoint = "http://127.0.0.1:9/token"
client_id = "fleet"
user_verification = "none"

[state]
redis = "{}"

[[rate_limit]]
name = "per-user"
tools = ["Calc.*"]
per = "user"
rate = "100/h"
"#,
        redis.url()
    ));
    let gw = Gateway::start_with_env(&config.toml(), &ENV).await;
    gw.wait_for_tool("Mail.Read@1.0.0").await;
    call(gw.addr, ALICE, "Calc.Add", Some("c-1")).await.result();
    call(gw.addr, ALICE, "Mail.Read", None).await.server_error(400);
    let client = redis::Client::open(redis.url()).expect("a redis URL");
    let mut connection = client.get_connection().expect("redis answers");
    let keys: Vec<String> = redis::cmd("KEYS").arg("otc-gateway:*").query(&mut connection).expect("KEYS");
    for store in ["otc-gateway:idem:", "otc-gateway:rl:", "otc-gateway:oauth:"] {
        assert!(keys.iter().any(|k| k.starts_with(store)), "nothing of {store} in {keys:?}");
    }
    let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut connection).expect("CLIENT LIST");
    // The gateway's one connection, and this test's.
    assert_eq!(clients.lines().count(), 2, "{clients}");
}
