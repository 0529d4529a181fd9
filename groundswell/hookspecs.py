"""The plugin contract: hook specifications and the records hooks return.

A plugin is any object or module with functions marked ``@hookimpl`` whose
names match the specs below. Each ``register_*`` hook takes no arguments and
returns one record or an iterable of records. A record is cheap: a unique
``name`` and a lazy ``factory`` that is called only when the thing is used, so
loading plugins stays fast.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeAlias

import pluggy

__all__ = [
    "CacheBackend",
    "CliCommand",
    "ContextProvider",
    "EventSink",
    "ExecutionBackend",
    "HookResult",
    "ReflectionStrategy",
    "TokenCounter",
    "ToolProvider",
    "hookimpl",
    "hookspec",
]

PROJECT = "groundswell"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@dataclass(frozen=True, slots=True)
class _Record:
    name: str
    factory: Callable[..., Any]
    description: str = ""

    def __post_init__(self) -> None:
        kind = type(self).__name__
        if not isinstance(self.name, str) or not self.name.strip():
            raise TypeError(f"{kind}.name must be a non-empty string, got {self.name!r}")
        if not callable(self.factory):
            raise TypeError(
                f"{kind} {self.name!r}: factory must be callable, got {type(self.factory).__name__}"
            )


@dataclass(frozen=True, slots=True)
class CacheBackend(_Record):
    """A cache backend: ``factory(**options)`` returns a `Cache`."""


@dataclass(frozen=True, slots=True)
class ReflectionStrategy(_Record):
    """A reflection strategy: ``factory(**options)`` returns the strategy object."""


@dataclass(frozen=True, slots=True)
class EventSink(_Record):
    """An event sink: ``factory()`` returns an object with ``handle(event)`` and ``close()``.

    The factory may return ``None`` when the sink has nothing to do in this
    process (say, no exporter is configured); it then costs runs nothing, and
    `refresh_sinks` asks it again later.
    """


@dataclass(frozen=True, slots=True)
class ToolProvider(_Record):
    """A named toolset: ``factory(**options)`` returns the tools an agent gets for that name."""


@dataclass(frozen=True, slots=True)
class TokenCounter(_Record):
    """A token counter: ``factory()`` returns an object with ``async count(request) -> int``.

    ``request`` is a `groundswell.tokens.CountRequest` (model, messages,
    system, tools, and the calling agent's client).
    """


@dataclass(frozen=True, slots=True)
class CliCommand(_Record):
    """A ``groundswell NAME ...`` command: ``factory(parser)`` adds the command's
    arguments to its ``argparse.ArgumentParser`` and sets ``func``, which gets the
    parsed arguments and returns the exit code (``parser.set_defaults(func=...)``).
    """


@dataclass(frozen=True, slots=True)
class ContextProvider(_Record):
    """A context provider: ``factory()`` returns a callable (or an object with
    ``provide``) taking a `groundswell.ContextRequest` and returning the
    text to add to an agent's system prompt, or ``None`` (sync or async).
    """


@dataclass(frozen=True, slots=True)
class ExecutionBackend(_Record):
    """Where workflows and steps run: ``factory()`` returns an `ExecutionEngine`.

    The kernel's ``local`` backend runs them in-process; a durable backend
    (``Workflow(durable=True)``) checkpoints steps and runs queued workflows
    on workers. One engine per name per process.
    """


HookResult: TypeAlias = "_Record | Iterable[_Record] | None"


@hookspec
def register_cache_backends() -> HookResult:
    """Return the `CacheBackend` records this plugin adds."""


@hookspec
def register_reflection_strategies() -> HookResult:
    """Return the `ReflectionStrategy` records this plugin adds."""


@hookspec
def register_cli_commands() -> HookResult:
    """Return the `CliCommand` records this plugin adds."""


@hookspec
def register_context_providers() -> HookResult:
    """Return the `ContextProvider` records this plugin adds."""


@hookspec
def register_execution_backends() -> HookResult:
    """Return the `ExecutionBackend` records this plugin adds."""


@hookspec
def register_event_sinks() -> HookResult:
    """Return the `EventSink` records this plugin adds."""


@hookspec
def register_tool_providers() -> HookResult:
    """Return the `ToolProvider` records this plugin adds."""


@hookspec
def register_token_counters() -> HookResult:
    """Return the `TokenCounter` records this plugin adds."""
