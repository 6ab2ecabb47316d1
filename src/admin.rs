//! The admin listener: GET /status (and GET /health), on `admin_listen`.
//!
//! Kept off the data plane on its own small tokio runtime so that scrapes and
//! status checks never compete with calls for pingora's workers.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde::Serialize;
use tokio::net::TcpListener;

use crate::catalog::poll::UpstreamStatus;
use crate::catalog::search::IndexStats;
use crate::catalog::{Conflict, RefusedTool, SharedToolkit, UngrantedRequirement};
use crate::gateway::Gateway;

/// Serves the admin endpoints on an already bound listener, forever.
pub async fn serve_admin(listener: TcpListener, gateway: Arc<Gateway>) {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "admin accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let gateway = gateway.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let gateway = gateway.clone();
                async move { Ok::<_, Infallible>(route(&gateway, request)) }
            });
            let connection = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "admin connection ended");
            }
        });
    }
}

fn route(gateway: &Gateway, request: Request<Incoming>) -> Response<Full<Bytes>> {
    match (request.method(), request.uri().path()) {
        (&Method::GET, "/status") => json(StatusCode::OK, &status(gateway)),
        (&Method::GET, "/metrics") => {
            let runtime = gateway.runtime();
            if runtime.secrets.has_vault() {
                let stats = runtime.secrets.stats();
                gateway.metrics.sync_vault_totals("vault", stats.requests_ok, stats.requests_error, stats.stale_served);
            }
            gateway.metrics.sync_idempotency_totals(&runtime.idempotency.stats().by_result());
            let (served, refused) = runtime.rate_limits.store_failures();
            gateway.metrics.sync_rate_limit_store_failures(served, refused);
            let mut response = Response::new(Full::new(Bytes::from(gateway.metrics.render())));
            response
                .headers_mut()
                .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static(crate::metrics::CONTENT_TYPE));
            response
        }
        (&Method::GET, "/health") => json(StatusCode::OK, &serde_json::json!({"status": "ok"})),
        (_, "/status" | "/health" | "/metrics") => {
            json(StatusCode::METHOD_NOT_ALLOWED, &serde_json::json!({"message": "use GET"}))
        }
        _ => json(
            StatusCode::NOT_FOUND,
            &serde_json::json!({"message": "admin endpoints: GET /metrics, GET /status, GET /health"}),
        ),
    }
}

/// The body of GET /status.
#[derive(Serialize)]
struct Status {
    generation: u64,
    last_reload: Option<crate::gateway::ReloadReport>,
    upstreams: Vec<UpstreamReport>,
    tools: usize,
    conflicts: Vec<Conflict>,
    /// Policy patterns that match no tool in the catalog (likely typos).
    policy_warnings: Vec<String>,
    /// Requirements tools declare that their upstream was not granted:
    /// those tools cannot be called until the operator grants them.
    ungranted: Vec<UngrantedRequirement>,
    /// Tools not served because another upstream reserved their toolkit.
    refused_tools: Vec<RefusedTool>,
    /// Toolkits whose tools come from more than one upstream.
    shared_toolkits: Vec<SharedToolkit>,
    /// Settings that weaken the gateway's defences, as written.
    security_warnings: Vec<String>,
    /// How long building the current catalog took (merge, listing and
    /// search index), in milliseconds.
    catalog_build_ms: f64,
    /// The current catalog's search index.
    search_index: IndexStats,
}

#[derive(Serialize)]
struct UpstreamReport {
    name: String,
    /// What the operator granted it (names only).
    granted: Granted,
    #[serde(flatten)]
    status: UpstreamStatus,
}

/// An upstream's grants, as gateway.toml writes them.
#[derive(Serialize)]
struct Granted {
    secrets: Vec<String>,
    authorization: Vec<String>,
    toolkits: Vec<String>,
}

fn status(gateway: &Gateway) -> Status {
    let catalog = gateway.catalog.load();
    let runtime = gateway.runtime();
    let mut statuses = gateway.catalog.statuses();
    let upstreams = runtime
        .upstreams
        .iter()
        .map(|u| UpstreamReport {
            name: u.name.clone(),
            granted: Granted {
                secrets: u.secret_grants.to_list(),
                authorization: u.authorization_grants.to_list(),
                toolkits: u.reserved_toolkits.clone(),
            },
            status: statuses.remove(&u.name).unwrap_or_default(),
        })
        .collect();
    Status {
        generation: gateway.generation(),
        last_reload: gateway.last_reload(),
        upstreams,
        tools: catalog.len(),
        conflicts: catalog.conflicts().to_vec(),
        policy_warnings: runtime.access.unmatched_patterns(&catalog),
        ungranted: catalog.ungranted(&runtime.config),
        refused_tools: catalog.refused().to_vec(),
        shared_toolkits: catalog.shared_toolkits().to_vec(),
        security_warnings: runtime.config.security_warnings(),
        catalog_build_ms: catalog.build_time().as_secs_f64() * 1000.0,
        search_index: catalog.search_index().stats(),
    }
}

fn json<T: Serialize>(status: StatusCode, body: &T) -> Response<Full<Bytes>> {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut response = Response::new(Full::new(Bytes::from(bytes)));
    *response.status_mut() = status;
    response.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    response
}
