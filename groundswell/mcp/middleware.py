"""``mcps=[...]``: local MCP servers (stdio or in-process) as tools, remote ones sent to the API.

Local servers are connected for the prompt and closed after it, or, inside
``async with agent:``, taken from the agent's session (started once, kept
until the block ends); each start is an ``mcp_connect`` node, their tools are
named ``mcp__<server>__<tool>`` and each call is an ``mcp_call`` node. Remote
servers (``{"type": "url", ...}``) go to the request's ``mcp_servers``, with
the MCP-client beta and an ``mcp_toolset`` entry in ``tools`` for each.
"""

from __future__ import annotations

from typing import Any

from ..agent import Middleware, PromptNext, PromptResult, PromptRun
from .bridge import MCPBridge
from .client import prompt_scope
from .config import check_toolsets, remote_request
from .session import session_for

__all__ = ["MCPServers"]


class MCPServers(Middleware):
    """Connect the prompt's MCP servers and offer their tools."""

    name = "mcp"
    order = 250
    per_agent = True  # active() reads the agent's settings only

    def active(self, run: PromptRun) -> bool:
        # A hand-written mcp_toolset with no server is refused here, before the API sees it.
        settings = run.settings
        if settings.get("mcps"):
            return True
        tools = settings.get("tools")
        if not tools:  # no generator at all for a prompt without tools
            return False
        return any(isinstance(t, dict) and t.get("type") == "mcp_toolset" for t in tools)

    async def wrap_prompt(self, run: PromptRun, call_next: PromptNext) -> PromptResult[Any]:
        _answer_sampling()
        settings = run.settings
        check_toolsets(
            settings.get("tools") or (),
            settings.get("mcps") or (),
            f"agent {run.agent.name!r}",
            settings.get("betas"),
        )
        bridge = MCPBridge(
            settings.get("mcps") or [], settings.get("env") or {}, session_for(run.agent)
        )
        async with bridge:
            for tool in bridge.tools:
                run.tools.add(tool)
            if bridge.remote:
                servers, toolsets, betas = remote_request(
                    bridge.remote, settings.get("betas"), run.tools.definitions
                )
                # Beside any given by name (mcp_servers=...), not instead of them.
                settings["mcp_servers"] = [*(settings.get("mcp_servers") or ()), *servers]
                settings["betas"] = betas
                # Not through Toolbox.add: toolsets have no "name" to tell them apart by.
                run.tools.definitions.extend(toolsets)
            with prompt_scope(run):  # the servers' progress and logs reach this prompt's stream
                return await call_next()


def _answer_sampling() -> None:
    """Let servers' sampling requests be answered by an agent (a layer above the client).

    Here, not at import: every process makes this middleware on its first prompt, and
    the `mcp` SDK these modules load costs half a second to import.
    """
    from . import capabilities as mcp_capabilities

    if mcp_capabilities.SAMPLER is None:
        from .sampling import answer_sampling

        mcp_capabilities.SAMPLER = answer_sampling
