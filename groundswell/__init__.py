"""Groundswell: plugin-based orchestration of LLM agents, with one event tree per run."""

from __future__ import annotations

import importlib.metadata as _metadata
from typing import TYPE_CHECKING, Any

from . import waits as waits  # groundswell.waits: people in the loop (a module, not in __all__)
from .budget.pricing import set_prices
from .budget.summary import Summarizer, is_summary_text, summary_text
from .budget.token_budget import TokenBudget, use_budget
from .budget.tokens import AnthropicCounter, estimate_tokens
from .cache.backends import (
    Cache,
    CacheLock,
    ToolCachePolicy,
    choose_cache,
    get_cache,
    read_cache_entry,
    request_cache_key,
    schema_hash,
)
from .cache.tool_results import clear_tool_cache, invalidate, tool_cache_stats
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
from .hooks.runner import HookStopped, PromptBlocked
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
from .mcp.client import Elicitation
from .plugins.loading import PluginInfo
from .plugins.manager import PluginManager, flush_sinks, get_plugin_manager
from .prompt.context_providers import ContextRequest
from .prompt.extraction import Extract
from .prompt.prompt import Prompt, PromptOverrides, PromptTemplate, create_prompt, render_user
from .reflection import (
    ReflectionAPI,
    ReflectionConfig,
    ReflectionContext,
    ReflectionEntry,
    ReflectionResult,
    Reflector,
    is_recoverable,
)
from .runtime.context import (
    Frame,
    current_agent,
    current_frame,
    current_node,
    current_tree,
    new_run_tree,
    observe_run,
    record_event,
)
from .scrubbing import sdk_logs as _sdk_logs  # noqa: F401  (the SDK's loggers scrubbed while Groundswell is imported)
from .scrubbing.serialize import is_secret_key, redact, register_secret, scrub
from .skills.local import Skill
from .tools.tool import Tool, ToolContext, ToolFailed, tool_error_text, tool_result_content
from .tree.events import Event, Sink, SinkHub
from .tree.labels import label_parts
from .tree.tracebacks import format_traceback
from .tree.tree import EventNode, EventTree, NodeStatus, NodeType
from .waits.approval import Approval
from .waits.questions import ask_user
from .workflow.execution import ExecutionEngine, WorkflowCall, get_engine
from .workflow.workflow import Workflow, WorkflowContext, WorkflowResult, create_workflow, workflow

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
        override_agents_here,
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
    "override_agents_here",
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
    "AnthropicCounter",
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
    "choose_cache",
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
    "format_traceback",
    "get_cache",
    "get_engine",
    "get_plugin_manager",
    "hookimpl",
    "invalidate",
    "is_recoverable",
    "is_secret_key",
    "is_summary_text",
    "label_parts",
    "new_run_tree",
    "observe_run",
    "override_agents_here",
    "read_cache_entry",
    "record_event",
    "redact",
    "register_secret",
    "render_user",
    "request_cache_key",
    "schema_hash",
    "scrub",
    "set_prices",
    "summary_text",
    "tool_cache_stats",
    "tool_error_text",
    "tool_result_content",
    "use_budget",
    "workflow",
]
