//! A call_id is an idempotency key: a repeated call gets the first answer
//! and the tool runs once, in one gateway or across replicas sharing Redis.

mod common;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{add, add_schema, catalog, free_addr, html_500, tool, tool_error, Gateway, Resp, ToolServer};
use otc_gateway::config::Dur;
use otc_gateway::idempotency::{Decision, Fingerprint, IdempotencyConfig, IdempotencyStore, StoredCall};
use otc_gateway::wire::CallResult;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

async fn slow_calculator(delay: Duration) -> ToolServer {
    let server = ToolServer::start(catalog(vec![tool("Calculator.Add", "1.0.0", add_schema())])).await;
    server.on_call(add);
    server.set_call_delay(delay);
    server
}

fn config(upstream: &str, idempotency: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\n\
         [catalog]\npoll_interval = \"200ms\"\nrequest_timeout = \"1s\"\n\n\
         [[upstreams]]\nname = \"calc\"\nurl = \"{upstream}\"\n\n[idempotency]\nttl = \"1m\"\n{idempotency}\n"
    )
}

async fn call_with_id(addr: SocketAddr, call_id: Option<&str>, a: i64) -> Resp {
    let mut request = json!({"tool_id": "Calculator.Add@1.0.0", "input": {"a": a, "b": 1}});
    if let Some(id) = call_id {
        request["call_id"] = json!(id);
    }
    let body = Bytes::from(json!({"request": request}).to_string());
    common::send(addr, "POST", "/tools/call", body, Some("application/json")).await
}

#[tokio::test]
async fn a_repeated_call_id_gets_the_first_answer_and_the_tool_runs_once() {
    let server = slow_calculator(Duration::ZERO).await;
    let gw = Gateway::start(&config(&server.url(), "")).await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;
    let first = call_with_id(gw.addr, Some("pay-once-1"), 41).await.result();
    let again = call_with_id(gw.addr, Some("pay-once-1"), 41).await.result();
    assert_eq!(first["value"], json!(42));
    assert_eq!(again, first, "the same answer, duration and all");
    assert_eq!(server.call_count(), 1);

    // The same call_id for another input is refused; nothing runs.
    let body = call_with_id(gw.addr, Some("pay-once-1"), 7).await.server_error(400);
    assert!(body["message"].as_str().unwrap().contains("call_id"), "{body}");
    assert_eq!(server.call_count(), 1);

    // Calls without a call_id are never deduplicated.
    call_with_id(gw.addr, None, 1).await.expect_status(200);
    call_with_id(gw.addr, None, 1).await.expect_status(200);
    assert_eq!(server.call_count(), 3);
}

#[tokio::test]
async fn concurrent_duplicates_wait_for_the_first_and_share_its_answer() {
    let server = slow_calculator(Duration::from_millis(400)).await;
    let gw = Gateway::start(&config(&server.url(), "")).await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;
    let calls: Vec<_> = (0..5).map(|_| tokio::spawn(call_with_id(gw.addr, Some("burst-1"), 1))).collect();
    let mut results = Vec::new();
    for call in calls {
        results.push(call.await.expect("join").result());
    }
    assert!(results.iter().all(|r| *r == results[0]), "{results:?}");
    assert_eq!(results[0]["value"], json!(2));
    assert_eq!(server.call_count(), 1, "five duplicates, one execution");
}

#[tokio::test]
async fn a_call_refused_before_the_tool_ran_can_be_retried_with_its_call_id() {
    let server = slow_calculator(Duration::ZERO).await;
    let gw = Gateway::start(&config(&server.url(), "")).await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;
    let body = Bytes::from(json!({"request": {"tool_id": "Calculator.Add@1.0.0", "call_id": "fix-and-retry", "input": {"a": "x"}}}).to_string());
    common::send(gw.addr, "POST", "/tools/call", body, Some("application/json")).await.expect_status(422);
    let retried = call_with_id(gw.addr, Some("fix-and-retry"), 1).await;
    assert_eq!(retried.result()["value"], json!(2), "{}", retried.text());
    assert_eq!(server.call_count(), 1);
}

/// A real redis-server on a free loopback port, killed on drop.
struct Redis {
    child: Child,
    addr: SocketAddr,
}

impl Redis {
    fn start() -> Redis {
        Redis::start_on(free_addr())
    }

