"""A langchain-tool-server (PyPI `langchain-tool-server`) with three tools,
on 127.0.0.1:<port> (argv[1]).

What it speaks, as the gateway sees it:
- GET /tools: a bare JSON list of definitions whose `id` is the bare function
  name ("add"), with no `version`, a flat `input_schema` (pydantic's, with
  `title`s) and an `output_schema`; the gateway completes the ids from the
  upstream's `toolkit` and `version`.
- POST /tools/call: only the wrapped form `{"$schema"?, "request": {tool_id,
  input}}` (a bare request is a 422 from it); `$schema` must be absent,
  "urn:oxp:1.0" or "otc://1.0". It answers a bare, unwrapped result
  `{"execution_id", "success": true, "value"}`, ignoring the call_id it was
  given. A tool that raises is an HTTP 500 with the text/plain body
  "Internal Server Error"; bad input is its own 400 `{"detail": ...}`.
"""
import sys

import uvicorn
from langchain_tool_server import Server, tool


@tool
def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


@tool
def stats(numbers: list[int]) -> dict:
    """Counts and sums a list of integers."""
    return {"count": len(numbers), "sum": sum(numbers)}


@tool
def explode(reason: str) -> str:
    """Always fails, with the given reason."""
    raise ValueError(reason)


server = Server()
server._add_tools(add, stats, explode)
uvicorn.run(server, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
