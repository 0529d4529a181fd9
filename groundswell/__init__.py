"""Groundswell: plugin-based orchestration of LLM agents, with one event tree per run."""

from __future__ import annotations

import importlib.metadata as _metadata
from typing import TYPE_CHECKING, Any

from . import _sdk_logs  # noqa: F401  (the SDK's loggers scrubbed while Groundswell is imported)
from . import waits as waits  # groundswell.waits: people in the loop (a module, not in __all__)
from ._serialize import is_secret_key, redact, register_secret, scrub
from .approval import Approval
from .budget import TokenBudget
from .cache import Cache, CacheLock, ToolCachePolicy, get_cache, request_cache_key, schema_hash
from .claude_hooks import HookStopped, PromptBlocked
from .context_providers import ContextRequest
from .errors import (
    BatchUnanswered,
    ConfigurationError,
    ContextWindowExceeded,
    ExtractionError,
    GroundswellError,
    InvalidAnswer,
    MaxTurnsExceeded,
    MissingAwait,
    ModelAPIError,
    ModelRefused,
    OutputTruncated,
    PluginError,
    ResponseValidationError,
    StepTimeout,
    TokenBudgetExceeded,
    ToolDefinitionError,
    ToolError,
    UnknownWait,
    WaitClosed,
    WaitTimedOut,
    WorkflowError,
)
from .events import Event, Sink, SinkHub
from .execution import ExecutionEngine, WorkflowCall
from .extraction import Extract
from .hookspecs import (
    AgentMiddleware,
    AgentOption,
    CacheBackend,
    CliCommand,
    ContextProvider,
    EventSink,
    ExecutionBackend,
    NamedEvaluator,
    ReflectionStrategy,
    TokenCounter,
    ToolProvider,
    hookimpl,
)
from .mcp_client import Elicitation
from .plugins import PluginInfo, PluginManager, flush_sinks, get_plugin_manager
from .pricing import set_prices
from .prompt import Prompt, PromptOverrides, PromptTemplate, create_prompt
from .questions import ask_user
from .reflection import (
    ReflectionAPI,
    ReflectionConfig,
    ReflectionContext,
    ReflectionEntry,
    ReflectionResult,
    Reflector,
    is_recoverable,
)
from .run_context import (
    Frame,
    current_agent,
    current_frame,
    current_node,
    current_tree,
    observe_run,
    record_event,
)
from .skills import Skill
from .summary import Summarizer
from .tokens import estimate_tokens
from .tool_cache import clear_tool_cache, invalidate, tool_cache_stats
from .tools import Tool, ToolContext, ToolFailed
from .tree import EventNode, EventTree, NodeStatus, NodeType
from .workflow import Workflow, WorkflowContext, WorkflowResult, create_workflow, workflow

if TYPE_CHECKING:
    from .agent import (
        Agent,
        Middleware,
        ModelNext,
        PromptNext,
        PromptResult,
        PromptRun,
        StreamEvent,
        ToolCall,
        ToolNext,
        create_agent,
    )

# Importing anthropic takes over a second; only code that uses agents pays for it.
_LAZY = {
    "Agent",
    "Middleware",
    "ModelNext",
    "PromptNext",
    "PromptResult",
    "PromptRun",
    "StreamEvent",
    "ToolCall",
    "ToolNext",
    "create_agent",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from . import agent

        value = getattr(agent, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'groundswell' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _LAZY)


try:
    __version__ = _metadata.version("groundswell")
except _metadata.PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"

__all__ = [
    "Agent",
    "AgentMiddleware",
    "AgentOption",
    "Approval",
    "BatchUnanswered",
    "Cache",
    "CacheBackend",
    "CacheLock",
    "CliCommand",
    "ConfigurationError",
    "ContextProvider",
    "ContextRequest",
    "ContextWindowExceeded",
    "Elicitation",
    "Event",
    "EventNode",
    "EventSink",
    "EventTree",
    "ExecutionBackend",
    "ExecutionEngine",
    "Extract",
    "ExtractionError",
    "Frame",
    "GroundswellError",
    "HookStopped",
    "InvalidAnswer",
    "MaxTurnsExceeded",
    "Middleware",
    "MissingAwait",
    "ModelAPIError",
    "ModelNext",
    "ModelRefused",
    "NamedEvaluator",
    "NodeStatus",
    "NodeType",
    "OutputTruncated",
    "PluginError",
    "PluginInfo",
    "PluginManager",
    "Prompt",
    "PromptBlocked",
    "PromptNext",
    "PromptOverrides",
    "PromptResult",
    "PromptRun",
    "PromptTemplate",
    "ReflectionAPI",
    "ReflectionConfig",
    "ReflectionContext",
    "ReflectionEntry",
    "ReflectionResult",
    "ReflectionStrategy",
    "Reflector",
    "ResponseValidationError",
    "Sink",
    "SinkHub",
    "Skill",
    "StepTimeout",
    "StreamEvent",
    "Summarizer",
    "TokenBudget",
    "TokenBudgetExceeded",
    "TokenCounter",
    "Tool",
    "ToolCachePolicy",
    "ToolCall",
    "ToolContext",
    "ToolDefinitionError",
    "ToolError",
    "ToolFailed",
    "ToolNext",
    "ToolProvider",
    "UnknownWait",
    "WaitClosed",
    "WaitTimedOut",
    "Workflow",
    "WorkflowCall",
    "WorkflowContext",
    "WorkflowError",
    "WorkflowResult",
    "__version__",
    "ask_user",
    "clear_tool_cache",
    "create_agent",
    "create_prompt",
    "create_workflow",
    "current_agent",
    "current_frame",
    "current_node",
    "current_tree",
    "estimate_tokens",
    "flush_sinks",
    "get_cache",
    "get_plugin_manager",
    "hookimpl",
    "invalidate",
    "is_recoverable",
    "is_secret_key",
    "observe_run",
    "record_event",
    "redact",
    "register_secret",
    "request_cache_key",
    "schema_hash",
    "scrub",
    "set_prices",
    "tool_cache_stats",
    "workflow",
]