    fn start_on(addr: SocketAddr) -> Redis {
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &addr.port().to_string(), "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is missing: run scripts/test.sh, which installs it");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        Redis { child, addr }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn two_replicas_sharing_redis_run_a_call_once() {
    let redis = Redis::start();
    let server = slow_calculator(Duration::from_millis(300)).await;
    let toml = config(&server.url(), &format!("store = \"redis://{}\"", redis.addr));
    let (one, two) = (Gateway::start(&toml).await, Gateway::start(&toml).await);
    one.wait_for_tool("Calculator.Add@1.0.0").await;
    two.wait_for_tool("Calculator.Add@1.0.0").await;

    // Sequential: the duplicate lands on the other replica.
    let first = call_with_id(one.addr, Some("replica-1"), 10).await.result();
    let second = call_with_id(two.addr, Some("replica-1"), 10).await.result();
    assert_eq!(first, second);
    assert_eq!(server.call_count(), 1);

    // Concurrent, across both replicas.
    let calls: Vec<_> = (0..6)
        .map(|i| tokio::spawn(call_with_id(if i % 2 == 0 { one.addr } else { two.addr }, Some("replica-2"), 5)))
        .collect();
    let mut results: Vec<Value> = Vec::new();
    for call in calls {
        results.push(call.await.expect("join").result());
    }
    assert!(results.iter().all(|r| *r == results[0]), "{results:?}");
    assert_eq!(server.call_count(), 2, "one execution per call_id across replicas");

    // A different input under the same id, on either replica: 400.
    call_with_id(two.addr, Some("replica-1"), 99).await.server_error(400);
}

#[tokio::test]
async fn a_call_the_tool_server_received_is_kept_whatever_came_of_it() {
    let mut server = ToolServer::start(catalog(vec![tool("Calculator.Add", "1.0.0", add_schema())])).await;
    // The first call gets an HTML 500; every later one is answered.
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    server.on_call(move |req| if counter.fetch_add(1, Ordering::SeqCst) == 0 { html_500(req) } else { add(req) });
    let gw = Gateway::start(&config(&server.url(), "")).await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;
    // The tool may have run before its server failed: a retry with the same
    // call_id gets the same failure rather than a second run.
    let failed = call_with_id(gw.addr, Some("flaky-1"), 1).await.result();
    assert_eq!(failed["success"], json!(false), "{failed}");
    assert_eq!(call_with_id(gw.addr, Some("flaky-1"), 1).await.result(), failed);
    assert_eq!(server.call_count(), 1);

    // A call that reached no tool server (unreachable) is not kept: the
    // retry with its call_id runs once the server is back.
    server.stop().await;
    let unreachable = call_with_id(gw.addr, Some("unreachable-1"), 1).await;
    assert_ne!(unreachable.status, 200, "{}", unreachable.text());
    server.restart().await;
    assert_eq!(call_with_id(gw.addr, Some("unreachable-1"), 1).await.result()["value"], json!(2));
    assert_eq!(call_with_id(gw.addr, Some("unreachable-1"), 1).await.result()["value"], json!(2));
    assert_eq!(server.call_count(), 2);
}

#[tokio::test]
async fn a_tool_error_is_an_answer_and_is_replayed() {
    let server = ToolServer::start(catalog(vec![tool("Calculator.Add", "1.0.0", add_schema())])).await;
    server.on_call(|req| tool_error(req, json!({"message": "card declined"})));
    let gw = Gateway::start(&config(&server.url(), "")).await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;
    let first = call_with_id(gw.addr, Some("declined-1"), 1).await.result();
    assert_eq!(first["success"], json!(false));
    assert_eq!(call_with_id(gw.addr, Some("declined-1"), 1).await.result(), first);
    assert_eq!(server.call_count(), 1);
}

/// The value of a sample in a Prometheus text page, if present.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

async fn idempotency_metric(gw: &Gateway, result: &str) -> f64 {
    let text = common::send(gw.admin, "GET", "/metrics", Bytes::new(), None).await.text();
    sample(&text, &format!("otc_gateway_idempotency_total{{result=\"{result}\"}}")).unwrap_or(0.0)
}

#[tokio::test]
async fn without_redis_calls_run_undeduplicated_until_it_is_back() {
    let server = slow_calculator(Duration::ZERO).await;
    // Nothing listens there yet: the gateway starts anyway (fail open).
    let reserved = common::reserve_addr();
    let redis_addr = reserved.addr;
    let gw = Gateway::start(&config(&server.url(), &format!("store = \"redis://{redis_addr}\""))).await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;
    call_with_id(gw.addr, Some("down-1"), 1).await.expect_status(200);
    call_with_id(gw.addr, Some("down-1"), 1).await.expect_status(200);
    assert_eq!(server.call_count(), 2, "no store, no deduplication, but every call answered");
    assert!(idempotency_metric(&gw, "store_unavailable").await >= 2.0);

    // Redis comes up: deduplication resumes without a restart.
    drop(reserved);
    let redis = Redis::start_on(redis_addr);
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let id = format!("back-{attempt}");
        let before = server.call_count();
        let first = call_with_id(gw.addr, Some(&id), 1).await.result();
        let again = call_with_id(gw.addr, Some(&id), 1).await.result();
        if server.call_count() == before + 1 {
            assert_eq!(first, again);
            break;
        }
        assert!(Instant::now() < deadline, "deduplication did not resume once Redis was back");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(idempotency_metric(&gw, "replayed").await >= 1.0);

    // Redis goes away mid-run: calls keep being answered.
    drop(redis);
    for _ in 0..3 {
        let answer = call_with_id(gw.addr, Some("gone-1"), 1).await;
        assert_eq!(answer.result()["value"], json!(2));
    }
    let answer = call_with_id(gw.addr, None, 1).await;
    assert_eq!(answer.result()["value"], json!(2));
}

fn stored(value: i64) -> StoredCall {
    StoredCall {
        result: CallResult { call_id: "c".into(), duration: 1.0, success: true, value: Some(json!(value).into()), error: None },
        upstream: "u".into(),
    }
}

/// Two stores on one Redis, as two replicas would have.
async fn two_stores(redis: &Redis, ttl: Duration) -> (IdempotencyStore, IdempotencyStore) {
    let config = IdempotencyConfig { ttl: Dur(ttl), store: Some(format!("redis://{}", redis.addr)), ..Default::default() };
    (
        IdempotencyStore::build(&config).await.expect("store"),
        IdempotencyStore::build(&config).await.expect("store"),
    )
}

#[tokio::test]
async fn redis_claims_abandoned_by_a_replica_do_not_block_the_call_id() {
    let redis = Redis::start();
    let (one, two) = two_stores(&redis, Duration::from_secs(60)).await;
    let fp = Fingerprint::of("Calculator.Add@1.0.0", &json!({"a": 1, "b": 1}));

    // A claim dropped on one replica (its client went away) frees the id
    // for the other (the release runs on a spawned task).
    let Ok(Decision::Run(claim)) = one.claim("dropped", &fp, Duration::from_secs(1)).await else { panic!("run") };
    drop(claim);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match two.claim("dropped", &fp, Duration::from_millis(50)).await {
            Ok(Decision::Run(claim)) => {
                claim.release().await;
                break;
            }
            Ok(Decision::InProgress) => assert!(Instant::now() < deadline, "the dropped claim was never released"),
            other => panic!("{other:?}"),
        }
    }

