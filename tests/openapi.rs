//! OpenAPI upstreams against a real REST API: a FastAPI application
//! (tests/peers/openapi_server.py) serving the OpenAPI 3.1 document FastAPI
//! generates, behind the real gateway, called through both fronts.
//!
//! - every operation is a tool named from its operationId (or its method
//!   and path), its parameters and JSON body its input, every `$ref`
//!   resolved (a recursive model bounded), its security its requirements;
//! - a call is an HTTP request: parameters of each kind, bodies, hostile
//!   path values kept to one segment, each security kind's credential where
//!   its scheme says;
//! - each answer maps to the tool's outcome: 2xx values, 204, text, 404,
//!   422, 429 and 503 with Retry-After, 500, a redirect (not followed), a
//!   timeout;
//! - the document is a catalog: a route added while running becomes a tool,
//!   a reload keeps the tools, a Swagger 2.0 document is a clear error;
//! - policy, rate limits, per-user tokens and grants apply as for any tool.
//!
//! The Python peer comes from the virtualenv `scripts/test.sh` makes
//! (`OTC_TEST_PYTHON`, else `.venv/bin/python`), with fastapi and uvicorn.

mod common;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::fleet::Nginx;
use common::{
    find_tool, free_addr, peer_script, send_with_headers, temp_file, wait_listening, wait_until, wait_within, Gateway,
    Resp,
};
use serde_json::{json, Value};

// The credentials tests/peers/openapi_server.py accepts.
const HEADER_KEY: &str = "hdr-key-5f2a9c71";
const QUERY_KEY: &str = "qry-key-08be33d2";
const COOKIE_KEY: &str = "cki-key-c41d9e05";
const BEARER_TOKEN: &str = "bearer-tok-77a1f0e3";
const BASIC_CREDENTIALS: &str = "librarian:s3cret-pa55word";
const ALICE_BOOKS_TOKEN: &str = "tok-alice-4b8e2d17";
// The gateway's own API keys for its callers.
const ALICE_KEY: &str = "openapi-alice-key-2c9d";
const BOB_KEY: &str = "openapi-bob-key-71fa";

/// tests/peers/openapi_server.py on a loopback port, killed on drop.
struct Library {
    child: Child,
    addr: SocketAddr,
}

impl Library {
    fn start() -> Library {
        let addr = free_addr();
        let child = Command::new(common::sdk_python())
            .arg(peer_script("openapi_server.py"))
            .arg(addr.port().to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start openapi_server.py");
        let mut library = Library { child, addr };
        let what = "openapi_server.py (are fastapi and uvicorn installed?)";
        wait_listening(&mut library.child, addr, what, Duration::from_secs(30), String::new);
        library
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request the API received since the last clear, but the
    /// gateway's fetches of the document (every poll interval).
    async fn log(&self) -> Vec<Value> {
        let resp = send_with_headers(self.addr, "GET", "/test/log", Bytes::new(), &[]).await;
        let all = resp.json().as_array().cloned().unwrap_or_default();
        all.into_iter().filter(|r| r["raw_path"] != "/openapi.json").collect()
    }

    /// The gateway's fetches of the document, since the last clear.
    async fn document_fetches(&self) -> Vec<Value> {
        let resp = send_with_headers(self.addr, "GET", "/test/log", Bytes::new(), &[]).await;
        let all = resp.json().as_array().cloned().unwrap_or_default();
        all.into_iter().filter(|r| r["raw_path"] == "/openapi.json").collect()
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    async fn clear_log(&self) {
        send_with_headers(self.addr, "DELETE", "/test/log", Bytes::new(), &[]).await.expect_status(200);
    }

    async fn add_route(&self) {
        send_with_headers(self.addr, "POST", "/test/add-route", Bytes::new(), &[]).await.expect_status(200);
    }
}

impl Drop for Library {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The environment the gateway reads its secrets, tokens and keys from.
const ENV: &[(&str, &str)] = &[
    ("OA_HEADER_KEY", HEADER_KEY),
    ("OA_QUERY_KEY", QUERY_KEY),
    ("OA_COOKIE_KEY", COOKIE_KEY),
    ("OA_BEARER_TOKEN", BEARER_TOKEN),
    ("OA_BASIC", BASIC_CREDENTIALS),
    ("OA_BOOKS_TOKEN_alice", ALICE_BOOKS_TOKEN),
    ("OA_ALICE_KEY", ALICE_KEY),
    ("OA_BOB_KEY", BOB_KEY),
];

/// gateway.toml with the library as an OpenAPI upstream, `upstream_extra`
/// on its `[[upstreams]]` and `extra` after everything.
fn config(library: &Library, upstream_extra: &str, extra: &str) -> String {
    let url = library.url();
    format!(
        r#"[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"

[catalog]
poll_interval = "200ms"
request_timeout = "2s"

[[upstreams]]
name = "library"
protocol = "openapi"
url = "{url}"
spec = "{url}/openapi.json"
exclude = ["adminPanel"]
call_timeout = "1s"
authorization = ["books"]
security = {{ APIKeyHeader = {{ secret = "HEADER_KEY" }}, APIKeyQuery = {{ secret = "QUERY_KEY" }}, APIKeyCookie = {{ secret = "COOKIE_KEY" }}, HTTPBearer = {{ secret = "BEARER_TOKEN" }}, HTTPBasic = {{ secret = "BASIC" }}, OAuth2AuthorizationCodeBearer = {{ authorization = "books" }} }}
{upstream_extra}

[secrets]
HEADER_KEY = "env:OA_HEADER_KEY"
QUERY_KEY = "env:OA_QUERY_KEY"
COOKIE_KEY = "env:OA_COOKIE_KEY"
BEARER_TOKEN = "env:OA_BEARER_TOKEN"
BASIC = "env:OA_BASIC"

[authorization.books]
token = "env:OA_BOOKS_TOKEN_{{user_id}}"

[auth]
api_keys = [{{ key = "env:OA_ALICE_KEY", user_id = "alice" }}, {{ key = "env:OA_BOB_KEY", user_id = "bob" }}]

{extra}
"#
    )
}

/// Every secret granted.
const ALL_SECRETS: &str = "secrets = [\"HEADER_KEY\", \"QUERY_KEY\", \"COOKIE_KEY\", \"BEARER_TOKEN\", \"BASIC\"]";

async fn start(library: &Library, upstream_extra: &str, extra: &str) -> Gateway {
    let gw = Gateway::start_with_env(&config(library, upstream_extra, extra), ENV).await;
    gw.wait_for_tool("Library.ListBooks@2.3.0").await;
    gw
}

/// POST /tools/call as a caller (an API key, or anonymous).
async fn call_as(gw: &Gateway, key: Option<&str>, tool: &str, input: Value) -> Resp {
    let body = json!({"$schema": "otc://1.0", "request": {"tool_id": tool, "input": input}});
    let mut headers = vec![("content-type", "application/json")];
    if let Some(key) = key {
        headers.push(("oxp-api-key", key));
    }
    send_with_headers(gw.addr, "POST", "/tools/call", Bytes::from(body.to_string()), &headers).await
}

/// A successful call's value.
async fn value(gw: &Gateway, tool: &str, input: Value) -> Value {
    let result = gw.call(tool, input).await.result();
    assert_eq!(result["success"], true, "{tool}: {result}");
    result["value"].clone()
}

/// A failed call's error.
async fn tool_error(gw: &Gateway, tool: &str, input: Value) -> Value {
    let result = gw.call(tool, input).await.result();
    assert_eq!(result["success"], false, "{tool}: {result}");
    result["error"].clone()
}

const MODERN: &str = "2026-07-28";

/// A 2026-07-28 `tools/call` on `/mcp`, as a caller: its JSON-RPC result.
async fn mcp_call(gw: &Gateway, key: Option<&str>, name: &str, arguments: Value) -> Value {
    let answer = mcp_rpc(gw, key, name, arguments).await;
    assert!(answer["result"].is_object(), "{answer}");
    answer["result"].clone()
}

/// A 2026-07-28 `tools/call` on `/mcp`, as a caller: the JSON-RPC answer.
async fn mcp_rpc(gw: &Gateway, key: Option<&str>, name: &str, arguments: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": name, "arguments": arguments,
        "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                  "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
                  "io.modelcontextprotocol/clientCapabilities": {}}}});
    let mut headers = vec![
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", MODERN),
        ("mcp-method", "tools/call"),
        ("mcp-name", name),
    ];
    if let Some(key) = key {
        headers.push(("oxp-api-key", key));
    }
    let resp = send_with_headers(gw.addr, "POST", "/mcp", Bytes::from(body.to_string()), &headers).await;
    resp.json()
}

