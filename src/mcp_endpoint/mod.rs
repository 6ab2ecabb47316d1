//! The `/mcp` endpoint: the merged catalog served to MCP clients over the
//! streamable HTTP transport, in both eras of MCP side by side.
//!
//! - **2026-07-28** (modern, [`envelope`]): no handshake. Every request
//!   carries its version and the client's capabilities in `_meta`, and
//!   `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` headers that must
//!   match the body. `server/discover`; `tools/list` with caching hints;
//!   `tools/call`; `subscriptions/listen` ([`listen`]); empty prompt and
//!   resource lists. Every result says `resultType` and names the server.
//! - **2025-11-25** (legacy, and 2025-06-18, 2025-03-26): `initialize`
//!   issues an `Mcp-Session-Id`; `ping`, `tools/list`, `tools/call`; `GET`
//!   opens the stream of list changes. The front keeps no session state: the
//!   id itself carries the one thing later requests need (whether the client
//!   takes URL-mode elicitations), so any replica serves any session.
//!
//! A request is modern when its `_meta` names a protocol version or its
//! `MCP-Protocol-Version` header names a modern one; otherwise legacy.
//!
//! Both eras list the same tools ([`tools`]) and run `tools/call` through
//! [`crate::call::execute_call`] like `POST /tools/call`. An unknown (or
//! denied) tool and malformed params are JSON-RPC error -32602; everything
//! that goes wrong once the tool is known is a tool result with `isError:
//! true`, as MCP asks for errors a model may act on, except an authorization
//! the caller must give first: that is asked for as a URL-mode elicitation
//! when the client takes them (an `input_required` result in 2026-07-28,
//! error -32042 in 2025-11-25), else a tool error carrying the link.
//! Errors become responses in one place ([`error`]).

mod envelope;
mod era;
mod error;
mod listen;
mod read;
mod search;
mod tools;
mod write;

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;
use http::HeaderMap;
use serde_json::{json, Map, Value};

pub use listen::{keep_alive, Listen, KEEP_ALIVE_EVERY};

use self::envelope::{body_name, check_2025_11_25, check_2026_07_28, era_of, meta, Envelope, Meta};
use self::era::Era;
use self::error::RpcError;
use self::listen::StreamCounts;
use self::read::{read_tools_call, ToolsCall};
use self::tools::{catalog_of, error_result, instructions, invalid_arguments, list_page, server_name, NameCache, META};
use crate::auth::Caller;
use crate::call::{execute_call, new_call_id, FinishedCall, Native, ParsedCall};
use crate::catalog::Catalog;
use crate::error::RequestError;
use crate::gateway::{Gateway, Generation};
use crate::mcp::jsonrpc::{params_object, Message, OutgoingResponse};
use crate::mcp::v2026_07_28::{
    ClientAsk, Passthrough, META_SERVER_INFO, METHOD_HEADER, NAME_HEADER, REVISIONS_2026_07_28,
};
use crate::mcp::{
    is_supported_version, LATEST_PROTOCOL_VERSION, PROTOCOL_VERSIONS, PROTOCOL_VERSION_HEADER, SESSION_HEADER,
};
use crate::reply::Reply;
use crate::wire::{CallContext, CallResult, Input};

/// The notification a list change is announced with.
const NOTIFICATION_TOOLS_CHANGED: &str = "notifications/tools/list_changed";

/// What a legacy session id ends with when its client took URL-mode
/// elicitations at `initialize`.
const URL_ELICITATION_SESSION: &str = ".url";

/// The `requestState` of the gateway's own `input_required` (asking for an
/// authorization): a retry carrying it answers the gateway, not the tool's
/// server. The gateway keeps no state: the retry simply runs the call again.
const GATEWAY_STATE: &str = "otc-gateway/authorize";

/// Every protocol version the endpoint speaks, modern first.
fn supported_versions() -> Vec<&'static str> {
    REVISIONS_2026_07_28.iter().chain(PROTOCOL_VERSIONS.iter()).copied().collect()
}

