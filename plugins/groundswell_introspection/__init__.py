"""The ``introspection`` toolset: tools an agent calls to see, and extend, its place in the run.

``Agent(tools=["introspection"])`` adds twelve tools. They read the run from
Groundswell's context (the tree, the current node, the workflow, the calling
agent), so they need no arguments to know where they are. "The current node"
is the step (or, outside steps, the workflow) the calling agent runs in.
Everything a tool shows or accepts lies within the calling agent's own run.

Everything is bounded (result limits, depth caps, truncated payloads) and
read-only, except ``request_spawn_workflow`` (runs a workflow the developer
approved) and ``generate_dynamic_prompt`` with ``dry_run=false`` (runs a prompt
from an approved template, once it passes the safety checks). Values under
secret-looking keys are redacted; the tree itself never holds API keys or
``env`` values. Each call is a ``tool_call`` node like any other tool call, so
it is audited in the tree.

`toolset` builds the tools with other `Limits`;
`approve_workflow` adds spawnable workflows for every agent.

The modules: ``_common`` (where the caller is, bounded views), ``_position``
(the caller's node and neighbours), ``_hierarchy``, ``_events``, ``_state``,
``_cache``, ``_spawn`` (the template registry and spawning) and ``_prompts``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from groundswell import (
    AgentOption,
    ConfigurationError,
    PromptTemplate,
    Tool,
    ToolProvider,
    Workflow,
    hookimpl,
)

from . import _cache, _events, _hierarchy, _position, _prompts, _spawn, _state
from ._common import Limits
from ._spawn import approve_workflow, approved_workflows, revoke_workflow

__all__ = [
    "TOOL_NAMES",
    "Limits",
    "approve_workflow",
    "approved_workflows",
    "revoke_workflow",
    "toolset",
]

TOOL_NAMES = (
    "inspect_current_node",
    "read_ancestor_chain",
    "list_siblings_children",
    "inspect_prior_outputs",
    "read_ancestor_outputs",
    "inspect_hierarchy",
    "read_event_history",
    "inspect_state_snapshot",
    "inspect_cache_status",
    "list_mount_points",
    "request_spawn_workflow",
    "generate_dynamic_prompt",
)
_MODULES = (_position, _hierarchy, _events, _state, _cache, _spawn, _prompts)


def _build(limits: Limits) -> list[Tool]:
    functions: dict[str, Callable[..., Any]] = {
        fn.__name__: fn for module in _MODULES for fn in module.build(limits)
    }
    return [Tool(functions[name], toolset="introspection") for name in TOOL_NAMES]


_default: list[Tool] | None = None


def toolset(limits: Limits | None = None) -> list[Tool]:
    """The twelve tools; pass them in ``Agent(tools=[...])`` to use other `Limits`."""
    global _default
    if limits is not None:
        return _build(limits)
    if _default is None:  # building twelve tool schemas costs milliseconds: do it once
        _default = _build(Limits())
    return list(_default)


def _check_spawnable(value: Any, owner: str) -> dict[str, Workflow[..., Any]]:
    if not isinstance(value, Mapping):
        raise ConfigurationError(
            f"{owner}: spawnable must map template names to workflows, got {type(value).__name__}"
        )
    for key, wf in value.items():
        if not isinstance(wf, Workflow):
            raise ConfigurationError(
                f"spawnable[{key!r}] must be a groundswell.Workflow, got {type(wf).__name__}"
            )
    return dict(value)


def _check_templates(value: Any, owner: str) -> dict[str, PromptTemplate]:
    if not isinstance(value, Mapping):
        raise ConfigurationError(
            f"{owner}: prompt_templates must map names to PromptTemplate, "
            f"got {type(value).__name__}"
        )
    for key, template in value.items():
        if not isinstance(template, PromptTemplate):
            raise ConfigurationError(
                f"prompt_templates[{key!r}] must be a groundswell.PromptTemplate, "
                f"got {type(template).__name__}"
            )
    return dict(value)


@hookimpl
def register_agent_options() -> list[AgentOption]:
    """``Agent(spawnable={...})`` and ``Agent(prompt_templates={...})``."""
    return [
        AgentOption(
            "spawnable",
            check=_check_spawnable,
            default={},
            description="workflows request_spawn_workflow may start for this agent, by name",
        ),
        AgentOption(
            "prompt_templates",
            check=_check_templates,
            default={},
            description="prompt templates generate_dynamic_prompt may fill in, by name",
        ),
    ]


@hookimpl
def register_tool_providers() -> ToolProvider:
    """The ``introspection`` toolset."""
    return ToolProvider(
        "introspection", toolset, "tools to inspect the run's tree and spawn approved workflows"
    )
