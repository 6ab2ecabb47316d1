//! The demo's stand-in OAuth provider: just enough of an authorization
//! server (code grant with PKCE S256, refresh, revocation) for a newcomer to
//! click through the gateway's per-user flow on loopback. One user, who
//! approves or denies on a page; tokens live in memory and expire in five
//! minutes, so a running demo refreshes too. Not for anything but the demo:
//! the tests run against a certified provider (`oidc-provider`).
//!
//! Beside it, under `/app/`, the demo's stand-in application, where alice
//! is signed in: the gateway's `verifier_url`. After the provider's
//! callback the browser lands there; its Confirm button has the application
//! confirm the flow to the gateway (`POST /oauth/confirm`) with alice's own
//! credentials and send the browser on to the `return_to` the gateway
//! answered, where the gateway keeps the grant: alice's application vouched
//! for her, and the browser coming back is the one that consented.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine as _;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::json;
use sha2::Digest;
use tokio::net::TcpListener;

/// The gateway's client id at the stand-in.
pub(crate) const CLIENT_ID: &str = "otc-gateway-demo";
/// The gateway's client secret at the stand-in.
pub(crate) const CLIENT_SECRET: &str = "demo-client-secret";
/// How long an access token lives.
const ACCESS_TTL: Duration = Duration::from_secs(300);

#[derive(Default)]
struct State {
    /// Authorization requests waiting on the user's answer, by id.
    asked: HashMap<String, Asked>,
    /// Codes not yet exchanged.
    codes: HashMap<String, Asked>,
    /// Access tokens and when they expire.
    access: HashMap<String, Instant>,
    /// Refresh tokens and their scope.
    refresh: HashMap<String, String>,
}

#[derive(Clone)]
struct Asked {
    redirect_uri: String,
    state: String,
    scope: String,
    challenge: String,
}

fn state() -> std::sync::MutexGuard<'static, State> {
    static STATE: OnceLock<Mutex<State>> = OnceLock::new();
    STATE.get_or_init(Mutex::default).lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether `token` is a live access token of the stand-in.
pub(crate) fn is_valid(token: Option<&str>) -> bool {
    token.is_some_and(|t| state().access.get(t).is_some_and(|until| *until > Instant::now()))
}

/// Serves the stand-in on a free loopback port.
pub(crate) async fn serve() -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            tokio::spawn(async move {
                let service =
                    service_fn(|request| async move { Ok::<_, std::convert::Infallible>(handle(request).await) });
                let _ =
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    Ok(addr)
}

fn random() -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(uuid::Uuid::new_v4().as_bytes())
}

fn params(text: &str) -> HashMap<String, String> {
    oauth2::url::form_urlencoded::parse(text.as_bytes()).into_owned().collect()
}

async fn handle(request: Request<Incoming>) -> Response<Full<Bytes>> {
    let query = params(request.uri().query().unwrap_or_default());
    match (request.method().clone(), request.uri().path()) {
        (Method::GET, "/authorize") => authorize(&query),
        (Method::GET, "/answer") => answer(&query),
        (Method::POST, "/token") => {
            let basic = request.headers().get(http::header::AUTHORIZATION).cloned();
            let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            token(basic.as_ref(), &params(&String::from_utf8_lossy(&body)))
        }
        (Method::GET, "/app/connect/verify") => verify_page(&query),
        (Method::POST, "/app/connect/confirm") => {
            let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            confirm(&params(&String::from_utf8_lossy(&body))).await
        }
        (Method::POST, "/revoke") => {
            let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            if let Some(token) = params(&String::from_utf8_lossy(&body)).get("token") {
                let mut state = state();
                state.refresh.remove(token);
                state.access.remove(token);
            }
            Response::new(Full::new(Bytes::new()))
        }
        _ => super::reply(StatusCode::NOT_FOUND, &json!({"error": "not_found"})),
    }
}

/// The consent page.
fn authorize(query: &HashMap<String, String>) -> Response<Full<Bytes>> {
    let get = |k: &str| query.get(k).cloned().unwrap_or_default();
    if get("client_id") != CLIENT_ID || get("response_type") != "code" || get("code_challenge_method") != "S256" {
        return page("The request is not from the demo gateway (client_id, response_type=code, PKCE S256).");
    }
    let id = random();
    let scope = get("scope");
    state().asked.insert(
        id.clone(),
        Asked {
            redirect_uri: get("redirect_uri"),
            state: get("state"),
            scope: scope.clone(),
            challenge: get("code_challenge"),
        },
    );
    let scope = scope.replace(['<', '>', '&', '"'], "");
    page(&format!(
        "The demo gateway asks for access to alice's pretend mail (scopes: {scope}).</p>\
         <p><a href=\"/answer?id={id}&allow=1\">Allow</a> &nbsp; <a href=\"/answer?id={id}&allow=0\">Deny</a>"
    ))
}

/// Back to the gateway with a code, or with `error=access_denied`.
fn answer(query: &HashMap<String, String>) -> Response<Full<Bytes>> {
    let Some(asked) = query.get("id").and_then(|id| state().asked.remove(id)) else {
        return page("This request was answered already.");
    };
    let mut target = oauth2::url::Url::parse(&asked.redirect_uri).ok();
    let Some(url) = target.as_mut() else { return page("The redirect URI is not a URL.") };
    if query.get("allow").map(String::as_str) == Some("1") {
        let code = random();
        url.query_pairs_mut().append_pair("code", &code).append_pair("state", &asked.state);
        state().codes.insert(code, asked);
    } else {
        url.query_pairs_mut().append_pair("error", "access_denied").append_pair("state", &asked.state);
    }
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = StatusCode::FOUND;
    if let Ok(location) = http::HeaderValue::from_str(url.as_str()) {
        response.headers_mut().insert(http::header::LOCATION, location);
    }
    response
}

