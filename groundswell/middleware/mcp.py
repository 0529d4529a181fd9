"""``mcps=[...]``: local MCP servers (stdio or in-process) as tools, remote ones sent to the API.

Local servers are connected for the prompt and closed after it; their tools
are named ``mcp__<server>__<tool>`` and each call is an ``mcp_call`` node.
Remote servers (``{"type": "url", ...}``) go to the request's ``mcp_servers``.
"""

from __future__ import annotations

from typing import Any

from ..agent import Middleware, PromptNext, PromptResult, PromptRun
from ..mcp_bridge import MCPBridge

__all__ = ["MCPServers"]


class MCPServers(Middleware):
    """Connect the prompt's MCP servers and offer their tools."""

    name = "mcp"
    order = 250

    def active(self, run: PromptRun) -> bool:
        return bool(run.settings.get("mcps"))

    async def wrap_prompt(self, run: PromptRun, call_next: PromptNext) -> PromptResult[Any]:
        bridge = MCPBridge(run.settings["mcps"], run.settings.get("env") or {})
        async with bridge:
            for tool in bridge.tools:
                run.tools.add(tool)
            if bridge.remote:
                run.settings["mcp_servers"] = list(bridge.remote)
            return await call_next()
