//! An Open Tool Calling upstream: GET /tools for its catalog, read in any of
//! the dialects [`crate::dialect`] knows, and POST /tools/call for calls.
//!
//! Each upstream has clients of its own, so that its connect timeout and its
//! connection pools are its own; connections are reused across calls. Calls
//! go through the lean [`CallClient`]; catalog fetches, a few a minute,
//! through hyper-util's.

use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION};
use http::{HeaderValue, Request, Uri};
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::call_client::{CallClient, ExchangeError};
use super::fetch::conditional_get;
use super::{FetchError, Fetched, ForwardError, HttpResponse, Upstream, UpstreamCall};
use crate::config::UpstreamConfig;
use crate::dialect::{normalise_catalog, CatalogShapeError, CatalogTool, DialectDefaults, Skipped};
use crate::wire::{self, UpstreamCallRequest};

/// An OTC upstream's clients.
#[derive(Debug)]
pub(super) struct OtcUpstream {
    tools_uri: Uri,
    /// Calls' connections, made and used by the calls' own tasks on the data
    /// plane's threads.
    call_client: CallClient,
    /// Catalog fetches' own pool, driven by the control runtime: a call that
    /// borrowed one of these connections would wake another thread for every
    /// read and write.
    catalog_client: Client<HttpConnector, Full<Bytes>>,
}

impl OtcUpstream {
    /// The clients for the upstream at `config.url`.
    pub(super) fn new(config: &UpstreamConfig) -> Result<OtcUpstream, http::uri::InvalidUri> {
        let base = &config.url.get_ref().0;
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(config.connect_timeout.0));
        connector.set_nodelay(true);
        let call_uri: Uri = format!("{base}/tools/call").parse()?;
        let authority = call_uri.authority().map_or("", |a| a.as_str());
        Ok(OtcUpstream {
            tools_uri: format!("{base}/tools").parse()?,
            call_client: CallClient::new(authority, call_uri.path(), config.connect_timeout.0),
            catalog_client: Client::builder(TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(90))
                .pool_max_idle_per_host(1)
                .build(connector),
        })
    }

    /// GET /tools, with If-None-Match when an ETag is known.
    pub(super) async fn fetch_catalog(
        &self,
        upstream: &Upstream,
        authorization: Option<HeaderValue>,
        etag: Option<&str>,
        timeout: Duration,
        max_bytes: usize,
    ) -> Result<Fetched, FetchError> {
        let mut request = Request::get(self.tools_uri.clone()).header(ACCEPT, "application/json");
        if let Some(authorization) = authorization {
            request = request.header(AUTHORIZATION, authorization);
        }
        conditional_get(&self.catalog_client, request, etag, Some(&upstream.circuit), timeout, max_bytes).await
    }

    /// POST /tools/call: the call's body written here, the answer returned
    /// unread for the pipeline's re-wrap step.
    pub(super) async fn call(
        &self,
        upstream: &Upstream,
        call: UpstreamCall<'_>,
        authorization: Option<HeaderValue>,
        max_bytes: usize,
    ) -> Result<HttpResponse, ForwardError> {
        let body = wire::upstream_call_body(&UpstreamCallRequest {
            tool_id: call.tool,
            call_id: call.call_id,
            trace_id: call.trace.trace_id,
            input: call.input,
            context: call.context,
        });
        let traceparent = call.trace.header();
        let mut headers = [("traceparent", traceparent.as_bytes()), ("authorization", &[][..])];
        let headers = match &authorization {
            Some(authorization) => {
                headers[1].1 = authorization.as_bytes();
                &headers[..]
            }
            None => &headers[..1],
        };
        let name = || upstream.name.to_string();
        match self.call_client.post(headers, &body, max_bytes, upstream.call_timeout).await {
            Ok(response) => {
                upstream.circuit.record_success();
                Ok(response)
            }
            Err(ExchangeError::Connect(detail)) => {
                upstream.circuit.record_failure();
                Err(ForwardError::Connect { upstream: name(), detail })
            }
            Err(ExchangeError::Broken(detail)) => Err(ForwardError::Broken { upstream: name(), detail }),
            Err(ExchangeError::TooLarge) => Err(ForwardError::TooLarge { upstream: name(), limit: max_bytes }),
            Err(ExchangeError::Timeout) => {
                Err(ForwardError::Timeout { upstream: name(), timeout: upstream.call_timeout })
            }
        }
    }

    /// Closes idle call connections that timed out or that the server closed.
    pub(super) fn close_stale_connections(&self) {
        self.call_client.close_stale();
    }

    pub(super) fn close_idle_connections(&self) {
        self.call_client.close_idle();
    }
}

/// Reads a GET /tools body in any of the OTC dialects.
pub(super) fn read_catalog(
    upstream: &Upstream,
    body: &[u8],
) -> Result<(Vec<CatalogTool>, Vec<Skipped>), CatalogShapeError> {
    let defaults = DialectDefaults { toolkit: upstream.toolkit.as_deref(), version: upstream.version.as_deref() };
    normalise_catalog(body, defaults)
}
