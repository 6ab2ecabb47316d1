"""A langchain-tool-server with two tools, on 127.0.0.1:<port> (argv[1]).

It publishes bare tool ids ("add") in a bare JSON list: the gateway completes
them from the upstream's `toolkit` and `version`.
"""
import sys

import uvicorn
from langchain_tool_server import Server, tool


@tool
def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


@tool
def explode(reason: str) -> str:
    """Always fails, with the given reason."""
    raise ValueError(reason)


server = Server()
server._add_tools(add, explode)
uvicorn.run(server, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