/// The MCP names a caller sees in `tools/list`.
async fn mcp_names(gw: &Gateway, key: &str) -> Vec<String> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {
        "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                  "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
                  "io.modelcontextprotocol/clientCapabilities": {}}}});
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", MODERN),
        ("mcp-method", "tools/list"),
        ("oxp-api-key", key),
    ];
    let resp = send_with_headers(gw.addr, "POST", "/mcp", Bytes::from(body.to_string()), &headers).await;
    let result = resp.json()["result"].clone();
    result["tools"].as_array().into_iter().flatten().filter_map(|t| t["name"].as_str().map(str::to_owned)).collect()
}

/// Whether any string in `value` points into `#/components`.
fn points_into_components(value: &Value) -> bool {
    value.to_string().contains("#/components")
}

#[tokio::test]
async fn operations_become_tools() {
    let library = Library::start();
    let gw = start(&library, ALL_SECRETS, "").await;
    let tools = gw.tools().await;
    let ids = common::ids(&tools);
    for id in [
        "Library.ListBooks@2.3.0",
        "Library.GetBook@2.3.0",
        "Library.CreateBook@2.3.0",
        "Library.CreateBooks@2.3.0",
        "Library.UpdateBook@2.3.0",
        "Library.DeleteBook@2.3.0",
        "Library.BookSummary@2.3.0",
        // No operationId: the method and the path's literal segments.
        "Library.GetAuthors@2.3.0",
        "Library.EchoSegment@2.3.0",
        "Library.SecureHeader@2.3.0",
        "Library.MyBooks@2.3.0",
    ] {
        assert!(ids.iter().any(|i| i == id), "{id} is listed: {ids:?}");
    }
    assert!(!ids.iter().any(|i| i.starts_with("Library.AdminPanel")), "excluded: {ids:?}");
    assert!(!ids.iter().any(|i| i.contains("Stolen") || i.contains("Test")), "routes outside the document: {ids:?}");

    // Parameters of each kind are top-level inputs, with their schemas.
    let list = find_tool(&tools, "Library.ListBooks@2.3.0").expect("listed");
    assert_eq!(list["description"], "List books\n\nBooks, filtered by tag.");
    let props = &list["input_schema"]["properties"];
    assert_eq!(props["tag"]["type"], "array");
    assert_eq!(props["tag"]["description"], "Only books with every one of these tags.");
    assert_eq!(props["limit"]["type"], "integer");
    assert!(props["x-request-id"].is_object() && props["shelf"].is_object() && props["q"].is_object(), "{props}");
    assert_eq!(list["input_schema"]["additionalProperties"], false);
    let get = find_tool(&tools, "Library.GetBook@2.3.0").expect("listed");
    assert_eq!(get["input_schema"]["required"], json!(["book_id"]));

    // A JSON body's properties join the parameters; `$ref`s are resolved,
    // the recursive Category bounded.
    let create = find_tool(&tools, "Library.CreateBook@2.3.0").expect("listed");
    let schema = &create["input_schema"];
    assert_eq!(schema["required"], json!(["title", "author"]));
    assert_eq!(schema["properties"]["author"]["properties"]["name"]["type"], "string");
    let category = &schema["properties"]["category"]["anyOf"][0];
    assert_eq!(category["properties"]["label"]["type"], "string");
    let child = &category["properties"]["children"]["items"];
    assert_eq!(child["type"], "object", "the recursion is a stub of its type: {child}");
    assert!(child.get("properties").is_none(), "and is not expanded again: {child}");
    assert_eq!(create["output_schema"]["properties"]["title"]["minLength"], 1);
    // A list body, or one with a property named like a parameter: `body`.
    let bulk = find_tool(&tools, "Library.CreateBooks@2.3.0").expect("listed");
    assert_eq!(bulk["input_schema"]["properties"]["body"]["type"], "array");
    let update = find_tool(&tools, "Library.UpdateBook@2.3.0").expect("listed");
    let keys: Vec<&String> = update["input_schema"]["properties"].as_object().expect("props").keys().collect();
    assert_eq!(keys, ["body", "book_id"]);
    for tool in &tools {
        assert!(!points_into_components(&tool["input_schema"]), "{}", tool["id"]);
        assert!(!points_into_components(&tool["output_schema"]), "{}", tool["id"]);
        jsonschema::validator_for(&tool["input_schema"]).unwrap_or_else(|e| panic!("{}: {e}", tool["id"]));
    }

    // Security requirements are the tools' requirements.
    let secure = find_tool(&tools, "Library.SecureHeader@2.3.0").expect("listed");
    assert_eq!(secure["requirements"], json!({"secrets": [{"id": "HEADER_KEY"}]}));
    let mine = find_tool(&tools, "Library.MyBooks@2.3.0").expect("listed");
    assert_eq!(mine["requirements"], json!({"authorization": [{"id": "books", "oauth2": {"scopes": ["books:read"]}}]}));

    // The MCP front lists them too, with hints from the method.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
    let resp = send_with_headers(
        gw.addr,
        "POST",
        "/mcp",
        Bytes::from(body.to_string()),
        &[("content-type", "application/json"), ("accept", "application/json, text/event-stream")],
    )
    .await;
    let listed = resp.json()["result"]["tools"].clone();
    let get =
        listed.as_array().expect("tools").iter().find(|t| t["name"] == "Library_GetBook").expect("listed").clone();
    assert_eq!(get["annotations"]["readOnlyHint"], true, "{get}");
    let delete =
        listed.as_array().expect("tools").iter().find(|t| t["name"] == "Library_DeleteBook").expect("listed").clone();
    assert_eq!(delete["annotations"]["destructiveHint"], true, "{delete}");
}

