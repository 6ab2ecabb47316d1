//! Clients that try what an attacker would, on raw sockets: framing that two
//! readers could read differently, heads and bodies that never end, floods
//! of half-open connections, and web pages on other sites (foreign `Origin`,
//! DNS rebinding). Each is refused with its status, never reaches the
//! upstream, and leaves everyone else served.

mod common;

use std::time::{Duration, Instant};

use common::{calculator, Gateway, ToolServer};
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

fn call_body() -> String {
    json!({"request": {"tool_id": "Calculator.Add@1.0.0", "input": {"a": 1, "b": 2}}}).to_string()
}

/// A call's request with `headers` (each line ending in CRLF) and its body.
fn call_request(headers: &str) -> String {
    let body = call_body();
    format!("POST /tools/call HTTP/1.1\r\n{headers}Content-Length: {}\r\n\r\n{body}", body.len())
}

use common::read_until_closed as read_all;

/// Sends `request` on a new connection; what came back and whether it closed.
async fn exchange(gw: &Gateway, request: &[u8]) -> (String, bool) {
    let mut stream = TcpStream::connect(gw.addr).await.expect("connect");
    stream.write_all(request).await.expect("write");
    read_all(&mut stream, Duration::from_secs(5)).await
}

fn status_of(answer: &str) -> &str {
    answer.get(9..12).unwrap_or("")
}

/// Reads one answer with a Content-Length body off a kept-alive connection.
async fn read_one(stream: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let text = String::from_utf8_lossy(&out).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length: ").map(str::to_owned))
                .and_then(|n| n.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if body.len() >= length {
                return text;
            }
        }
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
            .await
            .expect("an answer")
            .expect("read");
        assert!(n > 0, "closed before a whole answer: {text}");
        out.extend_from_slice(&buf[..n]);
    }
}

#[tokio::test]
async fn ambiguous_framing_is_refused_on_every_route_and_never_reaches_the_upstream() {
    let calc = calculator().await;
    let gw = gateway(&calc, "", "").await;
    let body = call_body();
    // A valid chunked body, so that reading by Transfer-Encoding would succeed.
    let chunked = format!("{:x}\r\n{body}\r\n0\r\n\r\n", body.len());
    let cases = [
        (format!("POST /tools/call HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\nTransfer-Encoding: chunked\r\n\r\n{chunked}", chunked.len()), "400"),
        (format!("POST /tools/call HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n{chunked}"), "400"),
        (format!("POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n{chunked}"), "400"),
        (format!("POST /tools/call HTTP/1.1\r\nHost: localhost\r\nContent-Length: {0}\r\nContent-Length: {0}\r\n\r\n{body}", body.len()), "400"),
        (format!("POST /tools/call HTTP/1.1\r\nHost: localhost\r\nContent-Length: {0}, {0}\r\n\r\n{body}", body.len()), "400"),
        (format!("POST /tools/call HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}", body.len()), "400"),
        (format!("POST /tools/call HTTP/1.1\r\nHost: localhost\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n{body}", body.len()), "400"),
        ("GET /tools HTTP/1.1\r\n\r\n".to_owned(), "400"),
        (format!("POST /tools/call HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: gzip, chunked\r\n\r\n{chunked}"), "501"),
        (format!("POST /tools/call HTTP/1.1\r\nHost: localhost\r\nExpect: 200-ok\r\nContent-Length: {}\r\n\r\n{body}", body.len()), "417"),
    ];
    for (request, expected) in &cases {
        let (answer, closed) = exchange(&gw, request.as_bytes()).await;
        assert_eq!(status_of(&answer), *expected, "{request:?}: {answer}");
        assert!(closed, "closed after {request:?}");
        let json_body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        assert!(serde_json::from_str::<serde_json::Value>(json_body).is_ok(), "a JSON body: {answer}");
    }
    // The same on a connection whose first request pingora served.
    let mut stream = TcpStream::connect(gw.addr).await.expect("connect");
    stream.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n").await.expect("write");
    assert_eq!(status_of(&read_one(&mut stream).await), "200");
    stream.write_all(cases[0].0.as_bytes()).await.expect("write");
    let (answer, closed) = read_all(&mut stream, Duration::from_secs(5)).await;
    assert_eq!(status_of(&answer), "400", "{answer}");
    assert!(closed);
    assert_eq!(calc.call_count(), 0, "no ambiguous request reached the upstream");
}

