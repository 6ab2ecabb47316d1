//! The admin listener, on `admin_listen`: GET /health and /metrics; the
//! console, /status, /calls (`recent_calls.rs`), /tools, /explain
//! (`explain.rs`) and /grants (who holds a grant at each managed provider);
//! and the admin actions (POST /reload, DELETE /grants/<provider>/<user_id>).
//!
//! Kept off the data plane on its own small tokio runtime so that scrapes and
//! status checks never compete with calls for pingora's workers. The data
//! plane's browser policy applies here too (a DNS-rebinding page must not
//! read `/status`), judged by this listener's address.
//!
//! Who may do what is decided in one place, `authorize`, by `Access`:
//! `/health` and `/metrics` are anyone's; with `[server] admin_token` every
//! other route needs `Authorization: Bearer <admin_token>` (the console's
//! page and assets excepted, so that it can ask for the token). Without an
//! `admin_token` there are no actions, and reads are served only when the
//! listener is bound to a loopback address: reads name users and grants,
//! and anyone on the network (a tool server's pod) could otherwise take
//! them.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use http::request::Parts;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde::Serialize;
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;

use crate::approvals::{self, ApprovalError};
use crate::browser::BrowserRefusal;
use crate::catalog::poll::UpstreamStatus;
use crate::catalog::search::{IndexStats, SearchRequest};
use crate::catalog::{Conflict, McpNameConflict, RefusedTool, SharedToolkit, UngrantedRequirement};
use crate::console;
use crate::explain::{caller_of, explain, ExplainError, ExplainRequest};
use crate::gateway::{Gateway, Generation};
use crate::integrity::{ChangeState, HeldTool, ReviewError};
use crate::oauth::FlowError;

/// The largest `POST /explain` body (a caller's claims, a pasted JWT).
const MAX_EXPLAIN_BODY: usize = 64 * 1024;

/// Serves the admin endpoints on an already bound listener, forever;
/// `config_path` is the file `POST /reload` reads (none in the demo).
pub async fn serve_admin(listener: TcpListener, gateway: Arc<Gateway>, config_path: Option<PathBuf>) {
    let config_path = Arc::new(config_path);
    // Judged by the address bound, not the config's: a reload cannot move
    // the listener, and must not open its reads either.
    let loopback = listener.local_addr().is_ok_and(|a| a.ip().is_loopback());
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "admin accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let (gateway, config_path) = (gateway.clone(), config_path.clone());
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let (gateway, config_path) = (gateway.clone(), config_path.clone());
                async move { Ok::<_, Infallible>(route(&gateway, config_path.as_ref().as_deref(), loopback, request).await) }
            });
            let connection = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "admin connection ended");
            }
        });
    }
}