#[tokio::test]
async fn calls_carry_parameters_and_bodies_through_both_fronts() {
    let library = Library::start();
    let gw = start(&library, ALL_SECRETS, "").await;
    let input = json!({"tag": ["sci fi", "b&w"], "limit": 3, "q": "x/y?z", "x-request-id": "req-1", "shelf": "top"});
    let got = value(&gw, "Library.ListBooks", input.clone()).await;
    assert_eq!(got["tag"], json!(["sci fi", "b&w"]), "{got}");
    assert_eq!((got["limit"].clone(), got["q"].clone()), (json!(3), json!("x/y?z")));
    assert_eq!((got["x_request_id"].clone(), got["shelf"].clone()), (json!("req-1"), json!("top")));
    // Arrays as OpenAPI's default form style, exploded.
    assert_eq!(got["query"], "tag=sci%20fi&tag=b%26w&limit=3&q=x%2Fy%3Fz");
    // The same through /mcp.
    let result = mcp_call(&gw, None, "Library_ListBooks", input).await;
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(result["structuredContent"]["query"], "tag=sci%20fi&tag=b%26w&limit=3&q=x%2Fy%3Fz", "{result}");

    // Bodies: a merged object with `$ref`ed models (nested, recursive).
    let book = json!({"title": "Dune", "author": {"name": "Frank Herbert", "born": 1920},
                      "category": {"label": "fiction", "children": [{"label": "sf", "children": [{"label": "space"}]}]}});
    let created = value(&gw, "Library.CreateBook", book.clone()).await;
    assert_eq!(created["author"]["name"], "Frank Herbert");
    assert_eq!(created["category"]["children"][0]["children"][0]["label"], "space");
    let result = mcp_call(&gw, None, "Library_CreateBook", book).await;
    assert_eq!(result["structuredContent"]["title"], "Dune", "{result}");
    let bulk = value(&gw, "Library.CreateBooks", json!({"body": [{"title": "A", "author": {"name": "x"}}]})).await;
    assert_eq!(bulk, json!({"created": 1, "titles": ["A"]}));
    let updated = value(&gw, "Library.UpdateBook", json!({"book_id": 1, "body": {"book_id": 2, "title": "t"}})).await;
    assert_eq!(updated, json!({"path_id": 1, "body_id": 2, "title": "t"}));
    // Bad input stops at the gateway (the document's schema), never reaching the API.
    library.clear_log().await;
    let errors = gw.call("Library.CreateBook", json!({"title": "", "author": {}})).await.parameter_errors();
    assert!(errors.contains_key("title") || errors.contains_key("author"), "{errors:?}");
    assert!(library.log().await.is_empty(), "the API was not called");
    // The context the gateway injects is not sent as a body; a GET has none.
    value(&gw, "Library.SecureHeader", json!({})).await;
    let sent = library.log().await;
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(sent[0]["headers"].get("content-type").is_none(), "{sent:?}");
    assert!(sent[0]["headers"]["traceparent"].as_str().is_some_and(|t| t.starts_with("00-")), "{sent:?}");
    // The document's `servers` are not where calls go: the request came here.
    assert_eq!(sent[0]["host"], library.addr.to_string());
}

