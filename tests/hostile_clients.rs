//! Clients that try what an attacker would, on raw sockets: heads and bodies
//! that never end, floods of half-open connections, and web pages on other
//! sites (foreign `Origin`, DNS rebinding). Each is refused with its status,
//! never reaches the upstream, and leaves everyone else served. (Framing
//! that two readers could read differently: tests/framing.rs.)

mod common;

use std::time::{Duration, Instant};

use common::{
    add_call_body, calculator, call_with_headers, read_one_answer, read_until_closed, status_of, Gateway, ToolServer,
};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A gateway config with every listener on loopback port 0.
fn config(server_extra: &str, upstream_url: &str, extra: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n{server_extra}\n\
         [catalog]\npoll_interval = \"200ms\"\nrequest_timeout = \"1s\"\n\n\
         [[upstreams]]\nname = \"calc\"\nurl = \"{upstream_url}\"\n\n{extra}"
    )
}

async fn gateway(calc: &ToolServer, server_extra: &str, extra: &str) -> Gateway {
    let gw = Gateway::start(&config(server_extra, &calc.url(), extra)).await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;
    gw
}

#[tokio::test]
async fn a_head_sent_a_byte_at_a_time_is_cut_off_at_the_header_timeout() {
    let calc = calculator().await;
    let gw = gateway(&calc, "header_timeout = \"1s\"", "").await;
    let mut stream = TcpStream::connect(gw.addr).await.expect("connect");
    let started = Instant::now();
    let slow = b"POST /tools/call HTTP/1.1\r\nHost: localhost\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let mut answer = String::new();
    for byte in slow {
        if stream.write_all(&[*byte]).await.is_err() {
            break;
        }
        let mut buf = [0u8; 1024];
        if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(200), stream.read(&mut buf)).await {
            answer.push_str(&String::from_utf8_lossy(&buf[..n]));
            break;
        }
    }
    if answer.is_empty() {
        answer = read_until_closed(&mut stream, Duration::from_secs(10)).await.0;
    }
    assert_eq!(status_of(&answer), "408", "{answer}");
    // Generous: the head would have taken 10 s at this pace.
    assert!(started.elapsed() < Duration::from_secs(8), "cut off early, not at the end of the head");
    let (_, closed) = read_until_closed(&mut stream, Duration::from_secs(5)).await;
    assert!(closed, "closed after 408");
    assert_eq!(gw.get("/health").await.status, 200);
}

#[tokio::test]
async fn heads_without_bodies_hold_no_in_flight_slot() {
    let calc = calculator().await;
    let gw = gateway(&calc, "max_in_flight = 4\nbody_timeout = \"30s\"", "").await;
    // Twenty connections send a call's head and never its body (mode none:
    // no credentials needed); both readers are tried (the second with Expect).
    let mut stalled = Vec::new();
    for i in 0..20 {
        let mut stream = TcpStream::connect(gw.addr).await.expect("connect");
        let expect = if i % 2 == 0 { "" } else { "Expect: 100-continue\r\n" };
        let head = format!("POST /tools/call HTTP/1.1\r\nHost: localhost\r\n{expect}Content-Length: 100\r\n\r\n");
        stream.write_all(head.as_bytes()).await.expect("head");
        stalled.push(stream);
    }
    // On purpose: nothing outside the gateway shows that it has read the
    // twenty heads; this gives it the time to.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let call = gw.call("Calculator.Add@1.0.0", json!({"a": 2, "b": 2})).await;
    assert_eq!(call.status, 200, "{}", call.text());
    assert_eq!(call.result()["value"], json!(4));
    assert_eq!(gw.get("/health").await.status, 200);
    assert_eq!(gw.get("/tools").await.status, 200);
    drop(stalled);
}

#[tokio::test]
async fn a_flood_of_idle_connections_closes_the_oldest_and_real_callers_are_served() {
    let calc = calculator().await;
    let gw = gateway(&calc, "max_connections = 10", "").await;
    let mut flood = Vec::new();
    for i in 0..30 {
        let mut stream = TcpStream::connect(gw.addr).await.expect("connect");
        // Half send part of a head, half a head without its body.
        let bytes: &[u8] = if i % 2 == 0 {
            b"POST /tools/call HTTP/1.1\r\nHost: loc"
        } else {
            b"POST /tools/call HTTP/1.1\r\nHost: localhost\r\nContent-Length: 50\r\n\r\n"
        };
        stream.write_all(bytes).await.expect("write");
        flood.push(stream);
        // (On purpose: a pause, so the gateway's listening threads accept
        // them in order and the oldest is known.)
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let call = gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 1})).await;
    assert_eq!(call.status, 200, "{}", call.text());
    assert_eq!(gw.get("/health").await.status, 200);
    // The oldest ones were closed to make room; the newest still open.
    let (_, oldest_closed) = read_until_closed(&mut flood[0], Duration::from_secs(5)).await;
    assert!(oldest_closed, "the oldest idle connection is closed");
    let (_, newest_closed) = read_until_closed(&mut flood[29], Duration::from_millis(300)).await;
    assert!(!newest_closed, "the newest is kept");
}

