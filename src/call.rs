//! The life of a tool call, top to bottom: parse, resolve, admit, validate,
//! inject, claim the call id, forward, re-wrap. Each step is a function named
//! for what it does. The caller arrives authenticated: the fronts
//! (`proxy/`, `mcp_endpoint/`) authenticate before the body is read.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::HeaderValue;
use serde_json::Value;
use smallvec::SmallVec;

mod record;

use crate::approval_gate::approve_call;
use crate::auth::Caller;
use crate::catalog::{Catalog, LookupError, Route, Target};
use crate::circuit::Admission;
use crate::error::{ended, mark_failed, AuthorizationChallenge, MissingRequirements, RequestError};
use crate::gateway::{upstream_bearer, Gateway, Generation};
use crate::idempotency::{CallerScope, Decision, Fingerprint, Pending, StoredCall};
use crate::mcp::v2026_07_28::{ClientAsk, Passthrough};
use crate::metrics::CallOutcome;
use crate::oauth::TokenError;
use crate::otel::{self, Kind, Span};
use crate::requirements::{self, check_grants, Granted, SecretPlan, TokenPlan};
use crate::resolve::parse_tool_id;
use crate::scrub;
use crate::trace::OutgoingTrace;
pub use crate::upstream::Native;
use crate::upstream::{ForwardError, UpstreamCall, UpstreamReply};
use crate::wire::{
    self, is_supported_schema, AuthorizationToken, CallContext, CallResult, Input, SecretValue, UpstreamResult,
};

/// A call request after parsing: the canonical form of whatever shape came in.
#[derive(Debug)]
pub struct ParsedCall {
    /// `Toolkit.Name[@version]` as the client wrote it.
    pub tool_id: String,
    /// The client's call id, or one the gateway made.
    pub call_id: String,
    /// Whether the client sent the call id (only those are idempotency keys).
    pub client_call_id: bool,
    /// The client's trace id.
    pub trace_id: Option<String>,
    /// The input, always a JSON object.
    pub input: Input,
    /// The client's context.
    pub context: CallContext,
    /// The client's W3C `traceparent` header, continued upstream.
    pub traceparent: Option<String>,
    /// What a 2026-07-28 MCP client sends on to a 2026-07-28 MCP server
    /// (its capabilities, input responses); `None` for every other front.
    pub passthrough: Option<Passthrough>,
    /// The virtual server's view the call came through (`catalog/servers.rs`); `None` at the root.
    pub server: Option<Arc<Catalog>>,
}

/// A finished call: its canonical result and what to record about it.
#[derive(Debug)]
pub struct FinishedCall {
    /// The outcome in canonical form.
    pub result: CallResult,
    /// Success or tool error.
    pub outcome: CallOutcome,
    /// The name of the upstream that answered (for a replayed answer, the
    /// name stored with it).
    pub upstream: Arc<str>,
    /// How long the call took: measured once, for the result's `duration`
    /// and for the metrics.
    pub took: Duration,
    /// The upstream's answer in its own protocol (an MCP server's result,
    /// or its question to the client), for a front that speaks it; `result`
    /// is its mapping for any other.
    pub native: Option<Native>,
}

impl FinishedCall {
    /// Whether the upstream asked the client something instead of
    /// answering: not an outcome yet (the client answers and calls again).
    fn is_question(&self) -> bool {
        matches!(self.native, Some(Native::McpAsk(_)))
    }
}

/// Parse, for `POST /tools/call`: the raw body, within `generation`'s
/// nesting limit, as a call that continues `traceparent`. The front then
/// runs it ([`execute_call`]) and renders its result ([`render_result`]).
pub fn parse_call_request(
    generation: &Generation,
    body: &[u8],
    traceparent: Option<String>,
) -> Result<ParsedCall, RequestError> {
    let max_depth = generation.config.server.max_json_depth;
    if !wire::nesting_within(body, max_depth) {
        return Err(RequestError::TooDeep(max_depth));
    }
    Ok(ParsedCall { traceparent, ..parse_call(body)? })
}