#[tokio::test]
async fn hostile_path_values_arrive_as_one_segment_or_are_refused() {
    let library = Library::start();
    let gw = start(&library, ALL_SECRETS, "").await;
    library.clear_log().await;
    for (segment, raw) in [
        ("a?c", "/echo/a%3Fc"),
        ("x#y z&w=1", "/echo/x%23y%20z%26w%3D1"),
        ("...", "/echo/%2E%2E%2E"),
        ("100%", "/echo/100%25"),
    ] {
        let got = value(&gw, "Library.EchoSegment", json!({"segment": segment})).await;
        assert_eq!(got["raw_path"], raw, "{segment}");
        assert_eq!(got["segment"], segment, "the value arrives whole");
        assert_eq!(got["query"], "", "{segment}: nothing became a query");
    }
    // What a proxy would read as a dot segment or a separator is the
    // caller's mistake, named, and never sent (tests below: behind nginx).
    for segment in ["../admin", "a/b?c", "%2F", "..", "%2e%2E", "..;"] {
        let resp = gw.call("Library.EchoSegment", json!({"segment": segment})).await;
        assert_eq!(resp.status, 422, "{segment}: {}", resp.text());
        assert!(resp.parameter_errors()["segment"].as_str().is_some_and(|e| e.contains("in a path")), "{segment}");
    }
    let sent = library.log().await;
    assert_eq!(sent.len(), 4, "only the four that stay in their segment were sent: {sent:?}");
    assert!(sent.iter().all(|r| r["raw_path"].as_str().is_some_and(|p| p.starts_with("/echo/"))), "{sent:?}");
}

/// What a caller, or a document, may try against an upstream whose `url`
/// has a base path, behind a proxy that normalises paths (nginx, `proxy_pass`
/// with a URI): whatever it is, the API key never reaches a path outside
/// the base.
#[tokio::test]
async fn behind_a_normalising_proxy_the_key_never_leaves_the_base_path() {
    let library = Library::start();
    let nginx = Nginx::normalising_proxy(library.addr);
    // The proxy does climb: `..` encoded, sent to it directly, reaches /admin.
    library.clear_log().await;
    send_with_headers(nginx.addr, "GET", "/base/echo/%2E%2E/%2E%2E/admin", Bytes::new(), &[]).await;
    send_with_headers(nginx.addr, "GET", "/base/echo/..%2F..%2Fadmin", Bytes::new(), &[]).await;
    let direct: Vec<Value> = library.log().await.iter().map(|r| r["raw_path"].clone()).collect();
    assert_eq!(direct, [json!("/admin"), json!("/admin")], "nginx normalised both");

    let op = |id: &str, parameters: Value| {
        json!({"get": {"operationId": id, "parameters": parameters, "security": [{"Key": []}],
                       "responses": {"200": {"description": "ok"}}}})
    };
    let segment = json!([{"name": "segment", "in": "path", "required": true, "schema": {"type": "string"}}]);
    // A file path: reserved expansion keeps its `/`.
    let path = json!([{"name": "path", "in": "path", "required": true, "allowReserved": true,
                       "schema": {"type": "string"}}]);
    let document = json!({
        "openapi": "3.1.0",
        "info": {"title": "Edge", "version": "1.0.0"},
        "paths": {
            "/echo/{segment}": op("echo", segment),
            "/files/{path}": op("file", path),
            "/%2e%2e/admin": op("climbEncoded", json!([])),
            "/%252E%252E/admin": op("climbTwice", json!([])),
            "/..;/admin": op("climbTomcat", json!([])),
            "/x%2F..%2F..%2Fadmin": op("climbSlashes", json!([])),
        },
        "components": {"securitySchemes": {"Key": {"type": "apiKey", "in": "header", "name": "X-API-Key"}}},
    });
    let document = temp_file("edge", "json", &document.to_string());
    let edge = format!(
        "[[upstreams]]\nname = \"edge\"\nprotocol = \"openapi\"\nurl = \"http://{}/base\"\nspec = \"file:{}\"\n\
         secrets = [\"HEADER_KEY\"]\nsecurity = {{ Key = {{ secret = \"HEADER_KEY\" }} }}\n",
        nginx.addr,
        document.display()
    );
    let gw = start(&library, ALL_SECRETS, &edge).await;
    gw.wait_for_tool("Edge.Echo@1.0.0").await;
    // The document's paths that climb, in any spelling, are not tools.
    let skipped = gw.upstream_status("edge").await["skipped"].clone();
    for climb in ["/%2e%2e/admin", "/%252E%252E/admin", "/..;/admin", "/x%2F..%2F..%2Fadmin"] {
        let entry = strings(&skipped).into_iter().find(|s| s.starts_with(&format!("GET {climb} ")));
        let entry = entry.unwrap_or_default();
        assert!(entry.contains(". or .. segment once decoded"), "{climb}: {skipped}");
    }
    assert_eq!(common::ids(&gw.tools().await).iter().filter(|i| i.starts_with("Edge.")).count(), 2);

    // A caller's values that would climb: refused, naming the parameter,
    // through both fronts; nothing is sent.
    library.clear_log().await;
    let climbing = [
        ".",
        "..",
        "%2e",
        "%2E%2e",
        ".%2e",
        "../../admin",
        "..%2F..%2Fadmin",
        "%2e%2e%2f%2e%2e%2fadmin",
        "..\\..\\admin",
        "%5c",
        "%252e%252e",
        "..;",
        "%c0%ae%c0%ae",
        "．．",
    ];
    for value in climbing {
        for (tool, name) in [("Edge.Echo", "segment"), ("Edge.File", "path")] {
            let resp = call_as(&gw, Some(ALICE_KEY), tool, json!({ name: value })).await;
            assert_eq!(resp.status, 422, "{tool} {value}: {}", resp.text());
            assert!(resp.parameter_errors().contains_key(name), "{tool} {value}: {}", resp.text());
        }
        let result = mcp_call(&gw, Some(BOB_KEY), "Edge_Echo", json!({"segment": value})).await;
        assert_eq!(result["isError"], true, "{value}: {result}");
        assert!(result.to_string().contains("segment"), "{value}: {result}");
    }
    for value in ["docs/../../admin", "docs/%2e%2e/%2e%2e/admin", "a/..;/..;/admin"] {
        let resp = call_as(&gw, Some(ALICE_KEY), "Edge.File", json!({"path": value})).await;
        assert_eq!(resp.status, 422, "{value}: {}", resp.text());
    }
    assert!(library.log().await.is_empty(), "nothing was sent: {:?}", library.log().await);
    // Values that stay in their segment go through, with the key, to the base.
    for segment in ["...", "a.b", "..x", "ok"] {
        let got = value(&gw, "Edge.Echo", json!({"segment": segment})).await;
        assert_eq!(got["segment"], segment, "{got}");
    }
    for path in ["docs/a.md", "a/.../b"] {
        let got = value(&gw, "Edge.File", json!({"path": path})).await;
        assert_eq!(got["path"], path, "{got}");
    }
    let sent = library.log().await;
    assert_eq!(sent.len(), 6, "{sent:?}");
    for request in &sent {
        assert_eq!(request["has_api_key"], true, "{request}");
        let raw = request["raw_path"].as_str().unwrap_or_default();
        assert!(raw.starts_with("/base/echo/") || raw.starts_with("/base/files/"), "outside the base: {request}");
    }
    let _ = std::fs::remove_file(document);
}