#[tokio::test]
async fn a_foreign_origin_is_refused_on_every_route_before_the_upstream_is_called() {
    let calc = calculator().await;
    let gw = gateway(&calc, "", "").await;
    // A cross-site "simple" request: no preflight, text/plain.
    let evil = "Host: localhost\r\nOrigin: https://evil.example\r\nContent-Type: text/plain\r\n";
    let (answer, closed) = gw.exchange(call_with_headers(evil).as_bytes()).await;
    assert_eq!(status_of(&answer), "403", "{answer}");
    assert!(closed);
    for path in ["/tools", "/health"] {
        let (answer, _) = gw
            .exchange(
                format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nOrigin: https://evil.example\r\n\r\n").as_bytes(),
            )
            .await;
        assert_eq!(status_of(&answer), "403", "{path}: {answer}");
    }
    let (answer, _) =
        gw.exchange(b"POST /mcp HTTP/1.1\r\nHost: localhost\r\nOrigin: null\r\nContent-Length: 2\r\n\r\n{}").await;
    assert_eq!(status_of(&answer), "403", "{answer}");
    assert!(answer.contains("jsonrpc"), "/mcp refuses in JSON-RPC: {answer}");
    assert_eq!(calc.call_count(), 0, "the upstream never saw a foreign page's call");
    // A local page, and a client that is no browser, are served.
    let (answer, _) = gw
        .exchange(
            call_with_headers("Host: localhost\r\nOrigin: http://localhost:3000\r\nConnection: close\r\n").as_bytes(),
        )
        .await;
    assert_eq!(status_of(&answer), "200", "{answer}");
    let (answer, _) = gw.exchange(call_with_headers("Host: localhost\r\nConnection: close\r\n").as_bytes()).await;
    assert_eq!(status_of(&answer), "200", "{answer}");
    assert_eq!(calc.call_count(), 2);
}

#[tokio::test]
async fn configured_origins_apply_to_every_route_and_the_older_mcp_key_still_works() {
    let calc = calculator().await;
    for (server, extra) in [
        ("allowed_origins = [\"https://app.example.com\"]", ""),
        ("", "[mcp]\nallowed_origins = [\"https://app.example.com\"]\n"),
    ] {
        let gw = gateway(&calc, server, extra).await;
        let (ok, _) = gw
            .exchange(
                call_with_headers("Host: localhost\r\nOrigin: https://app.example.com\r\nConnection: close\r\n")
                    .as_bytes(),
            )
            .await;
        assert_eq!(status_of(&ok), "200", "{server}{extra}: {ok}");
        let (refused, _) =
            gw.exchange(call_with_headers("Host: localhost\r\nOrigin: http://localhost\r\n").as_bytes()).await;
        assert_eq!(status_of(&refused), "403", "{server}{extra}: {refused}");
    }
}

#[tokio::test]
async fn a_loopback_gateway_refuses_a_rebound_host_unless_configured() {
    let calc = calculator().await;
    let gw = gateway(&calc, "", "").await;
    // DNS rebinding: the attacker's name now points at 127.0.0.1.
    let rebound = "Host: attacker.example:8080\r\n";
    let (answer, closed) = gw.exchange(call_with_headers(rebound).as_bytes()).await;
    assert_eq!(status_of(&answer), "421", "{answer}");
    assert!(closed);
    let (answer, _) = gw.exchange(b"GET /tools HTTP/1.1\r\nHost: attacker.example\r\n\r\n").await;
    assert_eq!(status_of(&answer), "421", "{answer}");
    // An absolute-form target names its host itself: refused when it is not
    // the Host (400, pingora's check) and when both are foreign (421).
    let (answer, _) = gw.exchange(b"GET http://attacker.example/tools HTTP/1.1\r\nHost: localhost\r\n\r\n").await;
    assert_eq!(status_of(&answer), "400", "{answer}");
    let (answer, _) =
        gw.exchange(b"GET http://attacker.example/tools HTTP/1.1\r\nHost: attacker.example\r\n\r\n").await;
    assert_eq!(status_of(&answer), "421", "{answer}");
    // HTTP/1.0 needs no Host: the target's authority is checked alone.
    let (answer, _) = gw.exchange(b"GET http://attacker.example/tools HTTP/1.0\r\n\r\n").await;
    assert_eq!(status_of(&answer), "421", "{answer}");
    let body = add_call_body();
    let old_call = format!(
        "POST http://attacker.example:8080/tools/call HTTP/1.0\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let (answer, _) = gw.exchange(old_call.as_bytes()).await;
    assert_eq!(status_of(&answer), "421", "{answer}");
    let (answer, _) = gw.exchange(b"GET http://localhost/tools HTTP/1.0\r\n\r\n").await;
    assert_eq!(status_of(&answer), "200", "{answer}");
    assert_eq!(calc.call_count(), 0);
    for host in ["localhost", "127.0.0.1", "[::1]:80"] {
        let (answer, _) =
            gw.exchange(format!("GET /tools HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes()).await;
        assert_eq!(status_of(&answer), "200", "{host}: {answer}");
    }
    // Each request's Host is checked, also on a kept-alive connection.
    let mut stream = TcpStream::connect(gw.addr).await.expect("connect");
    stream.write_all(call_with_headers("Host: localhost\r\n").as_bytes()).await.expect("write");
    assert_eq!(status_of(&read_one_answer(&mut stream).await), "200");
    stream.write_all(call_with_headers(rebound).as_bytes()).await.expect("write");
    let (answer, closed) = read_until_closed(&mut stream, Duration::from_secs(5)).await;
    assert_eq!(status_of(&answer), "421", "{answer}");
    assert!(closed);
    let named = gateway(&calc, "allowed_hosts = [\"tools.internal\"]", "").await;
    let (answer, _) =
        named.exchange(call_with_headers("Host: tools.internal:8080\r\nConnection: close\r\n").as_bytes()).await;
    assert_eq!(status_of(&answer), "200", "{answer}");
    let (answer, _) = named.exchange(call_with_headers(rebound).as_bytes()).await;
    assert_eq!(status_of(&answer), "421", "{answer}");
}
