//! A catalog or an OpenAPI document fetched by `GET`: conditionally
//! (`If-None-Match` with the ETag of the last good body), bounded in time and
//! in size, only a 200's body read. OTC catalogs and OpenAPI documents are
//! fetched alike; MCP lists its tools over its own protocol (`mcp.rs`).

use std::time::Duration;

use bytes::Bytes;
use http::header::{ETAG, IF_NONE_MATCH};
use http::{request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::connect::Connect;
use hyper_util::client::legacy::Client;

use super::{FetchError, Fetched};
use crate::circuit::Circuit;
use crate::http_client::error_chain;

/// Sends `request` with `If-None-Match: etag` when an ETag is known. A
/// 304 is [`Fetched::NotModified`]; any status but 200 (a redirect
/// included: a catalog is where the config says) is an error. `circuit` is
/// the upstream's, told whether it could be reached, when the URL is the
/// upstream's own (an OpenAPI document may live elsewhere).
pub(super) async fn conditional_get<C>(
    client: &Client<C, Full<Bytes>>,
    mut request: request::Builder,
    etag: Option<&str>,
    circuit: Option<&Circuit>,
    timeout: Duration,
    max_bytes: usize,
) -> Result<Fetched, FetchError>
where
    C: Connect + Clone + Send + Sync + 'static,
{
    if let Some(etag) = etag {
        request = request.header(IF_NONE_MATCH, etag);
    }
    let request = request.body(Full::new(Bytes::new())).map_err(|e| FetchError::Unreachable(e.to_string()))?;
    let exchange = async {
        let response = client.request(request).await.map_err(|e| {
            if let Some(circuit) = circuit.filter(|_| e.is_connect()) {
                circuit.record_failure();
            }
            FetchError::Unreachable(error_chain(&e))
        })?;
        if let Some(circuit) = circuit {
            circuit.record_success();
        }
        match response.status() {
            StatusCode::NOT_MODIFIED => return Ok(Fetched::NotModified),
            StatusCode::OK => {}
            other => return Err(FetchError::Status(other.as_u16())),
        }
        let etag = response.headers().get(ETAG).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let body = read_limited(response.into_body(), max_bytes).await.map_err(|e| match e {
            Limit::TooLarge => FetchError::TooLarge(max_bytes),
            Limit::Broken(detail) => FetchError::Unreachable(detail),
        })?;
        Ok(Fetched::Body { body, etag })
    };
    tokio::time::timeout(timeout, exchange).await.map_err(|_| FetchError::Timeout(timeout))?
}

/// Why a body was not read whole.
pub(super) enum Limit {
    /// Larger than allowed.
    TooLarge,
    /// The connection broke.
    Broken(String),
}

/// A response body, at most `max_bytes`.
pub(super) async fn read_limited(body: hyper::body::Incoming, max_bytes: usize) -> Result<Bytes, Limit> {
    Limited::new(body, max_bytes).collect().await.map(|b| b.to_bytes()).map_err(|e| {
        if e.is::<http_body_util::LengthLimitError>() {
            Limit::TooLarge
        } else {
            Limit::Broken(e.to_string())
        }
    })
}