/// A careless API answers 500 repeating the key it was given, in each
/// spelling an encoder gives it, and once across the cut of the excerpt:
/// no front passes any of it, or its start, on.
#[tokio::test]
async fn an_api_failing_with_its_key_in_any_spelling_hands_none_of_it_on() {
    let library = Library::start();
    // A key with what encoders escape: a slash, a space, a quote.
    let key = "hdr/key 5f2a\"9c71";
    let env: Vec<(&str, &str)> =
        ENV.iter().map(|&(name, v)| (name, if name == "OA_HEADER_KEY" { key } else { v })).collect();
    let gw = Gateway::start_with_env(&config(&library, ALL_SECRETS, ""), &env).await;
    gw.wait_for_tool("Library.FailLoudly@2.3.0").await;
    // The key's first four characters, as each spelling writes them.
    let starts = ["hdr/", "hdr\\/", "hdr%2F", "hdr%2f", "\\u0068\\u0064\\u0072\\u002F"];
    for how in ["json", "url", "unicode", "form", "straddle"] {
        let error = tool_error(&gw, "Library.FailLoudly", json!({"how": how})).await;
        let mcp = mcp_call(&gw, None, "Library_FailLoudly", json!({"how": how})).await;
        for (front, answer) in [("otc", &error), ("mcp", &mcp)] {
            let texts = strings(answer);
            assert!(texts.iter().any(|t| t.contains("[reda")), "{how} via {front}: {answer}");
            for text in &texts {
                for start in starts {
                    assert!(!text.contains(start), "{how} via {front}: {start} in {text:?}");
                }
            }
        }
    }
}

/// Every string in a value, keys included.
fn strings(value: &Value) -> Vec<String> {
    match value {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items.iter().flat_map(strings).collect(),
        Value::Object(fields) => {
            fields.iter().flat_map(|(k, v)| std::iter::once(k.clone()).chain(strings(v))).collect()
        }
        _ => Vec::new(),
    }
}

#[tokio::test]
async fn security_schemes_carry_granted_credentials() {
    let library = Library::start();
    let gw = start(&library, ALL_SECRETS, "").await;
    for (tool, kind) in [
        ("Library.SecureHeader", "header"),
        ("Library.SecureQuery", "query"),
        ("Library.SecureCookie", "cookie"),
        ("Library.SecureBearer", "bearer"),
        ("Library.SecureBasic", "basic"),
    ] {
        let got = value(&gw, tool, json!({})).await;
        assert_eq!(got["authenticated"], kind, "{tool}: {got}");
    }
    // A tool that sends the key back does not hand it to the caller.
    let echoed = value(&gw, "Library.EchoKey", json!({})).await;
    assert_eq!(echoed["you_sent"], "[redacted]");

    // A per-user OAuth token from a read-only provider: alice has one.
    let result = call_as(&gw, Some(ALICE_KEY), "Library.MyBooks", json!({})).await.result();
    assert_eq!(result["value"]["user"], "alice", "{result}");
    let result = mcp_call(&gw, Some(ALICE_KEY), "Library_MyBooks", json!({})).await;
    assert_eq!(result["structuredContent"]["user"], "alice", "{result}");
    // Bob has none: the usual challenge, and the API is not called.
    library.clear_log().await;
    let body = call_as(&gw, Some(BOB_KEY), "Library.MyBooks", json!({})).await.server_error(400);
    assert_eq!(body["missing_requirements"]["authorization"][0]["id"], "books", "{body}");
    let result = mcp_call(&gw, Some(BOB_KEY), "Library_MyBooks", json!({})).await;
    assert_eq!(result["isError"], true, "{result}");
    // An anonymous caller has no user to hold a token for.
    let body = call_as(&gw, None, "Library.MyBooks", json!({})).await.server_error(400);
    assert_eq!(body["missing_requirements"]["user_id"], true, "{body}");
    let sent = library.log().await;
    assert!(sent.is_empty(), "no call without the token: {sent:?}");

    // Nothing the gateway injected shows in /status or its log.
    let status = send_with_headers(gw.admin, "GET", "/status", Bytes::new(), &[]).await.text();
    let metrics = send_with_headers(gw.admin, "GET", "/metrics", Bytes::new(), &[]).await.text();
    let logs = gw.logs();
    for secret in [HEADER_KEY, QUERY_KEY, COOKIE_KEY, BEARER_TOKEN, "s3cret-pa55word", ALICE_BOOKS_TOKEN] {
        for (what, text) in [("status", &status), ("metrics", &metrics), ("log", &logs)] {
            assert!(!text.contains(secret), "{what} shows a secret");
        }
    }
}

#[tokio::test]
async fn an_ungranted_secret_is_refused_before_the_api_is_called() {
    let library = Library::start();
    // Everything but HEADER_KEY is granted.
    let gw = start(&library, "secrets = [\"QUERY_KEY\", \"COOKIE_KEY\", \"BEARER_TOKEN\", \"BASIC\"]", "").await;
    library.clear_log().await;
    let body = gw.call("Library.SecureHeader", json!({})).await.server_error(400);
    assert_eq!(body["missing_requirements"]["secrets"], json!([{"id": "HEADER_KEY"}]), "{body}");
    let developer = body["developer_message"].as_str().expect("developer_message");
    assert!(developer.contains("upstream \"library\" is not granted"), "{body}");
    assert!(library.log().await.is_empty(), "the API was not called");
    // What was granted still works.
    assert_eq!(value(&gw, "Library.SecureQuery", json!({})).await["authenticated"], "query");
    // /status names the requirement.
    let status = send_with_headers(gw.admin, "GET", "/status", Bytes::new(), &[]).await.json();
    assert!(status["ungranted"].to_string().contains("HEADER_KEY"), "{}", status["ungranted"]);
}