    // A replica that dies mid-call: its claim lasts as long as the call
    // could (the wait), not the whole ttl.
    let Ok(Decision::Run(claim)) = one.claim("crashed", &fp, Duration::from_millis(400)).await else { panic!("run") };
    std::mem::forget(claim);
    assert!(matches!(two.claim("crashed", &fp, Duration::from_millis(50)).await, Ok(Decision::InProgress)));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let Ok(Decision::Run(claim)) = two.claim("crashed", &fp, Duration::from_secs(1)).await else { panic!("run") };
    claim.complete(&stored(5)).await;
    match one.claim("crashed", &fp, Duration::from_secs(1)).await {
        Ok(Decision::Replay(call)) => assert_eq!(*call, stored(5)),
        other => panic!("{other:?}"),
    }
    let other_input = Fingerprint::of("Calculator.Add@1.0.0", &json!({"a": 2, "b": 1}));
    assert!(matches!(one.claim("crashed", &other_input, Duration::from_secs(1)).await, Ok(Decision::Conflict)));

    // The answer is kept for the ttl, under the documented prefix.
    let client = redis::Client::open(format!("redis://{}", redis.addr)).expect("client");
    let mut connection = redis::aio::ConnectionManager::new(client).await.expect("connect");
    let ttl_ms: i64 = redis::cmd("PTTL").arg("otc-gateway:idem:crashed").query_async(&mut connection).await.expect("pttl");
    assert!(ttl_ms > 50_000 && ttl_ms <= 60_000, "{ttl_ms}");
    assert_eq!((one.stats().replayed, one.stats().conflict, two.stats().stored), (1, 1, 1));
}

#[tokio::test]
async fn concurrent_claims_across_redis_replicas_elect_one() {
    let redis = Redis::start();
    let (one, two) = two_stores(&redis, Duration::from_secs(60)).await;
    let (one, two) = (Arc::new(one), Arc::new(two));
    let fp = Fingerprint::of("Calculator.Add@1.0.0", &json!({"a": 1, "b": 1}));
    let runs = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..10)
        .map(|i| {
            let store = if i % 2 == 0 { one.clone() } else { two.clone() };
            let (fp, runs) = (fp.clone(), runs.clone());
            tokio::spawn(async move {
                match store.claim("race", &fp, Duration::from_secs(5)).await.expect("redis answers") {
                    Decision::Run(claim) => {
                        runs.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        claim.complete(&stored(42)).await;
                        stored(42)
                    }
                    Decision::Replay(call) => (*call).clone(),
                    other => panic!("{other:?}"),
                }
            })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.expect("join"), stored(42));
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_client_that_goes_away_mid_call_does_not_make_it_run_twice() {
    let server = slow_calculator(Duration::from_millis(800)).await;
    let gw = Gateway::start(&config(&server.url(), "")).await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;
    let call = tokio::spawn(call_with_id(gw.addr, Some("gone-client"), 1));
    tokio::time::sleep(Duration::from_millis(200)).await;
    call.abort();
    // The client retries (before and after the first call would have ended).
    let retry = call_with_id(gw.addr, Some("gone-client"), 1).await.result();
    assert_eq!(retry["value"], json!(2));
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(call_with_id(gw.addr, Some("gone-client"), 1).await.result(), retry);
    assert_eq!(server.call_count(), 1);
}
