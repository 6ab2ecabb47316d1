//! An OpenAPI upstream: a REST API whose OpenAPI document is its catalog.
//!
//! - **The catalog** is the document (`spec`): fetched like an OTC catalog
//!   (ETag and If-None-Match, the poll interval, the last good one kept on
//!   failure) from an http(s) URL, or read from a `file:`. Each operation
//!   becomes a tool (`crate::openapi`); the plans of their calls are kept
//!   here, replaced whenever the document is read anew.
//! - **A call** is one HTTP request to `url` and nowhere else: the
//!   document's `servers` are not read, and a redirect is an answer (a tool
//!   failure), never followed. The API's answer, whatever its status, is the
//!   tool's outcome (`UpstreamReply::Result`); only what stops the answer
//!   (no connection, no answer in `call_timeout`, a broken or too large
//!   one) is a `ForwardError`, as for every upstream.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, USER_AGENT};
use http::uri::{Authority, Scheme};
use http::{HeaderValue, Request, Uri};
use http_body_util::Full;

use super::fetch::{conditional_get, read_limited, Limit};
use super::{FetchError, Fetched, ForwardError, Upstream, UpstreamCall, UpstreamReply};
use crate::config::{OperationPattern, SecurityMap, SpecLocation, UpstreamConfig};
use crate::dialect::{CatalogShapeError, CatalogTool, Skipped};
use crate::http_client::{self, error_chain, HttpClient};
use crate::openapi::{self, ImportSettings, Operation};
use crate::scrub;
use crate::wire::{self, UpstreamResult};

/// What the document fetch asks for: JSON first, YAML as well.
const DOCUMENT_ACCEPT: &str =
    "application/json, application/yaml;q=0.9, application/x-yaml;q=0.9, text/yaml;q=0.9, */*;q=0.5";

/// An OpenAPI upstream's settings, clients and current operations.
#[derive(Debug)]
pub(super) struct OpenApiUpstream {
    /// `url`'s scheme: every call's.
    scheme: Scheme,
    /// `url`'s host and port: every call's.
    authority: Authority,
    /// `url`'s path, without a trailing slash: put before every operation's.
    base_path: String,
    /// Where the document is.
    spec: SpecLocation,
    /// Whether the document is at `url`'s origin: only then does its fetch
    /// carry the upstream's `bearer_token`.
    spec_same_origin: bool,
    operations: Vec<OperationPattern>,
    exclude: Vec<OperationPattern>,
    security: SecurityMap,
    /// Calls' connections, made by the calls' own tasks.
    call_client: Result<HttpClient, String>,
    /// Document fetches' own pool, on the control runtime.
    document_client: Result<HttpClient, String>,
    /// The plan of each tool's calls, by its `upstream_id` (`GET /path`),
    /// from the document last read.
    plans: ArcSwap<HashMap<String, Arc<Operation>>>,
}

impl OpenApiUpstream {
    /// The upstream at `config.url`, with its document at `config.spec`.
    pub(super) fn new(config: &UpstreamConfig) -> Result<OpenApiUpstream, http::uri::InvalidUri> {
        let url: Uri = config.url.get_ref().0.parse()?;
        let scheme = url.scheme().cloned().unwrap_or(Scheme::HTTP);
        // The config checked that the URL has a host.
        let authority = url.authority().cloned().unwrap_or_else(|| Authority::from_static("invalid"));
        let base_path = url.path().trim_end_matches('/').to_owned();
        let spec = config.spec.as_ref().map_or_else(|| SpecLocation::File(String::new()), |s| s.get_ref().clone());
        let spec_same_origin = match &spec {
            SpecLocation::Url(spec_url) => spec_url.parse::<Uri>().is_ok_and(|u| {
                u.scheme() == Some(&scheme) && u.authority().map(Authority::as_str) == Some(authority.as_str())
            }),
            SpecLocation::File(_) => false,
        };
        let connect_timeout = config.connect_timeout.0;
        Ok(OpenApiUpstream {
            scheme,
            authority,
            base_path,
            spec,
            spec_same_origin,
            operations: config.operations.as_ref().map(|o| o.get_ref().clone()).unwrap_or_default(),
            exclude: config.exclude.as_ref().map(|o| o.get_ref().clone()).unwrap_or_default(),
            security: config.security.as_ref().map(|s| s.get_ref().clone()).unwrap_or_default(),
            call_client: http_client::build(connect_timeout),
            document_client: http_client::build(connect_timeout),
            plans: ArcSwap::default(),
        })
    }

