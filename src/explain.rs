//! Why a caller sees, or does not see, a tool (`GET /explain` on the admin
//! listener, `otc-gateway explain`): every tool the caller may see, the rule
//! that hides each other one, and for one tool reference how it resolves,
//! whether each requirement is met and the rate limits' buckets.
//!
//! Every answer comes from the code that decides real calls: the policy
//! decision (`AccessPolicy::decide`, behind listings and `call::admit_call`),
//! resolution (`call::resolve_tool`), the requirements plan
//! (`requirements.rs`, behind `call::inject_context`), the grant judgement
//! (`OAuth::standing`) and the buckets (`RateLimits::state`). Nothing is
//! counted, refreshed or challenged, and no secret or token value is in it.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::auth::Caller;
use crate::call::resolve_tool;
use crate::catalog::{Catalog, Route};
use crate::gateway::{Gateway, Generation};
use crate::policy::AccessDecision;
use crate::ratelimit::LimitState;
use crate::requirements::{self, SecretPlan, TokenPlan};

/// Who to explain for, and optionally which tool.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExplainRequest {
    /// The caller's user id (a JWT's user id claim, or an API key's user).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// The caller's JWT claims, as a JSON object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claims: Option<Value>,
    /// A JWT, decoded (not verified) for its claims; never echoed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwt: Option<String>,
    /// The user id stands for an API key (no claims).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub api_key: bool,
    /// A tool reference: `Toolkit.Name`, `Toolkit.Name@version`, or the
    /// tool's MCP name (`Toolkit_Name`, as `/mcp` lists it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// A virtual server (`[[servers]]`): what the caller sees through it,
    /// and why each tool is or is not in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
}

/// A request that cannot be explained.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    /// The pasted JWT is not three base64url parts with a JSON object in the middle.
    #[error("jwt: not a JWT (three base64url parts, the middle a JSON object of claims)")]
    NotAJwt,
    /// `claims` is not a JSON object.
    #[error("claims: must be a JSON object")]
    ClaimsNotObject,
    /// The token or claims name no user: the gateway refuses such a token.
    #[error("the claims have no {claim:?} ([auth] user_id_claim), so the gateway would refuse the token: give user_id or add the claim")]
    NoUser {
        /// `[auth] user_id_claim`.
        claim: String,
    },
}

/// The answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Explanation {
    /// The caller as understood.
    pub caller: CallerView,
    /// Every tool id the caller may see and call (subject to the rest).
    pub visible: Vec<String>,
    /// Every tool id hidden from the caller, with the rule that hid it.
    pub hidden: Vec<Hidden>,
    /// How the tool reference resolves, when one was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution: Option<Resolution>,
    /// The tool's requirements and whether each is met for this caller.
    #[serde(default)]
    pub requirements: Vec<RequirementView>,
    /// The rate limits the tool's calls count against, and the caller's buckets.
    #[serde(default)]
    pub rate_limits: Vec<LimitState>,
    /// The virtual server asked about: then `visible`, `hidden` and the
    /// tool's part are through it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerView>,
}

/// A virtual server, for one caller.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServerView {
    /// Its name.
    pub name: String,
    /// Whether the caller may use it; for anyone else every path under
    /// `/servers/<name>/` is 404.
    pub usable: bool,
    /// Why, in words.
    pub why: String,
    /// Every tool of the root catalog, and whether the server serves it.
    #[serde(default)]
    pub tools: Vec<ServerTool>,
}

/// One root tool in a virtual server.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServerTool {
    /// Its id at the root.
    pub tool: String,
    /// Its id in the server; `None` when the server does not serve it.
    pub served_as: Option<String>,
    /// Why, in words.
    pub why: String,
}

/// The caller an explanation is for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CallerView {
    /// The user id, if any.
    pub user_id: Option<String>,
    /// `anonymous`, `api_key` or `jwt`.
    pub kind: String,
    /// The `[[policy]]` names whose `when` matches the caller.
    pub policies: Vec<String>,
}

/// A tool hidden from the caller.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Hidden {
    /// The tool id.
    pub tool: String,
    /// The policy whose deny pattern hid it; `None` when no policy allows it.
    pub policy: Option<String>,
    /// That deny pattern.
    pub pattern: Option<String>,
}