/// Why an admin request was refused.
#[derive(Debug, thiserror::Error)]
enum AdminError {
    /// The browser policy refused it.
    #[error(transparent)]
    Browser(#[from] BrowserRefusal),
    /// A request whose authority is in doubt: `Host` missing (HTTP/1.1),
    /// carrying userinfo, or not the absolute-form target's authority.
    /// Answered 400, as the data plane answers it. (A second `Host` is
    /// 421, as before: the first one is judged, the second refused.)
    #[error("bad request: {0}")]
    Authority(&'static str),
    /// An action without `admin_token` configured.
    #[error("admin actions are off: set [server] admin_token (a secret reference) to enable them")]
    ActionsOff,
    /// A read on a non-loopback listener without `admin_token` configured:
    /// the warning `check` and the start-up log give, with the line to add.
    #[error("{0}")]
    ReadsOff(String),
    /// A route that needs the admin token, without the right one.
    #[error("this admin endpoint needs Authorization: Bearer <admin_token>")]
    Unauthorized,
    /// No such route.
    #[error(
        "admin endpoints: GET / (the console), GET /metrics, GET /status, GET /health, GET /calls, GET /tools, \
         GET /tools/search, GET or POST /explain, GET /grants, GET /changes, GET /approvals, POST /reload, \
         DELETE /grants/<provider>/<user_id>, POST /changes/<id>/approve|reject, POST /approvals/<id>/approve|deny"
    )]
    NotFound,
    /// An explain request that cannot be read.
    #[error("explain: {0}")]
    BadExplain(String),
    /// A tool search whose query, limit or version is unusable.
    #[error("search: {0}")]
    BadSearch(crate::catalog::search::SearchError),
    /// A query parameter this endpoint does not take.
    #[error("{0}")]
    BadQuery(String),
    /// `DELETE /grants/<provider>/...` of a provider the gateway does not manage.
    #[error("no managed OAuth provider {0:?}")]
    UnknownProvider(String),
    /// The grant store failed.
    #[error("the grant store failed: {0}")]
    GrantStore(String),
    /// A route with another method.
    #[error("use {0}")]
    Method(&'static str),
    /// `POST /reload` without a config file (the demo).
    #[error("this gateway was started without a config file to reload")]
    NoConfigFile,
    /// A decision on a tool definition change that was not taken.
    #[error(transparent)]
    Review(#[from] ReviewError),
    /// An approval request that could not be listed or decided.
    #[error(transparent)]
    Approval(#[from] ApprovalError),
    /// A decision on a request only its calling user may decide.
    #[error("this request is decided by its calling user, in their own browser (approver = \"caller\")")]
    CallersOwn,
}

impl AdminError {
    /// The one place an admin refusal becomes a status and a body.
    fn into_response(self) -> Response<Full<Bytes>> {
        let status = match &self {
            AdminError::Browser(BrowserRefusal::ForbiddenOrigin { .. })
            | AdminError::ActionsOff
            | AdminError::ReadsOff(_) => StatusCode::FORBIDDEN,
            AdminError::Browser(BrowserRefusal::MisdirectedHost) => StatusCode::MISDIRECTED_REQUEST,
            AdminError::Unauthorized => StatusCode::UNAUTHORIZED,
            AdminError::NotFound | AdminError::UnknownProvider(_) => StatusCode::NOT_FOUND,
            AdminError::Authority(_)
            | AdminError::BadExplain(_)
            | AdminError::BadSearch(_)
            | AdminError::BadQuery(_) => StatusCode::BAD_REQUEST,
            AdminError::GrantStore(_) => StatusCode::SERVICE_UNAVAILABLE,
            AdminError::Method(_) => StatusCode::METHOD_NOT_ALLOWED,
            AdminError::NoConfigFile => StatusCode::CONFLICT,
            AdminError::Review(ReviewError::Unknown(_)) => StatusCode::NOT_FOUND,
            AdminError::Review(ReviewError::Decided { .. }) => StatusCode::CONFLICT,
            AdminError::Review(ReviewError::Journal(_)) => StatusCode::SERVICE_UNAVAILABLE,
            AdminError::Approval(ApprovalError::Unknown(_)) => StatusCode::NOT_FOUND,
            AdminError::Approval(ApprovalError::AlreadyDecided { .. }) => StatusCode::CONFLICT,
            AdminError::Approval(ApprovalError::Journal(_)) => StatusCode::SERVICE_UNAVAILABLE,
            AdminError::Approval(ApprovalError::TooManyWaiting(_)) => StatusCode::TOO_MANY_REQUESTS,
            AdminError::CallersOwn => StatusCode::FORBIDDEN,
        };
        let mut response = json(status, &serde_json::json!({ "message": self.to_string() }));
        match self {
            AdminError::Unauthorized => {
                response.headers_mut().insert(http::header::WWW_AUTHENTICATE, http::HeaderValue::from_static("Bearer"));
            }
            AdminError::Method(allow) => {
                response.headers_mut().insert(http::header::ALLOW, http::HeaderValue::from_static(allow));
            }
            _ => {}
        }
        response
    }
}

async fn route(
    gateway: &Arc<Gateway>,
    config_path: Option<&std::path::Path>,
    loopback: bool,
    request: Request<Incoming>,
) -> Response<Full<Bytes>> {
    serve(gateway, config_path, loopback, request).await.unwrap_or_else(AdminError::into_response)
}

/// What a route needs before it is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// `/health` and `/metrics`: anyone the browser policy lets through
    /// (probes and Prometheus carry no token).
    Open,
    /// The console's page and assets: as a read, but loadable without the
    /// token when there is one to ask for.
    Console,
    /// Every other route, unknown ones included (so that a route added
    /// later is guarded unless said otherwise).
    Read,
    /// `POST /reload`, `DELETE /grants/...`, `POST /changes/.../approve|reject`,
    /// `POST /approvals/.../approve|deny`.
    Action,
}

impl Access {
    fn of(method: &Method, path: &str) -> Access {
        match (method, path) {
            (&Method::GET, "/health" | "/metrics") => Access::Open,
            (&Method::GET, asset) if console::asset(asset).is_some() => Access::Console,
            (&Method::POST, "/reload") => Access::Action,
            (&Method::DELETE, grant) if grant.starts_with("/grants/") => Access::Action,
            (&Method::POST, decision) if decision.starts_with("/changes/") || decision.starts_with("/approvals/") => {
                Access::Action
            }
            _ => Access::Read,
        }
    }
}

/// Checks the request's authority and browser policy, then who may make it,
/// then dispatches it.
async fn serve(
    gateway: &Arc<Gateway>,
    config_path: Option<&std::path::Path>,
    loopback: bool,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, AdminError> {
    let generation = gateway.generation_owned();
    let (request, body) = request.into_parts();
    check_browser(&generation, &request)?;
    let path = request.uri.path();
    authorize(&generation, Access::of(&request.method, path), loopback, &request)?;
    match (&request.method, path) {
        (&Method::GET, "/status") => Ok(json(StatusCode::OK, &status(gateway))),
        (&Method::GET, "/metrics") => Ok(metrics(gateway, &generation)),
        (&Method::GET, "/health") => Ok(json(StatusCode::OK, &serde_json::json!({"status": "ok"}))),
        (&Method::GET, "/tools") => Ok(with_type(StatusCode::OK, gateway.catalog.load().listing(), "application/json")),
        (&Method::GET, "/tools/search") => {
            // The operator searches every tool, at its latest version.
            let asked = SearchRequest::from_query_string(request.uri.query()).map_err(AdminError::BadSearch)?;
            let catalog = gateway.catalog.load();
            let index = catalog.search_index();
            let found: Vec<_> = index
                .search(&index.latest(), &asked.text, asked.limit)
                .into_iter()
                .map(|hit| hit.doc.route.clone())
                .collect();
            Ok(with_type(StatusCode::OK, crate::tool_search::otc_body(&found), "application/json"))
        }
        (&Method::GET, asset) if console::asset(asset).is_some() => {
            let (content_type, text) = console::asset(asset).unwrap_or_default();
            let mut response = with_type(StatusCode::OK, Bytes::from_static(text.as_bytes()), content_type);
            let headers = response.headers_mut();
            headers.insert("content-security-policy", http::HeaderValue::from_static(console::CSP));
            headers.insert("x-content-type-options", http::HeaderValue::from_static("nosniff"));
            headers.insert("referrer-policy", http::HeaderValue::from_static("no-referrer"));
            headers.insert(http::header::CACHE_CONTROL, http::HeaderValue::from_static("no-cache"));
            Ok(response)
        }
        (&Method::GET, "/calls") => {
            let limit = form_urlencoded::parse(request.uri.query().unwrap_or_default().as_bytes())
                .find(|(name, _)| name == "limit")
                .and_then(|(_, n)| n.parse().ok())
                .unwrap_or(crate::recent_calls::CAPACITY);
            let body = serde_json::json!({
                "capacity": crate::recent_calls::CAPACITY,
                "total": gateway.recent_calls.total(),
                "calls": gateway.recent_calls.newest(limit),
            });
            Ok(json(StatusCode::OK, &body))
        }
        (&Method::GET, "/explain") => {
            let asked = explain_query(request.uri.query().unwrap_or_default())?;
            answer_explain(gateway, &generation, &asked).await
        }
        (&Method::POST, "/explain") => {
            let bytes = Limited::new(body, MAX_EXPLAIN_BODY)
                .collect()
                .await
                .map_err(|_| AdminError::BadExplain(format!("the body must be at most {MAX_EXPLAIN_BODY} bytes")))?
                .to_bytes();
            let asked: ExplainRequest =
                serde_json::from_slice(&bytes).map_err(|e| AdminError::BadExplain(format!("the JSON body: {e}")))?;
            answer_explain(gateway, &generation, &asked).await
        }
        (&Method::POST, "/reload") => {
            let path = config_path.ok_or(AdminError::NoConfigFile)?;
            let outcome = gateway.reload(path).await;
            let body = serde_json::json!({
                "ok": outcome.is_ok(),
                "generation": gateway.generation_number(),
                "error": outcome.as_ref().err().map(ToString::to_string),
            });
            Ok(json(if outcome.is_ok() { StatusCode::OK } else { StatusCode::UNPROCESSABLE_ENTITY }, &body))
        }
        (&Method::GET, "/grants") => list_grants(&generation, request.uri.query()).await,
        (&Method::GET, "/changes") => list_changes(gateway, request.uri.query()),
        (&Method::POST, decision) if decision.starts_with("/changes/") => decide_change(gateway, decision, body).await,
        (&Method::GET, "/approvals") => list_approvals(gateway, request.uri.query()).await,
        (&Method::POST, decision) if decision.starts_with("/approvals/") => {
            decide_approval(gateway, decision, body).await
        }
        (&Method::DELETE, grant) if grant.starts_with("/grants/") => revoke_grant(&generation, grant).await,
        (_, "/status" | "/health" | "/metrics" | "/calls" | "/grants" | "/changes" | "/approvals") => {
            Err(AdminError::Method("GET"))
        }
        (_, decision) if decision.starts_with("/changes/") || decision.starts_with("/approvals/") => {
            Err(AdminError::Method("POST"))
        }
        (_, "/reload") => Err(AdminError::Method("POST")),
        (_, "/explain") => Err(AdminError::Method("GET, POST")),
        (_, grant) if grant.starts_with("/grants/") => Err(AdminError::Method("DELETE")),
        _ => Err(AdminError::NotFound),
    }
}

/// `GET /explain`'s query: `user_id`, `claims` (JSON), `jwt`, `api_key`, `tool`.
fn explain_query(query: &str) -> Result<ExplainRequest, AdminError> {
    let mut asked = ExplainRequest::default();
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        let value = value.into_owned();
        match name.as_ref() {
            "user_id" if !value.is_empty() => asked.user_id = Some(value),
            "claims" if !value.is_empty() => {
                let claims = serde_json::from_str(&value)
                    .map_err(|e| AdminError::BadExplain(format!("claims: not JSON: {e}")))?;
                asked.claims = Some(claims);
            }
            "jwt" if !value.is_empty() => asked.jwt = Some(value),
            "api_key" => asked.api_key = matches!(value.as_str(), "1" | "true" | "on" | "yes"),
            "tool" if !value.is_empty() => asked.tool = Some(value),
            "server" if !value.is_empty() => asked.server = Some(value),
            "user_id" | "claims" | "jwt" | "tool" | "server" => {}
            other => {
                let other: String = other.chars().take(40).collect();
                return Err(AdminError::BadExplain(format!(
                    "unknown parameter {other:?}: use user_id, claims, jwt, api_key, tool, server"
                )));
            }
        }
    }
    Ok(asked)
}

async fn answer_explain(
    gateway: &Gateway,
    generation: &Generation,
    asked: &ExplainRequest,
) -> Result<Response<Full<Bytes>>, AdminError> {
    let caller = caller_of(asked, generation).map_err(|e: ExplainError| AdminError::BadExplain(e.to_string()))?;
    let explanation = explain(gateway, generation, &caller, asked.tool.as_deref(), asked.server.as_deref()).await;
    Ok(json(StatusCode::OK, &explanation))
}

/// `GET /grants[?provider=P]`: who holds a grant at each managed provider,
/// with its scopes and times, never a token. A read like `/calls`: it names
/// users, which is why the admin listener is for operators only.
async fn list_grants(generation: &Generation, query: Option<&str>) -> Result<Response<Full<Bytes>>, AdminError> {
    let mut provider = None;
    for (name, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match name.as_ref() {
            "provider" if !value.is_empty() => provider = Some(value.into_owned()),
            "provider" => {}
            other => {
                let other: String = other.chars().take(40).collect();
                return Err(AdminError::BadQuery(format!("unknown parameter {other:?}: use provider")));
            }
        }
    }
    match generation.oauth.grants(provider.as_deref()).await {
        Ok(providers) => Ok(json(StatusCode::OK, &serde_json::json!({ "providers": providers }))),
        Err(FlowError::UnknownProvider(p)) => Err(AdminError::UnknownProvider(p.chars().take(64).collect())),
        Err(e) => Err(AdminError::GrantStore(e.to_string())),
    }
}

/// `?state=<word>|all` of `GET /changes` and `GET /approvals`: the state
/// `parse` reads (`pending` when absent; `None` for all).
fn state_query<S>(
    query: Option<&str>,
    parse: fn(&str) -> Option<S>,
    pending: S,
    words: &str,
) -> Result<Option<S>, AdminError> {
    let mut state = Some(pending);
    for (name, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match (name.as_ref(), value.as_ref()) {
            ("state", "all") => state = None,
            ("state", word) => {
                state = Some(parse(word).ok_or_else(|| AdminError::BadQuery(format!("state: use {words} or all")))?);
            }
            (other, _) => {
                let other: String = other.chars().take(40).collect();
                return Err(AdminError::BadQuery(format!("unknown parameter {other:?}: use state")));
            }
        }
    }
    Ok(state)
}

/// A decision's path, `/<kind>/<id>/<verb>`, as the id and whether it
/// approves, and its optional JSON body `{"by": "<who>"}`, recorded with it.
async fn decision(path: &str, kind: &str, no: &str, body: Incoming) -> Result<(String, bool, String), AdminError> {
    let rest = path.strip_prefix(kind).unwrap_or_default();
    let (id, approve) = match rest.split_once('/') {
        Some((id, "approve")) => (id, true),
        Some((id, verb)) if verb == no => (id, false),
        _ => return Err(AdminError::NotFound),
    };
    let bytes = Limited::new(body, 4096)
        .collect()
        .await
        .map_err(|_| AdminError::BadQuery("the body must be at most 4096 bytes".into()))?
        .to_bytes();
    let by = match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(value) => value.get("by").and_then(|by| by.as_str()).map(|by| by.chars().take(80).collect::<String>()),
        Err(_) if bytes.iter().all(u8::is_ascii_whitespace) => None,
        Err(e) => return Err(AdminError::BadQuery(format!("the JSON body: {e}"))),
    };
    Ok((id.to_owned(), approve, by.map_or_else(|| "admin".to_owned(), |by| format!("admin ({by})"))))
}

/// `GET /changes[?state=pending|approved|rejected|all]`: tool definition
/// changes, pending ones by default, newest first.
fn list_changes(gateway: &Gateway, query: Option<&str>) -> Result<Response<Full<Bytes>>, AdminError> {
    let state = state_query(query, ChangeState::parse, ChangeState::Pending, "pending, approved, rejected")?;
    Ok(json(StatusCode::OK, &serde_json::json!({ "changes": gateway.integrity.changes(state) })))
}

/// `POST /changes/<id>/approve` or `/reject`.
async fn decide_change(gateway: &Gateway, path: &str, body: Incoming) -> Result<Response<Full<Bytes>>, AdminError> {
    let (id, approve, by) = decision(path, "/changes/", "reject", body).await?;
    let change = gateway.integrity.decide(&id, approve, &by).await?;
    Ok(json(StatusCode::OK, &change))
}

/// `GET /approvals[?state=pending|approved|denied|expired|all]`: calls held
/// for approval, pending ones by default, newest first.
async fn list_approvals(gateway: &Gateway, query: Option<&str>) -> Result<Response<Full<Bytes>>, AdminError> {
    let state =
        state_query(query, approvals::State::parse, approvals::State::Pending, "pending, approved, denied, expired")?;
    Ok(json(StatusCode::OK, &serde_json::json!({ "approvals": gateway.approvals.list(state).await? })))
}

/// `POST /approvals/<id>/approve` or `/deny`: an operator decides a request
/// of an `approver = "admin"` rule (a caller's own requests are theirs).
async fn decide_approval(gateway: &Gateway, path: &str, body: Incoming) -> Result<Response<Full<Bytes>>, AdminError> {
    let (id, approve, by) = decision(path, "/approvals/", "deny", body).await?;
    let held = gateway.approvals.get(&id).await?.ok_or_else(|| ApprovalError::Unknown(id.clone()))?;
    if !held.approver.lets(&held, &approvals::Decider::Admin) {
        return Err(AdminError::CallersOwn);
    }
    let decided = gateway.approvals.decide(&id, approve, &by, &gateway.metrics).await?;
    Ok(json(StatusCode::OK, &decided))
}

/// `DELETE /grants/<provider>/<user_id>`: forgets the user's grant and
/// revokes it at the provider, as the user's own disconnect does.
async fn revoke_grant(generation: &Generation, path: &str) -> Result<Response<Full<Bytes>>, AdminError> {
    let rest = path.strip_prefix("/grants/").unwrap_or_default();
    let Some((provider, user)) = rest.split_once('/') else { return Err(AdminError::NotFound) };
    let decode = |s: &str| percent_encoding::percent_decode_str(s).decode_utf8().map(|s| s.into_owned());
    let (Ok(provider), Ok(user)) = (decode(provider), decode(user)) else { return Err(AdminError::NotFound) };
    if user.is_empty() || user.contains('/') || !generation.oauth.manages(&provider) {
        return Err(AdminError::UnknownProvider(provider.chars().take(64).collect()));
    }
    match generation.oauth.disconnect(&provider, &user).await {
        Ok(had) => {
            tracing::info!(provider, revoked = had, "admin revoked a grant");
            Ok(json(StatusCode::OK, &serde_json::json!({"provider": provider, "user_id": user, "revoked": had})))
        }
        Err(FlowError::UnknownProvider(p)) => Err(AdminError::UnknownProvider(p)),
        Err(e) => Err(AdminError::GrantStore(e.to_string())),
    }
}

/// The data plane's framing of a request's authority, then its `Host` and
/// `Origin` rules, for this listener.
fn check_browser(generation: &Generation, request: &Parts) -> Result<(), AdminError> {
    let headers = &request.headers;
    let host_header = headers.get(http::header::HOST);
    // hyper keeps an absolute-form target's authority on the URI, whatever
    // `Host` says: both must name the same host, byte for byte, as pingora
    // requires on the data plane (RFC 9112 3.2.2 would let the target win;
    // two readers of one request must not disagree).
    let authority = request.uri.authority().map(|a| a.as_str().as_bytes());
    if let (Some(authority), Some(host)) = (authority, host_header) {
        if authority != host.as_bytes() {
            return Err(AdminError::Authority("the Host header differs from the request target's authority"));
        }
    }
    let host = authority.or_else(|| host_header.map(http::HeaderValue::as_bytes));
    if host.is_some_and(|h| h.contains(&b'@')) {
        return Err(AdminError::Authority("userinfo in the request's authority"));
    }
    if host.is_none() && request.version == http::Version::HTTP_11 {
        return Err(AdminError::Authority("no Host header"));
    }
    generation.admin_browser.check_host(host)?;
    if headers.get_all(http::header::HOST).iter().count() > 1 {
        return Err(BrowserRefusal::MisdirectedHost.into());
    }
    generation.admin_browser.check_origin(headers.get(http::header::ORIGIN).map(http::HeaderValue::as_bytes), false)?;
    Ok(())
}

/// The one place the admin listener decides who may make a request (see
/// the module's comment); `loopback` is whether it is bound to a loopback
/// address.
fn authorize(generation: &Generation, access: Access, loopback: bool, request: &Parts) -> Result<(), AdminError> {
    let expected = match (&generation.admin_token, access) {
        (_, Access::Open) | (Some(_), Access::Console) => return Ok(()),
        (Some(token), Access::Read | Access::Action) => token,
        (None, Access::Action) => return Err(AdminError::ActionsOff),
        (None, Access::Console | Access::Read) if loopback => return Ok(()),
        (None, Access::Console | Access::Read) => {
            let warning = generation.config.server.admin_without_token().unwrap_or_else(|| {
                // The config says loopback but the listener is bound elsewhere
                // (a reload cannot move it): the same rule, worded for that.
                "the admin listener is not on a loopback address and [server] has no admin_token: it serves only \
                 /health and /metrics; add `admin_token = \"env:OTC_ADMIN_TOKEN\"` to [server]"
                    .to_owned()
            });
            return Err(AdminError::ReadsOff(warning));
        }
    };
    let presented = request
        .headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim());
    match presented {
        Some(token) if bool::from(token.as_bytes().ct_eq(expected.expose().as_bytes())) => Ok(()),
        _ => {
            // The path only: a query may carry a JWT (`/explain?jwt=`).
            tracing::info!(path = request.uri.path(), "admin request refused: missing or wrong admin token");
            Err(AdminError::Unauthorized)
        }
    }
}