#[tokio::test]
async fn answers_map_to_tool_outcomes() {
    let library = Library::start();
    let gw = start(&library, ALL_SECRETS, "").await;
    // 2xx: JSON is the value, 204 is no value, text is its text.
    assert_eq!(value(&gw, "Library.GetBook", json!({"book_id": 7})).await, json!({"id": 7, "title": "Book 7"}));
    let result = gw.call("Library.DeleteBook", json!({"book_id": 7})).await.result();
    assert_eq!((result["success"].clone(), result["value"].clone()), (json!(true), Value::Null), "{result}");
    let summary = value(&gw, "Library.BookSummary", json!({"book_id": 7})).await;
    assert_eq!(summary, "Book 7 is about a library.");

    // Any other status is a tool failure: 200 with success false.
    let error = tool_error(&gw, "Library.GetBook", json!({"book_id": 404})).await;
    assert_eq!(error["message"], "The API answered HTTP 404 Not Found", "{error}");
    assert!(error["developer_message"].as_str().expect("dev").contains("no such book"), "{error}");
    assert!(error.get("can_retry").is_none(), "{error}");
    let error = tool_error(&gw, "Library.AnswerStatus", json!({"code": 422})).await;
    assert!(error["message"].as_str().expect("m").contains("422"), "{error}");
    assert!(error["additional_prompt_content"].as_str().expect("excerpt").contains("answered 422"), "{error}");
    for code in [429, 503] {
        let error = tool_error(&gw, "Library.AnswerStatus", json!({"code": code})).await;
        assert_eq!(error["can_retry"], true, "{code}: {error}");
        assert_eq!(error["retry_after_ms"], 3000, "{code}: {error}");
    }
    let error = tool_error(&gw, "Library.Boom", json!({})).await;
    assert!(error["message"].as_str().expect("m").contains("500"), "{error}");
    // A redirect to another origin is an answer, not followed.
    library.clear_log().await;
    let error = tool_error(&gw, "Library.Moved", json!({})).await;
    assert!(error["message"].as_str().expect("m").contains("302"), "{error}");
    let sent = library.log().await;
    assert_eq!(sent.len(), 1, "only /moved was asked for: {sent:?}");
    // No answer within call_timeout: retryable.
    let error = tool_error(&gw, "Library.Slow", json!({})).await;
    assert_eq!(error["can_retry"], true, "{error}");
    // An answer past the limit is cut off, as from any upstream.
    let error = tool_error(&gw, "Library.Big", json!({})).await;
    assert!(error["developer_message"].as_str().expect("dev").contains("more than"), "{error}");
    // Through /mcp a failure is an error result.
    let result = mcp_call(&gw, None, "Library_GetBook", json!({"book_id": 404})).await;
    assert_eq!(result["isError"], true, "{result}");
    assert!(result["content"][0]["text"].as_str().expect("text").contains("404"), "{result}");
}

#[tokio::test]
async fn the_document_is_a_catalog_that_changes_and_reloads() {
    let mut library = Library::start();
    let gw = start(&library, ALL_SECRETS, "").await;
    // Polled with the ETag it came with: an unchanged document is a 304.
    wait_until("the document is revalidated (a 304)", async || {
        let fetches = library.document_fetches().await;
        if fetches.iter().any(|f| f["if_none_match"].is_string() && f["status"] == 304) {
            Ok(())
        } else {
            Err(format!("{fetches:?}"))
        }
    })
    .await;
    // A route added while running: the document changes, and so do the tools.
    assert!(find_tool(&gw.tools().await, "Library.LateArrival@2.3.0").is_none());
    library.add_route().await;
    gw.wait_for_tool("Library.LateArrival@2.3.0").await;
    assert_eq!(value(&gw, "Library.LateArrival", json!({})).await, json!({"late": true}));

    // A reload that keeps the upstream keeps its tools, callable at once.
    let extra = "[[rate_limit]]\nname = \"unrelated\"\ntools = [\"Other.*\"]\nper = \"global\"\nrate = \"5/s\"\n";
    gw.rewrite_config(&config(&library, ALL_SECRETS, extra));
    gw.wait_for_log(&["config reloaded"]).await;
    assert!(find_tool(&gw.tools().await, "Library.GetBook@2.3.0").is_some());
    assert_eq!(value(&gw, "Library.GetBook", json!({"book_id": 1})).await["id"], 1);

    // The API goes away: its last good document's tools stay listed, the
    // failure is in /status, and a call is "temporarily unavailable".
    library.stop();
    let status = wait_until("the failure shows in /status", async || {
        let status = gw.upstream_status("library").await;
        if status["up"] == false {
            Ok(status)
        } else {
            Err(status.to_string())
        }
    })
    .await;
    assert!(status["last_error"].as_str().is_some_and(|e| e.contains("cannot reach")), "{status}");
    assert!(find_tool(&gw.tools().await, "Library.LateArrival@2.3.0").is_some(), "the last good tools stay");
    let body = gw.call("Library.GetBook", json!({"book_id": 1})).await.server_error(400);
    assert!(body["message"].as_str().expect("message").contains("temporarily unavailable"), "{body}");
    // Its circuit opens after repeated connection failures, as any upstream's.
    let mut opened = false;
    for _ in 0..10 {
        let body = gw.call("Library.GetBook", json!({"book_id": 1})).await.server_error(400);
        if body["developer_message"].as_str().is_some_and(|d| d.contains("circuit open")) {
            opened = true;
            break;
        }
    }
    assert!(opened, "the circuit never opened");
}