/// How a tool reference resolves.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Resolution {
    /// The tool id it resolves to; `None` when it does not resolve.
    pub tool_id: Option<String>,
    /// The upstream a call would go to first; `None` when none would.
    pub upstream: Option<String>,
    /// Why, in words.
    pub why: String,
    /// Every upstream serving it, in failover order (replicas take turns first).
    #[serde(default)]
    pub candidates: Vec<Candidate>,
}

/// One upstream serving a resolved tool.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Candidate {
    /// The upstream's name.
    pub upstream: String,
    /// Its `priority`.
    pub priority: i64,
    /// Whether it was granted everything the tool asks the gateway for.
    pub granted: bool,
    /// Whether its circuit is open (calls skip it until the cool-down ends).
    pub circuit_open: bool,
}

/// One requirement of the tool, for this caller.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RequirementView {
    /// `user_id`, `secret`, `authorization` or `grant`.
    pub kind: String,
    /// The secret id or provider (empty for `user_id`).
    pub id: String,
    /// Whether a call would have it.
    pub met: bool,
    /// Why, in words.
    pub why: String,
}

/// The caller an explain request describes, built as the authenticator
/// would: a JWT's user id from `[auth] user_id_claim`.
pub fn caller_of(request: &ExplainRequest, generation: &Generation) -> Result<Caller, ExplainError> {
    let user_id_claim = &generation.config.auth.user_id_claim;
    if let Some(jwt) = &request.jwt {
        let claims = decode_claims(jwt)?;
        let Some(user_id) = claims.get(user_id_claim).and_then(Value::as_str).map(str::to_owned) else {
            return Err(ExplainError::NoUser { claim: user_id_claim.clone() });
        };
        return Ok(Caller::Jwt { user_id, claims });
    }
    let claims = match &request.claims {
        None | Some(Value::Null) => None,
        Some(object @ Value::Object(_)) => Some(object.clone()),
        Some(_) => return Err(ExplainError::ClaimsNotObject),
    };
    Ok(match (&request.user_id, claims) {
        (None, None) => Caller::Anonymous,
        (Some(user), _) if request.api_key => Caller::ApiKey { user_id: user.clone() },
        (user_id, claims) => {
            let mut claims = claims.unwrap_or_else(|| Value::Object(Default::default()));
            let user_id =
                user_id.clone().or_else(|| claims.get(user_id_claim).and_then(Value::as_str).map(str::to_owned));
            let Some(user_id) = user_id else { return Err(ExplainError::NoUser { claim: user_id_claim.clone() }) };
            if let Value::Object(map) = &mut claims {
                map.entry(user_id_claim.clone()).or_insert_with(|| Value::String(user_id.clone()));
            }
            Caller::Jwt { user_id, claims }
        }
    })
}

/// A JWT's claims, read without checking its signature: the explanation
/// of what a token would see, not a sign-in.
fn decode_claims(jwt: &str) -> Result<Value, ExplainError> {
    use base64::Engine as _;
    let mut parts = jwt.trim().split('.');
    let (Some(_), Some(payload), Some(_), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err(ExplainError::NotAJwt);
    };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .map_err(|_| ExplainError::NotAJwt)?;
    match serde_json::from_slice(&bytes) {
        Ok(claims @ Value::Object(_)) => Ok(claims),
        _ => Err(ExplainError::NotAJwt),
    }
}

