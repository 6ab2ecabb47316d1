//! One HTTP exchange with the MCP endpoint: a POST and its answer, one JSON
//! object or an event stream read to the response with the request's id
//! (a session's `ping`s answered, other server requests refused on the
//! side), bounded by the exchange's deadline and byte limit.

use super::*;

/// The answer to a POST: the message (none for a notification) and the
/// session id header.
pub(super) struct Posted {
    /// The answer (none for a notification).
    pub message: Option<Message>,
    /// `Mcp-Session-Id`, when the server sent one.
    pub session_id: Option<HeaderValue>,
}

impl McpClient {
    /// One POST: a request (`expect` is its id) or a notification (`expect`
    /// is `None`; any 2xx will do). Server requests on a reply stream are
    /// answered with `answer_with`'s headers; with `None` (2026-07-28, where
    /// servers send none) they are skipped.
    pub(super) async fn post(
        &self,
        headers: &HeaderMap,
        answer_with: Option<&HeaderMap>,
        body: Bytes,
        expect: Option<u64>,
        exchange: Exchange<'_>,
        deadline: Instant,
    ) -> Result<Posted, McpError> {
        let mut request = self.build(headers, body, exchange.authorization)?;
        if let Some(span) = exchange.span {
            if let Ok(value) = HeaderValue::from_bytes(span.traceparent().as_bytes()) {
                request.headers_mut().insert("traceparent", value);
            }
        }
        let response = match tokio::time::timeout_at(deadline, self.http.request(request)).await {
            Err(_) => return Err(McpError::Timeout(exchange.timeout)),
            Ok(Err(e)) if e.is_connect() => {
                if let Some(circuit) = exchange.circuit {
                    circuit.record_failure();
                }
                return Err(McpError::Connect(error_chain(&e)));
            }
            Ok(Err(e)) => return Err(McpError::Broken(error_chain(&e))),
            Ok(Ok(response)) => response,
        };
        if let Some(circuit) = exchange.circuit {
            circuit.record_success();
        }
        let status = response.status();
        let session_id = response.headers().get(SESSION_HEADER).cloned();
        let is_stream = is_event_stream(response.headers());
        if status == StatusCode::NOT_FOUND && headers.contains_key(SESSION_HEADER) {
            return Err(McpError::SessionExpired);
        }
        if !status.is_success() {
            let limit = ERROR_BODY_LIMIT.min(exchange.max_bytes);
            let body = read_limited(response.into_body(), limit, deadline, exchange.timeout).await.unwrap_or_default();
            return Err(refusal(status, &body, sent(&exchange)));
        }
        let Some(expect) = expect else {
            // Notifications are answered 202 with no body; a body, if any,
            // is not read (the connection is simply not reused).
            return Ok(Posted { message: None, session_id });
        };
        if status == StatusCode::ACCEPTED {
            return Err(McpError::Protocol("answered 202 Accepted to a request".into()));
        }
        let mut message = if is_stream {
            self.read_stream(response.into_body(), answer_with, expect, exchange, deadline).await?
        } else {
            let body = read_limited(response.into_body(), exchange.max_bytes, deadline, exchange.timeout).await?;
            let message = Message::from_slice(&body).map_err(|e| {
                McpError::Protocol(format!("not a JSON-RPC message ({e}): {}", snippet(&body, sent(&exchange))))
            })?;
            if !answers(&message, expect) {
                return Err(McpError::Protocol(format!("the answer is not the response to request {expect}")));
            }
            message
        };
        if let Message::Error { error, .. } = &mut message {
            without_sent(error, sent(&exchange));
        }
        Ok(Posted { message: Some(message), session_id })
    }

