"""The MCP server behind the gateway while MCP's conformance suite tests the
gateway's /mcp (scripts/conformance.sh, server scenarios).

Usage: conformance_server.py PORT

The suite's server scenarios look for diagnostic tools by name
(`test_missing_capability`, `test_trigger_tool_change`, ...). The gateway
lists an MCP upstream's tool `name` of toolkit `test` as `test_name`, so this
server (the SDK server of mcp_server.py, in both eras, plus the tools below)
serves them under the toolkit `test` as:

- `missing_capability`: needs the client's sampling capability, and says so
  with error -32021 when the request did not declare it (the gateway passes
  a 2026-07-28 client's capabilities on, and the error back);
- `streaming_elicitation`, `logging_tool`: answer plainly (the gateway's
  answers are one JSON response, never a stream with server requests or
  unasked log messages);
- `trigger_tool_change`: adds a tool and announces the change, which the
  gateway picks up at once and announces to its own listeners;
- `ask_name` (for tests/mcp_front.rs): asks the user's name by form
  elicitation (in 2026-07-28, an `input_required` result the gateway hands
  back to its client, whose retry it passes on).
"""

import asyncio
import itertools
import sys
from pathlib import Path
from typing import Annotated

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mcp_server as peer  # noqa: E402 - the SDK server, its era gate and its change bus
import uvicorn  # noqa: E402
from mcp import MCPError  # noqa: E402
from mcp.server.mcpserver import Context  # noqa: E402
from mcp.server.mcpserver.resolve import Elicit, Resolve  # noqa: E402
from pydantic import BaseModel  # noqa: E402
from mcp.shared.subscriptions import ToolsListChanged  # noqa: E402
from mcp_types import MISSING_REQUIRED_CLIENT_CAPABILITY  # noqa: E402

server = peer.server
added = itertools.count(1)


@server.tool(name="missing_capability", description="Needs the client's sampling capability.", structured_output=False)
def missing_capability(ctx: Context) -> str:
    capabilities = ctx.client_capabilities
    if capabilities is None or capabilities.sampling is None:
        raise MCPError(
            code=MISSING_REQUIRED_CLIENT_CAPABILITY,
            message="This tool needs the client's sampling capability",
            data={"requiredCapabilities": {"sampling": {}}},
        )
    return "Success"


@server.tool(name="streaming_elicitation", description="Answers once the work is done.", structured_output=False)
def streaming_elicitation() -> str:
    return "Streaming complete"


@server.tool(name="logging_tool", description="Answers without logging.", structured_output=False)
def logging_tool() -> str:
    return "Logging evaluated"


@server.tool(name="trigger_tool_change", description="Adds a tool and announces the change.", structured_output=False)
async def trigger_tool_change() -> str:
    name = f"added_{next(added)}"

    def tool() -> str:
        return f"{name} was added"

    server.add_tool(tool, name=name, description=f"Added by trigger_tool_change: {name}.", structured_output=False)
    await server._subscriptions.publish(ToolsListChanged())
    return "Mutation triggered"


class Name(BaseModel):
    name: str


def ask(ctx: Context) -> Elicit[Name]:
    return Elicit("What is your name?", Name)


@server.tool(name="ask_name", description="Greets the user, asking their name first.", structured_output=False)
def ask_name(name: Annotated[Name, Resolve(ask)]) -> str:
    return f"Hello, {name.name}"


if __name__ == "__main__":
    port = int(sys.argv[1])
    app = server.streamable_http_app(json_response=True)
    config = uvicorn.Config(peer.era_gate(app, "dual"), host="127.0.0.1", port=port, log_level="warning")
    asyncio.run(uvicorn.Server(config).serve())