fn metrics(gateway: &Gateway, generation: &Generation) -> Response<Full<Bytes>> {
    if generation.secrets.has_vault() {
        let stats = generation.secrets.stats();
        gateway.metrics.sync_vault_totals("vault", stats.requests_ok, stats.requests_error, stats.stale_served);
    }
    gateway.metrics.sync_idempotency_totals(&generation.idempotency.stats().by_result());
    let (served, refused) = generation.rate_limits.store_failures();
    gateway.metrics.sync_rate_limit_store_failures(served, refused);
    let spans = crate::otel::stats();
    gateway.metrics.sync_trace_totals(spans.exported(), spans.dropped());
    let mut response = Response::new(Full::new(Bytes::from(gateway.metrics.render())));
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static(crate::metrics::CONTENT_TYPE));
    response
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
    /// Tools whose MCP names clash: the ones not served on MCP.
    mcp_name_conflicts: Vec<McpNameConflict>,
    /// Tools whose definition waits for review: not served (`new`), or
    /// served at their pinned definition (`changed`).
    held_tools: Vec<HeldTool>,
    /// How many tool definition changes wait for review (`GET /changes`).
    tool_changes_pending: usize,
    /// Each virtual server (`[[servers]]`): its tools and what is wrong.
    servers: Vec<crate::catalog::ServerReport>,
    /// How many calls wait for an approval (`GET /approvals`).
    approvals_pending: usize,
    /// Settings that weaken the gateway's defences, as written.
    security_warnings: Vec<String>,
    /// How long building the current catalog took (merge, listing and
    /// search index), in milliseconds.
    catalog_build_ms: f64,
    /// The current catalog's search index.
    search_index: IndexStats,
    /// `[tracing]`, when set: where spans go and how many were lost.
    #[serde(skip_serializing_if = "Option::is_none")]
    tracing: Option<TracingStatus>,
}

