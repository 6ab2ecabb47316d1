"""The official MCP Python SDK's client against the gateway's /mcp in either
era, for tests/mcp_front.rs.

Usage: mcp_front_client.py URL MODE SCENARIO_JSON

MODE is the SDK's connect mode: "legacy" (initialize, 2025-11-25), "auto"
(server/discover, falling back to initialize) or "2026-07-28".

SCENARIO_JSON is an object:
  "headers":    extra HTTP headers on every request (credentials);
  "calls":      a list of {"name": ..., "arguments": {...}};
  "elicitation": when set, the client takes URL-mode elicitations: each one
                 is recorded, and {"write": PATH, "text": TOKEN} is written
                 first (the user finishing the flow at the link), then the
                 elicitation is answered with "action" (and "content", for
                 a form); with {"approve": {"admin": URL, "token": T}} an
                 operator first approves every pending approval on the
                 admin listener (a held call, tests/approvals.rs);
  "listen":     when set (2026-07-28 only), the client subscribes to tool
                list changes, touches {"ready": PATH} once the gateway has
                acknowledged, and waits up to "timeout" seconds for one
                change, then lists the tools again ("tools_after": their
                names, "listed_after": them as listed).

Prints one JSON object: the negotiated protocol version, the server's name
and instructions,
every listed tool (wire form), each call's {"result"} / {"error": {code,
message}} / {"exception"}, the elicitations seen, and what listening saw.
"""

import asyncio
import json
import sys
import warnings
from pathlib import Path

import anyio
import httpx
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_client import call, wire



async def main(url, mode, scenario):
    out = {"elicitations": []}
    elicitation = scenario.get("elicitation")

    async def on_elicitation(_context, params):
        out["elicitations"].append(wire(params))
        if elicitation.get("write"):
            Path(elicitation["write"]).write_text(elicitation.get("text", ""))
        operator = elicitation.get("approve")
        if operator:
            auth = {"authorization": "Bearer " + operator["token"]}
            async with httpx.AsyncClient(base_url=operator["admin"], headers=auth) as admin:
                pending = (await admin.get("/approvals")).json()["approvals"]
                for held in pending:
                    (await admin.post(f"/approvals/{held['id']}/approve")).raise_for_status()
        return types.ElicitResult(action=elicitation.get("action", "accept"), content=elicitation.get("content"))

    http = create_mcp_http_client(headers=scenario.get("headers") or {})
    transport = streamable_http_client(url, http_client=http)
    client = Client(transport, mode=mode, elicitation_callback=on_elicitation if elicitation else None)
    async with client:
        out["protocol_version"] = client.protocol_version
        out["server"] = client.server_info.name if client.server_info else None
        out["instructions"] = client.instructions
        listed = await client.list_tools()
        out["tools"] = [wire(tool) for tool in listed.tools]
        out["calls"] = [await call(client, c["name"], c.get("arguments")) for c in scenario.get("calls", [])]
        listen = scenario.get("listen")
        if listen:
            out["listen"] = {"events": []}
            async with client.listen(tools_list_changed=True) as subscription:
                out["listen"]["honored"] = wire(subscription.honored)
                Path(listen["ready"]).write_text("ready")
                with anyio.move_on_after(listen.get("timeout", 20)):
                    async for event in subscription:
                        out["listen"]["events"].append(type(event).__name__)
                        break
            relisted = await client.list_tools(cache_mode="bypass")
            out["listen"]["tools_after"] = [tool.name for tool in relisted.tools]
            out["listen"]["listed_after"] = [wire(tool) for tool in relisted.tools]
    print(json.dumps(out))


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    asyncio.run(main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3])))
