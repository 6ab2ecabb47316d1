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

/// One request on a fresh connection, bounded by [`REQUEST_TIMEOUT`].
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
