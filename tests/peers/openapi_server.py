"""A real REST API for tests/openapi.rs: a FastAPI application serving the
OpenAPI 3.1 document FastAPI generates for it, at /openapi.json.

Usage: openapi_server.py PORT

What it covers, route by route (every operation has the operationId FastAPI
gives it unless it sets one; `GET /authors/{author_id}` has its operationId
taken out of the document, to be named from its method and path):

- parameters of each kind: path, query (an array with the default style and
  explode, an integer with a default, an optional string), a header, a
  cookie; and hostile path values, which must arrive as one segment
  (`GET /echo/{segment}`: the segment as decoded and the raw path as sent);
- bodies with `$ref`ed models: `POST /books` (a Book with a nested Author
  and a recursive Category), `POST /books/bulk` (a list: one `body` input),
  `PUT /books/{book_id}` (a body property named like the path parameter:
  one `body` input);
- each security kind: an API key in a header, the query and a cookie, HTTP
  bearer, HTTP basic, OAuth 2 (a per-user token with scopes); each route
  checks the credential against the value the test configures and answers
  who it was, never the credential itself (`/secure/echo` does, to show the
  gateway scrubs it);
- each answer: 201 JSON, 204, text/plain, 404, 422, 429 with Retry-After,
  503, 500 (an exception), a redirect to another origin (`localhost`
  instead of `127.0.0.1`), a slow answer, one too large; a 500 repeating
  the API key in the spelling asked for (`/secure/fail`);
- `GET /base/echo/{segment}` and `GET /base/files/{path}`, not in the
  document: where an upstream whose `url` ends in `/base` sends its calls
  (behind a proxy, in tests/openapi.rs), while `GET /admin` stands outside
  that base;
- change while running: `POST /test/add-route` adds `GET /late` and the
  document changes with it;
- the document, at /openapi.json, with an ETag (304 to a matching
  If-None-Match), and `servers` naming another place, where no call must go;
- `GET /test/log`: every request the API received (method, raw path, query,
  the headers that matter, whether it carried an API key), for the test to
  see what was sent;
- `GET /swagger.json`: a Swagger 2.0 document, for the refusal.

The routes under /test and /swagger.json are not in the document.
"""

import asyncio
import hashlib
import json
import sys
import urllib.parse
from typing import Annotated, List, Optional

import uvicorn
from fastapi import Body, Cookie, Depends, FastAPI, Header, HTTPException, Query, Request, Security
from fastapi.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from fastapi.security import (
    APIKeyCookie,
    APIKeyHeader,
    APIKeyQuery,
    HTTPBasic,
    HTTPBasicCredentials,
    HTTPBearer,
    HTTPAuthorizationCredentials,
    OAuth2AuthorizationCodeBearer,
    SecurityScopes,
)
from pydantic import BaseModel, Field

# The credentials the test gives the gateway (as [secrets] and per-user
# tokens); the API accepts only these.
HEADER_KEY = "hdr-key-5f2a9c71"
QUERY_KEY = "qry-key-08be33d2"
COOKIE_KEY = "cki-key-c41d9e05"
BEARER_TOKEN = "bearer-tok-77a1f0e3"
BASIC_USER, BASIC_PASSWORD = "librarian", "s3cret-pa55word"
USER_TOKENS = {"tok-alice-4b8e2d17": "alice", "tok-carol-93c0a5f1": "carol"}

# `servers` names another place: calls must not go there (the gateway calls
# its configured `url`). The document is served by the route below, with an
# ETag.
app = FastAPI(title="Library", version="2.3.0", description="A small library API.",
              servers=[{"url": "http://127.0.0.1:9/elsewhere"}], openapi_url=None)
received: list = []


@app.middleware("http")
async def record(request: Request, call_next):
    if request.url.path.startswith("/test/"):
        return await call_next(request)
    headers = {k: v for k, v in request.headers.items() if k in ("x-request-id", "cookie", "content-type", "accept", "traceparent", "user-agent")}
    entry = {
        "method": request.method,
        "if_none_match": request.headers.get("if-none-match"),
        "raw_path": request.scope.get("raw_path", b"").decode("latin-1"),
        "query": request.scope.get("query_string", b"").decode("latin-1"),
        "host": request.headers.get("host"),
        "headers": headers,
        "has_authorization": "authorization" in request.headers,
        "has_api_key": "x-api-key" in request.headers,
    }
    received.append(entry)
    response = await call_next(request)
    entry["status"] = response.status_code
    return response