/// The MCP endpoint's state: the tool name table, built once per catalog,
/// and the count of open event streams.
#[derive(Debug, Default)]
pub struct McpEndpoint {
    names: Arc<NameCache>,
    streams: StreamCounts,
}

/// What the transport read of a request's head that `/mcp` needs.
#[derive(Debug, Clone, Default)]
pub struct McpHead<'a> {
    /// `MCP-Protocol-Version`.
    pub protocol_version: Option<&'a [u8]>,
    /// `Mcp-Method`.
    pub method: Option<&'a [u8]>,
    /// `Mcp-Name`.
    pub name: Option<&'a [u8]>,
    /// `Mcp-Session-Id` (2025-11-25).
    pub session: Option<&'a [u8]>,
    /// Whether one of the three mirrored headers came more than once.
    pub duplicated: bool,
    /// The client's W3C `traceparent`, continued upstream.
    pub traceparent: Option<String>,
    /// The virtual server's view at `/servers/<name>/mcp` (`catalog/servers.rs`); `None` at `/mcp`.
    pub server: Option<Arc<Catalog>>,
}

impl<'a> McpHead<'a> {
    /// The head's fields from a parsed header map.
    pub fn from_headers(headers: &'a HeaderMap) -> McpHead<'a> {
        let one = |name: &str| headers.get(name).map(|v| v.as_bytes());
        let duplicated = [PROTOCOL_VERSION_HEADER, METHOD_HEADER, NAME_HEADER]
            .iter()
            .any(|name| headers.get_all(*name).iter().nth(1).is_some());
        McpHead {
            protocol_version: one(PROTOCOL_VERSION_HEADER),
            method: one(METHOD_HEADER),
            name: one(NAME_HEADER),
            session: one(SESSION_HEADER),
            duplicated,
            traceparent: headers.get("traceparent").and_then(|v| v.to_str().ok()).map(str::to_owned),
            server: None,
        }
    }
}

/// The answer to a request: a reply, or an event stream to keep open.
#[derive(Debug)]
pub enum McpAnswer {
    /// One response (or 202 with no body).
    Reply(Reply),
    /// An event stream (`text/event-stream`) the transport writes until
    /// the client goes or the gateway stops. Boxed: a stream is rare, and
    /// every reply is moved a few times on its way out.
    Stream(Box<Listen>),
}

impl McpAnswer {
    /// The reply, on a connection that cannot carry an event stream: a
    /// stream is refused with a JSON-RPC error (and its slot given back).
    pub fn into_reply(self) -> Reply {
        match self {
            McpAnswer::Reply(reply) => reply,
            McpAnswer::Stream(_) => RpcError::StreamUnavailable.reply(Value::Null, Era::R2026_07_28),
        }
    }
}

/// A request read from the body.
struct Request {
    id: Value,
    method: String,
    params: Value,
}

impl McpEndpoint {
    /// Answers one POST to `/mcp` (the body read whole, the caller
    /// authenticated), under `generation`.
    pub async fn handle_post(
        &self,
        gateway: &Arc<Gateway>,
        generation: Arc<Generation>,
        caller: &Caller,
        head: &McpHead<'_>,
        body: &[u8],
    ) -> McpAnswer {
        let max_depth = generation.config.server.max_json_depth;
        if !crate::wire::nesting_within(body, max_depth) {
            let error = RpcError::Parse(format!("JSON nested deeper than {max_depth} levels"));
            return McpAnswer::Reply(error.reply(Value::Null, era_of(head, &Meta::default())));
        }
        // The call, the request agents send most, without a `Value` tree
        // for its envelope.
        if let Some(call) = read_tools_call(body) {
            return McpAnswer::Reply(self.tools_call(gateway, generation, caller, head, call).await);
        }
        let request = match read_request(body) {
            Ok(Some(request)) => request,
            // Notifications and responses need no answer.
            Ok(None) => return McpAnswer::Reply(Reply::json(202, Bytes::new())),
            Err(e) => return McpAnswer::Reply(e.reply(Value::Null, era_of(head, &Meta::default()))),
        };
        if request.method == "tools/call" {
            // One the call reader left (a member sent twice, an escape, an
            // error to answer): served by the same code.
            let call = ToolsCall::from_value(&request.id, request.params);
            return McpAnswer::Reply(self.tools_call(gateway, generation, caller, head, call).await);
        }
        match era_of(head, &Meta::of_value(meta(&request.params))) {
            Era::R2026_07_28 => self.request_2026_07_28(gateway, caller, head, request).await,
            Era::R2025_11_25 => McpAnswer::Reply(self.request_2025_11_25(gateway, caller, head, request).await),
        }
    }