/// Runs a parsed call for a caller under `generation`: the part of a call every
/// front (OTC, MCP) shares.
pub async fn execute_call(
    gateway: &Gateway,
    generation: Arc<Generation>,
    caller: &Caller,
    mut call: ParsedCall,
) -> Result<FinishedCall, RequestError> {
    let started = Instant::now();
    // Recorded when a front's server span is (`otel/`): one check otherwise.
    let tracer = generation.tracer.as_ref();
    let mut span = tracer.and_then(|t| t.continue_trace(call.traceparent.as_deref(), "execute_tool"));
    let catalog = call.server.take().unwrap_or_else(|| gateway.catalog.load_owned());
    let step = otel::child(span.as_ref(), "resolve", Kind::Internal);
    let resolved = resolve_tool(&catalog, &call.tool_id).map_err(|e| unseen_unless_allowed(&generation, caller, e));
    let route = ended(step, resolved).inspect_err(|e| mark_failed(span.as_mut(), e))?;
    if let Some(span) = &mut span {
        route.root().describe(span);
    }
    let finished = run_resolved_call(gateway, &generation, route, caller, &mut call, started, span.as_ref()).await;
    record::record_call(gateway, caller, route.root(), &mut call, &finished, started, span.as_mut());
    finished
}

/// Everything after resolution: admit, validate, inject, claim the call id,
/// forward, re-wrap; a server's route (`catalog/servers.rs`) judged as its root's.
async fn run_resolved_call(
    gateway: &Gateway,
    generation: &Generation,
    route: &Route,
    caller: &Caller,
    call: &mut ParsedCall,
    started: Instant,
    span: Option<&Span>,
) -> Result<FinishedCall, RequestError> {
    let (served, route) = (route, route.root());
    let step = otel::child(span, "admit", Kind::Internal);
    ended(step, admit_call(generation, served, caller).await)?;
    ended(otel::child(span, "validate", Kind::Internal), validate_input(served, &mut call.input))?;
    let call_id = call.client_call_id.then_some(call.call_id.as_str());
    let approved = approve_call(gateway, generation, route, caller, call_id, &call.input, &call.context, span).await?;
    // A client's call_id is theirs: whose it is comes from the context as
    // they sent it, before anything is injected.
    let scope = call.client_call_id.then(|| CallerScope::of(caller, &call.context));
    let step = otel::child(span, "inject", Kind::Internal);
    let context = std::mem::take(&mut call.context);
    let injected = inject_context(gateway, generation, route, caller, context, step.as_ref()).await;
    let Injected { context, granted } = ended(step, injected)?;
    // An approved call runs once: without a call_id of the client's, its
    // run is kept under the approval's.
    let (claim_scope, claim_id) = match &approved {
        Some(approved) if scope.is_none() => (Some(&approved.scope), approved.claim_id.as_str()),
        _ => (scope.as_ref(), call.call_id.as_str()),
    };
    let claim = match claim_call_id(generation, route, claim_scope, claim_id, &call.input, started).await? {
        Claimed::Replay(completed) => return Ok(completed),
        Claimed::Run(claim) => claim,
    };
    if let Some(approved) = &approved {
        approved.unspent()?;
    }
    let max_response = generation.config.server.max_body_bytes.max(MIN_RESPONSE_LIMIT);
    let trace =
        OutgoingTrace { trace_id: call.trace_id.as_deref(), traceparent: call.traceparent.as_deref(), span: None };
    let scoped_id = scope.map(|scope| scope.forwarded_call_id(&call.call_id));
    let upstream_call_id = scoped_id.as_deref().unwrap_or(&call.call_id);
    let request = UpstreamCall {
        tool: "",
        call_id: upstream_call_id,
        trace,
        input: &call.input,
        context: &context,
        passthrough: call.passthrough.as_ref(),
        span: None,
    };
    let forwarded = forward_call(generation, route, granted, request, max_response, span).await;
    // What the gateway injected never reaches the caller, even when a tool
    // echoes it (before it is stored for duplicates too). The upstream's own
    // token is the operator's secret too.
    let bearer = forwarded.as_ref().ok().and_then(|(_, _, bearer)| bearer.clone());
    let mut injected = injected_values(generation, &context);
    injected.extend(bearer.as_ref().and_then(|b| b.to_str().ok()).map(scrub::credential));
    let mut finished = forwarded.and_then(|(target, forwarded, _)| {
        let took = started.elapsed();
        let (result, native) = rewrap_response(forwarded, target, call.call_id.clone(), took, &injected)?;
        Ok(FinishedCall {
            outcome: if result.success { CallOutcome::Success } else { CallOutcome::ToolError },
            result,
            upstream: target.upstream.name.clone(),
            took,
            native,
        })
    });
    redact_echoes(&mut finished, &injected);
    if let (Some(approved), Ok(completed)) = (&approved, &finished) {
        approved.spend(gateway, completed.is_question()).await;
    }
    if let Some(claim) = claim {
        remember_call(claim, &finished).await;
        // Storing the answer for duplicates is part of what the call took.
        if let Ok(completed) = &mut finished {
            completed.took = started.elapsed();
        }
    }
    finished
}

