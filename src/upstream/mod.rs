//! One tool server behind the gateway: its settings and its HTTP clients.
//!
//! Each upstream has clients of its own, so that its connect timeout and its
//! connection pools are its own; connections are reused across calls. Calls
//! go through the lean client in [`http1`]; catalog fetches, a few a minute,
//! through hyper-util's.

pub mod http1;

use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, ETAG, IF_NONE_MATCH};
use http::{HeaderValue, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::circuit::Circuit;
use crate::config::SecretRef;
use crate::config::{Protocol, UpstreamConfig};
use http1::{ExchangeError, Http1Client};

/// A configured upstream, ready to be called.
#[derive(Debug)]
pub struct Upstream {
    /// Its unique name from the config.
    pub name: String,
    /// Its position in the config: the tie-breaker between equal priorities.
    pub order: usize,
    /// The higher wins when two upstreams serve the same tool id.
    pub priority: i64,
    /// The protocol it speaks.
    pub protocol: Protocol,
    /// Toolkit for bare tool ids.
    pub toolkit: Option<String>,
    /// Version for definitions without one.
    pub version: Option<String>,
    /// How long a call may take once sent.
    pub call_timeout: Duration,
    /// Sent as `Authorization: Bearer` on every fetch and call.
    pub bearer_token: Option<SecretRef>,
    /// Fails calls fast while the upstream refuses connections.
    pub circuit: Circuit,
    tools_uri: Uri,
    /// Calls' connections, made and used by the calls' own tasks on the data
    /// plane's threads.
    call_client: Http1Client,
    /// Catalog fetches' own pool, driven by the control runtime: a call that
    /// borrowed one of these connections would wake another thread for every
    /// read and write.
    catalog_client: Client<HttpConnector, Full<Bytes>>,
    /// The MCP client, for `protocol = "mcp"` (whose `url` is the MCP
    /// endpoint itself); catalog fetches and calls go through it.
    pub mcp: Option<crate::mcp::client::McpClient>,
    /// MCP: the `[authorization]` provider whose per-user token is sent.
    pub user_token: Option<String>,
}

/// Why a catalog could not be fetched.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// No connection, or it broke.
    #[error("cannot reach {0}")]
    Unreachable(String),
    /// No complete answer in time.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// An answer, but not a 200 or 304.
    #[error("answered HTTP {0}")]
    Status(u16),
    /// Larger than the configured maximum.
    #[error("catalog larger than {0} bytes")]
    TooLarge(usize),
    /// An answer, but not the one the protocol calls for (MCP: a JSON-RPC
    /// error, a failed initialize, a broken event stream).
    #[error("{0}")]
    Protocol(String),
}

/// What a catalog fetch found.
#[derive(Debug)]
pub enum Fetched {
    /// 304: the catalog is the one already held.
    NotModified,
    /// A new body, with its ETag when the upstream gave one.
    Body {
        /// The catalog bytes.
        body: Bytes,
        /// For If-None-Match next time.
        etag: Option<String>,
    },
}

/// Why a call could not be completed.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    /// No connection could be made: nothing was sent, so another replica may
    /// take the call.
    #[error("cannot connect to {upstream}: {detail}")]
    Connect {
        /// The upstream's name.
        upstream: String,
        /// What the connector said.
        detail: String,
    },
    /// The call was sent but no answer came within `call_timeout`.
    #[error("{upstream} did not answer within {timeout:?}")]
    Timeout {
        /// The upstream's name.
        upstream: String,
        /// The configured call timeout.
        timeout: Duration,
    },
    /// The call was sent and the connection broke before a full answer.
    #[error("{upstream} broke the connection: {detail}")]
    Broken {
        /// The upstream's name.
        upstream: String,
        /// What hyper said.
        detail: String,
    },
    /// The answer was larger than the configured maximum.
    #[error("{upstream} answered with more than {limit} bytes")]
    TooLarge {
        /// The upstream's name.
        upstream: String,
        /// The limit.
        limit: usize,
    },
}

/// An upstream's HTTP answer to a call.
#[derive(Debug)]
pub struct CallReply {
    /// Its status.
    pub status: StatusCode,
    /// Whether it said it was JSON.
    pub is_json: bool,
    /// Its body.
    pub body: Bytes,
}