#[tokio::test]
async fn a_connection_is_the_gateways_again_after_pingora_served_a_request() {
    let calc = calculator().await;
    let gw = gateway(&calc, "", "").await;
    let mut stream = TcpStream::connect(gw.addr).await.expect("connect");
    for _ in 0..2 {
        stream.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n").await.expect("write");
        assert_eq!(status_of(&read_one(&mut stream).await), "200");
        stream.write_all(call_request("Host: localhost\r\n").as_bytes()).await.expect("write");
        let answer = read_one(&mut stream).await;
        assert_eq!(status_of(&answer), "200", "{answer}");
        assert!(answer.contains(r#""value":3"#), "{answer}");
    }
    assert_eq!(calc.call_count(), 2);
}

#[tokio::test]
async fn too_many_header_lines_get_431() {
    let calc = calculator().await;
    let gw = gateway(&calc, "", "").await;
    for lines in [101, 400] {
        let padding: String = (0..lines).map(|i| format!("X-Pad-{i}: y\r\n")).collect();
        let (answer, closed) = exchange(&gw, call_request(&format!("Host: localhost\r\n{padding}")).as_bytes()).await;
        assert_eq!(status_of(&answer), "431", "{lines} lines: {answer}");
        assert!(closed);
    }
    assert_eq!(calc.call_count(), 0);
}

#[tokio::test]
async fn expect_100_continue_gets_100_before_the_body_is_sent() {
    let calc = calculator().await;
    let gw = gateway(&calc, "", "").await;
    let body = call_body();
    for path in ["/tools/call", "/mcp"] {
        let mut stream = TcpStream::connect(gw.addr).await.expect("connect");
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
            if path == "/mcp" { r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#.len() } else { body.len() }
        );
        stream.write_all(head.as_bytes()).await.expect("head");
        // A client that waits for 100 Continue sends nothing more until it comes.
        let mut buf = [0u8; 1024];
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
            .await
            .expect("100 Continue comes")
            .expect("read");
        let interim = String::from_utf8_lossy(&buf[..n]).into_owned();
        assert!(interim.starts_with("HTTP/1.1 100"), "{path}: {interim}");
        let payload =
            if path == "/mcp" { r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#.to_owned() } else { body.clone() };
        stream.write_all(payload.as_bytes()).await.expect("body");
        let rest = if interim.contains("\r\n\r\nHTTP/1.1") { interim.clone() } else { read_one(&mut stream).await };
        let last = rest.rfind("HTTP/1.1 ").map_or("", |at| &rest[at..]);
        assert_eq!(status_of(last), "200", "{path}: {rest}");
    }
    assert_eq!(calc.call_count(), 1);
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
        answer = read_all(&mut stream, Duration::from_secs(10)).await.0;
    }
    assert_eq!(status_of(&answer), "408", "{answer}");
    // Generous: the head would have taken 10 s at this pace.
    assert!(started.elapsed() < Duration::from_secs(8), "cut off early, not at the end of the head");
    let (_, closed) = read_all(&mut stream, Duration::from_secs(5)).await;
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
        // (Accepted in order, so the oldest is known.)
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let call = gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 1})).await;
    assert_eq!(call.status, 200, "{}", call.text());
    assert_eq!(gw.get("/health").await.status, 200);
    // The oldest ones were closed to make room; the newest still open.
    let (_, oldest_closed) = read_all(&mut flood[0], Duration::from_secs(5)).await;
    assert!(oldest_closed, "the oldest idle connection is closed");
    let (_, newest_closed) = read_all(&mut flood[29], Duration::from_millis(300)).await;
    assert!(!newest_closed, "the newest is kept");
}

#[tokio::test]
async fn a_foreign_origin_is_refused_on_every_route_before_the_upstream_is_called() {
    let calc = calculator().await;
    let gw = gateway(&calc, "", "").await;
    // A cross-site "simple" request: no preflight, text/plain.
    let evil = "Host: localhost\r\nOrigin: https://evil.example\r\nContent-Type: text/plain\r\n";
    let (answer, closed) = exchange(&gw, call_request(evil).as_bytes()).await;
    assert_eq!(status_of(&answer), "403", "{answer}");
    assert!(closed);
    for path in ["/tools", "/health"] {
        let (answer, _) = exchange(
            &gw,
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nOrigin: https://evil.example\r\n\r\n").as_bytes(),
        )
        .await;
        assert_eq!(status_of(&answer), "403", "{path}: {answer}");
    }
    let (answer, _) =
        exchange(&gw, b"POST /mcp HTTP/1.1\r\nHost: localhost\r\nOrigin: null\r\nContent-Length: 2\r\n\r\n{}").await;
    assert_eq!(status_of(&answer), "403", "{answer}");
    assert!(answer.contains("jsonrpc"), "/mcp refuses in JSON-RPC: {answer}");
    assert_eq!(calc.call_count(), 0, "the upstream never saw a foreign page's call");
    // A local page, and a client that is no browser, are served.
    let (answer, _) = exchange(
        &gw,
        call_request("Host: localhost\r\nOrigin: http://localhost:3000\r\nConnection: close\r\n").as_bytes(),
    )
    .await;
    assert_eq!(status_of(&answer), "200", "{answer}");
    let (answer, _) = exchange(&gw, call_request("Host: localhost\r\nConnection: close\r\n").as_bytes()).await;
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
        let (ok, _) = exchange(
            &gw,
            call_request("Host: localhost\r\nOrigin: https://app.example.com\r\nConnection: close\r\n").as_bytes(),
        )
        .await;
        assert_eq!(status_of(&ok), "200", "{server}{extra}: {ok}");
        let (refused, _) =
            exchange(&gw, call_request("Host: localhost\r\nOrigin: http://localhost\r\n").as_bytes()).await;
        assert_eq!(status_of(&refused), "403", "{server}{extra}: {refused}");
    }
}