/// What the idempotency store said about a call.
enum Claimed {
    /// Run it; with the claim when its answer is to be remembered (a claim
    /// dropped on the way, the request cancelled, is released).
    Run(Option<Pending>),
    /// A duplicate: the first call's answer.
    Replay(FinishedCall),
}

/// Claims a client-sent `call_id` for its caller (`scope`; gateway-made ids
/// are never repeated and have none). A store that cannot answer lets the
/// call run undeduplicated: refusing every call while Redis is down would be
/// worse than a rare double run.
async fn claim_call_id(
    generation: &Generation,
    route: &Route,
    scope: Option<&CallerScope>,
    call_id: &str,
    input: &Input,
    started: Instant,
) -> Result<Claimed, RequestError> {
    let Some(scope) = scope else { return Ok(Claimed::Run(None)) };
    let tool = &route.tool.definition.id;
    let fingerprint = Fingerprint::of(tool, &input.value());
    // A concurrent duplicate waits as long as the first call may take.
    let longest = route.targets.iter().map(|t| t.upstream.call_timeout).max().unwrap_or_default();
    match generation.idempotency.claim(&scope.key(call_id), &fingerprint, longest + Duration::from_secs(5)).await {
        Ok(Decision::Run(claim)) => Ok(Claimed::Run(Some(claim))),
        Ok(Decision::Replay(stored)) => Ok(Claimed::Replay(FinishedCall {
            outcome: if stored.result.success { CallOutcome::Success } else { CallOutcome::ToolError },
            result: stored.result.clone(),
            upstream: Arc::from(stored.upstream.as_str()),
            took: started.elapsed(),
            native: None,
        })),
        Ok(Decision::Conflict) => Err(RequestError::CallIdReused),
        Ok(Decision::InProgress) => Err(RequestError::CallInProgress),
        Err(e) => {
            tracing::warn!(error = %e, "idempotency store unavailable; running the call without deduplication");
            Ok(Claimed::Run(None))
        }
    }
}

/// Stores a completed call's answer for its duplicates, or gives the claim up
/// when the call ended before the tool ran, or with a question to the
/// client (a retry may then run it).
async fn remember_call(claim: Pending, finished: &Result<FinishedCall, RequestError>) {
    match finished {
        Ok(completed) if !completed.is_question() => {
            let stored = StoredCall { result: completed.result.clone(), upstream: completed.upstream.to_string() };
            claim.complete(&stored).await;
        }
        _ => claim.release().await,
    }
}

/// Tool answers may be larger than requests; never below this many bytes.
const MIN_RESPONSE_LIMIT: usize = 16 * 1024 * 1024;

/// A new call id, for a call whose client sent none.
pub(crate) fn new_call_id() -> String {
    // Written without `core::fmt`, which is slower here (benches/HISTORY.md,
    // "Figures behind the code"). Digit pairs and one draw of the thread's
    // generator were tried: the text then needs a UTF-8 check, which cost
    // what they saved (benches/README.md, "Per-call work after the front
    // door: the bound met").
    uuid::Uuid::new_v4().hyphenated().encode_lower(&mut uuid::Uuid::encode_buffer()).to_owned()
}