/// Explains what `caller` sees under `generation` and the current catalog
/// (through virtual server `server`, when given), and, with `tool`, how a
/// call to it would go.
pub async fn explain(
    gateway: &Gateway,
    generation: &Generation,
    caller: &Caller,
    tool: Option<&str>,
    server: Option<&str>,
) -> Explanation {
    let root = gateway.catalog.load_owned();
    let (catalog, server) = match server {
        Some(name) => {
            let (view, explained) = explain_server(&root, name, caller);
            (view, Some(explained))
        }
        None => (Some(root), None),
    };
    let access = &generation.access;
    let matching = access.matching(caller);
    let (mut visible, mut hidden) = (Vec::new(), Vec::new());
    for route in catalog.iter().flat_map(|catalog| catalog.routes()) {
        let id = route.tool.definition.id.clone();
        // A server's tool is judged by the root tool it stands for.
        match access.decide(matching, &route.root().tool.key) {
            AccessDecision::Open | AccessDecision::Allowed(_) => visible.push(id),
            AccessDecision::Denied(rule) => {
                let (policy, pattern) = access.rule(rule, true);
                hidden.push(Hidden { tool: id, policy: Some(policy.to_owned()), pattern: Some(pattern.to_owned()) });
            }
            AccessDecision::NotAllowed => hidden.push(Hidden { tool: id, policy: None, pattern: None }),
        }
    }
    visible.sort();
    hidden.sort_by(|a, b| a.tool.cmp(&b.tool));
    let caller_view = CallerView {
        user_id: caller.authenticated_user().map(str::to_owned),
        kind: caller.kind().to_owned(),
        policies: access.names_matching(matching).into_iter().map(str::to_owned).collect(),
    };
    let mut explanation = Explanation {
        caller: caller_view,
        visible,
        hidden,
        resolution: None,
        requirements: Vec::new(),
        rate_limits: Vec::new(),
        server,
    };
    if let (Some(tool), Some(catalog)) = (tool, &catalog) {
        explain_tool(generation, catalog, caller, tool, &mut explanation).await;
    }
    explanation
}

/// Virtual server `name` for `caller`: its view when the caller may use it,
/// and why each root tool is or is not in it.
fn explain_server(root: &Catalog, name: &str, caller: &Caller) -> (Option<Arc<Catalog>>, ServerView) {
    let mut out = ServerView { name: name.to_owned(), usable: false, why: String::new(), tools: Vec::new() };
    let Some(view) = root.server(name) else {
        out.why = format!("no server {name:?} is configured ([[servers]]): /servers/{name}/ is 404");
        return (None, out);
    };
    let Some(server) = view.as_server() else { return (None, out) };
    let usable = crate::policy::server_view(root, name, caller);
    out.usable = usable.is_some();
    out.why = match (&server.config.when, out.usable) {
        (None, _) => "everyone may use it (it has no `when`)".to_owned(),
        (Some(_), true) => "the caller meets its `when`".to_owned(),
        (Some(_), false) => "the caller does not meet its `when`: every path under it is 404".to_owned(),
    };
    let served: std::collections::HashMap<&str, &str> =
        view.routes().map(|r| (r.root().tool.definition.id.as_str(), r.tool.definition.id.as_str())).collect();
    let report = &server.report;
    for route in root.routes() {
        let (id, key) = (route.tool.definition.id.as_str(), route.tool.key.as_str());
        let why = match (server.config.takes(key), served.get(id)) {
            (Err(None), _) => "no `tools` pattern of the server matches it".to_owned(),
            (Err(Some(excluded)), _) => format!("`exclude` has {:?}", excluded.as_str()),
            (Ok(pattern), Some(_)) => format!("`tools` has {:?}", pattern.as_str()),
            (Ok(_), None) => match report.rename_collisions.iter().find(|c| c.hidden == key) {
                Some(c) => format!("{} is renamed {}, its own name: the rename wins", c.served, c.name),
                None => report
                    .fixed_problems
                    .iter()
                    .find(|p| p.tool == id)
                    .map_or("not served".to_owned(), |p| format!("fixed argument {:?}: {}", p.argument, p.problem)),
            },
        };
        out.tools.push(ServerTool { tool: id.to_owned(), served_as: served.get(id).map(|s| (*s).to_owned()), why });
    }
    (usable, out)
}

/// The tool reference's part: resolution, requirements, rate limits.
async fn explain_tool(generation: &Generation, catalog: &Catalog, caller: &Caller, tool: &str, out: &mut Explanation) {
    // A tool id first, as `/tools/call` takes it; else the name `/mcp` lists
    // the tool by (always its latest version).
    let (route, mcp_key) = match resolve_tool(catalog, tool) {
        Ok(route) => (route, None),
        Err(e) => match catalog.mcp_names().get(tool).and_then(|key| resolve_tool(catalog, key).ok()) {
            Some(route) => (route, Some(route.tool.key.clone())),
            None => {
                let why = format!("does not resolve: {e} (nor is it a tool's MCP name)");
                out.resolution = Some(Resolution { tool_id: None, upstream: None, why, candidates: Vec::new() });
                return;
            }
        },
    };
    // In a server, policies and limits judge the root tool it stands for.
    let key = route.root().tool.key.as_str();
    // A tool the caller may not see does not exist for them: a call is
    // answered as for an unknown tool, before anything else is looked at.
    if !generation.access.allows(generation.access.matching(caller), key) {
        out.resolution = Some(Resolution {
            tool_id: Some(route.tool.definition.id.clone()),
            upstream: None,
            why: "hidden from this caller by policy: a call is answered as for an unknown tool".to_owned(),
            candidates: candidates(generation, route),
        });
        return;
    }
    let mut resolved = resolution(generation, catalog, route, tool);
    if let Some(key) = mcp_key {
        resolved.why = format!("the MCP name {tool} stands for {key}; {}", resolved.why);
    }
    out.resolution = Some(resolved);
    out.rate_limits = generation.rate_limits.state(caller, key).await;
    out.requirements = requirements_met(generation, route.root(), caller).await;
}