    /// `GET /mcp`: a 2025-11-25 client's stream of list changes.
    pub fn handle_get(&self, gateway: &Arc<Gateway>, caller: &Caller, head: &McpHead<'_>) -> McpAnswer {
        if let Err(e) = check_2025_11_25(head) {
            return McpAnswer::Reply(e.reply(Value::Null, Era::R2025_11_25));
        }
        match self.stream_slot(gateway, caller) {
            Ok(slot) => McpAnswer::Stream(Box::new(Listen::open(
                self.names.clone(),
                gateway.clone(),
                caller.clone(),
                (None, server_name(&head.server)),
                slot,
            ))),
            Err(e) => McpAnswer::Reply(e.reply(Value::Null, Era::R2025_11_25)),
        }
    }

    fn stream_slot(&self, gateway: &Gateway, caller: &Caller) -> Result<listen::StreamSlot, RpcError> {
        let mcp = &gateway.generation().config.mcp;
        self.streams.take(caller, mcp.max_streams, mcp.max_streams_per_caller)
    }

    /// A 2026-07-28 request other than `tools/call`: its envelope checked,
    /// then its method.
    async fn request_2026_07_28(
        &self,
        gateway: &Arc<Gateway>,
        caller: &Caller,
        head: &McpHead<'_>,
        request: Request,
    ) -> McpAnswer {
        let Request { id, method, params } = request;
        let outcome = match check_2026_07_28(head, &method, &Meta::of_value(meta(&params)), body_name(&method, &params))
        {
            Err(e) => Err(e),
            Ok(_) => match method.as_str() {
                "server/discover" => Ok(discover(gateway, head)),
                "tools/list" => self.list(gateway, caller, head, &params).map(|mut page| {
                    page.extend(cache_hints(gateway));
                    page
                }),
                // The gateway bridges tools only: it declares prompts and
                // resources (2026-07-28 clients cache these lists) with none.
                "prompts/list" => Ok(empty_list("prompts", gateway)),
                "resources/list" => Ok(empty_list("resources", gateway)),
                "resources/templates/list" => Ok(empty_list("resourceTemplates", gateway)),
                "prompts/get" => Err(RpcError::InvalidParams("Unknown prompt: the gateway serves no prompts".into())),
                "resources/read" => {
                    Err(RpcError::InvalidParams("Resource not found: the gateway serves no resources".into()))
                }
                "subscriptions/listen" => {
                    return match self.listen(gateway, caller, head, id.clone(), &params) {
                        Ok(listen) => McpAnswer::Stream(Box::new(listen)),
                        Err(e) => McpAnswer::Reply(e.reply(id, Era::R2026_07_28)),
                    }
                }
                // `initialize`, `ping`, `logging/setLevel` and
                // `resources/subscribe` are gone in 2026-07-28.
                other => Err(RpcError::MethodNotFound(other.to_owned())),
            },
        };
        McpAnswer::Reply(match outcome {
            Ok(result) => reply(id, complete_or_interim(result)),
            Err(e) => e.reply(id, Era::R2026_07_28),
        })
    }