#[tokio::test]
async fn policy_and_rate_limits_apply_to_openapi_tools() {
    let library = Library::start();
    let extra = r#"
[[policy]]
name = "readers"
when = { any = true }
allow = ["Library.Get*", "Library.List*"]

[[policy]]
name = "alice"
when = { user_id = "alice" }
allow = ["Library.*"]

[[rate_limit]]
name = "book-reads"
tools = ["Library.GetBook"]
per = "user"
rate = "2/m"
"#;
    let gw = Gateway::start_with_env(&config(&library, ALL_SECRETS, extra), ENV).await;
    gw.wait_for_tool("Library.GetBook@2.3.0").await;
    // Bob may read but not delete: the tool does not exist for him.
    assert!(call_as(&gw, Some(BOB_KEY), "Library.GetBook", json!({"book_id": 1})).await.result()["success"] == true);
    call_as(&gw, Some(BOB_KEY), "Library.DeleteBook", json!({"book_id": 1})).await.server_error(400);
    let names = mcp_names(&gw, BOB_KEY).await;
    assert!(names.contains(&"Library_GetBook".to_owned()) && !names.contains(&"Library_DeleteBook".to_owned()));
    let answer = mcp_rpc(&gw, Some(BOB_KEY), "Library_DeleteBook", json!({"book_id": 1})).await;
    assert!(answer["error"]["message"].as_str().is_some_and(|m| m.contains("Library_DeleteBook")), "{answer}");
    // Alice may delete.
    assert_eq!(
        call_as(&gw, Some(ALICE_KEY), "Library.DeleteBook", json!({"book_id": 1})).await.result()["success"],
        true
    );
    // Two reads a minute each: alice's third, on either front, is refused.
    for _ in 0..2 {
        call_as(&gw, Some(ALICE_KEY), "Library.GetBook", json!({"book_id": 1})).await.result();
    }
    let refused = call_as(&gw, Some(ALICE_KEY), "Library.GetBook", json!({"book_id": 1})).await;
    assert_eq!(refused.status, 429, "{}", refused.text());
    assert!(refused.text().contains("book-reads"));
    let result = mcp_call(&gw, Some(ALICE_KEY), "Library_GetBook", json!({"book_id": 1})).await;
    assert_eq!(result["isError"], true, "{result}");
    assert!(result.to_string().contains("book-reads"), "{result}");
    // Bob's own bucket still has one read left (he used one above).
    assert_eq!(mcp_call(&gw, Some(BOB_KEY), "Library_GetBook", json!({"book_id": 2})).await["isError"], false);
}

#[tokio::test]
async fn a_swagger_2_document_is_a_clear_error_and_the_gateway_keeps_serving() {
    let library = Library::start();
    let url = library.url();
    let extra = format!(
        "[[upstreams]]\nname = \"old\"\nprotocol = \"openapi\"\nurl = \"{url}\"\nspec = \"{url}/swagger.json\"\ntoolkit = \"Old\"\n"
    );
    let mut gw = Gateway::start_with_env(&config(&library, ALL_SECRETS, &extra), ENV).await;
    gw.wait_for_tool("Library.GetBook@2.3.0").await;
    let status = wait_until("the error shows in /status", async || {
        let old = gw.upstream_status("old").await;
        if old["last_error"].is_string() {
            Ok(old)
        } else {
            Err(old.to_string())
        }
    })
    .await;
    let error = status["last_error"].as_str().expect("error");
    assert!(error.contains("Swagger 2.0") && error.contains("OpenAPI 3"), "{error}");
    assert_eq!(status["up"], false);
    gw.wait_for_log(&["Swagger 2.0"]).await;
    // Still serving, the other upstream's tools included.
    assert_eq!(value(&gw, "Library.GetBook", json!({"book_id": 3})).await["id"], 3);
    assert!(gw.is_alive());
}

#[tokio::test]
async fn a_yaml_3_0_document_from_a_file_with_selected_operations() {
    let library = Library::start();
    // OpenAPI 3.0 in YAML: `nullable`, a boolean exclusiveMinimum, a
    // `$ref`ed parameter, integer response codes, and `servers` pointing
    // elsewhere (never used).
    let yaml = r##"openapi: 3.0.3
info:
  title: Library (YAML)
  version: 1.4.0
servers:
  - url: http://127.0.0.1:9/elsewhere
paths:
  /books/{book_id}:
    get:
      operationId: get_book
      summary: A book
      parameters:
        - $ref: '#/components/parameters/BookId'
      responses:
        200:
          description: the book
          content:
            application/json:
              schema:
                $ref: '#/components/schemas/Book'
  /books:
    get:
      operationId: list_books
      parameters:
        - name: limit
          in: query
          schema: {type: integer, minimum: 0, exclusiveMinimum: true}
        - name: q
          in: query
          schema: {type: string, nullable: true}
      responses:
        200: {description: ok}
    post:
      operationId: create_book
      requestBody:
        content:
          multipart/form-data:
            schema: {type: object}
        required: true
      responses:
        201: {description: created}
  /admin:
    get:
      operationId: admin_panel
      responses:
        200: {description: ok}
components:
  parameters:
    BookId:
      name: book_id
      in: path
      required: true
      schema: {type: integer}
  schemas:
    Book:
      type: object
      properties:
        id: {type: integer}
        title: {type: string, nullable: true}
"##;
    let path = temp_file("library", "yaml", yaml);
    let extra = format!(
        "[[upstreams]]\nname = \"yaml\"\nprotocol = \"openapi\"\nurl = \"{}\"\nspec = \"file:{}\"\ntoolkit = \"Shelf\"\noperations = [\"get_book\", \"GET /books\", \"POST /books\"]\n",
        library.url(),
        path.display()
    );
    let gw = Gateway::start_with_env(&config(&library, ALL_SECRETS, &extra), ENV).await;
    let get = gw.wait_for_tool("Shelf.GetBook@1.4.0").await;
    assert_eq!(get["input_schema"]["properties"]["book_id"]["type"], "integer");
    assert_eq!(get["output_schema"]["properties"]["title"]["type"], json!(["string", "null"]));
    let list = gw.wait_for_tool("Shelf.ListBooks@1.4.0").await;
    assert_eq!(list["input_schema"]["properties"]["limit"]["exclusiveMinimum"], 0);
    assert!(list["input_schema"]["properties"]["limit"].get("minimum").is_none());
    // 3.0 exclusiveMinimum true: 0 is refused by the gateway, 1 is fine.
    gw.call("Shelf.ListBooks", json!({"limit": 0})).await.parameter_errors();
    let got = value(&gw, "Shelf.ListBooks", json!({"limit": 1, "q": null})).await;
    assert_eq!(got["limit"], 1);
    // Calls go to `url` (the FastAPI app), not to `servers`.
    assert_eq!(value(&gw, "Shelf.GetBook", json!({"book_id": 5})).await["id"], 5);
    let tools = gw.tools().await;
    let ids = common::ids(&tools);
    assert!(!ids.iter().any(|i| i.starts_with("Shelf.AdminPanel")), "not selected: {ids:?}");
    // A multipart body is not supported: skipped with the reason in /status.
    assert!(!ids.iter().any(|i| i.starts_with("Shelf.CreateBook")), "{ids:?}");
    let skipped = gw.upstream_status("yaml").await["skipped"].to_string();
    assert!(skipped.contains("POST /books") && skipped.contains("multipart/form-data"), "{skipped}");
    let _ = std::fs::remove_file(path);
}

