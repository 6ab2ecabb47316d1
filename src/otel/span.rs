//! One span being recorded: its ids, its attributes, queued when dropped.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{self as proto, span::SpanKind, status::StatusCode, Status};

use super::Tracer;
use crate::trace::Traceparent;

/// What a span is, in OpenTelemetry's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A step inside the gateway.
    Internal,
    /// A request the gateway serves.
    Server,
    /// A request the gateway sends (an upstream call).
    Client,
}

/// A span being recorded. It ends, and is queued for export, when dropped:
/// a step that returns early with `?` still ends its span.
///
/// One pointer: an `Option<Span>` rides in every call's futures, tracing on
/// or off, and with tracing off it must cost what no span costs (a null
/// check, nothing moved or dropped).
pub struct Span(Box<Recording>);

/// What a span holds while it is recorded.
struct Recording {
    tracer: Arc<Tracer>,
    trace_id: [u8; 16],
    span_id: [u8; 8],
    parent: Option<[u8; 8]>,
    name: Cow<'static, str>,
    kind: Kind,
    start: u64,
    attributes: Vec<KeyValue>,
    events: Vec<proto::span::Event>,
    error: Option<String>,
}

impl std::fmt::Debug for Span {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Span").field("name", &self.0.name).field("kind", &self.0.kind).finish_non_exhaustive()
    }
}

/// A future polled inside a recorded span's [`Span::log_context`], so that
/// the lines it logs lead to the trace; without one, polled as it is. One
/// poll site for both, so an unrecorded request's future is compiled as
/// without `[tracing]`; what it costs is a check a poll (an instrumented
/// copy beside it, measured, cost more: the code under it stopped being
/// inlined).
pub struct Logged<'f, F> {
    inner: Pin<&'f mut F>,
    context: Option<Box<tracing::Span>>,
}

impl<'f, F: Future> Logged<'f, F> {
    /// `inner`, inside `context` when there is one.
    pub fn new(inner: Pin<&'f mut F>, context: Option<Box<tracing::Span>>) -> Self {
        Logged { inner, context }
    }
}

impl<F: Future> Future for Logged<'_, F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        let _entered = this.context.as_deref().map(tracing::Span::enter);
        this.inner.as_mut().poll(cx)
    }
}

/// A child of `parent`, when there is a parent (its trace is recorded).
pub fn child(parent: Option<&Span>, name: &'static str, kind: Kind) -> Option<Span> {
    parent.map(|p| p.child(name, kind))
}

impl Span {
    pub(super) fn start(
        tracer: Arc<Tracer>,
        trace_id: [u8; 16],
        parent: Option<[u8; 8]>,
        name: &'static str,
        kind: Kind,
    ) -> Span {
        Span(Box::new(Recording {
            tracer,
            trace_id,
            span_id: new_span_id(),
            parent,
            name: Cow::Borrowed(name),
            kind,
            start: now(),
            attributes: Vec::new(),
            events: Vec::new(),
            error: None,
        }))
    }

    /// A child span, starting now.
    pub fn child(&self, name: &'static str, kind: Kind) -> Span {
        Span::start(self.0.tracer.clone(), self.0.trace_id, Some(self.0.span_id), name, kind)
    }

    /// Renames the span (a name known only once the work is under way,
    /// such as the resolved tool's).
    pub fn rename(&mut self, name: impl Into<Cow<'static, str>>) {
        self.0.name = name.into();
    }

    /// Sets a string attribute. Only names, ids and outcomes: never a
    /// call's input or output, a secret or a token.
    pub fn set(&mut self, key: &'static str, value: impl Into<String>) {
        self.attribute(key, any_value::Value::StringValue(value.into()));
    }

    /// Sets an integer attribute.
    pub fn set_int(&mut self, key: &'static str, value: i64) {
        self.attribute(key, any_value::Value::IntValue(value));
    }

    /// Sets a boolean attribute.
    pub fn set_bool(&mut self, key: &'static str, value: bool) {
        self.attribute(key, any_value::Value::BoolValue(value));
    }

