//! The stream on which an MCP server announces that its tool list changed:
//!
//! - 2025-11-25 and before (a session whose `initialize` result declared
//!   `capabilities.tools.listChanged`): the session's standalone GET stream;
//! - 2026-07-28 (a server whose `server/discover` declared it): a
//!   `subscriptions/listen` request for `toolsListChanged`, whose answer is
//!   the stream; its first message is `notifications/subscriptions/acknowledged`.
//!
//! The watcher is told when the stream opens (changes may have been missed
//! while it was closed) and at each `notifications/tools/list_changed`.
//! Opening is bounded by a deadline, each event by a byte limit, quiet by an
//! idle limit after which the stream is opened anew (a connection that died
//! silently is not kept forever). A server that offers no stream is not
//! asked again until the link to it is made anew.

use super::*;

/// The notification that the tool list changed.
const TOOLS_LIST_CHANGED: &str = "notifications/tools/list_changed";
/// The first message of a `subscriptions/listen` stream.
const ACKNOWLEDGED: &str = "notifications/subscriptions/acknowledged";

/// At most one `ping` a second is answered on a stream: a server that
/// floods them costs the gateway nothing.
const PING_ANSWER_GAP: Duration = Duration::from_secs(1);

/// What the stream tells its watcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolListEvent {
    /// The stream is open (and, in 2026-07-28, acknowledged).
    Opened,
    /// `notifications/tools/list_changed`.
    Changed,
}

/// How one watch ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEnd {
    /// The server offers no stream, and the link to it was since made anew
    /// (or dropped): look again at once.
    Relinked,
    /// Nothing came within the idle limit: open the stream again at once.
    Quiet,
    /// Not opened, or closed: try again after a pause.
    Dropped(String),
}

/// The bounds of one watch.
#[derive(Debug, Clone, Copy)]
pub struct WatchSettings<'a> {
    /// Connecting (the probe and `initialize` included), opening the stream
    /// and, in 2026-07-28, its acknowledgement.
    pub open_timeout: Duration,
    /// The longest the stream may stay silent (keep-alive comments count)
    /// before it is opened anew.
    pub idle_timeout: Duration,
    /// The largest event (and the largest answer while connecting).
    pub max_event_bytes: usize,
    /// Sent as `Authorization`.
    pub authorization: Option<&'a HeaderValue>,
}

/// One stream's outcome, before the watcher is told.
enum Stream {
    /// The server does not announce tool list changes on this link.
    NotOffered,
    /// The link no longer fits (the session expired, the server changed
    /// eras) and was dropped: worth one new link at once.
    Stale(String),
    /// The watch is over.
    End(WatchEnd),
}

/// What a message on the stream calls for.
enum Flow {
    Continue,
    /// The 2026-07-28 acknowledgement came: from now on only quiet ends it.
    Acknowledged,
    Stop(Stream),
}

fn dropped(reason: impl Into<String>) -> Stream {
    Stream::End(WatchEnd::Dropped(reason.into()))
}

impl McpClient {
    /// Opens the stream that announces tool list changes (connecting first
    /// if there is no link yet) and reads it until it ends, telling
    /// `on_event` as it opens and at each change. When the server offers no
    /// such stream, waits until the link to it is made anew. Cancel it by
    /// dropping the future: that closes the stream's connection.
    pub async fn watch_tool_list(
        &self,
        settings: WatchSettings<'_>,
        on_event: &(dyn Fn(ToolListEvent) + Send + Sync),
    ) -> WatchEnd {
        for attempt in 0..2 {
            let deadline = Instant::now() + settings.open_timeout;
            let exchange = Exchange {
                passthrough: None,
                timeout: settings.open_timeout,
                max_bytes: settings.max_event_bytes,
                authorization: settings.authorization,
                circuit: None,
                span: None,
            };
            let link = match self.link(exchange, deadline).await {
                Ok(link) => link,
                Err(e) => return WatchEnd::Dropped(format!("cannot connect: {e}")),
            };
            let relinked = self.relinked.subscribe();
            let stream = match &*link {
                Channel::R2025_11_25(session) if session.tools_list_changed => {
                    self.session_stream(&link, session, &settings, deadline, on_event).await
                }
                Channel::R2026_07_28(stateless) if stateless.tools_list_changed => {
                    self.listen_stream(&link, stateless, &settings, deadline, on_event).await
                }
                _ => Stream::NotOffered,
            };
            match stream {
                // Once at once (a server back from a restart knows no session);
                // a second time, after the watcher's pause.
                Stream::Stale(reason) if attempt == 0 => {
                    tracing::debug!(endpoint = %self.endpoint, reason, "reconnecting for the tool list change stream");
                }
                Stream::Stale(reason) => return WatchEnd::Dropped(reason),
                Stream::End(end) => return end,
                Stream::NotOffered => return self.until_relinked(&link, relinked).await,
            }
        }
        WatchEnd::Dropped("unreachable: the reconnect loop ended".into())
    }

