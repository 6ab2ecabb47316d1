//! Request framing, on raw sockets: where one request ends and the next
//! begins, read the same way by both readers (the gateway's own HTTP/1
//! reader and pingora's). Content-Length and Transfer-Encoding that two
//! readers could read differently are refused, the connection closed and the
//! upstream never called; heads too large or unparsable get their 4xx;
//! keep-alive, HTTP/1.0, pipelining, requests in pieces, `Expect:
//! 100-continue` and HEAD keep a connection's requests apart; bodies of a few
//! hundred KB go through intact, and one over `max_body_bytes` is a 413.

mod common;

use std::time::Duration;

use common::{
    add_call_body, calculator, call_request, call_with_headers, catalog, echo, gateway_for, raw_exchange, read_answers,
    read_one_answer, read_until_closed, status_of, tool, wait_until, GatewayConfig, ToolServer,
};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test]
async fn content_length_with_transfer_encoding_is_refused_and_the_connection_closed() {
    let server = calculator().await;
    let gw = gateway_for(&server, "").await;
    let body = add_call_body();
    // A well-formed chunked call whose Content-Length reads less: one reader
    // would take the call, the other a prefix and then "another request".
    let chunked = format!("{:x}\r\n{body}\r\n0\r\n\r\n", body.len());
    let request = format!(
        "POST /tools/call HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\nTransfer-Encoding: chunked\r\n\r\n{chunked}",
        body.len()
    );
    let (answer, closed) = gw.exchange(request.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(closed, "the connection must be closed after ambiguous framing");
    assert_eq!(server.call_count(), 0, "a smuggling attempt must never reach the upstream");
}

#[tokio::test]
async fn two_content_lengths_are_refused_and_the_connection_closed() {
    let server = calculator().await;
    let gw = gateway_for(&server, "").await;
    let body = add_call_body();
    let request = format!(
        "POST /tools/call HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\nContent-Length: 3\r\n\r\n{body}",
        body.len()
    );
    let (answer, closed) = gw.exchange(request.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(closed);
    assert_eq!(server.call_count(), 0);
}

#[tokio::test]
async fn a_content_length_that_is_not_digits_alone_is_refused_and_the_connection_closed() {
    let server = calculator().await;
    let gw = gateway_for(&server, "").await;
    let body = add_call_body();
    // RFC 9110: Content-Length = 1*DIGIT. A sign is what a lenient parser
    // reads and a strict one refuses: two readers of one request disagree.
    for length in [format!("+{}", body.len()), format!("{}.0", body.len()), format!("0x{:x}", body.len())] {
        let request = format!("POST /tools/call HTTP/1.1\r\nHost: localhost\r\nContent-Length: {length}\r\n\r\n{body}");
        let (answer, closed) = gw.exchange(request.as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{length}: {answer}");
        assert!(closed, "{length}");
    }
    assert_eq!(server.call_count(), 0, "no such request reaches the upstream");
}

#[tokio::test]
async fn ambiguous_framing_is_refused_on_every_route_and_never_reaches_the_upstream() {
    let calc = calculator().await;
    let gw = gateway_for(&calc, "").await;
    let body = add_call_body();
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
        let (answer, closed) = gw.exchange(request.as_bytes()).await;
        assert_eq!(status_of(&answer), *expected, "{request:?}: {answer}");
        assert!(closed, "closed after {request:?}");
        let json_body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        assert!(serde_json::from_str::<serde_json::Value>(json_body).is_ok(), "a JSON body: {answer}");
    }
    // The same on a connection whose first request pingora served.
    let mut stream = TcpStream::connect(gw.addr).await.expect("connect");
    stream.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n").await.expect("write");
    assert_eq!(status_of(&read_one_answer(&mut stream).await), "200");
    stream.write_all(cases[0].0.as_bytes()).await.expect("write");
    let (answer, closed) = read_until_closed(&mut stream, Duration::from_secs(5)).await;
    assert_eq!(status_of(&answer), "400", "{answer}");
    assert!(closed);
    assert_eq!(calc.call_count(), 0, "no ambiguous request reached the upstream");
}

#[tokio::test]
async fn an_unparsable_request_head_gets_a_json_400_and_the_connection_closed() {
    let gw = GatewayConfig::new().start().await;
    let (answer, closed) = gw.exchange(b"GARBAGE\x01 / HTTP/9\r\n\0\0\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    let json: serde_json::Value = serde_json::from_str(body).expect("a JSON body, not an empty page");
    assert!(json["message"].is_string(), "{json}");
    assert!(closed, "the connection must be closed");
    assert_eq!(gw.get("/health").await.status, 200, "the gateway keeps serving");
}

#[tokio::test]
async fn a_malformed_head_is_refused_without_quoting_its_credentials() {
    let calc = calculator().await;
    let gw = gateway_for(&calc, "").await;
    let (answer, closed) = gw
        .exchange(b"GARBAGE\x01 / HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer sekrit-token-4711\r\n\r\n")
        .await;
    assert_eq!(status_of(&answer), "400", "{answer}");
    assert!(closed);
    assert!(!answer.contains("sekrit-token-4711"), "the error quotes the credentials back: {answer}");
    assert!(!gw.logs().contains("sekrit-token-4711"), "the log quotes the credentials");
}

#[tokio::test]
async fn oversized_headers_are_431() {
    let gw = GatewayConfig::new().server_line("max_header_bytes = 4096").start().await;
    let request = format!("GET /tools HTTP/1.1\r\nHost: localhost\r\nX-Padding: {}\r\n\r\n", "a".repeat(8000));
    let (answer, _) = gw.exchange(request.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    assert_eq!(gw.get("/health").await.status, 200, "the gateway keeps serving");
}

#[tokio::test]
async fn too_many_header_lines_get_431() {
    let calc = calculator().await;
    let gw = gateway_for(&calc, "").await;
    for lines in [101, 400] {
        let padding: String = (0..lines).map(|i| format!("X-Pad-{i}: y\r\n")).collect();
        let (answer, closed) =
            gw.exchange(call_with_headers(&format!("Host: localhost\r\n{padding}")).as_bytes()).await;
        assert_eq!(status_of(&answer), "431", "{lines} lines: {answer}");
        assert!(closed);
    }
    assert_eq!(calc.call_count(), 0);
}

// ---------------------------------------------------------------------------
// Several requests on one connection
// ---------------------------------------------------------------------------

#[tokio::test]
async fn keep_alive_carries_several_requests_and_http_1_0_closes_after_one() {
    let gw = GatewayConfig::new().start().await;
    // Two requests, one after the other, on one connection.
    let mut stream = TcpStream::connect(gw.addr).await.expect("connect");
    for last in [false, true] {
        let close = if last { "Connection: close\r\n" } else { "" };
        stream
            .write_all(format!("GET /health HTTP/1.1\r\nHost: localhost\r\n{close}\r\n").as_bytes())
            .await
            .expect("write");
        let mut buf = [0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
            .await
            .expect("an answer")
            .expect("read");
        let answer = String::from_utf8_lossy(&buf[..n]).into_owned();
        assert!(answer.starts_with("HTTP/1.1 200"), "request {} on the connection: {answer}", if last { 2 } else { 1 });
    }
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest)).await;
    assert!(matches!(read, Ok(Ok(0))), "closed after `Connection: close`");
    let (answer, closed) = gw.exchange(b"GET /health HTTP/1.0\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(closed, "an HTTP/1.0 request without keep-alive closes the connection");
}

#[tokio::test]
async fn pipelined_requests_are_all_answered_in_order() {
    let calc = calculator().await;
    let gw = gateway_for(&calc, "").await;
    // Three requests in one write, a call with a body in the middle: the
    // bytes read past each request are parsed as the next one.
    let call = add_call_body();
    let pipelined = format!(
        "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n\
         POST /tools/call HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{call}\
         GET /nowhere HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        call.len()
    );
    let (answers, closed) = raw_exchange(gw.addr, pipelined.as_bytes(), Duration::from_secs(10)).await;
    assert!(closed, "the last request asked to close: {answers}");
    let statuses: Vec<&str> = answers.match_indices("HTTP/1.1 ").map(|(at, _)| &answers[at + 9..at + 12]).collect();
    assert_eq!(statuses, ["200", "200", "404"], "{answers}");
    assert!(answers.contains(r#""tools":1"#), "first the health answer: {answers}");
    assert!(answers.contains(r#""value":3"#), "then the call's: {answers}");
}

#[tokio::test]
async fn calls_that_arrive_in_pieces_or_pipelined_are_answered_in_order_on_one_connection() {
    let calc = calculator().await;
    let gw = gateway_for(&calc, "").await;
    let mut stream = TcpStream::connect(gw.addr).await.expect("connect");
    // One call trickling in: the head cut mid-line, then the body in two.
    let request = call_request(&add_call_body(), "");
    let body_at = request.find("\r\n\r\n").expect("a head") + 4;
    for piece in [&request[..20], &request[20..body_at], &request[body_at..body_at + 10], &request[body_at + 10..]] {
        stream.write_all(piece.as_bytes()).await.expect("write");
        // On purpose: a pause, so each piece arrives on its own.
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let answers = read_answers(&mut stream, 1).await;
    assert_eq!(answers[0].0, "200", "{answers:?}");
    assert_eq!(answers[0].1["result"]["value"], 3);
    // Then, in one write: two calls, a request of another kind, and a call
    // after it.
    let second = json!({"request": {"tool_id": "Calculator.Add@1.0.0", "input": {"a": 20, "b": 22}}}).to_string();
    let pipelined = [
        call_request(&second, ""),
        call_request(&add_call_body(), ""),
        "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n".to_owned(),
        call_request(&second, ""),
    ]
    .concat();
    stream.write_all(pipelined.as_bytes()).await.expect("write");
    let answers = read_answers(&mut stream, 4).await;
    let statuses: Vec<&str> = answers.iter().map(|(status, _)| status.as_str()).collect();
    assert_eq!(statuses, ["200", "200", "200", "200"], "{answers:?}");
    assert_eq!(answers[0].1["result"]["value"], 42);
    assert_eq!(answers[1].1["result"]["value"], 3);
    assert_eq!(answers[2].1["tools"], 1, "the health answer, third: {answers:?}");
    assert_eq!(answers[3].1["result"]["value"], 42);
    assert_eq!(calc.call_count(), 4, "each call ran once");
}

#[tokio::test]
async fn a_call_refused_after_a_served_one_on_the_same_connection_gets_its_401() {
    let calc = calculator().await;
    let key_file = common::temp_file("client-key", "txt", "ck-lean-path-5d5d\n");
    let jwt_secret = common::temp_file("jwt-secret", "txt", "a-secret-no-client-here-knows-1234\n");
    let auth = format!(
        "[auth]\nmode = \"jwt\"\nhs256_secret = \"file:{}\"\napi_keys = [{{ key = \"file:{}\", user_id = \"svc\" }}]\n",
        jwt_secret.display(),
        key_file.display()
    );
    let gw = GatewayConfig::new().upstream("calc", &calc.url()).raw(&auth).start().await;
    let good = "Authorization: Bearer ck-lean-path-5d5d\r\n";
    let mut stream = TcpStream::connect(gw.addr).await.expect("connect");
    // (The tool may not be listed yet: wait for it on this connection.)
    let answer = wait_until("the tool is callable on this connection", async || {
        stream.write_all(call_request(&add_call_body(), good).as_bytes()).await.expect("write");
        let answer = read_answers(&mut stream, 1).await.remove(0);
        if answer.0 == "200" {
            Ok(answer)
        } else {
            Err(format!("{answer:?}"))
        }
    })
    .await;
    assert_eq!(answer.1["result"]["value"], 3);
    let calls_before = calc.call_count();
    // A refused call on the same connection, a good one pipelined behind it.
    // Its body is left unread (an unauthenticated client's body is not
    // taken in), so the connection closes after the 401.
    let requests =
        [call_request(&add_call_body(), "Authorization: Bearer not-a-key\r\n"), call_request(&add_call_body(), good)]
            .concat();
    stream.write_all(requests.as_bytes()).await.expect("write");
    let refused = read_answers(&mut stream, 1).await.remove(0);
    assert_eq!(refused.0, "401", "{refused:?}");
    assert!(refused.1["message"].is_string(), "{refused:?}");
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest)).await;
    assert!(matches!(read, Ok(Ok(0))), "closed after the 401, nothing more: {:?}", String::from_utf8_lossy(&rest));
    let mut again = TcpStream::connect(gw.addr).await.expect("connect");
    again.write_all(call_request(&add_call_body(), good).as_bytes()).await.expect("write");
    let answer = read_answers(&mut again, 1).await.remove(0);
    assert_eq!((answer.0.as_str(), &answer.1["result"]["value"]), ("200", &json!(3)), "{answer:?}");
    assert_eq!(calc.call_count(), calls_before + 1, "only the authenticated call ran");
}

#[tokio::test]
async fn a_head_answer_has_no_body_and_the_connection_stays_usable() {
    let gw = GatewayConfig::new().start().await;
    let mut stream = TcpStream::connect(gw.addr).await.expect("connect");
    stream.write_all(b"HEAD /tools HTTP/1.1\r\nHost: localhost\r\n\r\n").await.expect("write");
    let mut buf = [0u8; 4096];
    let n =
        tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await.expect("an answer").expect("read");
    let head = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.to_ascii_lowercase().contains("content-length: "), "HEAD tells the length GET would have: {head}");
    assert!(head.ends_with("\r\n\r\n"), "no body bytes after a HEAD answer: {head:?}");
    stream.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n").await.expect("write");
    let n =
        tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await.expect("an answer").expect("read");
    let next = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(next.starts_with("HTTP/1.1 200"), "the next answer starts cleanly: {next:?}");
}

#[tokio::test]
async fn a_connection_is_the_gateways_again_after_pingora_served_a_request() {
    let calc = calculator().await;
    let gw = gateway_for(&calc, "").await;
    let mut stream = TcpStream::connect(gw.addr).await.expect("connect");
    for _ in 0..2 {
        stream.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n").await.expect("write");
        assert_eq!(status_of(&read_one_answer(&mut stream).await), "200");
        stream.write_all(call_with_headers("Host: localhost\r\n").as_bytes()).await.expect("write");
        let answer = read_one_answer(&mut stream).await;
        assert_eq!(status_of(&answer), "200", "{answer}");
        assert!(answer.contains(r#""value":3"#), "{answer}");
    }
    assert_eq!(calc.call_count(), 2);
}

#[tokio::test]
async fn expect_100_continue_gets_100_before_the_body_is_sent() {
    let calc = calculator().await;
    let gw = gateway_for(&calc, "").await;
    let body = add_call_body();
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
        let rest =
            if interim.contains("\r\n\r\nHTTP/1.1") { interim.clone() } else { read_one_answer(&mut stream).await };
        let last = rest.rfind("HTTP/1.1 ").map_or("", |at| &rest[at..]);
        assert_eq!(status_of(last), "200", "{path}: {rest}");
    }
    assert_eq!(calc.call_count(), 1);
}

// ---------------------------------------------------------------------------
// Bodies
// ---------------------------------------------------------------------------

fn text_schema() -> serde_json::Value {
    json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
}

/// `len` bytes or so of text with everything JSON has to escape in it.
fn awkward_text(len: usize) -> String {
    let pieces = [
        "plain words ",
        "\"quoted\" ",
        "back\\slash ",
        "new\nline ",
        "tab\t",
        "ünïcødé ",
        "🦀 ",
        "{\"not\": \"json\"} ",
        "\u{0001}",
    ];
    let mut s = String::with_capacity(len + 32);
    let mut i = 0usize;
    while s.len() < len {
        s.push_str(pieces[i % pieces.len()]);
        s.push_str(&i.to_string());
        i += 1;
    }
    s
}

#[tokio::test]
async fn a_300_kb_input_reaches_the_upstream_intact_and_comes_back_intact() {
    let upstream = ToolServer::start(catalog(vec![tool("Text.Echo", "1.0.0", text_schema())])).await;
    upstream.on_call(echo);
    let gw = GatewayConfig::new().upstream("text", &upstream.url()).start().await;
    gw.wait_for_tool("Text.Echo@1.0.0").await;
    let text = awkward_text(300 * 1024);

    let resp = gw.call("Text.Echo@1.0.0", json!({"text": text})).await;

    let result = resp.result();
    assert_eq!(upstream.call_count(), 1);
    let seen = upstream.last_request()["input"]["text"].as_str().expect("the upstream got a text").to_owned();
    assert_eq!(seen.len(), text.len(), "the upstream saw {} bytes of {}", seen.len(), text.len());
    assert!(seen == text, "the upstream saw exactly the input");
    assert!(result["value"]["text"].as_str() == Some(text.as_str()), "the answer came back intact");
}

#[tokio::test]
async fn a_body_over_max_body_bytes_is_413_and_never_reaches_the_upstream() {
    let upstream = ToolServer::start(catalog(vec![tool("Text.Echo", "1.0.0", text_schema())])).await;
    let gw = GatewayConfig::new().max_body_bytes(16 * 1024).upstream("text", &upstream.url()).start().await;
    gw.wait_for_tool("Text.Echo@1.0.0").await;

    // Just under the limit: fine.
    let small = gw.call("Text.Echo@1.0.0", json!({"text": "x".repeat(15 * 1024)})).await;
    small.result();
    assert_eq!(upstream.call_count(), 1);

    // Over it: 413 with a ServerErrorResponse body.
    let big = gw.call("Text.Echo@1.0.0", json!({"text": "x".repeat(40 * 1024)})).await;
    big.server_error(413);
    assert_eq!(upstream.call_count(), 1, "an oversized call is never forwarded");

    // The gateway still serves afterwards.
    gw.call("Text.Echo@1.0.0", json!({"text": "after"})).await.result();
    assert_eq!(upstream.call_count(), 2);
}

#[tokio::test]
async fn the_limit_applies_to_the_bare_call_path_too() {
    let upstream = ToolServer::start(catalog(vec![tool("Text.Echo", "1.0.0", text_schema())])).await;
    let gw = GatewayConfig::new().max_body_bytes(8 * 1024).upstream("text", &upstream.url()).start().await;
    gw.wait_for_tool("Text.Echo@1.0.0").await;

    let body = json!({"request": {"tool_id": "Text.Echo@1.0.0", "input": {"text": "y".repeat(20 * 1024)}}});
    let resp = gw.post_json("/call", &body).await;

    resp.server_error(413);
    assert_eq!(upstream.call_count(), 0);
}