/// Parse: any accepted body shape into a [`ParsedCall`].
pub fn parse_call(body: &[u8]) -> Result<ParsedCall, RequestError> {
    let mut outer = wire::read_call_body(body).map_err(|e| RequestError::MalformedCall(e.to_string()))?;
    let outer_schema = outer.schema.take();
    let request = match outer.request {
        Some(inner) => *inner,
        None => outer,
    };
    for schema in [outer_schema.as_deref(), request.schema.as_deref()].into_iter().flatten() {
        if !is_supported_schema(schema) {
            return Err(RequestError::UnsupportedSchema(schema.chars().take(100).collect()));
        }
    }
    let tool_id = request.tool_id.ok_or(RequestError::MissingToolId)?;
    let (call_id, client_call_id) = match request.call_id {
        Some(id) if !id.is_empty() => (id, true),
        _ => (new_call_id(), false),
    };
    let input = request.input.or(request.inputs).unwrap_or_default();
    Ok(ParsedCall {
        tool_id,
        call_id,
        client_call_id,
        trace_id: request.trace_id,
        input,
        context: request.context.unwrap_or_default(),
        traceparent: None,
        passthrough: None,
        server: None,
    })
}

/// Resolve: the tool id to the route serving that version.
pub fn resolve_tool<'c>(catalog: &'c Catalog, tool_id: &str) -> Result<&'c Route, RequestError> {
    let tool = parse_tool_id(tool_id)?;
    Ok(catalog.lookup(&tool)?)
}

/// A tool that waits for review is one only for callers whose policies let
/// them see it; to anyone else it does not exist.
fn unseen_unless_allowed(generation: &Generation, caller: &Caller, error: RequestError) -> RequestError {
    let access = &generation.access;
    match error {
        RequestError::Lookup(LookupError::Held { key, .. }) if !access.allows(access.matching(caller), &key) => {
            RequestError::Denied(key)
        }
        other => other,
    }
}

/// Admit: the caller's policies must allow the (root) tool, else it is unknown
/// by the name the caller used; and its rate limits must have room.
pub async fn admit_call(generation: &Generation, route: &Route, caller: &Caller) -> Result<(), RequestError> {
    let key = route.root().tool.key.as_str();
    let access = &generation.access;
    if access.is_active() && !access.allows(access.matching(caller), key) {
        tracing::info!(user_id = caller.authenticated_user(), tool = key, "call denied by policy");
        return Err(RequestError::Denied(route.tool.key.clone()));
    }
    generation
        .rate_limits
        .check(caller, key)
        .await
        .map_err(|(limit, retry_after)| RequestError::RateLimited { limit, retry_after })
}

/// Validate: the input against the tool's compiled `input_schema`; in a
/// server, fixed arguments refused when sent, then added (`Route::check_input`).
pub fn validate_input(route: &Route, input: &mut Input) -> Result<(), RequestError> {
    route.check_input(input).map_err(RequestError::InvalidInput)
}