    /// Waits until the link is made anew (or dropped), the server offering no
    /// stream on `link`.
    async fn until_relinked(&self, link: &Arc<Channel>, mut relinked: tokio::sync::watch::Receiver<u64>) -> WatchEnd {
        // The link may have changed before `relinked` was subscribed to.
        if !self.is_current(link) {
            return WatchEnd::Relinked;
        }
        tracing::debug!(endpoint = %self.endpoint, "the MCP server does not announce tool list changes");
        if relinked.changed().await.is_err() {
            // The client is gone: nothing will ever change.
            std::future::pending::<()>().await;
        }
        WatchEnd::Relinked
    }

    /// Whether `link` is still the current link.
    fn is_current(&self, link: &Arc<Channel>) -> bool {
        self.link.load().as_ref().is_some_and(|current| Arc::ptr_eq(current, link))
    }

    /// 2025-11-25: the session's standalone GET stream.
    async fn session_stream(
        &self,
        link: &Arc<Channel>,
        session: &Session,
        settings: &WatchSettings<'_>,
        deadline: Instant,
        on_event: &(dyn Fn(ToolListEvent) + Send + Sync),
    ) -> Stream {
        let headers = session.headers();
        let mut request = Request::get(self.endpoint.clone()).header(ACCEPT, "text/event-stream");
        if let Some(map) = request.headers_mut() {
            map.extend(headers.iter().map(|(k, v)| (k.clone(), v.clone())));
            if let Some(authorization) = settings.authorization {
                map.insert(AUTHORIZATION, authorization.clone());
            }
        }
        let request = match request.body(Full::new(Bytes::new())) {
            Ok(request) => request,
            Err(e) => return dropped(e.to_string()),
        };
        let response = match tokio::time::timeout_at(deadline, self.http.request(request)).await {
            Err(_) => return dropped(format!("the GET stream did not open within {:?}", settings.open_timeout)),
            Ok(Err(e)) => return dropped(format!("cannot open the GET stream: {}", error_chain(&e))),
            Ok(Ok(response)) => response,
        };
        match response.status() {
            StatusCode::METHOD_NOT_ALLOWED => return Stream::NotOffered,
            StatusCode::NOT_FOUND => {
                self.forget(link);
                return Stream::Stale("the session expired".into());
            }
            status if !status.is_success() => return dropped(format!("the GET stream answered HTTP {status}")),
            _ if !is_event_stream(response.headers()) => return Stream::NotOffered,
            _ => {}
        }
        tracing::debug!(endpoint = %self.endpoint, "listening for tool list changes on the session's GET stream");
        on_event(ToolListEvent::Opened);
        let mut answered: Option<Instant> = None;
        self.read_events(response.into_body(), settings, None, |message| {
            match message {
                Message::Notification { method, .. } if method == TOOLS_LIST_CHANGED => {
                    on_event(ToolListEvent::Changed)
                }
                Message::Request { id, method, .. } if answered.is_none_or(|at| at.elapsed() >= PING_ANSWER_GAP) => {
                    answered = Some(Instant::now());
                    self.answer(&headers, id, &method, settings.authorization);
                }
                _ => {}
            }
            Flow::Continue
        })
        .await
    }