    /// Reads an event stream until the response to request `expect`.
    pub(super) async fn read_stream(
        &self,
        mut body: hyper::body::Incoming,
        answer_with: Option<&HeaderMap>,
        expect: u64,
        exchange: Exchange<'_>,
        deadline: Instant,
    ) -> Result<Message, McpError> {
        let mut parser = SseParser::new();
        let mut received = 0usize;
        loop {
            let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
                Err(_) => return Err(McpError::Timeout(exchange.timeout)),
                Ok(None) => return Err(McpError::Broken("the event stream ended before the response".into())),
                Ok(Some(Err(e))) => return Err(McpError::Broken(error_chain(&e))),
                Ok(Some(Ok(frame))) => frame,
            };
            let Ok(chunk) = frame.into_data() else { continue };
            received += chunk.len();
            if received > exchange.max_bytes {
                return Err(McpError::TooLarge(exchange.max_bytes));
            }
            for event in parser.push(&chunk) {
                let Some(message) = self.event_message(&event) else { continue };
                if answers(&message, expect) {
                    return Ok(message);
                }
                match message {
                    Message::Request { id, method, .. } => match answer_with {
                        Some(headers) => self.answer(headers, id, &method, exchange.authorization),
                        None => {
                            tracing::debug!(endpoint = %self.endpoint, method, "skipping a request from an MCP 2026-07-28 server")
                        }
                    },
                    Message::Notification { method, .. } => {
                        tracing::debug!(endpoint = %self.endpoint, method, "skipping an MCP notification");
                    }
                    _ => {}
                }
            }
        }
    }

    /// Answers a server's request in a session: `ping`, or a refusal (the
    /// gateway offers no client capabilities).
    pub(super) fn answer(&self, headers: &HeaderMap, id: Value, method: &str, authorization: Option<&HeaderValue>) {
        let answer = if method == "ping" {
            OutgoingResponse::result(id, json!({}))
        } else {
            OutgoingResponse::error(id, METHOD_NOT_FOUND, format!("the gateway does not offer {method}"))
        };
        self.send_aside(headers, answer.to_bytes(), authorization);
    }

    /// Tells the server a timed-out request is abandoned (best effort).
    pub(super) fn cancel(&self, session: &Session, id: u64, authorization: Option<&HeaderValue>) {
        let params = json!({"requestId": id, "reason": "the gateway's call_timeout elapsed"});
        let body = serialise(&OutgoingRequest::notification("notifications/cancelled", Some(&params)));
        self.send_aside(&session.headers(), body, authorization);
    }

    /// POSTs a message in the background without waiting for it.
    pub(super) fn send_aside(&self, headers: &HeaderMap, body: Bytes, authorization: Option<&HeaderValue>) {
        let request = match self.build(headers, body, authorization) {
            Ok(request) => request,
            Err(e) => {
                tracing::debug!(error = %e, "cannot build a message to the MCP server");
                return;
            }
        };
        let http = self.http.clone();
        tokio::spawn(async move {
            if let Ok(Err(e)) = tokio::time::timeout(SIDE_MESSAGE_TIMEOUT, http.request(request)).await {
                tracing::debug!(error = %e, "a message to the MCP server was not delivered");
            }
        });
    }

    pub(super) fn build(
        &self,
        headers: &HeaderMap,
        body: Bytes,
        authorization: Option<&HeaderValue>,
    ) -> Result<Request<Full<Bytes>>, McpError> {
        let mut request = Request::post(self.endpoint.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json, text/event-stream");
        if let Some(map) = request.headers_mut() {
            map.extend(headers.iter().map(|(k, v)| (k.clone(), v.clone())));
            if let Some(authorization) = authorization {
                map.insert(AUTHORIZATION, authorization.clone());
            }
        }
        request.body(Full::new(body)).map_err(|e| McpError::Protocol(e.to_string()))
    }
}

pub(super) fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.trim_start().to_ascii_lowercase().starts_with("text/event-stream"))
}

/// Whether `message` is the response (or error) to request `id`.
fn answers(message: &Message, id: u64) -> bool {
    match message {
        Message::Response { id: got, .. } | Message::Error { id: got, .. } => got.as_u64() == Some(id),
        _ => false,
    }
}

pub(super) fn serialise<T: serde::Serialize>(message: &T) -> Bytes {
    // Serialising plain data into a Vec cannot fail.
    Bytes::from(serde_json::to_vec(message).unwrap_or_default())
}

/// Reads a whole body of at most `limit` bytes before `deadline`.
pub(super) async fn read_limited(
    body: hyper::body::Incoming,
    limit: usize,
    deadline: Instant,
    timeout: Duration,
) -> Result<Bytes, McpError> {
    let collect = http_body_util::Limited::new(body, limit).collect();
    match tokio::time::timeout_at(deadline, collect).await {
        Err(_) => Err(McpError::Timeout(timeout)),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(McpError::TooLarge(limit)),
        Ok(Err(e)) => Err(McpError::Broken(e.to_string())),
    }
}

/// The start of a body, printable, for an error message; the credential
/// the exchange sent (`sent`) is scrubbed from the whole body first.
pub(super) fn snippet(body: &[u8], sent: Option<&str>) -> String {
    scrub::excerpt(body, sent.as_slice(), 200)
}

/// The credential an exchange sends in `Authorization`, which no error
/// made from the server's answer may show.
pub(super) fn sent<'e>(exchange: &Exchange<'e>) -> Option<&'e str> {
    credential(exchange.authorization)
}

/// The credential of an `Authorization` header.
pub(super) fn credential(authorization: Option<&HeaderValue>) -> Option<&str> {
    authorization.and_then(|a| a.to_str().ok()).map(scrub::credential)
}

/// A server's error without the credential it was sent (`sent`), in any
/// spelling: its words are logged, kept in `/status` and passed on.
pub(super) fn without_sent(error: &mut ErrorObject, sent: Option<&str>) {
    scrub::text(&mut error.message, sent.as_slice());
    if let Some(data) = &mut error.data {
        scrub::value(data, sent.as_slice());
    }
}