/// What `/status` says of `[tracing]`.
#[derive(Serialize)]
struct TracingStatus {
    otlp_endpoint: String,
    sample_ratio: f64,
    spans_exported: u64,
    spans_dropped: u64,
}

#[derive(Serialize)]
struct UpstreamReport {
    name: String,
    /// What the operator granted it (names only).
    granted: GrantedNames,
    #[serde(flatten)]
    status: UpstreamStatus,
}

/// An upstream's grants, as gateway.toml writes them.
#[derive(Serialize)]
struct GrantedNames {
    secrets: Vec<String>,
    authorization: Vec<String>,
    toolkits: Vec<String>,
}

fn status(gateway: &Gateway) -> Status {
    let catalog = gateway.catalog.load();
    let generation = gateway.generation();
    let mut statuses = gateway.catalog.statuses();
    let upstreams = generation
        .upstreams
        .iter()
        .map(|u| UpstreamReport {
            name: u.name.to_string(),
            granted: GrantedNames {
                secrets: u.secret_grants.to_list(),
                authorization: u.authorization_grants.to_list(),
                toolkits: u.reserved_toolkits.clone(),
            },
            status: statuses.remove(&*u.name).unwrap_or_default(),
        })
        .collect();
    Status {
        generation: gateway.generation_number(),
        last_reload: gateway.last_reload(),
        upstreams,
        tools: catalog.len(),
        conflicts: catalog.conflicts().to_vec(),
        policy_warnings: generation.access.unmatched_patterns(&catalog),
        ungranted: catalog.ungranted_requirements(&generation.config),
        refused_tools: catalog.refused().to_vec(),
        shared_toolkits: catalog.shared_toolkits().to_vec(),
        mcp_name_conflicts: catalog.mcp_name_conflicts().to_vec(),
        held_tools: catalog.held().to_vec(),
        tool_changes_pending: gateway.integrity.pending(),
        servers: catalog.servers().filter_map(|view| Some(view.as_server()?.report.clone())).collect(),
        approvals_pending: gateway.approvals.pending(),
        security_warnings: generation.config.security_warnings(),
        catalog_build_ms: catalog.build_time().as_secs_f64() * 1000.0,
        search_index: catalog.search_index().stats(),
        tracing: generation.config.tracing.as_ref().map(|t| TracingStatus {
            otlp_endpoint: t.otlp_endpoint.clone(),
            sample_ratio: t.sample_ratio,
            spans_exported: crate::otel::stats().exported(),
            spans_dropped: crate::otel::stats().dropped(),
        }),
    }
}