class Author(BaseModel):
    name: str = Field(description="The author's full name.")
    born: Optional[int] = None


class Category(BaseModel):
    label: str
    children: List["Category"] = []


class Book(BaseModel):
    title: str = Field(min_length=1, description="The book's title.")
    author: Author
    category: Optional[Category] = None
    tags: List[str] = []


class BookUpdate(BaseModel):
    book_id: int
    title: str


@app.get("/books", operation_id="listBooks", summary="List books", description="Books, filtered by tag.")
def list_books(
    request: Request,
    tag: Annotated[List[str], Query(description="Only books with every one of these tags.")] = [],
    limit: int = 10,
    q: Optional[str] = None,
    x_request_id: Annotated[Optional[str], Header()] = None,
    shelf: Annotated[Optional[str], Cookie()] = None,
):
    return {"tag": tag, "limit": limit, "q": q, "x_request_id": x_request_id, "shelf": shelf,
            "query": request.scope["query_string"].decode()}


@app.get("/books/{book_id}", operation_id="getBook", summary="Get a book")
def get_book(book_id: int):
    if book_id == 404:
        raise HTTPException(status_code=404, detail="no such book")
    return {"id": book_id, "title": f"Book {book_id}"}


@app.post("/books", operation_id="createBook", status_code=201, summary="Create a book")
def create_book(book: Book) -> Book:
    return book


@app.post("/books/bulk", operation_id="createBooks", summary="Create several books")
def create_books(books: List[Book]):
    return {"created": len(books), "titles": [b.title for b in books]}


@app.put("/books/{book_id}", operation_id="updateBook")
def update_book(book_id: int, update: BookUpdate):
    return {"path_id": book_id, "body_id": update.book_id, "title": update.title}


@app.delete("/books/{book_id}", operation_id="deleteBook", status_code=204)
def delete_book(book_id: int):
    return Response(status_code=204)


@app.get("/books/{book_id}/summary", operation_id="bookSummary", response_class=PlainTextResponse)
def book_summary(book_id: int):
    return f"Book {book_id} is about a library."


@app.get("/authors/{author_id}")
def get_author(author_id: int) -> Author:
    return Author(name=f"Author {author_id}")


@app.get("/echo/{segment:path}", operation_id="echoSegment")
def echo_segment(segment: str, request: Request):
    return {"segment": segment, "raw_path": request.scope["raw_path"].decode("latin-1"),
            "query": request.scope["query_string"].decode()}


@app.get("/base/echo/{segment:path}", include_in_schema=False)
def base_echo(segment: str, request: Request):
    return {"segment": segment, "raw_path": request.scope["raw_path"].decode("latin-1")}


@app.get("/base/files/{path:path}", include_in_schema=False)
def base_files(path: str, request: Request):
    return {"path": path, "raw_path": request.scope["raw_path"].decode("latin-1")}


@app.get("/admin", operation_id="adminPanel")
def admin():
    return {"admin": True}


@app.get("/status/{code}", operation_id="answerStatus")
def answer_status(code: int):
    headers = {}
    if code in (429, 503):
        headers["Retry-After"] = "3"
    return JSONResponse(status_code=code, content={"detail": f"answered {code} on purpose"}, headers=headers)


@app.get("/boom", operation_id="boom")
def boom():
    raise RuntimeError("the handler failed")


@app.get("/moved", operation_id="moved")
def moved(request: Request):
    port = request.url.port
    return RedirectResponse(f"http://localhost:{port}/stolen", status_code=302)


@app.get("/stolen", include_in_schema=False)
def stolen():
    return {"stolen": True}


@app.get("/big", operation_id="big", response_class=PlainTextResponse)
def big():
    # Past the gateway's limit on an answer (16 MiB at least).
    return "x" * (17 * 1024 * 1024)


@app.get("/slow", operation_id="slow")
async def slow():
    await asyncio.sleep(3)
    return {"slow": True}


header_key = APIKeyHeader(name="X-API-Key")
query_key = APIKeyQuery(name="api_key")
cookie_key = APIKeyCookie(name="session")
bearer = HTTPBearer()
basic = HTTPBasic()
oauth = OAuth2AuthorizationCodeBearer(
    authorizationUrl="https://login.example.com/authorize",
    tokenUrl="https://login.example.com/token",
    scopes={"books:read": "Read books", "books:write": "Write books"},
)