    /// The document, from its URL (with If-None-Match when an ETag is
    /// known) or its file.
    pub(super) async fn fetch_catalog(
        &self,
        upstream: &Upstream,
        authorization: Option<HeaderValue>,
        etag: Option<&str>,
        timeout: Duration,
        max_bytes: usize,
    ) -> Result<Fetched, FetchError> {
        let url = match &self.spec {
            SpecLocation::File(path) => return read_file(path, timeout, max_bytes).await,
            SpecLocation::Url(url) => url,
        };
        let client = self.document_client.as_ref().map_err(|e| FetchError::Unreachable(e.clone()))?;
        let mut request = Request::get(url.as_str()).header(ACCEPT, DOCUMENT_ACCEPT).header(USER_AGENT, "otc-gateway");
        // The upstream's own token goes only to its own origin, and only
        // there does a failed fetch count against its circuit.
        if let Some(authorization) = authorization.filter(|_| self.spec_same_origin) {
            request = request.header(AUTHORIZATION, authorization);
        }
        let circuit = Some(&upstream.circuit).filter(|_| self.spec_same_origin);
        conditional_get(client, request, etag, circuit, timeout, max_bytes).await
    }

    /// The document's operations as tools; their plans replace the ones of
    /// the document read before.
    pub(super) fn read_catalog(
        &self,
        upstream: &Upstream,
        body: &[u8],
    ) -> Result<(Vec<CatalogTool>, Vec<Skipped>), CatalogShapeError> {
        let settings = ImportSettings {
            toolkit: upstream.toolkit.as_deref(),
            version: upstream.version.as_deref(),
            operations: &self.operations,
            exclude: &self.exclude,
            security: &self.security,
        };
        let started = Instant::now();
        let imported = openapi::import(body, settings).map_err(|e| CatalogShapeError::Document(e.to_string()))?;
        tracing::info!(
            upstream = &*upstream.name,
            tools = imported.tools.len(),
            skipped = imported.skipped.len(),
            bytes = body.len(),
            took_ms = started.elapsed().as_secs_f64() * 1000.0,
            "OpenAPI document read"
        );
        self.plans.store(Arc::new(imported.operations));
        Ok((imported.tools, imported.skipped))
    }

