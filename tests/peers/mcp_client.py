"""The official MCP Python SDK's client against the gateway's /mcp, for
tests/mcp_bridge.rs.

Usage: mcp_client.py URL CALLS_JSON

CALLS_JSON is a list of {"name": ..., "arguments": {...}}. Prints one JSON
object: the negotiated protocol version, the server's name, every listed
tool (wire form), and for each call either {"result": CallToolResult} or
{"error": {"code", "message"}} (a JSON-RPC error) or {"exception": text}.
"""

import asyncio
import json
import sys
import warnings

from mcp import Client, MCPError


def wire(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def call(client, name, arguments):
    """One tools/call as the test reads it: its result, its JSON-RPC error,
    or any other exception as text. (mcp_front_client.py and
    mcp_search_client.py use it too.)"""
    try:
        return {"result": wire(await client.call_tool(name, arguments))}
    except MCPError as e:
        return {"error": {"code": e.code, "message": str(e)}}
    except Exception as e:  # noqa: BLE001 - reported to the test as text
        return {"exception": f"{type(e).__name__}: {e}"}


async def main(url, calls):
    out = {}
    async with Client(url, mode="legacy") as client:
        out["protocol_version"] = client.protocol_version
        out["server"] = client.server_info.name if client.server_info else None
        await client.send_ping()
        listed = await client.list_tools()
        out["tools"] = [wire(tool) for tool in listed.tools]
        out["calls"] = [await call(client, c["name"], c.get("arguments")) for c in calls]
    print(json.dumps(out))


if __name__ == "__main__":
    # ping is deprecated in newer revisions; the gateway speaks 2025-11-25.
    warnings.simplefilter("ignore")
    asyncio.run(main(sys.argv[1], json.loads(sys.argv[2])))
