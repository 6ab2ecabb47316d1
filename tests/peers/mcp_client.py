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


async def main(url, calls):
    out = {}
    async with Client(url, mode="legacy") as client:
        out["protocol_version"] = client.protocol_version
        out["server"] = client.server_info.name if client.server_info else None
        await client.send_ping()
        listed = await client.list_tools()
        out["tools"] = [wire(tool) for tool in listed.tools]
        out["calls"] = []
        for call in calls:
            try:
                result = await client.call_tool(call["name"], call.get("arguments"))
                out["calls"].append({"result": wire(result)})
            except MCPError as e:
                out["calls"].append({"error": {"code": e.code, "message": str(e)}})
            except Exception as e:  # noqa: BLE001 - reported to the test as text
                out["calls"].append({"exception": f"{type(e).__name__}: {e}"})
    print(json.dumps(out))


if __name__ == "__main__":
    # ping is deprecated in newer revisions; the gateway speaks 2025-11-25.
    warnings.simplefilter("ignore")
    asyncio.run(main(sys.argv[1], json.loads(sys.argv[2])))