    /// One call: the operation's request, sent to `url`; its answer as the
    /// tool's outcome.
    pub(super) async fn call(
        &self,
        upstream: &Upstream,
        call: UpstreamCall<'_>,
        authorization: Option<HeaderValue>,
        max_bytes: usize,
    ) -> Result<UpstreamReply, ForwardError> {
        let name = || upstream.name.to_string();
        let client =
            self.call_client.as_ref().map_err(|e| ForwardError::Connect { upstream: name(), detail: e.clone() })?;
        let Some(operation) = self.plans.load().get(call.tool).cloned() else {
            // A reload built this upstream anew and its document is not read
            // yet (it is fetched at once): as if it could not be reached.
            return Err(ForwardError::Connect {
                upstream: name(),
                detail: format!("the OpenAPI document has no operation {} (not read yet, or changed)", call.tool),
            });
        };
        let what = format!("upstream {}: {}", upstream.name, operation.label);
        let empty = serde_json::Map::new();
        let input = call.input.value();
        let input = input.as_object().unwrap_or(&empty);
        let prepared = match openapi::prepare(&operation, input, call.context) {
            Ok(prepared) => prepared,
            Err(e) => {
                return Ok(failure("The gateway could not build the request for this input", format!("{what}: {e}")))
            }
        };
        let path_and_query = format!("{}{}", self.base_path, prepared.path_and_query);
        let uri = Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(path_and_query)
            .build();
        let uri = match uri {
            Ok(uri) => uri,
            Err(e) => {
                return Ok(failure("The gateway could not build the request for this input", format!("{what}: {e}")))
            }
        };
        let traceparent = call.trace.header();
        let mut request = Request::builder().method(operation.method.clone()).uri(uri);
        if let Some(headers) = request.headers_mut() {
            for (header, value) in prepared.headers {
                headers.append(header, value);
            }
            headers.insert(USER_AGENT, HeaderValue::from_static("otc-gateway"));
            if let Ok(value) = HeaderValue::from_bytes(traceparent.as_bytes()) {
                headers.insert("traceparent", value);
            }
            if let Some(authorization) = authorization.filter(|_| !prepared.sets_authorization) {
                headers.insert(AUTHORIZATION, authorization);
            }
        }
        // What the API was given, which an error's excerpt never shows.
        let mut sent = prepared.sent;
        if let Some(authorization) = request.headers_ref().and_then(|h| h.get(AUTHORIZATION)) {
            sent.extend(authorization.to_str().ok().map(|a| scrub::credential(a).to_owned()));
        }
        let body = match prepared.body {
            Some((content_type, body)) => {
                request = request.header(CONTENT_TYPE, content_type);
                body
            }
            None => Bytes::new(),
        };
        let request = match request.body(Full::new(body)) {
            Ok(request) => request,
            Err(e) => {
                return Ok(failure("The gateway could not build the request for this input", format!("{what}: {e}")))
            }
        };
        let exchange = async {
            let response = client.request(request).await.map_err(|e| {
                if e.is_connect() {
                    upstream.circuit.record_failure();
                    ForwardError::Connect { upstream: name(), detail: error_chain(&e) }
                } else {
                    ForwardError::Broken { upstream: name(), detail: error_chain(&e) }
                }
            })?;
            upstream.circuit.record_success();
            let (parts, body) = response.into_parts();
            let body = read_limited(body, max_bytes).await.map_err(|e| match e {
                Limit::TooLarge => ForwardError::TooLarge { upstream: name(), limit: max_bytes },
                Limit::Broken(detail) => ForwardError::Broken { upstream: name(), detail },
            })?;
            let sent: Vec<&str> = sent.iter().map(String::as_str).collect();
            Ok(UpstreamReply::Result(openapi::outcome(&what, parts.status, &parts.headers, &body, &sent)))
        };
        tokio::time::timeout(upstream.call_timeout, exchange)
            .await
            .map_err(|_| ForwardError::Timeout { upstream: name(), timeout: upstream.call_timeout })?
    }
}

/// A tool failure the gateway decided before sending anything.
fn failure(message: &str, detail: String) -> UpstreamReply {
    UpstreamReply::Result(UpstreamResult {
        duration: None,
        success: false,
        value: None,
        error: Some(wire::tool_error(message, &detail, false)),
    })
}

/// A `file:` document, at most `max_bytes`.
async fn read_file(path: &str, timeout: Duration, max_bytes: usize) -> Result<Fetched, FetchError> {
    use tokio::io::AsyncReadExt;
    let read = async {
        let file =
            tokio::fs::File::open(path).await.map_err(|e| FetchError::Unreachable(format!("file:{path}: {e}")))?;
        // A file already too large is refused unread (reading it would cost
        // the poll's whole time budget on a busy machine).
        if file.metadata().await.is_ok_and(|m| m.is_file() && m.len() > max_bytes as u64) {
            return Err(FetchError::TooLarge(max_bytes));
        }
        let mut body = Vec::new();
        // One byte more than allowed tells a file that is too large.
        let limit = u64::try_from(max_bytes).unwrap_or(u64::MAX).saturating_add(1);
        file.take(limit)
            .read_to_end(&mut body)
            .await
            .map_err(|e| FetchError::Unreachable(format!("file:{path}: {e}")))?;
        if body.len() > max_bytes {
            return Err(FetchError::TooLarge(max_bytes));
        }
        Ok(Fetched::Body { body: Bytes::from(body), etag: None })
    };
    tokio::time::timeout(timeout, read).await.map_err(|_| FetchError::Timeout(timeout))?
}