fn with_type(status: StatusCode, body: Bytes, content_type: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static(content_type));
    response
}

fn json<T: Serialize>(status: StatusCode, body: &T) -> Response<Full<Bytes>> {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut response = Response::new(Full::new(Bytes::from(bytes)));
    *response.status_mut() = status;
    response.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_but_health_and_metrics_is_guarded() {
        assert_eq!(Access::of(&Method::GET, "/health"), Access::Open);
        assert_eq!(Access::of(&Method::GET, "/metrics"), Access::Open);
        for asset in ["/", "/index.html", "/console/app.js", "/console/app.css", "/favicon.ico"] {
            assert_eq!(Access::of(&Method::GET, asset), Access::Console, "{asset}");
        }
        assert_eq!(Access::of(&Method::POST, "/reload"), Access::Action);
        assert_eq!(Access::of(&Method::DELETE, "/grants/idp/ann"), Access::Action);
        // Reads, wrong methods and unknown routes alike: a route added
        // later is guarded until said otherwise.
        for (method, path) in [
            (Method::GET, "/status"),
            (Method::GET, "/calls"),
            (Method::GET, "/tools"),
            (Method::GET, "/tools/search"),
            (Method::GET, "/explain"),
            (Method::POST, "/explain"),
            (Method::GET, "/grants"),
            (Method::POST, "/metrics"),
            (Method::GET, "/reload"),
            (Method::GET, "/grants/idp/ann"),
            (Method::GET, "/something-new"),
        ] {
            assert_eq!(Access::of(&method, path), Access::Read, "{method} {path}");
        }
    }
}