/// The token endpoint: code (with the PKCE verifier) or refresh token.
fn token(basic: Option<&http::HeaderValue>, form: &HashMap<String, String>) -> Response<Full<Bytes>> {
    let expected =
        format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{CLIENT_ID}:{CLIENT_SECRET}")));
    if basic.and_then(|v| v.to_str().ok()) != Some(expected.as_str()) {
        return super::reply(StatusCode::UNAUTHORIZED, &json!({"error": "invalid_client"}));
    }
    let invalid = || super::reply(StatusCode::BAD_REQUEST, &json!({"error": "invalid_grant"}));
    let mut state = state();
    let scope = match form.get("grant_type").map(String::as_str) {
        Some("authorization_code") => {
            let Some(asked) = form.get("code").and_then(|c| state.codes.remove(c)) else { return invalid() };
            let verifier = form.get("code_verifier").cloned().unwrap_or_default();
            let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(verifier));
            if challenge != asked.challenge || form.get("redirect_uri") != Some(&asked.redirect_uri) {
                return invalid();
            }
            asked.scope
        }
        Some("refresh_token") => match form.get("refresh_token").and_then(|t| state.refresh.get(t)) {
            Some(scope) => scope.clone(),
            None => return invalid(),
        },
        _ => return super::reply(StatusCode::BAD_REQUEST, &json!({"error": "unsupported_grant_type"})),
    };
    let (access, refresh) = (random(), random());
    state.access.insert(access.clone(), Instant::now() + ACCESS_TTL);
    state.refresh.insert(refresh.clone(), scope.clone());
    super::reply(
        StatusCode::OK,
        &json!({"access_token": access, "token_type": "Bearer", "expires_in": ACCESS_TTL.as_secs(),
                "refresh_token": refresh, "scope": scope}),
    )
}

/// The gateway the demo application confirms flows with (known once it
/// listens).
static GATEWAY: OnceLock<SocketAddr> = OnceLock::new();

/// Tells the demo application where the gateway listens.
pub(crate) fn set_gateway(addr: SocketAddr) {
    let _ = GATEWAY.set(addr);
}

/// The application's page for a flow back from the provider: alice
/// confirms that it was her.
fn verify_page(query: &HashMap<String, String>) -> Response<Full<Bytes>> {
    let flow_id: String = query
        .get("flow_id")
        .map(|f| f.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_').collect())
        .unwrap_or_default();
    app_page(&format!(
        "You are signed in to the demo application as alice. You just connected demo-mail: confirm it was you, \
         and the gateway keeps the grant for alice.</p>\
         <form method=\"post\" action=\"/app/connect/confirm\"><input type=\"hidden\" name=\"flow_id\" value=\"{flow_id}\">\
         <button type=\"submit\">Confirm</button></form><p>"
    ))
}

/// Confirms the flow to the gateway as alice and sends the browser on to
/// the gateway's `return_to`, or says why not.
async fn confirm(form: &HashMap<String, String>) -> Response<Full<Bytes>> {
    let Some(gateway) = GATEWAY.get() else { return app_page("The gateway is not listening yet.") };
    let flow_id = form.get("flow_id").cloned().unwrap_or_default();
    let Ok(client) = crate::http_client::build(Duration::from_secs(5)) else { return app_page("No HTTP client.") };
    let Ok(uri) = format!("http://{gateway}/oauth/confirm").parse() else { return app_page("Bad gateway address.") };
    let headers = vec![
        (http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json")),
        (http::HeaderName::from_static("oxp-api-key"), http::HeaderValue::from_static(super::DEMO_USER_KEY.1)),
    ];
    let body = Bytes::from(json!({ "flow_id": flow_id }).to_string());
    match crate::http_client::send(&client, Method::POST, uri, headers, body, Duration::from_secs(10)).await {
        Ok((status, _, body)) if status.is_success() => {
            let answer: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            // A real application would show `answer["account"]` (whose
            // provider account is being connected) before sending its user on.
            let Some(location) = answer["return_to"].as_str().and_then(|to| http::HeaderValue::from_str(to).ok())
            else {
                return app_page("The gateway's answer named no return_to.");
            };
            let mut response = Response::new(Full::new(Bytes::new()));
            *response.status_mut() = StatusCode::SEE_OTHER;
            response.headers_mut().insert(http::header::LOCATION, location);
            response
        }
        Ok((status, _, body)) => {
            let text = String::from_utf8_lossy(&body).replace(['<', '>', '&'], "");
            app_page(&format!("The gateway refused the confirmation (HTTP {status}): {text}"))
        }
        Err(e) => app_page(&format!("The gateway could not be reached: {}", e.replace(['<', '>', '&'], ""))),
    }
}

fn app_page(text: &str) -> Response<Full<Bytes>> {
    let body = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Demo application</title></head>\
         <body><h1>Demo application</h1><p>{text}</p></body></html>"
    );
    let mut response = Response::new(Full::new(Bytes::from(body)));
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/html; charset=utf-8"));
    response
}

fn page(text: &str) -> Response<Full<Bytes>> {
    let body = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Demo provider</title></head>\
         <body><h1>Demo OAuth provider</h1><p>{text}</p></body></html>"
    );
    let mut response = Response::new(Full::new(Bytes::from(body)));
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/html; charset=utf-8"));
    response
}