    /// A request of 2025-11-25 and before, other than `tools/call`.
    async fn request_2025_11_25(
        &self,
        gateway: &Arc<Gateway>,
        caller: &Caller,
        head: &McpHead<'_>,
        request: Request,
    ) -> Reply {
        let Request { id, method, params } = request;
        if let Err(e) = check_2025_11_25(head) {
            return e.reply(id, Era::R2025_11_25);
        }
        let outcome = match method.as_str() {
            "initialize" => {
                let (result, session) = initialize(&params, &instructions(gateway, head));
                let mut answer = reply(id, result);
                answer.headers.push((SESSION_HEADER, session));
                return answer;
            }
            "ping" => Ok(Map::new()),
            "tools/list" => self.list(gateway, caller, head, &params),
            other => Err(RpcError::MethodNotFound(other.to_owned())),
        };
        match outcome {
            Ok(result) => reply(id, result),
            Err(e) => e.reply(id, Era::R2025_11_25),
        }
    }

    /// `tools/list`: the caller's tools, a page at a time; in search mode
    /// (`[mcp] tool_listing = "search"`) the fixed meta-tools instead.
    fn list(
        &self,
        gateway: &Gateway,
        caller: &Caller,
        head: &McpHead,
        params: &Value,
    ) -> Result<Map<String, Value>, RpcError> {
        let params = params_object(params).ok_or_else(|| RpcError::InvalidParams("params must be an object".into()))?;
        let generation = gateway.generation();
        if search::enabled(&generation) {
            let Value::Object(meta_tools) = search::list() else { return Ok(Map::new()) };
            return Ok(meta_tools);
        }
        let names = self.names.of(&catalog_of(gateway, &head.server));
        list_page(&names, &generation.access, generation.access.matching(caller), params)
    }

    /// A call of a search-mode meta-tool (`search_tools`, `describe_tool`).
    fn meta_call(
        &self,
        gateway: &Gateway,
        caller: &Caller,
        head: &McpHead,
        params: &Value,
    ) -> Result<Map<String, Value>, RpcError> {
        let catalog = catalog_of(gateway, &head.server);
        match search::call(gateway, &catalog, caller, params, &*self.names.of(&catalog)) {
            Ok(Value::Object(result)) => Ok(result),
            Ok(_) => Ok(Map::new()),
            Err(message) => Err(RpcError::InvalidParams(message)),
        }
    }

    /// `subscriptions/listen`: a stream of the changes the client asked for.
    fn listen(
        &self,
        gateway: &Arc<Gateway>,
        caller: &Caller,
        head: &McpHead,
        id: Value,
        params: &Value,
    ) -> Result<Listen, RpcError> {
        let filter = params.get("notifications").and_then(Value::as_object);
        let tools = filter.and_then(|f| f.get("toolsListChanged")).and_then(Value::as_bool).unwrap_or(false);
        let slot = self.stream_slot(gateway, caller)?;
        let subscription = (Some((id, tools)), server_name(&head.server));
        Ok(Listen::open(self.names.clone(), gateway.clone(), caller.clone(), subscription, slot))
    }

    /// `tools/call`, in either era: its envelope checked, the call run, and
    /// the response written. A call whose tool ran is written straight from
    /// its result ([`write::call_response`]).
    async fn tools_call(
        &self,
        gateway: &Gateway,
        generation: Arc<Generation>,
        caller: &Caller,
        head: &McpHead<'_>,
        call: ToolsCall<'_>,
    ) -> Reply {
        let ToolsCall { id, params_object, meta, name, input, input_responses, request_state } = call;
        let era = era_of(head, &meta);
        let checked = match era {
            Era::R2026_07_28 => check_2026_07_28(head, "tools/call", &meta, name.as_deref()).map(Some),
            Era::R2025_11_25 => check_2025_11_25(head).map(|()| None),
        };
        let outcome = match checked {
            Ok(envelope) => {
                let request = CallRequest {
                    params_object,
                    name: name.as_deref(),
                    input,
                    capabilities: meta.capabilities.map(Cow::into_owned).unwrap_or_default(),
                    input_responses,
                    request_state,
                };
                self.call(gateway, generation, caller, head, request, envelope).await
            }
            Err(e) => Err(e),
        };
        match outcome {
            Ok(CallAnswer::Finished(result)) => Reply::json(200, Bytes::from(write::call_response(&id, &result, era))),
            Ok(CallAnswer::AsWritten { mut written, call_id }) => {
                // The server's content, structuredContent, isError and
                // _meta as it wrote them; the gateway's own _meta beside.
                if let Value::Object(meta) = written.entry("_meta").or_insert_with(|| Value::Object(Map::new())) {
                    meta.insert(format!("{META}/call_id"), Value::String(call_id));
                }
                let written = if era == Era::R2026_07_28 { complete_or_interim(written) } else { written };
                reply(id_value(&id), written)
            }
            Ok(CallAnswer::Made(result)) => {
                let result = if era == Era::R2026_07_28 { complete_or_interim(result) } else { result };
                reply(id_value(&id), result)
            }
            Err(e) => e.reply(id_value(&id), era),
        }
    }

