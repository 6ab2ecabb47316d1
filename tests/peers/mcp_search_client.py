"""The official MCP Python SDK's client against the gateway's /mcp in
search mode ([mcp] tool_listing = "search"), for tests/tool_search.rs: an
agent that searches, then calls what it found.

Usage: mcp_search_client.py URL QUERY ARGUMENTS_JSON HIDDEN_NAME

Lists the tools, calls search_tools with QUERY, calls the first tool found
with ARGUMENTS_JSON and describes it; then describes and calls HIDDEN_NAME
(a tool the caller may not see). Prints one JSON object with each step's
CallToolResult (wire form), or {"error": {"code", "message"}} for a
JSON-RPC error.
"""

import asyncio
import json
import sys
import warnings

from mcp import Client
from mcp_client import call as step
from mcp_client import wire


async def main(url, query, arguments, hidden):
    out = {}
    async with Client(url, mode="legacy") as client:
        out["instructions"] = client.instructions if hasattr(client, "instructions") else None
        listed = await client.list_tools()
        out["tools"] = [wire(tool) for tool in listed.tools]
        out["search"] = await step(client, "search_tools", {"query": query, "limit": 5})
        found = out["search"].get("result", {}).get("structuredContent", {}).get("tools", [])
        if found:
            first = found[0]["name"]
            out["called"] = await step(client, first, arguments)
            out["described"] = await step(client, "describe_tool", {"name": first})
        out["describe_hidden"] = await step(client, "describe_tool", {"name": hidden})
        out["call_hidden"] = await step(client, hidden, {})
    print(json.dumps(out))


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    asyncio.run(main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]))
