//! The pooled HTTP(S) client for the gateway's own requests to services
//! that are not tool servers (the Vault backend, the JWKS fetcher, OAuth
//! providers), and for OpenAPI upstreams, which are REST APIs.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// The client type: http and https, HTTP/1.1, pooled.
pub(crate) type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The largest response body read (Vault secrets, JWKS and token responses
/// are small).
pub(crate) const MAX_BODY: usize = 1 << 20;

/// Builds the client. TLS trusts the system's roots when it has any
/// (private CAs are common for Vault), else the bundled Mozilla roots.
pub(crate) fn build(connect_timeout: Duration) -> Result<HttpClient, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = match HttpsConnectorBuilder::new().with_provider_and_native_roots(provider.clone()) {
        Ok(b) => b,
        Err(e) => {
            tracing::debug!(error = %e, "no usable system CA roots; using bundled roots");
            HttpsConnectorBuilder::new()
                .with_provider_and_webpki_roots(provider)
                .map_err(|e| format!("TLS setup failed: {e}"))?
        }
    };
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(connect_timeout));
    http.set_nodelay(true);
    let connector = builder.https_or_http().enable_http1().wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new()).pool_idle_timeout(Duration::from_secs(30)).build(connector))
}

/// GETs `uri` with `headers`, reading at most [`MAX_BODY`] bytes, the
/// whole exchange bounded by `timeout`. Errors are short descriptions
/// fit for logs (no header values).
pub(crate) async fn get(
    client: &HttpClient,
    uri: http::Uri,
    headers: Vec<(http::HeaderName, http::HeaderValue)>,
    timeout: Duration,
) -> Result<(http::StatusCode, Bytes), String> {
    send(client, http::Method::GET, uri, headers, Bytes::new(), timeout).await.map(|(status, _, body)| (status, body))
}

/// Sends one request with `body`, reading at most [`MAX_BODY`] bytes of the
/// answer, the whole exchange bounded by `timeout`. Errors as for [`get`].
pub(crate) async fn send(
    client: &HttpClient,
    method: http::Method,
    uri: http::Uri,
    headers: Vec<(http::HeaderName, http::HeaderValue)>,
    body: Bytes,
    timeout: Duration,
) -> Result<(http::StatusCode, http::HeaderMap, Bytes), String> {
    let mut req = http::Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        req = req.header(name, value);
    }
    let req = req
        .header(http::header::USER_AGENT, "otc-gateway")
        .body(Full::new(body))
        .map_err(|e| format!("bad request: {e}"))?;
    let exchange = async {
        let resp = client.request(req).await.map_err(|e| error_chain(&e))?;
        let (parts, body) = resp.into_parts();
        let body = Limited::new(body, MAX_BODY)
            .collect()
            .await
            .map_err(|e| format!("reading the body failed: {e}"))?
            .to_bytes();
        Ok((parts.status, parts.headers, body))
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(r) => r,
        Err(_) => Err(format!("timed out after {}", humantime::format_duration(timeout))),
    }
}

/// An error and its sources on one line: hyper's top-level messages alone
/// ("client error (Connect)") say little; the innermost cause says
/// "connection refused".
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}