/// Inject: fills `context` with what the gateway manages, so clients never
/// hold a tool's secrets or a user's tokens.
///
/// - Only what the tool's upstream was granted (`[[upstreams]] secrets`,
///   `authorization`): a tool server declaring a secret or a provider it was
///   not granted is refused before anything is read for it.
/// - `user_id` is the authenticated caller's; a client cannot claim another.
///   An anonymous caller's own `user_id` passes through (the gateway manages
///   no identity then), but is never used to look up a stored token.
/// - Each required secret configured in `[secrets]` is read and replaces any
///   value the client sent; each required provider in `[authorization]` gets
///   the caller's token. What the gateway does not manage passes through, and
///   a requirement met by neither is refused before the call.
/// - A managed provider's token is refreshed first when it is about to
///   expire; a caller without one (or without the scopes the tool needs)
///   gets a challenge: a link to authorize and a `check_url`; a refresh is
///   a span under `span` (the step's own), when it is recorded.
pub async fn inject_context(
    gateway: &Gateway,
    generation: &Generation,
    route: &Route,
    caller: &Caller,
    mut context: CallContext,
    span: Option<&Span>,
) -> Result<Injected, RequestError> {
    if let Some(user) = caller.authenticated_user() {
        context.user_id = Some(user.to_owned());
    }
    let config = &generation.config;
    context.secrets.retain(|s| !config.supplies_secret(&s.id));
    context.authorization.retain(|a| !config.supplies_token(&a.id));
    let Some(requirements) = &route.tool.definition.requirements else {
        return Ok(Injected { context, granted: Granted::Every });
    };
    let granted = check_grants(generation, route, requirements)?;
    let plan = requirements::plan(generation, requirements, caller, &context);
    let mut missing = MissingRequirements { user_id: plan.user_id_missing, ..MissingRequirements::default() };
    for (id, how) in plan.secrets {
        match how {
            SecretPlan::Managed(reference) => {
                let value =
                    generation.secrets.resolve(reference, caller.authenticated_user()).await.map_err(|source| {
                        RequestError::RequirementUnavailable { requirement: format!("secret {id}"), source }
                    })?;
                let extra = Default::default();
                context.secrets.push(SecretValue { id: id.to_owned(), value: value.into_exposed(), extra });
            }
            SecretPlan::FromClient => {}
            SecretPlan::Missing => missing.secrets.push(id.to_owned()),
        }
    }
    for (id, how) in plan.authorization {
        let token = match how {
            TokenPlan::Grant { user, scopes } => {
                match generation.oauth.token(id, user, &scopes, &gateway.metrics, span).await {
                    Ok(token) => Some(token.into_exposed()),
                    Err(TokenError::Authorize(ask)) => {
                        let public_url = gateway.public_url(generation);
                        let issued = generation.oauth.challenge(id, user, ask, &public_url, &gateway.metrics).await;
                        let issued = issued.map_err(|source| RequestError::AuthorizationUnavailable {
                            provider: id.to_owned(),
                            source,
                        })?;
                        missing.authorization.push(AuthorizationChallenge {
                            id: id.to_owned(),
                            url: Some(issued.url),
                            check_url: Some(issued.check_url),
                        });
                        None
                    }
                    Err(TokenError::Unavailable(source)) => {
                        return Err(RequestError::AuthorizationUnavailable { provider: id.to_owned(), source })
                    }
                }
            }
            TokenPlan::GrantNeedsUser => {
                missing.user_id = true;
                missing.authorization.push(AuthorizationChallenge::unmanaged(id, None, None));
                None
            }
            TokenPlan::ConfiguredNeedsUser { authorize_url } => {
                missing.user_id = true;
                missing.authorization.push(AuthorizationChallenge::unmanaged(id, authorize_url, None));
                None
            }
            TokenPlan::Configured { reference, user, authorize_url } => {
                match generation.secrets.resolve(reference, user).await {
                    Ok(token) => Some(token.into_exposed()),
                    Err(e) if e.is_transient() => {
                        return Err(RequestError::RequirementUnavailable {
                            requirement: format!("authorization {id}"),
                            source: e,
                        })
                    }
                    // No stored token for this user: they must authorize first.
                    Err(e) => {
                        tracing::debug!(provider = id, error = %e, "no stored token for the caller");
                        missing.authorization.push(AuthorizationChallenge::unmanaged(id, authorize_url, user));
                        None
                    }
                }
            }
            TokenPlan::Nothing | TokenPlan::FromClient => None,
            TokenPlan::Missing => {
                missing.authorization.push(AuthorizationChallenge::unmanaged(id, None, None));
                None
            }
        };
        if let Some(token) = token {
            context.authorization.push(AuthorizationToken { id: id.to_owned(), token, extra: Default::default() });
        }
    }
    if missing.is_empty() {
        Ok(Injected { context, granted })
    } else {
        Err(RequestError::MissingRequirements(missing))
    }
}

/// What inject hands forward.
#[derive(Debug)]
pub struct Injected {
    /// The context to send, the gateway's secrets and tokens in it.
    pub context: CallContext,
    /// Which targets may be sent it.
    pub granted: Granted,
}

/// The values the gateway injected into `context` (its secrets and user
/// tokens, not what the client sent itself).
fn injected_values<'c>(generation: &Generation, context: &'c CallContext) -> SmallVec<[&'c str; 4]> {
    let config = &generation.config;
    let secrets = context.secrets.iter().filter(|s| config.supplies_secret(&s.id)).map(|s| s.value.as_str());
    let tokens = context.authorization.iter().filter(|a| config.supplies_token(&a.id)).map(|a| a.token.as_str());
    secrets.chain(tokens).collect()
}