#[tokio::test]
async fn a_loopback_gateway_refuses_a_rebound_host_unless_configured() {
    let calc = calculator().await;
    let gw = gateway(&calc, "", "").await;
    // DNS rebinding: the attacker's name now points at 127.0.0.1.
    let rebound = "Host: attacker.example:8080\r\n";
    let (answer, closed) = exchange(&gw, call_request(rebound).as_bytes()).await;
    assert_eq!(status_of(&answer), "421", "{answer}");
    assert!(closed);
    let (answer, _) = exchange(&gw, b"GET /tools HTTP/1.1\r\nHost: attacker.example\r\n\r\n").await;
    assert_eq!(status_of(&answer), "421", "{answer}");
    // An absolute-form target names its host itself: refused when it is not
    // the Host (400, pingora's check) and when both are foreign (421).
    let (answer, _) = exchange(&gw, b"GET http://attacker.example/tools HTTP/1.1\r\nHost: localhost\r\n\r\n").await;
    assert_eq!(status_of(&answer), "400", "{answer}");
    let (answer, _) =
        exchange(&gw, b"GET http://attacker.example/tools HTTP/1.1\r\nHost: attacker.example\r\n\r\n").await;
    assert_eq!(status_of(&answer), "421", "{answer}");
    // HTTP/1.0 needs no Host: the target's authority is checked alone.
    let (answer, _) = exchange(&gw, b"GET http://attacker.example/tools HTTP/1.0\r\n\r\n").await;
    assert_eq!(status_of(&answer), "421", "{answer}");
    let body = call_body();
    let old_call = format!(
        "POST http://attacker.example:8080/tools/call HTTP/1.0\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let (answer, _) = exchange(&gw, old_call.as_bytes()).await;
    assert_eq!(status_of(&answer), "421", "{answer}");
    let (answer, _) = exchange(&gw, b"GET http://localhost/tools HTTP/1.0\r\n\r\n").await;
    assert_eq!(status_of(&answer), "200", "{answer}");
    assert_eq!(calc.call_count(), 0);
    for host in ["localhost", "127.0.0.1", "[::1]:80"] {
        let (answer, _) =
            exchange(&gw, format!("GET /tools HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes()).await;
        assert_eq!(status_of(&answer), "200", "{host}: {answer}");
    }
    // Each request's Host is checked, also on a kept-alive connection.
    let mut stream = TcpStream::connect(gw.addr).await.expect("connect");
    stream.write_all(call_request("Host: localhost\r\n").as_bytes()).await.expect("write");
    assert_eq!(status_of(&read_one(&mut stream).await), "200");
    stream.write_all(call_request(rebound).as_bytes()).await.expect("write");
    let (answer, closed) = read_all(&mut stream, Duration::from_secs(5)).await;
    assert_eq!(status_of(&answer), "421", "{answer}");
    assert!(closed);
    let named = gateway(&calc, "allowed_hosts = [\"tools.internal\"]", "").await;
    let (answer, _) =
        exchange(&named, call_request("Host: tools.internal:8080\r\nConnection: close\r\n").as_bytes()).await;
    assert_eq!(status_of(&answer), "200", "{answer}");
    let (answer, _) = exchange(&named, call_request(rebound).as_bytes()).await;
    assert_eq!(status_of(&answer), "421", "{answer}");
}

#[tokio::test]
async fn a_malformed_head_is_refused_without_quoting_its_credentials() {
    let calc = calculator().await;
    let gw = gateway(&calc, "", "").await;
    let (answer, closed) =
        exchange(&gw, b"GARBAGE\x01 / HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer sekrit-token-4711\r\n\r\n")
            .await;
    assert_eq!(status_of(&answer), "400", "{answer}");
    assert!(closed);
    assert!(!answer.contains("sekrit-token-4711"), "the error quotes the credentials back: {answer}");
    assert!(!gw.logs().contains("sekrit-token-4711"), "the log quotes the credentials");
}
