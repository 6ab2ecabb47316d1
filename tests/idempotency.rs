//! A call_id is an idempotency key: a repeated call gets the first answer
//! and the tool runs once, in one gateway or across replicas sharing Redis.

mod common;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{add, add_schema, catalog, free_addr, tool, Gateway, Resp, ToolServer};
use serde_json::{json, Value};

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
        let addr = free_addr();
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