/// Replaces every injected value the upstream sent back, in any spelling
/// `scrub` knows (in the tool's value or error, the error body it refused
/// the call with, or why it could not be reached) with [`scrub::REDACTED`].
fn redact_echoes(finished: &mut Result<FinishedCall, RequestError>, injected: &[&str]) {
    if injected.is_empty() {
        return;
    }
    match finished {
        Ok(call) => {
            if let Some(value) = &mut call.result.value {
                scrub::raw_json(value, injected);
            }
            if let Some(error) = &mut call.result.error {
                scrub::value(error, injected);
            }
            match &mut call.native {
                Some(
                    Native::McpResult(written)
                    | Native::McpAsk(ClientAsk::Input(written) | ClientAsk::Capabilities(written)),
                ) => scrub::value(written, injected),
                None => {}
            }
        }
        Err(RequestError::UpstreamRefused { body, .. }) => scrub::value(body, injected),
        Err(RequestError::Unavailable { detail, .. }) => _ = scrub::text(detail, injected),
        Err(_) => {}
    }
}

/// Forward: sends the call (`request`, its `tool` set per target) to the
/// first target that accepts a connection, among those `granted` (inject's
/// decision) reaches. Only a connection that could not
/// be made moves on to the next replica: a request that was sent is never
/// sent again. Returns the target, its answer, and the upstream's own
/// `Authorization` when it has a `bearer_token`.
pub async fn forward_call<'r>(
    generation: &Generation,
    route: &'r Route,
    granted: Granted,
    request: UpstreamCall<'_>,
    max_response: usize,
    span: Option<&Span>,
) -> Result<(&'r Target, Result<UpstreamReply, ForwardError>, Option<HeaderValue>), RequestError> {
    let mut unreachable = Vec::new();
    let mut retry_after: Option<Duration> = None;
    for (attempt, target) in route.targets_in_turn().enumerate() {
        // Only an upstream granted all the tool declares gets its context;
        // decided first, so an ungranted replica neither takes the circuit's
        // half-open probe nor fails the call with its own bearer token.
        if !granted.reaches(generation, route, target) {
            continue;
        }
        if let Admission::Reject(wait) = target.upstream.circuit.admit() {
            unreachable.push(format!("{}: circuit open", target.upstream.name));
            retry_after = Some(retry_after.map_or(wait, |w| w.min(wait)));
            continue;
        }
        let authorization = upstream_bearer(generation, &target.upstream).await.map_err(|source| {
            RequestError::RequirementUnavailable {
                requirement: format!("bearer_token of upstream {}", target.upstream.name),
                source,
            }
        })?;
        // The upstream's traceparent names this attempt's client span.
        let mut client = otel::child(span, "upstream", Kind::Client);
        if let Some(s) = client.as_mut() {
            target.upstream.describe_call(s, &target.upstream_id, attempt);
        }
        let trace = OutgoingTrace { span: client.as_ref().map(Span::traceparent), ..request.trace };
        let call = UpstreamCall { tool: &target.upstream_id, trace, span: client.as_ref(), ..request };
        let forwarded = target.upstream.call(call, authorization.clone(), max_response).await;
        if let Some(s) = client.as_mut() {
            crate::upstream::describe_reply(s, &forwarded);
        }
        match forwarded {
            Err(e @ ForwardError::Connect { .. }) => {
                tracing::warn!(upstream = &*target.upstream.name, error = %e, "upstream unreachable; trying the next replica if any");
                unreachable.push(e.to_string());
            }
            other => return Ok((target, other, authorization)),
        }
    }
    Err(RequestError::Unavailable { detail: unreachable.join("; "), retry_after })
}