    /// 2026-07-28: `subscriptions/listen` for tool list changes.
    async fn listen_stream(
        &self,
        link: &Arc<Channel>,
        stateless: &Stateless,
        settings: &WatchSettings<'_>,
        deadline: Instant,
        on_event: &(dyn Fn(ToolListEvent) + Send + Sync),
    ) -> Stream {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let params = with_meta(&json!({"notifications": {"toolsListChanged": true}}), &stateless.version, None);
        let body = serialise(&OutgoingRequest::request(id, "subscriptions/listen", Some(&params)));
        let request = match self.build(
            &headers_2026_07_28(&stateless.version, "subscriptions/listen"),
            body,
            settings.authorization,
        ) {
            Ok(request) => request,
            Err(e) => return dropped(e.to_string()),
        };
        let response = match tokio::time::timeout_at(deadline, self.http.request(request)).await {
            Err(_) => {
                return dropped(format!("subscriptions/listen did not answer within {:?}", settings.open_timeout))
            }
            Ok(Err(e)) => return dropped(format!("cannot send subscriptions/listen: {}", error_chain(&e))),
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        if !status.is_success() || !is_event_stream(response.headers()) {
            let limit = ERROR_BODY_LIMIT.min(settings.max_event_bytes);
            let body =
                read_limited(response.into_body(), limit, deadline, settings.open_timeout).await.unwrap_or_default();
            let error = match Message::from_slice(&body) {
                Ok(Message::Error { mut error, .. }) => {
                    without_sent(&mut error, credential(settings.authorization));
                    Some(error)
                }
                _ => None,
            };
            return match error {
                Some(error) if error.code == METHOD_NOT_FOUND => Stream::NotOffered,
                Some(error) if error.code == UNSUPPORTED_PROTOCOL_VERSION => {
                    self.forget(link);
                    Stream::Stale(unsupported(&error))
                }
                Some(error) => dropped(format!(
                    "subscriptions/listen answered HTTP {status} with JSON-RPC error {}: {}",
                    error.code, error.message
                )),
                None if matches!(status.as_u16(), 400 | 404 | 405) => {
                    // Not an answer of 2026-07-28: probe the server again.
                    self.forget(link);
                    Stream::Stale(format!("subscriptions/listen answered HTTP {status} without a JSON-RPC error"))
                }
                None if status.is_success() => dropped("subscriptions/listen was answered without a stream"),
                None => dropped(format!("subscriptions/listen answered HTTP {status}")),
            };
        }
        self.read_events(response.into_body(), settings, Some(deadline), |message| match message {
            Message::Notification { method, params } if method == ACKNOWLEDGED => {
                if params.pointer("/notifications/toolsListChanged").and_then(Value::as_bool) != Some(true) {
                    return Flow::Stop(Stream::NotOffered);
                }
                tracing::debug!(endpoint = %self.endpoint, "listening for tool list changes (subscriptions/listen)");
                on_event(ToolListEvent::Opened);
                Flow::Acknowledged
            }
            Message::Notification { method, .. } if method == TOOLS_LIST_CHANGED => {
                on_event(ToolListEvent::Changed);
                Flow::Continue
            }
            Message::Response { id: answered, .. } | Message::Error { id: answered, .. }
                if answered.as_u64() == Some(id) =>
            {
                Flow::Stop(dropped("the server ended the subscription"))
            }
            _ => Flow::Continue,
        })
        .await
    }

    /// Reads a stream's events until `handle` stops it or the stream ends.
    /// Until `ack_by` (when given) is cleared by [`Flow::Acknowledged`], a
    /// silent stream is a failure; after, silence past the idle limit ends
    /// the watch quietly.
    async fn read_events(
        &self,
        mut body: hyper::body::Incoming,
        settings: &WatchSettings<'_>,
        mut ack_by: Option<Instant>,
        mut handle: impl FnMut(Message) -> Flow,
    ) -> Stream {
        let mut parser = SseParser::new();
        loop {
            let until = ack_by.unwrap_or_else(|| Instant::now() + settings.idle_timeout);
            let frame = match tokio::time::timeout_at(until, body.frame()).await {
                Err(_) if ack_by.is_some() => {
                    return dropped(format!("no acknowledgement within {:?}", settings.open_timeout))
                }
                Err(_) => return Stream::End(WatchEnd::Quiet),
                Ok(None) => return dropped("the server closed the stream"),
                Ok(Some(Err(e))) => return dropped(format!("the stream broke: {}", error_chain(&e))),
                Ok(Some(Ok(frame))) => frame,
            };
            let Ok(chunk) = frame.into_data() else { continue };
            for event in parser.push(&chunk) {
                if event.data.len() > settings.max_event_bytes {
                    return dropped(format!("an event of more than {} bytes", settings.max_event_bytes));
                }
                let Some(message) = self.event_message(&event) else { continue };
                match handle(message) {
                    Flow::Continue => {}
                    Flow::Acknowledged => ack_by = None,
                    Flow::Stop(stream) => return stream,
                }
            }
            if parser.buffered() > settings.max_event_bytes {
                return dropped(format!("an event of more than {} bytes", settings.max_event_bytes));
            }
        }
    }
}
