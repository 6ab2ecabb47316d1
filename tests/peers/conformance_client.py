#!/usr/bin/env python3
"""The client under test in MCP's conformance suite (client scenarios).

The suite starts an MCP server for a scenario and runs this script with the
server's URL as its last argument (and MCP_CONFORMANCE_SCENARIO and
MCP_CONFORMANCE_PROTOCOL_VERSION set). The script starts the gateway with
that URL as an MCP upstream, waits until the gateway has found the server's
revision and read the tool list, checks that the revision is the one the
suite runs at (2026-07-28 without a handshake, or a 2025-11-25 session), and,
when the scenario serves tools, calls each through the gateway's OTC front
(POST /tools/call). The suite judges what its server saw.

Standard library only. The gateway binary is $OTC_GATEWAY_BIN, else
target/debug/otc-gateway of this repository.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Arguments for the tools the suite's scenarios serve.
ARGUMENTS = {"add_numbers": {"a": 2, "b": 3}}
EXPECTED = {"add_numbers": "The sum of 2 and 3 is 5"}


def fail(message):
    print(f"conformance_client: {message}", file=sys.stderr)
    sys.exit(1)


def http(method, url, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def start_gateway(upstream_url, workdir):
    config = Path(workdir) / "gateway.toml"
    config.write_text(
        '[server]\nlisten = "127.0.0.1:0"\nadmin_listen = "127.0.0.1:0"\n\n'
        '[catalog]\npoll_interval = "200ms"\nrequest_timeout = "5s"\n\n'
        f'[[upstreams]]\nname = "conformance"\nurl = "{upstream_url}"\nprotocol = "mcp"\n'
        'toolkit = "Conformance"\nversion = "1.0.0"\n'
    )
    binary = os.environ.get("OTC_GATEWAY_BIN") or str(ROOT / "target/debug/otc-gateway")
    if not os.access(binary, os.X_OK):
        fail(f"no gateway binary at {binary}: run cargo build, or set OTC_GATEWAY_BIN")
    log = open(Path(workdir) / "gateway.log", "w")
    gateway = subprocess.Popen([binary, "--config", str(config)], stdout=subprocess.PIPE, stderr=log, text=True)
    line = gateway.stdout.readline()
    prefix = "otc-gateway listening on "
    if not line.startswith(prefix):
        gateway.kill()
        fail(f"the gateway did not start: {line!r}; see {log.name}")
    front, admin = line[len(prefix):].strip().rstrip(")").split(" (admin ")
    return gateway, f"http://{front}", f"http://{admin}"


def wait_until_up(admin):
    """The upstream's status once its tools were read."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        _, status = http("GET", f"{admin}/status")
        upstream = status["upstreams"][0]
        if upstream["up"]:
            return upstream
        time.sleep(0.2)
    fail(f"the gateway never read the upstream's tools: {upstream.get('last_error')}")


def wait_for_listing(front, count):
    """GET /tools once it lists the `count` tools read: the merged catalog is
    published a moment after the upstream's status says they were read."""
    deadline = time.monotonic() + 10
    while True:
        _, listing = http("GET", f"{front}/tools")
        if len(listing["items"]) >= count or time.monotonic() > deadline:
            return listing
        time.sleep(0.05)


def main():
    upstream_url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "?")
    expected = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION")
    with tempfile.TemporaryDirectory() as workdir:
        gateway, front, admin = start_gateway(upstream_url, workdir)
        try:
            upstream = wait_until_up(admin)
            revision = upstream.get("mcp_protocol_version")
            if expected and revision != expected:
                fail(f"{scenario}: the gateway speaks MCP {revision} to a server of {expected}")
            print(f"{scenario}: the gateway speaks MCP {revision}")
            listing = wait_for_listing(front, upstream["tools"])
            for tool in listing["items"]:
                name = tool["name"]
                status, answer = http(
                    "POST",
                    f"{front}/tools/call",
                    {"request": {"tool_id": tool["id"], "input": ARGUMENTS.get(name, {})}},
                )
                result = answer.get("result", {}) if isinstance(answer, dict) else {}
                if status != 200 or not result.get("success"):
                    fail(f"{scenario}: calling {tool['id']} answered {status}: {answer}")
                if name in EXPECTED and result.get("value") != EXPECTED[name]:
                    fail(f"{scenario}: {tool['id']} gave {result.get('value')!r}")
                print(f"{scenario}: {tool['id']} -> {result.get('value')!r}")
            print(f"{scenario}: {len(listing['items'])} tool(s) through the gateway")
        finally:
            gateway.terminate()
            gateway.wait(timeout=10)


if __name__ == "__main__":
    main()
