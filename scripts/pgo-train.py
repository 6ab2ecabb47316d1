#!/usr/bin/env python3
"""The training run of scripts/build-release.sh's profile-guided build.

Starts a tool server (this script's own, on loopback) and the gateway binary
given, then drives the traffic a gateway mostly sees: tool calls in every body
shape and version form, with a secret injected, from a few keep-alive
connections; now and then the catalog and a call the gateway refuses; and
MCP's tools/list and tools/call, from a 2025-11-25 and a 2026-07-28 client. Every answer is checked, so a drift in the API
fails the training (tests/release_build.rs runs it against the debug build).
The gateway is stopped with SIGTERM, as in production: an instrumented build
writes its profile when it exits.

Standard library only. Usage: pgo-train.py GATEWAY_BINARY [--calls N]
"""

import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SECRET = "train-secret-value"
NUMBER = {"type": "number"}
CATALOG = {
    "$schema": "otc://1.0",
    "tools": [
        {"id": "Train.Add@1.0.0", "name": "Add", "description": "Adds two numbers.", "version": "1.0.0",
         "input_schema": {"type": "object", "properties": {"a": NUMBER, "b": NUMBER}, "required": ["a", "b"]},
         "output_schema": NUMBER, "requirements": {"secrets": [{"id": "TRAIN_API_KEY"}]}},
        {"id": "Train.Add@2.0.0", "name": "Add", "description": "Adds numbers.", "version": "2.0.0",
         "input_schema": {"type": "object", "properties": {"numbers": {"type": "array", "items": NUMBER}},
                          "required": ["numbers"]},
         "output_schema": NUMBER},
        {"id": "Train.Echo@1.0.0", "name": "Echo", "description": "Echoes a message.", "version": "1.0.0",
         "input_schema": {"type": "object", "properties": {"message": {"type": "string", "maxLength": 200}},
                          "required": ["message"], "additionalProperties": False},
         "output_schema": {"type": "string"}},
    ],
}


class ToolServer(BaseHTTPRequestHandler):
    """An OTC tool server: the catalog, and the three tools' answers."""
    protocol_version = "HTTP/1.1"
    # The head and the body are two writes: without this, each answer waits
    # out a delayed ACK.
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def reply(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.reply(CATALOG)

    def do_POST(self):
        call = json.loads(self.rfile.read(int(self.headers["content-length"])))["request"]
        tool, args = call["tool_id"], call["input"]
        secrets = {s["id"]: s["value"] for s in call.get("context", {}).get("secrets", [])}
        if tool == "Train.Add@1.0.0" and secrets.get("TRAIN_API_KEY") != SECRET:
            value = {"success": False, "error": {"message": "no key"}}
        elif tool == "Train.Add@1.0.0":
            value = {"success": True, "value": args["a"] + args["b"]}
        elif tool == "Train.Add@2.0.0":
            value = {"success": True, "value": sum(args["numbers"])}
        else:
            value = {"success": True, "value": args["message"]}
        self.reply({"$schema": "otc://1.0", "result": {"call_id": call["call_id"], "duration": 0.01, **value}})


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TrainingFailed(Exception):
    """An answer the training did not expect."""


class Client:
    """One keep-alive connection to the gateway."""

    def __init__(self, port):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)

    def send(self, method, path, body=None, headers=None):
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        self.conn.request(method, path, data, {"content-type": "application/json", **(headers or {})})
        resp = self.conn.getresponse()
        return resp.status, resp.read(), resp

    def expect(self, status, method, path, body=None, headers=None):
        got, data, resp = self.send(method, path, body, headers)
        if got != status:
            raise TrainingFailed(f"{method} {path} {body!r}: expected {status}, got {got}: {data[:300]!r}")
        return (json.loads(data) if data else None), resp


CALLS = [
    # (body, expected value)
    ({"$schema": "otc://1.0", "request": {"tool_id": "Train.Add@1.0.0", "input": {"a": 10, "b": 5}}}, 15),
    ({"request": {"tool_id": "Train.Add@1", "call_id": None, "input": {"a": 1.5, "b": 2}}}, 3.5),
    ({"tool_id": "Train.Add", "input": {"numbers": [1, 2, 3, 4]}}, 10),
    ({"tool_id": "Train.Echo@1.0.0", "inputs": {"message": "héllo, \"world\"\n"}}, "héllo, \"world\"\n"),
]


def calls(port, count):
    client = Client(port)
    for i in range(count):
        body, value = CALLS[i % len(CALLS)]
        if body.get("request", {}).get("call_id", 0) is None:
            body = {"request": {**body["request"], "call_id": f"train-{threading.get_ident()}-{i}"}}
        answer, _ = client.expect(200, "POST", "/tools/call", body)
        if answer["result"].get("value") != value:
            raise TrainingFailed(f"{body}: {answer}")
        if i % 50 == 0:
            tools, _ = client.expect(200, "GET", "/tools")
            if len(tools["items"]) != 3:
                raise TrainingFailed(f"GET /tools: {tools}")
        if i % 100 == 7:
            client.expect(422, "POST", "/tools/call", {"tool_id": "Train.Add@1.0.0", "input": {"a": "ten", "b": 5}})
            client.expect(400, "POST", "/tools/call", {"tool_id": "Train.Nothing@1.0.0", "input": {}})
            client.expect(400, "POST", "/tools/call", b"{not json")