    /// `tools/call`: the tool's result, or why the request itself is wrong.
    /// `envelope` is a modern request's; a legacy one's client capabilities
    /// come from its session id.
    async fn call(
        &self,
        gateway: &Gateway,
        generation: Arc<Generation>,
        caller: &Caller,
        head: &McpHead<'_>,
        request: CallRequest<'_>,
        envelope: Option<Envelope>,
    ) -> Result<CallAnswer, RpcError> {
        if !request.params_object {
            return Err(RpcError::InvalidParams("params must be an object".into()));
        }
        let Some(name) = request.name else {
            return Err(RpcError::InvalidParams("tools/call needs a string `name`".into()));
        };
        let Some(input) = request.input else {
            return Err(RpcError::InvalidParams("`arguments` must be an object".into()));
        };
        if search::enabled(&generation) && search::is_meta_tool(name) {
            let params = json!({"name": name, "arguments": *input.value()});
            return self.meta_call(gateway, caller, head, &params).map(CallAnswer::Made);
        }
        let unknown = || RpcError::InvalidParams(format!("Unknown tool: {name}"));
        let tool_id = match self.names.of(&catalog_of(gateway, &head.server)).key(name) {
            Some(key) => key.to_owned(),
            // Older versions, and tools of a newer catalog than the table.
            None if name.contains('.') => name.to_owned(),
            None => return Err(unknown()),
        };
        // A retry of the gateway's own question (an authorization) is the
        // gateway's; any other input responses are for the tool's server.
        let own_retry = request.request_state.as_ref().and_then(Value::as_str) == Some(GATEWAY_STATE);
        let declined = own_retry && read::declined(request.input_responses.as_ref());
        let passthrough = envelope.map(|_| Passthrough {
            capabilities: Value::Object(request.capabilities),
            input_responses: request.input_responses.filter(|_| !own_retry),
            request_state: request.request_state.filter(|_| !own_retry),
        });
        let call = ParsedCall {
            tool_id,
            call_id: new_call_id(),
            client_call_id: false,
            trace_id: None,
            input,
            context: CallContext::default(),
            traceparent: head.traceparent.clone(),
            passthrough,
            server: head.server.clone(),
        };
        match execute_call(gateway, generation, caller, call).await {
            // The tool's server asks the client (which sent its capabilities
            // on) for input, or for a capability: the question goes back as
            // the server put it.
            Ok(FinishedCall { native: Some(Native::McpAsk(ClientAsk::Input(Value::Object(interim)))), .. }) => {
                Ok(CallAnswer::Made(interim))
            }
            Ok(FinishedCall { native: Some(Native::McpAsk(ClientAsk::Capabilities(required))), .. }) => {
                Err(RpcError::MissingCapability { required })
            }
            // An MCP server's result goes to an MCP client as it wrote it.
            Ok(FinishedCall { native: Some(Native::McpResult(Value::Object(written))), result, .. }) => {
                Ok(CallAnswer::AsWritten { written, call_id: result.call_id })
            }
            Ok(completed) => Ok(CallAnswer::Finished(completed.result)),
            Err(RequestError::Lookup(_) | RequestError::Denied(_) | RequestError::InvalidToolId(_)) => Err(unknown()),
            Err(RequestError::InvalidInput(errors)) => Ok(CallAnswer::Made(invalid_arguments(&errors))),
            Err(RequestError::MissingRequirements(missing)) if only_links(&missing) => {
                let error = RequestError::MissingRequirements(missing);
                match envelope {
                    Some(envelope) if envelope.url_elicitation() => {
                        Ok(CallAnswer::Made(input_required(&error, declined).unwrap_or_else(|| error_result(&error))))
                    }
                    None if head.session.is_some_and(|s| s.ends_with(URL_ELICITATION_SESSION.as_bytes())) => {
                        Err(url_elicitation_required(&error))
                    }
                    _ => Ok(CallAnswer::Made(error_result(&error))),
                }
            }
            Err(e) => Ok(CallAnswer::Made(error_result(&e))),
        }
    }
}

/// What `tools/call` runs, from either reader.
struct CallRequest<'r> {
    /// Whether `params` was an object.
    params_object: bool,
    /// `params.name`, when a string.
    name: Option<&'r str>,
    /// The input, `None` when `arguments` is not an object.
    input: Option<Input>,
    /// A 2026-07-28 client's capabilities for this request (empty in
    /// 2025-11-25).
    capabilities: Map<String, Value>,
    /// A retried call's answers to what an earlier result asked.
    input_responses: Option<Value>,
    /// The state an earlier result asked to be sent back.
    request_state: Option<Value>,
}

