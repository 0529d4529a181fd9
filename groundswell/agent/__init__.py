"""Agents: the `Agent` façade, the loop, its typed run state and the middleware seams.

``groundswell.agent.core`` holds `Agent`; ``settings`` its base `AgentSettings`
(its checked settings); ``run`` the `PromptRun` every seam gets; ``middleware``
the `Middleware` base class and layer ordering; ``loop`` the three steps a
prompt goes through (attempt, model turns, tool calls).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .middleware import NODE_ORDER, Middleware, ModelNext, PromptNext, ToolNext
from .overrides import override_agents_here
from .run import PromptResult, PromptRun, StreamEvent, Toolbox, ToolCall

if TYPE_CHECKING:
    from .core import Agent, create_agent
    from .settings import DEFAULT_MODEL

__all__ = [
    "DEFAULT_MODEL",
    "NODE_ORDER",
    "Agent",
    "Middleware",
    "ModelNext",
    "PromptNext",
    "PromptResult",
    "PromptRun",
    "StreamEvent",
    "ToolCall",
    "ToolNext",
    "Toolbox",
    "create_agent",
    "override_agents_here",
]

# The façade imports anthropic (about a second); a plugin that only defines a
# Middleware, or the CLI loading plugins, does not pay for it.
_CORE = {"DEFAULT_MODEL", "Agent", "create_agent"}


def __getattr__(name: str) -> Any:
    if name in _CORE:
        from ..scrubbing.sdk_logs import install
        from . import core, settings

        install()  # the SDK is loaded now: its loggers are scrubbed too
        value = getattr(settings if name == "DEFAULT_MODEL" else core, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'groundswell.agent' has no attribute {name!r}")
