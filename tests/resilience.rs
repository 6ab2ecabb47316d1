//! Nothing a client or an upstream does may take the gateway down, hang it,
//! or make a call run twice: circuit breaking, deeply nested bodies, slow
//! clients, many calls at once, lying upstreams, `max_in_flight`, graceful
//! shutdown. (Request framing: tests/framing.rs.)

mod common;

use std::time::{Duration, Instant};

use common::{
    add_call_body, add_schema, calculator, call_request, catalog, gateway_for, read_answers, read_until_closed, tool,
    wait_until, GatewayConfig,
};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[tokio::test]
async fn an_upstream_refusing_connections_opens_its_circuit_and_a_probe_closes_it() {
    let mut server = calculator().await;
    let gw = GatewayConfig::new()
        .upstream_with("calc", &server.url(), "circuit_failures = 2\ncircuit_cooldown = \"700ms\"")
        .start()
        .await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;

    server.stop().await;
    // Connection failures (calls and catalog polls alike) open the circuit;
    // then calls fail fast with a retry hint, the catalog being kept.
    wait_until("the circuit opens", async || {
        let resp = gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 2})).await;
        let body = resp.server_error(400);
        assert!(body["message"].as_str().unwrap().contains("temporarily unavailable"), "{body}");
        let detail = body["developer_message"].as_str().unwrap_or_default().to_owned();
        if detail.contains("circuit open") {
            assert!(detail.contains("retry_after_ms="), "{detail}");
            Ok(())
        } else {
            Err(detail)
        }
    })
    .await;

    server.restart().await;
    // After the cooldown one probe goes through, succeeds, and closes it.
    let resp = wait_until("the circuit closes again", async || {
        let resp = gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 2})).await;
        if resp.status == 200 {
            Ok(resp)
        } else {
            Err(resp.text())
        }
    })
    .await;
    assert_eq!(resp.result()["value"], json!(3));
    assert!(server.call_count() >= 1);
}

#[tokio::test]
async fn a_200000_deep_array_is_a_400_not_a_crash() {
    let server = calculator().await;
    let gw = gateway_for(&server, "").await;
    let deep_input = format!(
        r#"{{"request": {{"tool_id": "Calculator.Add@1.0.0", "input": {{"a": {}1{}, "b": 2}}}}}}"#,
        "[".repeat(200_000),
        "]".repeat(200_000)
    );
    let resp = gw.post_raw("/tools/call", deep_input, "application/json").await;
    let body = resp.server_error(400);
    assert!(body["message"].as_str().unwrap().contains("nested deeper"), "{body}");
    assert_eq!(server.call_count(), 0);
    let ok = gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 2})).await;
    assert_eq!(ok.status, 200, "the gateway is alive and answering");
}

#[tokio::test]
async fn a_client_that_stops_sending_its_body_is_cut_off_and_holds_nobody_up() {
    let server = calculator().await;
    let gw = gateway_for(&server, "body_timeout = \"500ms\"").await;
    let started = Instant::now();
    // The stalled request is sent first: the listener hands connections out
    // in the order they came, so the gateway has it before the other call.
    let request = "POST /tools/call HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\n{\"request\":";
    let mut stalled = TcpStream::connect(gw.addr).await.expect("connect");
    stalled.write_all(request.as_bytes()).await.expect("write");
    let ok = gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 2})).await;
    let (answer, closed) = read_until_closed(&mut stalled, Duration::from_secs(10)).await;
    assert_eq!(ok.status, 200, "another client's call is not held up");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(closed);
    assert!(started.elapsed() < Duration::from_secs(8), "cut off near body_timeout");
}

#[tokio::test]
async fn two_hundred_half_open_slowloris_connections_do_not_stop_calls() {
    let server = calculator().await;
    let gw = gateway_for(&server, "").await;
    let mut idle = Vec::new();
    for _ in 0..200 {
        let mut s = TcpStream::connect(gw.addr).await.expect("connect");
        s.write_all(b"POST /tools/call HTTP/1.1\r\nHost: localhost\r\nX-Slow: ").await.expect("write");
        idle.push(s);
    }
    for _ in 0..5 {
        let resp = gw.call("Calculator.Add@1.0.0", json!({"a": 2, "b": 2})).await;
        assert_eq!(resp.status, 200, "{}", resp.text());
        assert_eq!(resp.result()["value"], json!(4));
    }
    drop(idle);
    assert_eq!(gw.get("/health").await.status, 200);
}