/// How a `tools/call` ended, short of a JSON-RPC error.
enum CallAnswer {
    /// The tool ran, and succeeded or failed.
    Finished(CallResult),
    /// An MCP server's tool ran: its result as the server wrote it.
    AsWritten {
        /// The server's `CallToolResult`.
        written: Map<String, Value>,
        /// The gateway's call id.
        call_id: String,
    },
    /// A result the gateway made: a tool error for a call that did not run,
    /// or a 2026-07-28 interim result asking for input.
    Made(Map<String, Value>),
}

/// A request id's JSON text as a `Value` (the text was read as JSON).
fn id_value(id: &str) -> Value {
    serde_json::from_str(id).unwrap_or(Value::Null)
}

/// Whether all a call misses is what a person gives at a link: an
/// authorization, or an approval.
fn only_links(missing: &crate::error::MissingRequirements) -> bool {
    (!missing.authorization.is_empty() || !missing.approval.is_empty())
        && missing.secrets.is_empty()
        && !missing.user_id
        && missing.authorization.iter().all(|a| a.url.is_some())
}

/// The authorization challenges of a call's missing requirements, each as
/// a URL-mode elicitation's params (`mode`, `message`, `url`).
fn elicitations(error: &RequestError) -> Vec<(String, Value)> {
    let RequestError::MissingRequirements(missing) = error else { return Vec::new() };
    missing
        .authorization
        .iter()
        .filter_map(|challenge| {
            let url = challenge.url.as_ref()?;
            let message = format!(
                "Connect your {} account so the gateway can call the tool for you; then the call goes on.",
                challenge.id
            );
            Some((challenge.id.clone(), json!({"mode": "url", "message": message, "url": url})))
        })
        .chain(missing.approval.iter().map(|held| {
            let message = if held.by_caller {
                "Approve or deny the call the agent is about to make; it runs once you approve it."
            } else {
                "The call the agent is about to make waits for an operator's approval."
            };
            (format!("approval-{}", held.id), json!({"mode": "url", "message": message, "url": held.url}))
        }))
        .collect()
}