impl Upstream {
    /// Builds an upstream from its config entry.
    pub fn from_config(order: usize, config: &UpstreamConfig) -> Result<Upstream, http::uri::InvalidUri> {
        let base = &config.url.0;
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(config.connect_timeout.0));
        connector.set_nodelay(true);
        let call_uri: Uri = format!("{base}/tools/call").parse()?;
        let authority = call_uri.authority().map_or("", |a| a.as_str());
        Ok(Upstream {
            name: config.name.get_ref().0.clone(),
            order,
            priority: config.priority,
            protocol: *config.protocol.get_ref(),
            toolkit: config.toolkit.as_ref().map(|t| t.0.clone()),
            version: config.version.as_ref().map(|v| v.0.clone()),
            call_timeout: config.call_timeout.0,
            bearer_token: config.bearer_token.as_ref().map(|t| t.get_ref().clone()),
            circuit: Circuit::new(config.circuit_failures, config.circuit_cooldown.0),
            tools_uri: format!("{base}/tools").parse()?,
            call_client: Http1Client::new(authority, call_uri.path(), config.connect_timeout.0),
            catalog_client: Client::builder(TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(90))
                .pool_max_idle_per_host(1)
                .build(connector),
            mcp: match config.protocol.get_ref() {
                Protocol::Mcp => Some(crate::mcp::client::McpClient::new(base.parse()?, config.connect_timeout.0)),
                Protocol::Otc => None,
            },
            user_token: config.user_token.as_ref().map(|p| p.get_ref().clone()),
        })
    }

    /// GET /tools, with If-None-Match when an ETag is known.
    pub async fn fetch_catalog(
        &self,
        authorization: Option<HeaderValue>,
        etag: Option<&str>,
        timeout: Duration,
        max_bytes: usize,
    ) -> Result<Fetched, FetchError> {
        if let Some(mcp) = &self.mcp {
            return crate::mcp::upstream::fetch_catalog(self, mcp, authorization, timeout, max_bytes).await;
        }
        let mut request = Request::get(self.tools_uri.clone()).header(ACCEPT, "application/json");
        if let Some(etag) = etag {
            request = request.header(IF_NONE_MATCH, etag);
        }
        if let Some(authorization) = authorization {
            request = request.header(AUTHORIZATION, authorization);
        }
        let request = request.body(Full::new(Bytes::new())).map_err(|e| FetchError::Unreachable(e.to_string()))?;
        let exchange = async {
            let response = self.catalog_client.request(request).await.map_err(|e| {
                if e.is_connect() {
                    self.circuit.record_failure();
                }
                FetchError::Unreachable(error_chain(&e))
            })?;
            self.circuit.record_success();
            match response.status() {
                StatusCode::NOT_MODIFIED => return Ok(Fetched::NotModified),
                StatusCode::OK => {}
                other => return Err(FetchError::Status(other.as_u16())),
            }
            let etag = response.headers().get(ETAG).and_then(|v| v.to_str().ok()).map(str::to_owned);
            let body = Limited::new(response.into_body(), max_bytes)
                .collect()
                .await
                .map_err(|e| {
                    if e.is::<http_body_util::LengthLimitError>() {
                        FetchError::TooLarge(max_bytes)
                    } else {
                        FetchError::Unreachable(e.to_string())
                    }
                })?
                .to_bytes();
            Ok(Fetched::Body { body, etag })
        };
        tokio::time::timeout(timeout, exchange).await.map_err(|_| FetchError::Timeout(timeout))?
    }

    /// POST /tools/call with a ready body. The whole exchange is bounded by
    /// `call_timeout`; a failure to connect is told apart from one after the
    /// request went out, because only the former may be retried elsewhere.
    pub async fn call(
        &self,
        body: &[u8],
        authorization: Option<HeaderValue>,
        traceparent: &[u8],
        max_bytes: usize,
    ) -> Result<CallReply, ForwardError> {
        let mut headers = [("traceparent", traceparent), ("authorization", traceparent)];
        let headers = match &authorization {
            Some(authorization) => {
                headers[1].1 = authorization.as_bytes();
                &headers[..]
            }
            None => &headers[..1],
        };
        match self.call_client.post(headers, body, max_bytes, self.call_timeout).await {
            Ok(answer) => {
                self.circuit.record_success();
                Ok(CallReply { status: answer.status, is_json: answer.is_json, body: answer.body })
            }
            Err(ExchangeError::Connect(detail)) => {
                self.circuit.record_failure();
                Err(ForwardError::Connect { upstream: self.name.clone(), detail })
            }
            Err(ExchangeError::Broken(detail)) => Err(ForwardError::Broken { upstream: self.name.clone(), detail }),
            Err(ExchangeError::TooLarge) => {
                Err(ForwardError::TooLarge { upstream: self.name.clone(), limit: max_bytes })
            }
            Err(ExchangeError::Timeout) => {
                Err(ForwardError::Timeout { upstream: self.name.clone(), timeout: self.call_timeout })
            }
        }
    }

    /// Closes the calls' idle connections that timed out or that the server
    /// closed; the catalog poller calls it, so they do not linger unused.
    pub fn close_stale_connections(&self) {
        self.call_client.close_stale();
    }
}

/// An error and its sources on one line: hyper's top-level messages alone
/// ("client error (Connect)") say little.
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
