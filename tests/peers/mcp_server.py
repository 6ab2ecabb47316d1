"""A real MCP server (the official Python SDK) for tests/mcp_bridge.rs.

Usage: mcp_server.py PORT [json]

Serves streamable HTTP at http://127.0.0.1:PORT/mcp with the SDK's defaults
(stateful sessions, SSE replies), or JSON replies when "json" is given.
"""

import asyncio
import sys

from pydantic import BaseModel

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("otc-test-peer", version="1.0.0")


@server.tool(description="Adds two integers.", structured_output=False)
def add(a: int, b: int) -> int:
    return a + b


@server.tool(description="Always fails with the reason given.")
def explode(reason: str) -> str:
    raise ValueError(f"exploded: {reason}")


@server.tool(description="Refuses with a message meant for the caller.", structured_output=False)
def refuse(reason: str) -> str:
    raise ToolError(f"refused: {reason}")


class Weather(BaseModel):
    city: str
    temperature: float
    conditions: str


@server.tool(description="The weather in a city, as structured output.")
def weather(city: str) -> Weather:
    return Weather(city=city, temperature=21.5, conditions="sunny")


@server.tool(name="text-length", description="Counts the characters of a text.", structured_output=False)
def text_length(text: str) -> int:
    return len(text)


@server.tool(description="Answers with the text it was given.", structured_output=False)
def echo(text: str) -> str:
    return text


@server.tool(description="Sleeps, then answers.", structured_output=False)
async def slow(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "done"


@server.tool(description="The Authorization header the call came with.", structured_output=False)
def whoami(ctx: Context) -> str:
    return (ctx.headers or {}).get("authorization", "")


@server.tool(description="Logs to the client before answering.", structured_output=False)
async def chatty(ctx: Context) -> str:
    await ctx.log("info", "working on it")
    await ctx.log("info", "almost there")
    return "chatted"


if __name__ == "__main__":
    port = int(sys.argv[1])
    json_response = len(sys.argv) > 2 and sys.argv[2] == "json"
    server.run("streamable-http", host="127.0.0.1", port=port, json_response=json_response)
