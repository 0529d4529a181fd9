"""The tools of a connected local MCP server, as the agent loop's tool handlers.

Each is named ``mcp__<server>__<tool>``; a call runs within the server's
``call_timeout`` (`groundswell.mcp.calls`), its result becomes ``tool_result``
content (`groundswell.mcp.content`), and its ``mcp_call`` node records the
server, the server's own tool name, the transport (``payload["mcp"]``) and any
``structuredContent``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..runtime.context import current_frame
from ..scrubbing.serialize import jsonable
from ..tools.tool import ToolContext, ToolFailed
from ..tree.tree import NodeType
from .calls import CallTimedOut, timeout_message
from .config import CALL_TIMEOUT
from .content import structured_record, text_of, tool_result_content

__all__ = ["MCPTool", "call_mcp_tool", "call_record", "mcp_tool_name"]


@dataclass
class MCPTool:
    """A tool of a connected MCP server, named ``mcp__<server>__<tool>``."""

    name: str
    server: str
    remote_name: str
    description: str
    input_schema: dict[str, Any]
    #: ``call(tool, arguments, seconds)``: the connection's `MCPConnection.call_tool`.
    call: Callable[[str, dict[str, Any], float], Awaitable[Any]]
    node_type: NodeType = NodeType.MCP_CALL
    toolset: str | None = None
    #: Seconds one call may take (not ``timeout``: that would beat the agent's tool_timeout).
    call_timeout: float = CALL_TIMEOUT
    #: What its ``mcp_call`` nodes record as ``payload["mcp"]`` (`call_record`).
    mcp: dict[str, Any] = field(default_factory=dict)

    def definition(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        }

    async def invoke(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        content, failed = await call_mcp_tool(self, arguments)
        if failed:  # the server's own error text is what the model sees
            raise ToolFailed(str(content))
        return content


def call_record(
    server: str, tool: str, transport: str, call_timeout: float, client: Any
) -> dict[str, Any]:
    """What each ``mcp_call`` node of a tool records as ``payload["mcp"]`` (sinks read it)."""
    record: dict[str, Any] = {
        "server": server,
        "tool": tool,
        "transport": transport,
        "call_timeout_s": call_timeout,
    }
    version = getattr(getattr(client, "session", None), "protocol_version", None)
    if isinstance(version, str):
        record["protocol_version"] = version
    return record


async def call_mcp_tool(
    tool: MCPTool, arguments: dict[str, Any]
) -> tuple[str | list[dict[str, Any]], bool]:
    """Call an MCP tool within its ``call_timeout``; returns (``tool_result`` content, is_error).

    The content is text, or Anthropic content blocks when the result holds
    images, resources... (`groundswell.mcp.content`); an error's is always text.
    A call over its deadline raises `ToolFailed` saying so and how to raise it.
    """
    frame = current_frame()
    node = frame.node if frame is not None and frame.node.type == NodeType.MCP_CALL else None
    try:
        result = await tool.call(tool.remote_name, arguments, tool.call_timeout)
    except CallTimedOut:
        if frame is not None and node is not None:
            frame.tree.add_event(node, "call_timeout", seconds=tool.call_timeout)
        transport = str(tool.mcp.get("transport", "stdio"))
        message = timeout_message(tool.server, tool.remote_name, tool.call_timeout, transport)
        raise ToolFailed(message) from None
    if node is not None and result.structured_content is not None:
        node.payload["structured_content"] = jsonable(structured_record(result.structured_content))
    if result.is_error:
        return text_of(result), True
    return tool_result_content(result), False


def mcp_tool_name(server: str, tool: str) -> str:
    """``mcp__<server>__<tool>``, made valid for the API (letters, digits, _ and -; 64 max)."""
    name = f"mcp__{server}__{re.sub(r'[^a-zA-Z0-9_-]', '_', tool)}"
    if len(name) > 64:
        digest = hashlib.sha256(name.encode()).hexdigest()[:8]
        name = f"{name[:55]}_{digest}"
    return name
