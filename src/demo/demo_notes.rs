//! The demo's REST API: a small notes service with an OpenAPI 3.1 document
//! at `/openapi.json`, which the demo gateway fronts as an `openapi`
//! upstream. Every route wants the API key the gateway injects from its
//! `[secrets]` (`X-Notes-Key`); notes live in memory.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpListener;

use super::reply;

/// The API key the notes service accepts (the demo puts it in the
/// environment variable `[secrets] NOTES_API_KEY` names).
pub(super) const NOTES_KEY: &str = "demo-notes-key-4e1b";

/// The notes, in memory.
type Notes = Arc<Mutex<Vec<Value>>>;

/// Starts the service on a loopback port.
pub(super) async fn serve() -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let notes: Notes =
        Arc::new(Mutex::new(vec![json!({"id": 1, "title": "Welcome", "text": "Try the tools.", "tags": ["demo"]})]));
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let notes = notes.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request| {
                    let notes = notes.clone();
                    async move { Ok::<_, Infallible>(handle(&notes, request).await) }
                });
                let _ =
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    Ok(addr)
}

async fn handle(notes: &Notes, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let (method, path, query) = (
        request.method().clone(),
        request.uri().path().to_owned(),
        request.uri().query().unwrap_or_default().to_owned(),
    );
    if (method.clone(), path.as_str()) == (Method::GET, "/openapi.json") {
        return reply(StatusCode::OK, &document());
    }
    if request.headers().get("x-notes-key").map(|k| k.as_bytes()) != Some(NOTES_KEY.as_bytes()) {
        return reply(StatusCode::UNAUTHORIZED, &json!({"detail": "a valid X-Notes-Key is required"}));
    }
    // The body first: the lock is not held across an await.
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => return reply(StatusCode::BAD_REQUEST, &json!({"detail": "unreadable body"})),
    };
    let mut notes = notes.lock().unwrap_or_else(|p| p.into_inner());
    match (method, path.strip_prefix("/notes")) {
        (Method::GET, Some("")) => {
            let tag = form_urlencoded::parse(query.as_bytes()).find(|(k, _)| k == "tag").map(|(_, v)| v.into_owned());
            let found: Vec<&Value> = notes
                .iter()
                .filter(|n| {
                    tag.as_ref().is_none_or(|t| n["tags"].as_array().is_some_and(|tags| tags.iter().any(|x| x == t)))
                })
                .collect();
            reply(StatusCode::OK, &json!(found))
        }
        (Method::POST, Some("")) => {
            let new: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let Some(title) = new["title"].as_str().filter(|t| !t.is_empty()) else {
                return reply(StatusCode::UNPROCESSABLE_ENTITY, &json!({"detail": "a note needs a title"}));
            };
            let id = notes.iter().filter_map(|n| n["id"].as_u64()).max().unwrap_or(0) + 1;
            let note = json!({"id": id, "title": title, "text": new["text"].as_str().unwrap_or_default(),
                              "tags": new.get("tags").cloned().unwrap_or_else(|| json!([]))});
            notes.push(note.clone());
            reply(StatusCode::CREATED, &note)
        }
        (method, Some(rest)) => {
            let id = rest.strip_prefix('/').and_then(|id| id.parse::<u64>().ok());
            let Some(at) = id.and_then(|id| notes.iter().position(|n| n["id"] == id)) else {
                return reply(
                    StatusCode::NOT_FOUND,
                    &json!({"detail": format!("no note {}", rest.trim_start_matches('/'))}),
                );
            };
            match method {
                Method::GET => reply(StatusCode::OK, &notes[at]),
                Method::DELETE => {
                    notes.remove(at);
                    let mut response = Response::new(Full::new(Bytes::new()));
                    *response.status_mut() = StatusCode::NO_CONTENT;
                    response
                }
                _ => reply(StatusCode::METHOD_NOT_ALLOWED, &json!({"detail": "method not allowed"})),
            }
        }
        _ => reply(StatusCode::NOT_FOUND, &json!({"detail": "not found"})),
    }
}

/// The service's OpenAPI document.
fn document() -> Value {
    let note_id = json!({"name": "note_id", "in": "path", "required": true, "schema": {"type": "integer"}});
    let note = json!({"$ref": "#/components/schemas/Note"});
    json!({
        "openapi": "3.1.0",
        "info": {"title": "Notes", "version": "1.0.0", "description": "A small notes service."},
        "security": [{"NotesKey": []}],
        "paths": {
            "/notes": {
                "get": {"operationId": "listNotes", "summary": "List notes, optionally those with a tag",
                        "parameters": [{"name": "tag", "in": "query", "schema": {"type": "string"}}],
                        "responses": {"200": {"description": "The notes",
                            "content": {"application/json": {"schema": {"type": "array", "items": note}}}}}},
                "post": {"operationId": "createNote", "summary": "Write a new note",
                         "requestBody": {"required": true, "content": {"application/json": {
                             "schema": {"$ref": "#/components/schemas/NewNote"}}}},
                         "responses": {"201": {"description": "The note",
                             "content": {"application/json": {"schema": note}}}}}
            },
            "/notes/{note_id}": {
                "get": {"operationId": "getNote", "summary": "Read one note", "parameters": [note_id],
                        "responses": {"200": {"description": "The note",
                            "content": {"application/json": {"schema": note}}},
                                      "404": {"description": "No such note"}}},
                "delete": {"operationId": "deleteNote", "summary": "Delete a note", "parameters": [note_id],
                           "responses": {"204": {"description": "Deleted"}}}
            }
        },
        "components": {
            "securitySchemes": {"NotesKey": {"type": "apiKey", "in": "header", "name": "X-Notes-Key"}},
            "schemas": {
                "NewNote": {"type": "object", "required": ["title"], "properties": {
                    "title": {"type": "string", "minLength": 1, "description": "What the note is about."},
                    "text": {"type": "string", "description": "The note itself."},
                    "tags": {"type": "array", "items": {"type": "string"}, "description": "Words to find it by."}}},
                "Note": {"allOf": [{"$ref": "#/components/schemas/NewNote"},
                                   {"type": "object", "required": ["id"], "properties": {"id": {"type": "integer"}}}]}
            }
        }
    })
}
