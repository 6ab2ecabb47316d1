//! The exporter: spans from the queue, in batches, posted as OTLP/HTTP
//! protobuf (`POST <otlp_endpoint>/v1/traces`) with the gateway's own HTTP
//! client, one export at a time, each bounded in time.

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use tokio::sync::mpsc;

use crate::config::TracingConfig;
use crate::http_client::{self, HttpClient};

/// The most spans in one export (OpenTelemetry's default batch size).
const BATCH: usize = 512;
/// How long a span waits for others to fill its batch.
const DELAY: Duration = Duration::from_millis(500);
/// The longest one export may take; a collector that hangs costs its spans
/// (dropped, counted), never a call.
const TIMEOUT: Duration = Duration::from_secs(5);

pub(super) struct Exporter {
    client: HttpClient,
    uri: http::Uri,
    headers: Vec<(HeaderName, HeaderValue)>,
    resource: Resource,
    /// The last export failed: the next failure is not logged again.
    failing: bool,
}

impl Exporter {
    pub(super) fn new(config: &TracingConfig, headers: Vec<(HeaderName, HeaderValue)>) -> Result<Exporter, String> {
        let uri =
            format!("{}/v1/traces", config.otlp_endpoint).parse().map_err(|e| format!("tracing.otlp_endpoint: {e}"))?;
        let text = |key: &str, value: &str| KeyValue {
            key: key.to_owned(),
            value: Some(AnyValue { value: Some(any_value::Value::StringValue(value.to_owned())) }),
            ..Default::default()
        };
        let resource = Resource {
            attributes: vec![
                text("service.name", &config.service_name),
                text("service.version", env!("CARGO_PKG_VERSION")),
                text("telemetry.sdk.name", "otc-gateway"),
                text("telemetry.sdk.language", "rust"),
            ],
            ..Default::default()
        };
        Ok(Exporter { client: http_client::build(Duration::from_secs(2))?, uri, headers, resource, failing: false })
    }

    /// Sends batches until the tracer is dropped and its queue is empty.
    pub(super) async fn run(mut self, mut spans: mpsc::Receiver<Span>) {
        let mut batch = Vec::with_capacity(BATCH);
        while let Some(first) = spans.recv().await {
            batch.push(first);
            let deadline = tokio::time::Instant::now() + DELAY;
            while batch.len() < BATCH {
                match tokio::time::timeout_at(deadline, spans.recv()).await {
                    Ok(Some(span)) => batch.push(span),
                    Ok(None) | Err(_) => break,
                }
            }
            self.export(std::mem::take(&mut batch)).await;
        }
    }

    async fn export(&mut self, spans: Vec<Span>) {
        let count = spans.len() as u64;
        let request = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(self.resource.clone()),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: "otc-gateway".to_owned(),
                        version: env!("CARGO_PKG_VERSION").to_owned(),
                        ..Default::default()
                    }),
                    spans,
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
        };
        let body = Bytes::from(request.encode_to_vec());
        let mut headers = self.headers.clone();
        headers.push((http::header::CONTENT_TYPE, HeaderValue::from_static("application/x-protobuf")));
        let sent = http_client::send(&self.client, http::Method::POST, self.uri.clone(), headers, body, TIMEOUT).await;
        let stats = super::stats();
        match sent {
            Ok((status, _, _)) if status.is_success() => {
                stats.exported.fetch_add(count, Ordering::Relaxed);
                if std::mem::take(&mut self.failing) {
                    tracing::info!(endpoint = %self.uri, "trace export works again");
                }
            }
            failed => {
                stats.dropped.fetch_add(count, Ordering::Relaxed);
                // The status or the client's error only: no header values.
                let error = match failed {
                    Ok((status, _, _)) => format!("the collector answered HTTP {}", status.as_u16()),
                    Err(e) => e,
                };
                if !std::mem::replace(&mut self.failing, true) {
                    tracing::warn!(endpoint = %self.uri, spans = count, error, "trace export failed; spans dropped until it works again (otc_gateway_trace_spans_total)");
                }
            }
        }
    }
}