fn candidates(generation: &Generation, route: &Route) -> Vec<Candidate> {
    route
        .targets
        .iter()
        .map(|t| Candidate {
            upstream: t.upstream.name.to_string(),
            priority: t.upstream.priority,
            granted: route
                .tool
                .definition
                .requirements
                .as_ref()
                .is_none_or(|r| t.upstream.granted(r, &generation.config)),
            circuit_open: t.upstream.circuit.is_open(),
        })
        .collect()
}

fn resolution(generation: &Generation, catalog: &Catalog, route: &Route, asked: &str) -> Resolution {
    let candidates = candidates(generation, route);
    let versions: Vec<String> =
        catalog.routes().filter(|r| r.tool.key == route.tool.key).map(|r| r.tool.version.to_string()).collect();
    let version = if asked.contains('@') {
        format!("version {} as asked", route.tool.version)
    } else {
        format!("the latest version, {} (of {})", route.tool.version, versions.join(", "))
    };
    let first = candidates.iter().find(|c| c.granted && !c.circuit_open);
    let how = match (candidates.len(), first) {
        (_, None) => "no upstream would take a call now (none granted, or every circuit open)".to_owned(),
        (1, Some(c)) => format!("served by {} alone", c.upstream),
        (n, Some(c)) => format!(
            "served by {n} upstreams of the highest priority ({}): replicas take turns, the others are failover",
            c.priority
        ),
    };
    Resolution {
        tool_id: Some(route.tool.definition.id.clone()),
        upstream: first.map(|c| c.upstream.clone()),
        why: format!("{version}; {how}"),
        candidates,
    }
}

/// Each requirement, planned as `call::inject_context` plans it, and
/// checked without a refresh, a challenge or a value in the answer.
async fn requirements_met(generation: &Generation, route: &Route, caller: &Caller) -> Vec<RequirementView> {
    let Some(declared) = &route.tool.definition.requirements else { return Vec::new() };
    let view = |kind: &str, id: &str, met: bool, why: String| RequirementView {
        kind: kind.to_owned(),
        id: id.to_owned(),
        met,
        why,
    };
    let mut out: Vec<RequirementView> = requirements::missing_grants(generation, route, declared)
        .into_iter()
        .map(|u| {
            let why = format!("upstream {} was not granted it (add it to its `{}`)", u.upstream, u.key);
            view("grant", &u.id, false, why)
        })
        .collect();
    // The caller's context as the gateway would clean it: nothing from the
    // client (an explanation has no client context).
    let context =
        crate::wire::CallContext { user_id: caller.authenticated_user().map(str::to_owned), ..Default::default() };
    let plan = requirements::plan(generation, declared, caller, &context);
    if declared.user_id {
        let why = if plan.user_id_missing { "no authenticated user id" } else { "the caller's user id is sent" };
        out.push(view("user_id", "", !plan.user_id_missing, why.to_owned()));
    }
    let user = caller.authenticated_user();
    for (id, how) in plan.secrets {
        let (met, why) = match how {
            SecretPlan::Managed(reference) => match generation.secrets.resolve(reference, user).await {
                Ok(_) => (true, "configured in [secrets] and readable".to_owned()),
                Err(e) => (false, format!("configured in [secrets] but not readable: {e}")),
            },
            SecretPlan::FromClient => (true, "sent by the client".to_owned()),
            SecretPlan::Missing => (false, "not in [secrets]: the client must send it".to_owned()),
        };
        out.push(view("secret", id, met, why));
    }
    for (id, how) in plan.authorization {
        let (met, why) = match how {
            TokenPlan::Grant { user, scopes } => match generation.oauth.standing(id, user, &scopes).await {
                Ok(standing) => {
                    let held = standing.held.as_ref();
                    let expiry = held
                        .and_then(|g| g.expires_at)
                        .map(|at| format!("; expires at {at} (Unix seconds)"))
                        .unwrap_or_default();
                    let scopes = held.map(|g| format!("; scopes held: {}", g.scopes.join(" "))).unwrap_or_default();
                    (standing.met, format!("{}{scopes}{expiry}", standing.why))
                }
                Err(e) => (false, format!("the grant store could not be read: {e}")),
            },
            TokenPlan::GrantNeedsUser | TokenPlan::ConfiguredNeedsUser { .. } => {
                (false, "a per-user token needs an authenticated caller".to_owned())
            }
            TokenPlan::Nothing => (true, "[authorization] has no token for it: nothing is injected".to_owned()),
            TokenPlan::Configured { reference, user, .. } => match generation.secrets.resolve(reference, user).await {
                Ok(_) => (true, "a token is configured and readable".to_owned()),
                Err(e) => (false, format!("no token readable: {e}")),
            },
            TokenPlan::FromClient => (true, "sent by the client".to_owned()),
            TokenPlan::Missing => (false, "not in [authorization]: the client must send a token".to_owned()),
        };
        out.push(view("authorization", id, met, why));
    }
    out
}