/// 2026-07-28: the call needs the user at a link first. The client opens
/// each and retries the call; the gateway keeps no state between the two
/// (the retry simply finds the grant, or asks again).
fn input_required(error: &RequestError, declined: bool) -> Option<Map<String, Value>> {
    if declined {
        return None;
    }
    let requests: Map<String, Value> = elicitations(error)
        .into_iter()
        .map(|(provider, params)| (provider, json!({"method": "elicitation/create", "params": params})))
        .collect();
    let mut result = Map::new();
    result.insert("resultType".into(), json!("input_required"));
    result.insert("inputRequests".into(), Value::Object(requests));
    result.insert("requestState".into(), json!(GATEWAY_STATE));
    Some(result)
}

/// 2025-11-25: error -32042 naming each link as a URL-mode elicitation.
fn url_elicitation_required(error: &RequestError) -> RpcError {
    let mut message = "The tool needs your authorization first".to_owned();
    let elicitations = elicitations(error)
        .into_iter()
        .map(|(_, mut params)| {
            if let Some(text) = params.get("message").and_then(Value::as_str) {
                text.clone_into(&mut message);
            }
            params["elicitationId"] = json!(uuid::Uuid::new_v4().to_string());
            params
        })
        .collect();
    RpcError::UrlElicitationRequired { message, elicitations }
}

/// A request (or `None` for a notification or response) from the body,
/// read as a `Value`.
fn read_request(body: &[u8]) -> Result<Option<Request>, RpcError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| RpcError::Parse(e.to_string()))?;
    match Message::from_value(value) {
        Ok(Message::Request { id, method, params }) => Ok(Some(Request { id, method, params })),
        Ok(_) => Ok(None),
        Err(e) => Err(RpcError::InvalidRequest(e.to_string())),
    }
}

/// A 2026-07-28 result: `resultType` (unless the method set it: an interim
/// `input_required`) and the server's identity in `_meta`.
fn complete_or_interim(mut result: Map<String, Value>) -> Map<String, Value> {
    if !result.contains_key("resultType") {
        result = complete(result);
    } else {
        add_server_info(&mut result);
    }
    result
}

/// A final 2026-07-28 result.
fn complete(mut result: Map<String, Value>) -> Map<String, Value> {
    result.insert("resultType".into(), json!("complete"));
    add_server_info(&mut result);
    result
}

fn add_server_info(result: &mut Map<String, Value>) {
    let meta = result.entry("_meta").or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(meta) = meta {
        meta.insert(META_SERVER_INFO.into(), server_info());
    }
}

fn server_info() -> Value {
    json!({"name": "otc-gateway", "title": "OTC gateway", "version": env!("CARGO_PKG_VERSION")})
}

/// What the gateway serves, for both eras.
fn capabilities(since_2026_07_28: bool) -> Value {
    if since_2026_07_28 {
        json!({"tools": {"listChanged": true}, "prompts": {}, "resources": {}})
    } else {
        json!({"tools": {"listChanged": true}})
    }
}

/// How long a client may cache a list, and who may share the cache: each
/// caller its own when `[[policy]]` makes the list depend on the caller.
/// Fresh for one catalog poll: a list can change no sooner, and list
/// changes are also pushed to streams.
fn cache_hints(gateway: &Gateway) -> Map<String, Value> {
    let generation = gateway.generation();
    let scope = if generation.access.is_active() { "private" } else { "public" };
    let ttl = u64::try_from(generation.poll.interval.as_millis()).unwrap_or(u64::MAX);
    let mut hints = Map::new();
    hints.insert("ttlMs".into(), json!(ttl));
    hints.insert("cacheScope".into(), json!(scope));
    hints
}

/// `server/discover`: versions, capabilities, instructions.
fn discover(gateway: &Gateway, head: &McpHead) -> Map<String, Value> {
    let mut result = Map::new();
    result.insert("supportedVersions".into(), json!(supported_versions()));
    result.insert("capabilities".into(), capabilities(true));
    result.insert("instructions".into(), json!(instructions(gateway, head)));
    let ttl = u64::try_from(gateway.generation().poll.interval.as_millis()).unwrap_or(u64::MAX);
    result.insert("ttlMs".into(), json!(ttl));
    result.insert("cacheScope".into(), json!("public"));
    result
}

