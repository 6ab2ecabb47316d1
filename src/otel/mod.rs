//! Traces over OTLP (`[tracing]`): the gateway's spans, recorded only for a
//! sampled request and exported in batches off the call path.
//!
//! A generation has a [`Tracer`] only when `[tracing]` is set: every step of
//! a call asks for a span through an `Option`, so with tracing off a call
//! pays that check and nothing else. A sampled request gets a server span
//! ([`Tracer::start_request`]); its steps record children ([`Span::child`]),
//! each queued when it ends (dropped: an early return ends it too). The
//! queue is bounded and never waits: when it is full, or an export fails,
//! spans are dropped and counted ([`TraceStats`]), and calls go on as ever.

mod export;
mod span;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use http::{HeaderName, HeaderValue};
use opentelemetry_proto::tonic::trace::v1 as proto;
use tokio::sync::mpsc;

use crate::config::TracingConfig;
use crate::trace::SpanContext;

pub use span::{child, Kind, Logged, Span};

/// Spans waiting for export, at most (OpenTelemetry's default queue size).
const QUEUE: usize = 2048;

/// Spans exported, and spans lost (a full queue, a failed export): since
/// start, across reloads (a new exporter keeps counting here).
#[derive(Debug, Default)]
pub struct TraceStats {
    exported: AtomicU64,
    dropped: AtomicU64,
}

impl TraceStats {
    /// Spans the collector accepted.
    pub fn exported(&self) -> u64 {
        self.exported.load(Ordering::Relaxed)
    }

    /// Spans lost before reaching the collector.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// The process's span counts (one gateway per process; tests' gateways
/// each run in their own).
pub fn stats() -> &'static TraceStats {
    static STATS: TraceStats = TraceStats { exported: AtomicU64::new(0), dropped: AtomicU64::new(0) };
    &STATS
}

/// Records and exports spans for one `[tracing]` section. Dropping it (a
/// reload that changed the section) lets its exporter send what is queued
/// and stop.
#[derive(Debug)]
pub struct Tracer {
    /// The section it was built from (a reload keeping it keeps the tracer).
    config: TracingConfig,
    /// A new trace is sampled when a random `u64` is below this.
    threshold: u64,
    /// Always sample a new trace (`sample_ratio = 1.0`).
    always: bool,
    queue: mpsc::Sender<proto::Span>,
}

impl Tracer {
    /// A tracer for `config`, sending with `headers` (the section's, read);
    /// starts its exporter, so it runs inside a tokio runtime.
    pub fn start(config: TracingConfig, headers: Vec<(HeaderName, HeaderValue)>) -> Result<Arc<Tracer>, String> {
        let (queue, spans) = mpsc::channel(QUEUE);
        let exporter = export::Exporter::new(&config, headers)?;
        tokio::spawn(exporter.run(spans));
        let ratio = config.sample_ratio;
        Ok(Arc::new(Tracer { threshold: (ratio * u64::MAX as f64) as u64, always: ratio >= 1.0, config, queue }))
    }

    /// Whether this tracer was built from exactly `config`.
    pub fn is_for(&self, config: &TracingConfig) -> bool {
        &self.config == config
    }

    /// The server span of a request, if its trace is recorded: a child of
    /// a valid incoming `traceparent`, whose sampled flag decides; else a new
    /// trace, sampled at `sample_ratio`.
    pub fn start_request(self: &Arc<Self>, incoming: Option<&[u8]>, name: &'static str) -> Option<Span> {
        let parent = incoming.and_then(|v| std::str::from_utf8(v).ok()).and_then(SpanContext::parse);
        match parent {
            Some(parent) if parent.sampled => {
                Some(Span::start(self.clone(), parent.trace_id, Some(parent.span_id), name, Kind::Server))
            }
            Some(_) => None,
            None if self.always || span::random_u64() < self.threshold => {
                Some(Span::start(self.clone(), span::new_trace_id(), None, name, Kind::Server))
            }
            None => None,
        }
    }

    /// A span continuing the trace of a `traceparent` the gateway itself
    /// made for a recorded span (a front's server span): `None` unless it
    /// says the trace is sampled.
    pub fn continue_trace(self: &Arc<Self>, traceparent: Option<&str>, name: &'static str) -> Option<Span> {
        let parent = SpanContext::parse(traceparent?).filter(|p| p.sampled)?;
        Some(Span::start(self.clone(), parent.trace_id, Some(parent.span_id), name, Kind::Internal))
    }

    /// A root span of the gateway's own work (a catalog poll, a reload),
    /// sampled at `sample_ratio`.
    pub fn start_root(self: &Arc<Self>, name: &'static str) -> Option<Span> {
        (self.always || span::random_u64() < self.threshold)
            .then(|| Span::start(self.clone(), span::new_trace_id(), None, name, Kind::Internal))
    }

    /// Queues an ended span; a full queue drops it (counted): the call
    /// never waits for the collector.
    fn enqueue(&self, span: proto::Span) {
        if self.queue.try_send(span).is_err() {
            stats().dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracer(ratio: f64) -> Arc<Tracer> {
        let text = format!("otlp_endpoint = \"http://127.0.0.1:9\"\nsample_ratio = {ratio:?}");
        Tracer::start(toml::from_str(&text).expect("a section"), Vec::new()).expect("a tracer")
    }

    #[tokio::test]
    async fn a_callers_sampled_flag_decides_else_the_ratio() {
        let sampled = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let unsampled = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        let (never, always) = (tracer(0.0), tracer(1.0));
        for t in [&never, &always] {
            let span = t.start_request(Some(sampled), "s").expect("a sampled parent is followed");
            let header = span.traceparent();
            let text = std::str::from_utf8(header.as_bytes()).expect("ascii");
            assert!(text.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-") && text.ends_with("-01"), "{text}");
            assert!(t.start_request(Some(unsampled), "s").is_none(), "an unsampled parent is followed");
            // The steps of a call continue the server span's trace.
            let step = t.continue_trace(Some(text), "step").expect("continued");
            assert_eq!(step.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
            assert!(t.continue_trace(std::str::from_utf8(unsampled).ok(), "step").is_none());
        }
        assert!(never.start_request(None, "s").is_none() && never.start_request(Some(b"junk"), "s").is_none());
        assert!(always.start_request(None, "s").is_some() && always.start_root("poll").is_some());
        let half = tracer(0.5);
        let kept = (0..2000).filter(|_| half.start_root("poll").is_some()).count();
        assert!((800..1200).contains(&kept), "about half of 2000 sampled: {kept}");
    }
}
