"""The official MCP Python SDK's OAuth client against the gateway's /mcp, for
tests/mcp_authorization.rs: it meets the 401, discovers the protected
resource metadata from `WWW-Authenticate`, then the authorization server
from that, gets a token for the resource (client_credentials, with the RFC
8707 `resource` parameter) and calls a tool with it.

Usage: mcp_auth_client.py MCP_URL AS_PORT TOOL
Environment: MA_JWT_SECRET, the HS256 key the gateway verifies tokens with.

The authorization server is a minimal one run here on 127.0.0.1:AS_PORT (its
issuer is http://127.0.0.1:AS_PORT, which the gateway is configured with):
RFC 8414 metadata and a token endpoint for one client, issuing HS256 JWTs
whose `aud` is the `resource` asked for. Prints one JSON object: every
request the SDK made (method, URL, status, WWW-Authenticate), the token
requests the server got (form fields, secret left out), the tools listed and
the tool call's result.
"""

import asyncio
import base64
import json
import os
import sys
import threading
import time
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

import httpx2
import jwt
from mcp import Client
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import streamable_http_client

CLIENT_ID = "mcp-sdk-client"
CLIENT_SECRET = "mcp-sdk-client-secret-0123456789"

token_requests = []


def authorization_server(port, secret):
    issuer = f"http://127.0.0.1:{port}"

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def reply(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path != "/.well-known/oauth-authorization-server":
                return self.reply(404, {"error": "not_found"})
            self.reply(200, {
                "issuer": issuer,
                "authorization_endpoint": f"{issuer}/authorize",
                "token_endpoint": f"{issuer}/token",
                "grant_types_supported": ["client_credentials"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic"],
                "response_types_supported": ["code"],
            })

        def do_POST(self):
            form = parse_qs(self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode())
            fields = {k: v[0] for k, v in form.items()}
            token_requests.append(fields)
            expected = base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()
            if self.path != "/token" or self.headers.get("Authorization") != f"Basic {expected}":
                return self.reply(401, {"error": "invalid_client"})
            if fields.get("grant_type") != "client_credentials" or "resource" not in fields:
                return self.reply(400, {"error": "invalid_request"})
            claims = {"sub": CLIENT_ID, "iss": issuer, "aud": fields["resource"], "exp": int(time.time()) + 300}
            token = jwt.encode(claims, secret, algorithm="HS256")
            self.reply(200, {"access_token": token, "token_type": "Bearer", "expires_in": 300})

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return issuer


class MemoryStorage:
    def __init__(self):
        self.tokens = None
        self.client_info = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client_info

    async def set_client_info(self, client_info):
        self.client_info = client_info


async def main(url, as_port, tool):
    issuer = authorization_server(as_port, os.environ["MA_JWT_SECRET"])
    requests = []

    async def record(response):
        requests.append({
            "method": response.request.method,
            "url": str(response.request.url),
            "status": response.status_code,
            "www_authenticate": response.headers.get("www-authenticate"),
        })

    provider = ClientCredentialsOAuthProvider(
        server_url=url, storage=MemoryStorage(), client_id=CLIENT_ID, client_secret=CLIENT_SECRET, issuer=issuer
    )
    out = {}
    async with httpx2.AsyncClient(auth=provider, event_hooks={"response": [record]}) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
            out["tools"] = [t.name for t in (await client.list_tools()).tools]
            result = await client.call_tool(tool, {"x": 1})
            out["call"] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    out["requests"] = requests
    out["token_requests"] = [{k: v for k, v in r.items() if k != "client_secret"} for r in token_requests]
    print(json.dumps(out))


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