/// An empty list of prompts or resources, with its caching hints.
fn empty_list(field: &str, gateway: &Gateway) -> Map<String, Value> {
    let mut result = Map::new();
    result.insert(field.into(), json!([]));
    let ttl = u64::try_from(gateway.generation().poll.interval.as_millis()).unwrap_or(u64::MAX);
    result.insert("ttlMs".into(), json!(ttl));
    result.insert("cacheScope".into(), json!("public"));
    result
}

/// `initialize`: the client's version when supported, else the newest; and
/// the session id, which carries whether the client takes URL-mode
/// elicitations.
fn initialize(params: &Value, instructions: &str) -> (Map<String, Value>, String) {
    let asked = params.get("protocolVersion").and_then(Value::as_str).unwrap_or_default();
    let version = if is_supported_version(asked) { asked } else { LATEST_PROTOCOL_VERSION };
    let url_elicitation = params.pointer("/capabilities/elicitation/url").is_some_and(Value::is_object)
        && version == LATEST_PROTOCOL_VERSION;
    let mut session = uuid::Uuid::new_v4().simple().to_string();
    if url_elicitation {
        session.push_str(URL_ELICITATION_SESSION);
    }
    let mut result = Map::new();
    result.insert("protocolVersion".into(), json!(version));
    result.insert("capabilities".into(), capabilities(false));
    result.insert("serverInfo".into(), server_info());
    result.insert("instructions".into(), json!(instructions));
    (result, session)
}

fn reply(id: Value, result: Map<String, Value>) -> Reply {
    Reply::json(200, OutgoingResponse::result(id, Value::Object(result)).to_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::AuthorizationChallenge;
    use crate::mcp::v2026_07_28::REVISION_2026_07_28;

    #[test]
    fn versions_are_negotiated() {
        let version = |params: Value| initialize(&params, "instructions").0["protocolVersion"].clone();
        assert_eq!(version(json!({"protocolVersion": "2025-06-18"})), "2025-06-18");
        assert_eq!(version(json!({"protocolVersion": "2024-11-05"})), "2025-11-25");
        assert_eq!(version(Value::Null), "2025-11-25");
        assert_eq!(supported_versions()[0], REVISION_2026_07_28);
    }

    #[test]
    fn a_session_id_says_whether_its_client_takes_url_elicitations() {
        let session = |capabilities: Value| {
            initialize(&json!({"protocolVersion": "2025-11-25", "capabilities": capabilities}), "instructions").1
        };
        assert!(session(json!({"elicitation": {"url": {}}})).ends_with(URL_ELICITATION_SESSION));
        assert!(!session(json!({"elicitation": {}})).ends_with(URL_ELICITATION_SESSION), "form mode only");
        assert!(!session(json!({})).ends_with(URL_ELICITATION_SESSION));
    }

    #[test]
    fn challenges_become_elicitations() {
        let error = RequestError::MissingRequirements(crate::error::MissingRequirements {
            authorization: vec![AuthorizationChallenge {
                id: "google".into(),
                url: Some("http://gw/oauth/google/start/x".into()),
                check_url: None,
            }],
            ..Default::default()
        });
        let interim = input_required(&error, false).expect("asked");
        assert_eq!(interim["resultType"], "input_required");
        assert_eq!(interim["inputRequests"]["google"]["params"]["url"], "http://gw/oauth/google/start/x");
        assert_eq!(interim["inputRequests"]["google"]["params"]["mode"], "url");
        assert!(input_required(&error, true).is_none(), "a declined retry is not asked again");
        let RpcError::UrlElicitationRequired { elicitations, .. } = url_elicitation_required(&error) else {
            panic!("-32042")
        };
        assert_eq!(elicitations[0]["url"], "http://gw/oauth/google/start/x");
        assert!(elicitations[0]["elicitationId"].is_string());
        assert!(read::declined(Some(&json!({"google": {"action": "decline"}}))));
        assert!(!read::declined(Some(&json!({"google": {"action": "accept"}}))));
    }
}