    fn attribute(&mut self, key: &'static str, value: any_value::Value) {
        let value = Some(AnyValue { value: Some(value) });
        match self.0.attributes.iter_mut().find(|kv| kv.key == key) {
            Some(kv) => kv.value = value,
            None => self.0.attributes.push(KeyValue { key: key.to_owned(), value, ..Default::default() }),
        }
    }

    /// Adds an event, now, with string attributes (as [`Span::set`]: names,
    /// ids and outcomes only).
    pub fn event(&mut self, name: &'static str, attributes: &[(&'static str, &str)]) {
        let attributes = attributes
            .iter()
            .map(|(key, value)| KeyValue {
                key: (*key).to_owned(),
                value: Some(AnyValue { value: Some(any_value::Value::StringValue((*value).to_owned())) }),
                ..Default::default()
            })
            .collect();
        let event =
            proto::span::Event { time_unix_nano: now(), name: name.to_owned(), attributes, ..Default::default() };
        self.0.events.push(event);
    }

    /// Marks the span failed, with `error.type` and a status message (a
    /// short kind, never text a peer wrote).
    pub fn fail(&mut self, error_type: impl Into<String>) {
        let error_type = error_type.into();
        self.set("error.type", error_type.clone());
        self.0.error = Some(error_type);
    }

    /// Whether the span is marked failed.
    pub fn is_failed(&self) -> bool {
        self.0.error.is_some()
    }

    /// The `traceparent` naming this span as the parent.
    pub fn traceparent(&self) -> Traceparent {
        Traceparent::of_span(&self.0.trace_id, &self.0.span_id)
    }

    /// A `tracing` span naming this one: every log line written inside it
    /// carries `trace_id` and `span_id`, so it leads to its trace. Made only
    /// for a recorded span: an unrecorded request's log lines cost what
    /// they cost without `[tracing]`. (`error` level: enabled whenever any
    /// line is logged, so no level filter hides the ids.)
    pub fn log_context(&self) -> Box<tracing::Span> {
        let (trace_id, span_id) = (self.trace_id_hex(), self.span_id_hex());
        Box::new(tracing::error_span!("trace", trace_id = trace_id.as_str(), span_id = span_id.as_str()))
    }

    /// The trace id in hex, for log lines.
    pub fn trace_id_hex(&self) -> String {
        hex(&self.0.trace_id)
    }

    /// The span id in hex, for log lines.
    pub fn span_id_hex(&self) -> String {
        hex(&self.0.span_id)
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        let kind = match self.0.kind {
            Kind::Internal => SpanKind::Internal,
            Kind::Server => SpanKind::Server,
            Kind::Client => SpanKind::Client,
        };
        let status = self.0.error.take().map(|message| Status { message, code: StatusCode::Error as i32 });
        let span = proto::Span {
            trace_id: self.0.trace_id.to_vec(),
            span_id: self.0.span_id.to_vec(),
            parent_span_id: self.0.parent.map_or_else(Vec::new, |p| p.to_vec()),
            // The W3C trace flags: sampled.
            flags: 1,
            name: std::mem::take(&mut self.0.name).into_owned(),
            kind: kind as i32,
            start_time_unix_nano: self.0.start,
            end_time_unix_nano: now().max(self.0.start),
            attributes: std::mem::take(&mut self.0.attributes),
            events: std::mem::take(&mut self.0.events),
            status,
            ..Default::default()
        };
        self.0.tracer.enqueue(span);
    }
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// A random `u64` from the thread's generator (uuid's fast-rng). The
/// high half of a v4 uuid: its fixed version bits are low in it, and the
/// sampling comparison reads the high ones.
pub(super) fn random_u64() -> u64 {
    uuid::Uuid::new_v4().as_u64_pair().0
}

/// A new random trace id (never all zeros).
pub(super) fn new_trace_id() -> [u8; 16] {
    let mut id = uuid::Uuid::new_v4().as_u128().to_be_bytes();
    id[15] |= 1;
    id
}

fn new_span_id() -> [u8; 8] {
    (random_u64() | 1).to_be_bytes()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