def mcp(port, count):
    client = Client(port)
    accept = {"accept": "application/json, text/event-stream"}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-03-26", "capabilities": {},
                       "clientInfo": {"name": "pgo-train", "version": "1"}}}
    _, resp = client.expect(200, "POST", "/mcp", init, accept)
    session = {**accept, "mcp-session-id": resp.getheader("mcp-session-id") or "",
               "mcp-protocol-version": "2025-03-26"}
    client.expect(202, "POST", "/mcp", {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    listed, _ = client.expect(200, "POST", "/mcp", {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, session)
    if "Train_Add" not in [t["name"] for t in listed["result"]["tools"]]:
        raise TrainingFailed(f"MCP tools/list has no Train_Add: {listed}")
    for i in range(count):
        call = {"jsonrpc": "2.0", "id": 10 + i, "method": "tools/call",
                "params": {"name": "Train_Add", "arguments": {"numbers": [i, 1]}}}
        answer, _ = client.expect(200, "POST", "/mcp", call, session)
        if answer.get("result", {}).get("isError") or str(i + 1) not in json.dumps(answer.get("result")):
            raise TrainingFailed(f"MCP tools/call: {answer}")


MODERN_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
               "io.modelcontextprotocol/clientCapabilities": {}}


def mcp_modern(port, count):
    """A 2026-07-28 client: no handshake, `_meta` and the mirrored headers
    on every request."""
    client = Client(port)
    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2026-07-28"}
    listed, _ = client.expect(200, "POST", "/mcp", {"jsonrpc": "2.0", "id": "l", "method": "tools/list",
                                                    "params": {"_meta": MODERN_META}},
                              {**headers, "mcp-method": "tools/list"})
    if "Train_Add" not in [t["name"] for t in listed["result"]["tools"]]:
        raise TrainingFailed(f"MCP tools/list has no Train_Add: {listed}")
    call_headers = {**headers, "mcp-method": "tools/call", "mcp-name": "Train_Add"}
    for i in range(count):
        call = {"jsonrpc": "2.0", "id": f"m-{i}", "method": "tools/call",
                "params": {"name": "Train_Add", "arguments": {"numbers": [i, 2]}, "_meta": MODERN_META}}
        answer, _ = client.expect(200, "POST", "/mcp", call, call_headers)
        result = answer.get("result", {})
        if result.get("isError") or result.get("resultType") != "complete" or str(i + 2) not in json.dumps(result):
            raise TrainingFailed(f"MCP tools/call (2026-07-28): {answer}")
        if i % 100 == 7:
            # A header that does not match the body.
            client.expect(400, "POST", "/mcp", call, {**call_headers, "mcp-name": "Train_Other"})


def run(work, errors):
    """Runs one worker, keeping what it raised."""
    try:
        work()
    except Exception as e:  # noqa: BLE001 - any failure fails the training
        errors.append(f"{type(e).__name__}: {e}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gateway")
    ap.add_argument("--calls", type=int, default=20000, help="tool calls in all, over four connections")
    args = ap.parse_args()

    upstream = ThreadingHTTPServer(("127.0.0.1", 0), ToolServer)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    work = Path(tempfile.mkdtemp(prefix="otc-pgo-train-"))
    port, admin = free_port(), free_port()
    (work / "gateway.toml").write_text(f"""
[server]
listen = "127.0.0.1:{port}"
admin_listen = "127.0.0.1:{admin}"
threads = 1
[catalog]
poll_interval = "300s"
[[upstreams]]
name = "train"
url = "http://127.0.0.1:{upstream.server_port}"
secrets = ["TRAIN_API_KEY"]
[secrets]
TRAIN_API_KEY = "env:TRAIN_API_KEY"
""")
    env = dict(os.environ, TRAIN_API_KEY=SECRET, RUST_LOG="warn")
    gateway = subprocess.Popen([args.gateway, "--config", str(work / "gateway.toml")], env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                tools, _ = Client(port).expect(200, "GET", "/tools")
                if len(tools["items"]) == 3:
                    break
            except (OSError, http.client.HTTPException):
                pass
            if gateway.poll() is not None:
                raise TrainingFailed(f"the gateway exited ({gateway.returncode}) before it listed the training tools")
            if time.monotonic() > deadline:
                raise TrainingFailed("the gateway did not list the training tools within 60 s")
            time.sleep(0.1)
        errors = []
        # MCP is what most agents speak: an eighth of the calls in each era.
        jobs = [lambda: calls(port, args.calls // 4)] * 4 + [lambda: mcp(port, max(args.calls // 8, 5)),
                                                              lambda: mcp_modern(port, max(args.calls // 8, 5))]
        workers = [threading.Thread(target=run, args=(job, errors)) for job in jobs]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        if errors:
            raise TrainingFailed(errors[0])
    finally:
        gateway.send_signal(signal.SIGTERM)
        try:
            gateway.wait(60)
        except subprocess.TimeoutExpired:
            gateway.kill()
            raise TrainingFailed("the gateway did not stop within 60 s of SIGTERM")
        upstream.shutdown()
    if gateway.returncode != 0:
        raise TrainingFailed(f"the gateway exited with {gateway.returncode}")
    print(f"pgo-train: {args.calls} calls answered")


if __name__ == "__main__":
    try:
        main()
    except TrainingFailed as e:
        print(f"pgo-train: {e}", file=sys.stderr)
        sys.exit(1)