/// Re-wrap: the upstream's answer (or failure) as a canonical `CallResult`,
/// with the upstream's own answer when its protocol gave one. Its body, when
/// it is passed on as text, is cut to `SNIPPET` characters after the
/// `injected` values are scrubbed from it.
pub fn rewrap_response(
    forwarded: Result<UpstreamReply, ForwardError>,
    target: &Target,
    call_id: String,
    took: Duration,
    injected: &[&str],
) -> Result<(CallResult, Option<Native>), RequestError> {
    // Milliseconds, to the microsecond: more digits are noise.
    let elapsed_ms = (took.as_secs_f64() * 1_000_000.0).round() / 1000.0;
    let failed = |message: &str, detail: String, can_retry: bool| CallResult {
        call_id: call_id.clone(),
        duration: elapsed_ms,
        success: false,
        value: None,
        error: Some(wire::tool_error(message, &detail, can_retry)),
    };
    let finished = |r: UpstreamResult| CallResult {
        call_id: call_id.clone(),
        duration: r.duration.unwrap_or(elapsed_ms),
        success: r.success,
        value: r.value,
        error: r.error,
    };
    let upstream = &target.upstream.name;
    let reply = match forwarded {
        Ok(UpstreamReply::Http(reply)) => reply,
        Ok(UpstreamReply::Result(result)) => return Ok((finished(result), None)),
        Ok(UpstreamReply::Native { mapped, native }) => return Ok((finished(mapped), Some(native))),
        Err(e @ ForwardError::Timeout { .. }) => {
            return Ok((failed("The tool did not answer in time", e.to_string(), true), None));
        }
        Err(e) => return Ok((failed("The tool server failed while handling the call", e.to_string(), false), None)),
    };
    let excerpt = || scrub::excerpt(&reply.body, injected, SNIPPET);
    let result = match reply.status.as_u16() {
        200..=299 => match wire::normalise_tool_response(&reply.body) {
            Ok(r) => Ok(finished(r)),
            Err(e) => Ok(failed(
                "The tool server gave an answer the gateway could not read",
                format!("upstream {upstream}: {e}; body starts {}", excerpt()),
                false,
            )),
        },
        status @ (400 | 422) if reply.is_json => match serde_json::from_slice::<Value>(&reply.body) {
            Ok(body @ Value::Object(_)) => Err(RequestError::UpstreamRefused { status, body }),
            _ => Ok(failed(
                "The tool server refused the call",
                format!("upstream {upstream} answered HTTP {status}: {}", excerpt()),
                false,
            )),
        },
        status => Ok(failed(
            "The tool server failed while handling the call",
            format!("upstream {upstream} answered HTTP {status}: {}", excerpt()),
            matches!(status, 502..=504),
        )),
    };
    result.map(|result| (result, None))
}

/// The response body: `{"$schema": "otc://1.0", "result": {...}}`.
pub fn render_result(result: &CallResult) -> Bytes {
    Bytes::from(wire::call_response_body(result))
}

/// The most of an upstream's body a developer message shows (characters).
const SNIPPET: usize = 200;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn wrapped_and_bare_bodies_parse_alike() {
        let wrapped = json!({"$schema": "otc://1.0", "request": {"tool_id": "A.B", "call_id": "c", "input": {"x": 1}}});
        let bare = json!({"tool_id": "A.B", "call_id": "c", "inputs": {"x": 1}});
        for body in [wrapped, bare] {
            let call = parse_call(body.to_string().as_bytes()).expect("parses");
            assert_eq!(call.tool_id, "A.B");
            assert_eq!(call.call_id, "c");
            assert_eq!(*call.input.value(), json!({"x": 1}));
        }
    }

    #[test]
    fn a_call_id_is_made_when_missing() {
        let call = parse_call(br#"{"request": {"tool_id": "A.B"}}"#).expect("parses");
        assert_eq!(call.call_id.len(), 36);
        assert_eq!(*call.input.value(), json!({}));
    }

    #[test]
    fn a_made_call_id_is_a_random_version_4_uuid_in_its_usual_text() {
        let ids: Vec<String> = (0..64).map(|_| new_call_id()).collect();
        for id in &ids {
            let uuid = uuid::Uuid::parse_str(id).expect("a uuid");
            assert_eq!(uuid.get_version_num(), 4, "{id}");
            assert_eq!(uuid.get_variant(), uuid::Variant::RFC4122, "{id}");
            assert_eq!(&uuid.hyphenated().to_string(), id, "lower case, hyphenated");
        }
        let distinct: std::collections::HashSet<&String> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len());
    }

    #[test]
    fn bad_bodies_are_400s() {
        for body in [
            &b"{not json"[..],
            b"\xff\xfe{}",
            br#"{"request": {"tool_id": 5}}"#,
            br#"{"request": {"tool_id": "A.B", "input": [1]}}"#,
            br#"{"$schema": "otc://2.0", "request": {"tool_id": "A.B"}}"#,
            br#"{"request": {}}"#,
        ] {
            let e = parse_call(body).expect_err("must fail");
            assert_eq!(e.status(), 400, "{e}");
        }
    }
}