def check(value: str, expected: str):
    if value != expected:
        raise HTTPException(status_code=401, detail="wrong credential")


@app.get("/secure/header", operation_id="secureHeader")
def secure_header(key: str = Depends(header_key)):
    check(key, HEADER_KEY)
    return {"authenticated": "header"}


@app.get("/secure/query", operation_id="secureQuery")
def secure_query(key: str = Depends(query_key)):
    check(key, QUERY_KEY)
    return {"authenticated": "query"}


@app.get("/secure/cookie", operation_id="secureCookie")
def secure_cookie(key: str = Depends(cookie_key)):
    check(key, COOKIE_KEY)
    return {"authenticated": "cookie"}


@app.get("/secure/bearer", operation_id="secureBearer")
def secure_bearer(credentials: HTTPAuthorizationCredentials = Depends(bearer)):
    check(credentials.credentials, BEARER_TOKEN)
    return {"authenticated": "bearer"}


@app.get("/secure/basic", operation_id="secureBasic")
def secure_basic(credentials: HTTPBasicCredentials = Depends(basic)):
    check(credentials.username, BASIC_USER)
    check(credentials.password, BASIC_PASSWORD)
    return {"authenticated": "basic", "user": credentials.username}


@app.get("/secure/oauth", operation_id="myBooks")
def my_books(token: Annotated[str, Security(oauth, scopes=["books:read"])]):
    user = USER_TOKENS.get(token)
    if user is None:
        raise HTTPException(status_code=401, detail="unknown token")
    return {"user": user, "books": [f"{user}'s first book"]}


@app.get("/secure/echo", operation_id="echoKey")
def echo_key(key: str = Depends(header_key)):
    # A careless API that repeats the credential it was given.
    return {"you_sent": key}


def spelled(text: str, how: str) -> str:
    # How encoders write a value: JSON with `\/`, percent-encoding, `\u`
    # escapes, a form's `+` for a space.
    if how == "json":
        return text.replace("\\", "\\\\").replace('"', '\\"').replace("/", "\\/")
    if how == "url":
        return urllib.parse.quote(text, safe="")
    if how == "unicode":
        return "".join("\\u%04X" % ord(c) for c in text)
    if how == "form":
        return urllib.parse.quote_plus(text, safe="")
    return text


@app.get("/secure/fail", operation_id="failLoudly")
def fail_loudly(how: str, key: str = Depends(header_key)):
    # A careless API whose error repeats the credential it was given, in the
    # spelling `how` names; "straddle": JSON-escaped, across the gateway's
    # cut of an error body at 1,000 characters.
    if how == "straddle":
        return PlainTextResponse("x" * 992 + spelled(key, "json"), status_code=500)
    return PlainTextResponse(f"cannot use key {spelled(key, how)} today", status_code=500)


def late():
    return {"late": True}


@app.post("/test/add-route", include_in_schema=False)
def add_route():
    app.add_api_route("/late", late, methods=["GET"], operation_id="lateArrival", summary="Added while running")
    app.openapi_schema = None
    return {"added": "/late"}


@app.get("/test/log", include_in_schema=False)
def log():
    return received


@app.delete("/test/log", include_in_schema=False)
def clear_log():
    received.clear()
    return {"cleared": True}


@app.get("/swagger.json", include_in_schema=False)
def swagger():
    return {"swagger": "2.0", "info": {"title": "Old", "version": "1.0.0"},
            "paths": {"/pets": {"get": {"operationId": "listPets", "responses": {"200": {"description": "ok"}}}}}}


def openapi():
    # FastAPI's document, with one operationId taken out: that operation is
    # named from its method and path.
    if app.openapi_schema is None:
        from fastapi.openapi.utils import get_openapi
        schema = get_openapi(title=app.title, version=app.version, description=app.description,
                             routes=app.routes, servers=app.servers)
        schema["paths"]["/authors/{author_id}"]["get"].pop("operationId", None)
        app.openapi_schema = schema
    return app.openapi_schema


app.openapi = openapi


@app.get("/openapi.json", include_in_schema=False)
def openapi_json(request: Request):
    # As a static file server would: an ETag, and 304 when it still matches.
    body = json.dumps(app.openapi()).encode()
    etag = '"%s"' % hashlib.sha256(body).hexdigest()[:16]
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers={"ETag": etag})
    return Response(content=body, media_type="application/json", headers={"ETag": etag})

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
