"""The records plugins register: which record type each ``register_*`` hook returns.

One table ties each registration hook to its record type (`CacheBackend`,
`EventSink`, ...) and to what one record of that kind is called in error
messages; `as_records` checks what a hook returned against it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from ..hookspecs import (
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
)

__all__ = ["HOOK_OF_RECORD", "HOOK_RECORDS", "KIND_NOUNS", "RecordT", "as_records"]

#: Registration hook name -> the record type it returns.
HOOK_RECORDS: dict[str, type[Any]] = {
    "register_cache_backends": CacheBackend,
    "register_reflection_strategies": ReflectionStrategy,
    "register_event_sinks": EventSink,
    "register_tool_providers": ToolProvider,
    "register_context_providers": ContextProvider,
    "register_cli_commands": CliCommand,
    "register_token_counters": TokenCounter,
    "register_execution_backends": ExecutionBackend,
    "register_agent_middleware": AgentMiddleware,
    "register_agent_options": AgentOption,
    "register_evaluators": NamedEvaluator,
}
#: Record type -> its registration hook name.
HOOK_OF_RECORD = {record: hook for hook, record in HOOK_RECORDS.items()}
#: What the registry's messages call one record of each hook's kind.
KIND_NOUNS = {
    "register_cache_backends": "cache backend",
    "register_reflection_strategies": "reflection strategy",
    "register_event_sinks": "event sink",
    "register_tool_providers": "toolset",
    "register_context_providers": "context provider",
    "register_cli_commands": "command",
    "register_token_counters": "token counter",
    "register_execution_backends": "execution backend",
    "register_agent_middleware": "agent middleware",
    "register_agent_options": "agent option",
    "register_evaluators": "evaluator",
}
RecordT = TypeVar(
    "RecordT",
    AgentMiddleware,
    AgentOption,
    CacheBackend,
    ReflectionStrategy,
    EventSink,
    ToolProvider,
    TokenCounter,
    ContextProvider,
    CliCommand,
    ExecutionBackend,
    NamedEvaluator,
)


def as_records(value: Any, record_type: type[RecordT], hook_name: str) -> list[RecordT]:
    """What a ``hook_name`` implementation returned, as a list of ``record_type`` records.

    ``None`` is no records; anything but one record or an iterable of them is a `TypeError`.
    """
    if value is None:
        return []
    items: Iterable[Any] = [value] if isinstance(value, record_type) else value
    if isinstance(items, str | bytes) or not isinstance(items, Iterable):
        raise TypeError(
            f"{hook_name} must return {record_type.__name__} records, got {value!r:.80}"
        )
    out: list[RecordT] = []
    for item in items:
        if not isinstance(item, record_type):
            raise TypeError(
                f"{hook_name} must return {record_type.__name__} records, got {type(item).__name__}"
            )
        out.append(item)
    return out
