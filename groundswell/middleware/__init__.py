"""The kernel's default agent middleware, registered through the same hook as any plugin's.

Each feature around the agent loop is one small `groundswell.Middleware`, in the
package of the feature it serves (``DEFAULT_MIDDLEWARE`` names each module, e.g.
``groundswell.cache.middleware``); only this table lives here. The kernel
registers them as its default plugin (the way datasette ships its own features
as default plugins), so a plugin can list, reorder around or replace any of
them by name. Factories import their module only when a prompt first needs the
middleware.

Orders (lower runs outside higher; the prompt node starts at 200):

==========  =====  ====================================================
name        order  what it does
==========  =====  ====================================================
reflection  100    retries a failed prompt with the error fed back
hooks       210    Claude Agent SDK hooks (each event where it has a moment)
extraction  220    ``Extract`` rules on the answer, into ``ctx.state``
skills      230    local skills in the system prompt, API skills sent
context     240    context providers' text in the system prompt
mcp         250    local MCP servers as tools, remote ones sent
context_ttl 255    old tool results expire; a history's answers only
budget      260    token budgets before every model turn
approval    280    tool calls wait for a person's approval
cache       300    the answer cache (a hit skips the model)
tool_cache  310    per-tool result caching
tool_timeout 320   a deadline on each tool call
prompt_cache 900   Anthropic prompt caching (``prompt_cache=``)
batch       950    model calls through the Message Batches API (``batch=``)
==========  =====  ====================================================
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from ..hookspecs import AgentMiddleware, hookimpl

__all__ = ["DEFAULT_MIDDLEWARE", "register_agent_middleware"]

#: (name, order, module, class, description) of each default middleware.
DEFAULT_MIDDLEWARE: tuple[tuple[str, int, str, str, str], ...] = (
    (
        "reflection",
        100,
        "groundswell.reflection.middleware",
        "Reflection",
        "retry a failed prompt with feedback",
    ),
    ("hooks", 210, "groundswell.hooks.middleware", "ClaudeHooks", "Claude Agent SDK hooks"),
    (
        "extraction",
        220,
        "groundswell.prompt.extraction_middleware",
        "Extraction",
        "Extract rules on the answer",
    ),
    ("skills", 230, "groundswell.skills.middleware", "Skills", "local and API skills"),
    (
        "context",
        240,
        "groundswell.prompt.context_middleware",
        "ContextProviders",
        "context providers' text",
    ),
    ("mcp", 250, "groundswell.mcp.middleware", "MCPServers", "MCP servers as tools"),
    (
        "context_ttl",
        255,
        "groundswell.budget.context_ttl",
        "ContextTTL",
        "tool results expire (context_ttl)",
    ),
    ("budget", 260, "groundswell.budget.middleware", "Budget", "token budgets"),
    (
        "approval",
        280,
        "groundswell.waits.approval_middleware",
        "ToolApproval",
        "tool calls wait for a person's approval",
    ),
    ("cache", 300, "groundswell.cache.middleware", "AnswerCache", "the answer cache"),
    ("tool_cache", 310, "groundswell.cache.middleware", "ToolResultCache", "tool-result caching"),
    (
        "tool_timeout",
        320,
        "groundswell.tools.timeout",
        "ToolTimeout",
        "a deadline on each tool call",
    ),
    (
        "prompt_cache",
        900,
        "groundswell.cache.prompt_cache",
        "PromptCache",
        "Anthropic prompt caching",
    ),
    (
        "batch",
        950,
        "groundswell.model.batch_middleware",
        "Batch",
        "model calls through the Message Batches API",
    ),
)


def _lazy(module: str, cls: str) -> Callable[[], Any]:
    def make() -> Any:
        return getattr(importlib.import_module(module), cls)()

    make.__qualname__ = f"{cls}.factory"
    return make


@hookimpl
def register_agent_middleware() -> list[AgentMiddleware]:
    """The kernel's default middleware (every agent gets them; each checks if it applies)."""
    return [
        AgentMiddleware(name, _lazy(module, cls), order, True, description)
        for name, order, module, cls, description in DEFAULT_MIDDLEWARE
    ]