#[tokio::test]
async fn three_hundred_concurrent_calls_all_succeed() {
    let server = calculator().await;
    server.set_call_delay(Duration::from_millis(20));
    let gw = gateway_for(&server, "").await;
    let calls = (0..300).map(|i| {
        let gw = &gw;
        async move { gw.call("Calculator.Add@1.0.0", json!({"a": i, "b": 1})).await }
    });
    let answers = futures_join_all(calls).await;
    for (i, resp) in answers.iter().enumerate() {
        assert_eq!(resp.status, 200, "call {i}: {}", resp.text());
        assert_eq!(resp.result()["value"], json!(i + 1), "call {i} got another call's answer");
    }
    assert_eq!(server.call_count(), 300, "each call ran exactly once");
}

/// `join_all` without a futures dependency.
async fn futures_join_all<F: std::future::Future>(futures: impl Iterator<Item = F>) -> Vec<F::Output> {
    let pinned: Vec<_> = futures.map(Box::pin).collect();
    let mut out = Vec::with_capacity(pinned.len());
    let mut pending: Vec<_> = pinned.into_iter().map(Some).collect();
    let mut results: Vec<Option<F::Output>> = (0..pending.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut all_done = true;
        for (i, slot) in pending.iter_mut().enumerate() {
            if let Some(fut) = slot {
                match fut.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        results[i] = Some(v);
                        *slot = None;
                    }
                    std::task::Poll::Pending => all_done = false,
                }
            }
        }
        if all_done {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    out.extend(results.into_iter().flatten());
    out
}

/// An upstream that serves a catalog, then answers each call with the start
/// of a response and resets the connection.
async fn lying_upstream() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let catalog = catalog(vec![tool("Calculator.Add", "1.0.0", add_schema())]).to_string();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else { return };
            let catalog = catalog.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let Ok(n) = stream.read(&mut buf).await else { return };
                let head = String::from_utf8_lossy(&buf[..n]);
                if head.starts_with("GET /tools") {
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{catalog}",
                        catalog.len()
                    );
                    let _ = stream.write_all(answer.as_bytes()).await;
                } else {
                    let partial = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"result\": {\"succ";
                    let _ = stream.write_all(partial.as_bytes()).await;
                    // Reset rather than close: SO_LINGER 0 (what tokio's
                    // deprecation warns of, a drop that blocks, is the point).
                    #[allow(deprecated)]
                    let _ = stream.set_linger(Some(Duration::ZERO));
                }
            });
        }
    });
    addr
}

#[tokio::test]
async fn an_upstream_that_resets_mid_answer_is_a_200_failure_and_not_retried() {
    let addr = lying_upstream().await;
    let gw = GatewayConfig::new().upstream("liar", &format!("http://{addr}")).start().await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;
    let resp = gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 2})).await;
    let result = resp.result();
    assert_eq!(result["success"], json!(false), "{result}");
    assert_ne!(result["error"]["can_retry"], json!(true), "a call that was sent may have run: no retry hint");
    assert!(result["error"]["developer_message"].as_str().is_some());
    assert_eq!(gw.get("/health").await.status, 200);
}

#[tokio::test]
async fn sigterm_lets_an_in_flight_call_finish_then_exits_0() {
    let server = calculator().await;
    server.set_call_delay(Duration::from_millis(1500));
    let mut gw = gateway_for(&server, "").await;
    let in_flight = {
        let addr = gw.addr;
        tokio::spawn(async move {
            let body = bytes::Bytes::from(add_call_body());
            common::send(addr, "POST", "/tools/call", body, Some("application/json")).await
        })
    };
    wait_until("the call reached the tool server", async || server.call_count() == 1).await;
    gw.signal("TERM");
    let resp = in_flight.await.expect("the call task");
    assert_eq!(resp.status, 200, "{}", resp.text());
    let result: Value = resp.result();
    assert_eq!(result["value"], json!(3));
    let status = gw.wait_exit(Duration::from_secs(20)).await.expect("the gateway exits after draining");
    assert!(status.success(), "exit status {status:?}");
}

