//! A plain HTTP/1 client.

use super::*;

/// A response from the gateway.
#[derive(Debug)]
pub struct Resp {
    /// The status code.
    pub status: u16,
    /// The headers.
    pub headers: HeaderMap,
    /// The whole body.
    pub body: Bytes,
}

impl Resp {
    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON; panics (showing the body) when it is not.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("response ({}) is not JSON ({e}): {}", self.status, self.text()))
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.get(name).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    }

    /// Panics with the body unless the status is `status`.
    pub fn expect_status(&self, status: u16) -> &Self {
        assert_eq!(self.status, status, "expected HTTP {status}, got {} with body: {}", self.status, self.text());
        self
    }

    /// The `result` object of a 200 call response, after checking the envelope.
    pub fn result(&self) -> Value {
        self.expect_status(200);
        let body = self.json();
        assert_eq!(body["$schema"], "otc://1.0", "a call response must carry $schema otc://1.0: {body}");
        assert!(body["result"].is_object(), "a call response must be wrapped in result: {body}");
        body["result"].clone()
    }

    /// Checks a ServerErrorResponse: this status, JSON, `$schema`, a
    /// non-empty `message` and a non-empty `developer_message`. Returns the body.
    pub fn server_error(&self, status: u16) -> Value {
        self.expect_status(status);
        let body = self.json();
        assert_eq!(body["$schema"], "otc://1.0", "error body must carry $schema otc://1.0: {body}");
        assert!(
            body["message"].as_str().is_some_and(|m| !m.trim().is_empty()),
            "error body must have a non-empty message: {body}"
        );
        assert!(
            body["developer_message"].as_str().is_some_and(|m| !m.trim().is_empty()),
            "error body must have a non-empty developer_message: {body}"
        );
        body
    }

    /// Checks a 422 ValidationErrorResponse and returns its `parameter_errors`.
    pub fn parameter_errors(&self) -> serde_json::Map<String, Value> {
        self.expect_status(422);
        let body = self.json();
        assert_eq!(body["$schema"], "otc://1.0", "422 body must carry $schema otc://1.0: {body}");
        assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()), "422 body must have a message: {body}");
        body["parameter_errors"]
            .as_object()
            .unwrap_or_else(|| panic!("422 body must have a parameter_errors object: {body}"))
            .clone()
    }
}

/// Reads a raw connection until the gateway closes it or `limit` passes:
/// what came back, and whether it was closed.
pub async fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> (String, bool) {
    use tokio::io::AsyncReadExt;
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (String::from_utf8_lossy(&out).into_owned(), true),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Err(_) => return (String::from_utf8_lossy(&out).into_owned(), false),
        }
    }
}

/// Writes raw bytes on a new connection and reads until the gateway closes
/// it or `limit` passes: what came back, and whether it was closed.
pub async fn raw_exchange(addr: SocketAddr, request: &[u8], limit: Duration) -> (String, bool) {
    use tokio::io::AsyncWriteExt;
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request).await.expect("write");
    read_until_closed(&mut stream, limit).await
}

/// Reads one answer with a Content-Length body (or none) off a kept-alive
/// connection: its head and body, as text.
pub async fn read_one_answer(stream: &mut TcpStream) -> String {
    use tokio::io::AsyncReadExt;
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

/// Reads `count` complete answers (each with a Content-Length JSON body)
/// from `stream`; each answer's status and body.
pub async fn read_answers(stream: &mut TcpStream, count: usize) -> Vec<(String, Value)> {
    use tokio::io::AsyncReadExt;
    let mut bytes = Vec::new();
    let mut answers = Vec::new();
    let mut buf = [0u8; 8192];
    while answers.len() < count {
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let head = text[..end].to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .and_then(|v| v.trim().parse().ok())
                .expect("every answer has a content-length");
            if bytes.len() >= end + 4 + len {
                let body = serde_json::from_slice(&bytes[end + 4..end + 4 + len]).expect("a JSON body");
                answers.push((head[9..12].to_owned(), body));
                bytes.drain(..end + 4 + len);
                continue;
            }
        }
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
            .await
            .expect("an answer")
            .expect("read");
        assert!(n > 0, "closed after {} answers of {count}", answers.len());
        bytes.extend_from_slice(&buf[..n]);
    }
    answers
}

/// The status code of a raw answer (`HTTP/1.1 200 OK...` -> `200`).
pub fn status_of(answer: &str) -> &str {
    answer.get(9..12).unwrap_or("")
}

/// The body of a call of `Calculator.Add@1.0.0` with a = 1, b = 2.
pub fn add_call_body() -> String {
    json!({"request": {"tool_id": "Calculator.Add@1.0.0", "input": {"a": 1, "b": 2}}}).to_string()
}

/// A raw POST /tools/call with this body, `Host`, `Content-Type` and
/// `extra_headers` (each line ending in CRLF).
pub fn call_request(body: &str, extra_headers: &str) -> String {
    format!(
        "POST /tools/call HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n{extra_headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// A raw call of `Calculator.Add` ([`add_call_body`]) with exactly these
/// `headers` (each line ending in CRLF) besides its Content-Length.
pub fn call_with_headers(headers: &str) -> String {
    let body = add_call_body();
    format!("POST /tools/call HTTP/1.1\r\n{headers}Content-Length: {}\r\n\r\n{body}", body.len())
}

/// One request on a fresh connection, bounded by [`REQUEST_TIMEOUT`].
pub async fn send(addr: SocketAddr, method: &str, path: &str, body: Bytes, content_type: Option<&str>) -> Resp {
    let headers: Vec<(&str, &str)> = content_type.map(|ct| ("content-type", ct)).into_iter().collect();
    send_with_headers(addr, method, path, body, &headers).await
}

/// One request with extra headers (e.g. `authorization`) on a fresh connection.
pub async fn send_with_headers(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Bytes,
    extra_headers: &[(&str, &str)],
) -> Resp {
    let what = format!("{method} {path} to {addr}");
    let fut = async {
        let stream = TcpStream::connect(addr).await.unwrap_or_else(|e| panic!("{what}: cannot connect: {e}"));
        let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(stream))
            .await
            .unwrap_or_else(|e| panic!("{what}: handshake: {e}"));
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut req = Request::builder().method(method).uri(path).header("host", addr.to_string());
        for (name, value) in extra_headers {
            req = req.header(*name, *value);
        }
        let resp = sender
            .send_request(req.body(Full::new(body)).unwrap())
            .await
            .unwrap_or_else(|e| panic!("{what}: no response: {e}"));
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp.into_body().collect().await.unwrap_or_else(|e| panic!("{what}: body: {e}")).to_bytes();
        Resp { status, headers, body }
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, fut).await {
        Ok(resp) => resp,
        Err(_) => panic!("{what}: no answer within {REQUEST_TIMEOUT:?} (the gateway hung)"),
    }
}