/// An explanation in words, for the CLI.
pub fn in_words(e: &Explanation) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let who = e.caller.user_id.as_deref().map_or_else(|| "an anonymous caller".to_owned(), |u| format!("user {u}"));
    let _ = writeln!(s, "Caller: {who} ({})", e.caller.kind);
    match e.caller.policies.as_slice() {
        [] => s.push_str("Policies that apply: none\n"),
        names => {
            let _ = writeln!(s, "Policies that apply: {}", names.join(", "));
        }
    }
    if let Some(server) = &e.server {
        let _ = writeln!(s, "Server {}: {}", server.name, server.why);
        for t in &server.tools {
            let served = t.served_as.as_deref().map_or_else(|| "not served".to_owned(), |id| format!("as {id}"));
            let _ = writeln!(s, "  {}: {served} ({})", t.tool, t.why);
        }
    }
    let _ = writeln!(s, "\nVisible ({}):", e.visible.len());
    for tool in &e.visible {
        let _ = writeln!(s, "  {tool}");
    }
    let _ = writeln!(s, "\nHidden ({}):", e.hidden.len());
    for h in &e.hidden {
        match (&h.policy, &h.pattern) {
            (Some(policy), Some(pattern)) => {
                let _ = writeln!(s, "  {}: denied by policy {policy:?} (pattern {pattern:?})", h.tool);
            }
            _ => {
                let _ = writeln!(s, "  {}: no policy allows it", h.tool);
            }
        }
    }
    if let Some(r) = &e.resolution {
        let _ = writeln!(s, "\nResolution: {}", r.tool_id.as_deref().unwrap_or("(none)"));
        let _ = writeln!(s, "  {}", r.why);
        if let Some(upstream) = &r.upstream {
            let _ = writeln!(s, "  a call goes to {upstream}");
        }
        for c in &r.candidates {
            let state = match (c.granted, c.circuit_open) {
                (false, _) => "not granted",
                (true, true) => "circuit open",
                (true, false) => "ready",
            };
            let _ = writeln!(s, "  candidate {} (priority {}): {state}", c.upstream, c.priority);
        }
    }
    if !e.requirements.is_empty() {
        s.push_str("\nRequirements:\n");
        for r in &e.requirements {
            let mark = if r.met { "met" } else { "NOT met" };
            let _ = writeln!(s, "  {} {}: {mark}: {}", r.kind, r.id, r.why);
        }
    }
    if !e.rate_limits.is_empty() {
        s.push_str("\nRate limits:\n");
        for l in &e.rate_limits {
            match (l.remaining, l.reset_ms) {
                (Some(left), Some(reset)) => {
                    let _ = writeln!(s, "  {}: {left} calls left now, full again in {reset} ms", l.name);
                }
                _ => {
                    let _ = writeln!(s, "  {}: buckets kept in Redis, which did not answer", l.name);
                }
            }
        }
    }
    s
}