#[tokio::test]
async fn sigterm_lets_a_call_that_pingoras_session_serves_finish() {
    // A chunked body: not a plain call, so pingora's session serves it. The
    // shutdown sweep closes connections waiting for a head; this one was
    // handed over with its head and must be answered.
    let server = calculator().await;
    server.set_call_delay(Duration::from_millis(1500));
    let mut gw = gateway_for(&server, "").await;
    let body = add_call_body();
    let chunked = format!("{:x}\r\n{body}\r\n0\r\n\r\n", body.len());
    let mut stream = TcpStream::connect(gw.addr).await.expect("connect");
    let request = format!(
        "POST /tools/call HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n{chunked}"
    );
    stream.write_all(request.as_bytes()).await.expect("a chunked call");
    wait_until("the call reached the tool server", async || server.call_count() == 1).await;
    gw.signal("TERM");
    let answers = read_answers(&mut stream, 1).await;
    assert_eq!(answers[0].0, "200", "{answers:?}");
    assert_eq!(answers[0].1["result"]["value"], json!(3));
    let status = gw.wait_exit(Duration::from_secs(20)).await.expect("the gateway exits after draining");
    assert!(status.success(), "exit status {status:?}");
}

#[tokio::test]
async fn sigterm_waits_for_a_call_whose_body_is_still_arriving() {
    let server = calculator().await;
    let mut gw = gateway_for(&server, "").await;
    let body = add_call_body();
    let (first, second) = body.split_at(body.len() / 2);
    let mut stream = TcpStream::connect(gw.addr).await.expect("connect");
    let head = format!("POST /tools/call HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n{first}", body.len());
    stream.write_all(head.as_bytes()).await.expect("head and half the body");
    // On purpose: nothing outside the gateway shows that it has read a head
    // whose body is still missing; this gives it the time to.
    tokio::time::sleep(Duration::from_millis(300)).await;
    gw.signal("TERM");
    gw.wait_for_log(&["SIGTERM: draining"]).await;
    stream.write_all(second.as_bytes()).await.expect("the rest of the body");
    let answers = read_answers(&mut stream, 1).await;
    assert_eq!(answers[0].0, "200", "{answers:?}");
    assert_eq!(answers[0].1["result"]["value"], json!(3));
    let status = gw.wait_exit(Duration::from_secs(20)).await.expect("the gateway exits after draining");
    assert!(status.success(), "exit status {status:?}");
}

#[tokio::test]
async fn sigterm_closes_an_idle_kept_alive_connection_at_once() {
    let calc = calculator().await;
    let mut gw = gateway_for(&calc, "").await;
    // A call served on a kept-alive connection, which then waits idle for
    // its next request.
    let mut idle = TcpStream::connect(gw.addr).await.expect("connect");
    idle.write_all(call_request(&add_call_body(), "").as_bytes()).await.expect("write");
    let answers = read_answers(&mut idle, 1).await;
    assert_eq!(answers[0].0, "200", "{answers:?}");
    // A slow call keeps the gateway draining, so the process stays up.
    calc.set_call_delay(Duration::from_millis(2500));
    let slow = {
        let addr = gw.addr;
        tokio::spawn(async move {
            common::send(addr, "POST", "/tools/call", bytes::Bytes::from(add_call_body()), Some("application/json"))
                .await
        })
    };
    wait_until("the slow call reached the tool server", async || calc.call_count() == 2).await;
    gw.signal("TERM");
    // The idle connection is closed when shutdown begins, while the slow
    // call is still being served.
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(1), idle.read_to_end(&mut rest)).await;
    assert!(matches!(read, Ok(Ok(0))), "the idle connection is closed at shutdown: {read:?}");
    assert!(!slow.is_finished(), "the drain was still under way");
    assert_eq!(slow.await.expect("the slow call").status, 200);
    let status = gw.wait_exit(Duration::from_secs(20)).await.expect("the gateway exits");
    assert!(status.success(), "exit status {status:?}");
}

#[tokio::test]
async fn over_max_in_flight_requests_get_503_with_retry_after_and_the_rest_succeed() {
    let server = calculator().await;
    server.set_call_delay(Duration::from_millis(600));
    let gw = gateway_for(&server, "max_in_flight = 2").await;
    let body = bytes::Bytes::from(add_call_body());
    let slow: Vec<_> = (0..2)
        .map(|_| {
            let (addr, body) = (gw.addr, body.clone());
            tokio::spawn(async move { common::send(addr, "POST", "/tools/call", body, Some("application/json")).await })
        })
        .collect();
    wait_until("both slow calls reached the tool server", async || server.call_count() == 2).await;
    let refused = gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 2})).await;
    let body_json = refused.server_error(503);
    assert!(body_json["message"].as_str().unwrap().contains("capacity"), "{body_json}");
    assert_eq!(refused.header("retry-after").as_deref(), Some("1"));
    for call in slow {
        assert_eq!(call.await.expect("join").status, 200);
    }
    assert_eq!(gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 2})).await.status, 200, "capacity comes back");
}