#[tokio::test]
async fn hostile_documents_are_bounded_and_the_gateway_keeps_serving() {
    let library = Library::start();
    // One document with what a hostile or careless author writes: a $ref to
    // another file and to a URL (never fetched), a schema referring to
    // itself, one referring to the next ten times over ten levels (10^10
    // schemas if expanded), and one operation that is fine.
    let mut schemas = serde_json::Map::new();
    for level in 0..10 {
        let properties: serde_json::Map<String, Value> = (0..10)
            .map(|i| (format!("p{i}"), json!({"$ref": format!("#/components/schemas/L{}", level + 1)})))
            .collect();
        schemas.insert(format!("L{level}"), json!({"type": "object", "properties": properties}));
    }
    schemas.insert("L10".into(), json!({"type": "string"}));
    schemas
        .insert("Self".into(), json!({"type": "object", "properties": {"me": {"$ref": "#/components/schemas/Self"}}}));
    let body = |schema: Value| json!({"required": true, "content": {"application/json": {"schema": schema}}});
    let op = |id: &str, schema: Value| json!({"operationId": id, "requestBody": body(schema), "responses": {"200": {"description": "ok"}}});
    let document = json!({
        "openapi": "3.1.0",
        "info": {"title": "Hostile", "version": "1.0.0"},
        "paths": {
            "/file": {"post": op("fromFile", json!({"$ref": "other.yaml#/components/schemas/X"}))},
            "/url": {"post": op("fromUrl", json!({"$ref": format!("{}/stolen#/x", library.url())}))},
            "/self": {"post": op("selfish", json!({"$ref": "#/components/schemas/Self"}))},
            "/wide": {"post": op("wide", json!({"$ref": "#/components/schemas/L0"}))},
            "/books/{book_id}": {"get": {"operationId": "getBook", "parameters": [
                {"name": "book_id", "in": "path", "required": true, "schema": {"type": "integer"}}],
                "responses": {"200": {"description": "ok"}}}},
        },
        "components": {"schemas": schemas},
    });
    let path = temp_file("hostile", "json", &document.to_string());
    // Larger than catalog.max_catalog_bytes (32 MiB): refused whole.
    let big = temp_file("huge", "json", &format!("{{\"openapi\": \"3.1.0\", \"x\": \"{}\"}}", "x".repeat(40 << 20)));
    let url = library.url();
    let extra = format!(
        "[[upstreams]]\nname = \"hostile\"\nprotocol = \"openapi\"\nurl = \"{url}\"\nspec = \"file:{}\"\n\n\
         [[upstreams]]\nname = \"huge\"\nprotocol = \"openapi\"\nurl = \"{url}\"\nspec = \"file:{}\"\n",
        path.display(),
        big.display()
    );
    library.clear_log().await;
    let started = Instant::now();
    let gw = Gateway::start_with_env(&config(&library, ALL_SECRETS, &extra), ENV).await;
    let get = gw.wait_for_tool("Hostile.GetBook@1.0.0").await;
    assert!(started.elapsed() < Duration::from_secs(15), "took {:?}", started.elapsed());
    assert_eq!(get["input_schema"]["properties"]["book_id"]["type"], "integer");
    let tools = gw.tools().await;
    // The wide one is listed, bounded; the recursive one too, as a stub.
    let wide = find_tool(&tools, "Hostile.Wide@1.0.0").expect("bounded, not refused");
    assert!(wide.to_string().len() < 4 << 20, "{} bytes", wide.to_string().len());
    let selfish = find_tool(&tools, "Hostile.Selfish@1.0.0").expect("listed");
    assert!(selfish["input_schema"]["properties"]["me"]["description"].as_str().expect("stub").contains("recursive"));
    // The external references: skipped with their reasons, nothing fetched.
    let skipped = gw.upstream_status("hostile").await["skipped"].to_string();
    assert!(skipped.contains("POST /file") && skipped.contains("outside the document"), "{skipped}");
    assert!(skipped.contains("POST /url"), "{skipped}");
    let sent = library.log().await;
    assert!(!sent.iter().any(|r| r["raw_path"] == "/stolen"), "a $ref was fetched: {sent:?}");
    // A document over catalog.max_catalog_bytes (32 MiB) is refused whole.
    let huge = wait_within(Duration::from_secs(20), "the huge document's error shows in /status", async || {
        let huge = gw.upstream_status("huge").await;
        if huge["last_error"].is_string() {
            Ok(huge)
        } else {
            Err(huge.to_string())
        }
    })
    .await;
    assert!(huge["last_error"].as_str().expect("error").contains("larger than"), "{huge}");
    // And the gateway serves on.
    assert_eq!(value(&gw, "Hostile.GetBook", json!({"book_id": 9})).await["id"], 9);
    let _ = std::fs::remove_file(path);
    let _ = std::fs::remove_file(big);
}
