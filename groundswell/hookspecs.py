"""The plugin contract: hook specifications and the records hooks return.

A plugin is any object or module with functions marked ``@hookimpl`` whose
names match the specs below. Each ``register_*`` hook takes no arguments and
returns one record or an iterable of records. A record is cheap: a unique
``name`` and, for most kinds, a lazy ``factory`` that is called only when the
thing is used, so loading plugins stays fast. Factories are called with no
arguments (`CliCommand`'s gets its parser): a plugin reads its settings from
the environment, and users who want other settings pass an instance instead
(``Agent(cache=MyCache(path=...))``). The protocols the factories' objects
follow are in ``docs/plugin-hooks.md``; ``groundswell.testing`` checks them.
"""

from __future__ import annotations

import keyword
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeAlias

import pluggy

__all__ = [
    "AgentMiddleware",
    "AgentOption",
    "CacheBackend",
    "CliCommand",
    "ContextProvider",
    "EventSink",
    "ExecutionBackend",
    "HookResult",
    "NamedEvaluator",
    "ReflectionStrategy",
    "TokenCounter",
    "ToolProvider",
    "hookimpl",
    "hookspec",
]

PROJECT = "groundswell"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


def _check_name(record: Any) -> None:
    if not isinstance(record.name, str) or not record.name.strip():
        raise TypeError(
            f"{type(record).__name__}.name must be a non-empty string, got {record.name!r}"
        )


def _check_callable(record: Any, field: str, *, optional: bool = False) -> None:
    value = getattr(record, field)
    if not callable(value) and not (optional and value is None):
        raise TypeError(
            f"{type(record).__name__} {record.name!r}: {field} must be callable"
            f"{' or None' if optional else ''}, got {type(value).__name__}"
        )


@dataclass(frozen=True, slots=True)
class _Record:
    name: str
    factory: Callable[..., Any]
    description: str = ""

    def __post_init__(self) -> None:
        _check_name(self)
        _check_callable(self, "factory")


@dataclass(frozen=True, slots=True)
class CacheBackend(_Record):
    """A cache backend: ``factory()`` returns a `groundswell.Cache`, once per process.

    A backend shared between processes may also offer the optional lock
    (``try_lock``/``unlock``, `groundswell.cache.backends.CacheLock`), so that processes
    asking the same thing at once make one model call between them.
    """


@dataclass(frozen=True, slots=True)
class ReflectionStrategy(_Record):
    """A reflection strategy: ``factory()`` returns a `groundswell.Reflector`, per reflection."""


@dataclass(frozen=True, slots=True)
class EventSink(_Record):
    """An event sink: ``factory()`` returns a `groundswell.tree.events.Sink` (plain ``handle(event)``
    and ``close()``, optional ``flush()``), once per process, when the first run starts.

    The factory may return ``None`` when the sink has nothing to do in this
    process (say, no exporter is configured); it then costs runs nothing, and
    `refresh_sinks` asks it again later.
    """


@dataclass(frozen=True, slots=True)
class ToolProvider(_Record):
    """A named toolset: ``factory()`` returns the tools an agent gets for that name.

    A `groundswell.Tool`, an Anthropic tool dict, or an iterable of those (or of
    plain functions); called each time an agent's prompt asks for the name.
    """


@dataclass(frozen=True, slots=True)
class TokenCounter(_Record):
    """A token counter: ``factory()`` returns a `groundswell.budget.tokens.Counter`,
    ``async count(request) -> int``.

    ``request`` is a `groundswell.budget.tokens.CountRequest` (model, messages,
    system, tools, and the calling agent's client). The factory runs for each
    budgeted prompt that names the counter.
    """


@dataclass(frozen=True, slots=True)
class NamedEvaluator(_Record):
    """An eval evaluator datasets name: ``factory(*args, **kwargs)`` returns one (an
    object with ``evaluate(ctx)``, or a function of the context), for each use.

    A dataset's ``- NAME`` calls it with no arguments, ``- NAME: value`` with one,
    and ``- NAME: {key: value}`` with keyword arguments (`groundswell.evals`).
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


# Not a `_Record`: its positional order is (name, factory, order, default), as
# section 6 of the design fixes it, so it shares the validation instead.
@dataclass(frozen=True, slots=True)
class AgentMiddleware:
    """Agent middleware: ``factory()`` (no arguments) returns a `groundswell.Middleware`.

    ``order`` places it in the chain: lower runs outside higher, ties by name.
    ``default=True`` applies it to every agent; otherwise an agent opts in with
    ``Agent(middleware=["name"])``.
    """

    name: str
    factory: Callable[[], Any]
    order: int = 500
    default: bool = False
    description: str = ""

    def __post_init__(self) -> None:
        _check_name(self)
        _check_callable(self, "factory")
        # bool is an int subclass; order=True is surely a misplaced default=True.
        if isinstance(self.order, bool) or not isinstance(self.order, int):
            raise TypeError(
                f"AgentMiddleware {self.name!r}: order must be an int (lower runs outside "
                f"higher), got {self.order!r}"
            )
        if not isinstance(self.default, bool):
            raise TypeError(
                f"AgentMiddleware {self.name!r}: default must be True or False, got "
                f"{self.default!r}"
            )


@dataclass(frozen=True, slots=True)
class AgentOption:
    """An agent option a plugin declares, given as ``Agent(name=value)``.

    ``check(value, owner)`` validates and returns the (possibly normalized)
    value, raising `groundswell.ConfigurationError` that names the field and the
    fix (``owner`` names the agent, for that message); ``None`` accepts any
    value. ``agent.options[name]`` reads ``default`` when the option is not
    given (keep it immutable: every agent shares it).
    """

    name: str
    check: Callable[[Any, str], Any] | None = None
    default: Any = None
    description: str = ""

    def __post_init__(self) -> None:
        _check_name(self)
        # It becomes a keyword argument of Agent(...), so it must be spellable as one.
        if not self.name.isidentifier() or keyword.iskeyword(self.name):
            raise TypeError(
                f"AgentOption.name must be a Python identifier (it is passed as "
                f"Agent({self.name}=...)), got {self.name!r}"
            )
        _check_callable(self, "check", optional=True)


_AnyRecord: TypeAlias = "_Record | AgentMiddleware | AgentOption"
HookResult: TypeAlias = "_AnyRecord | Iterable[_AnyRecord] | None"


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


@hookspec
def register_agent_middleware() -> HookResult:
    """Return the `AgentMiddleware` records this plugin adds."""


@hookspec
def register_evaluators() -> HookResult:
    """Return the `NamedEvaluator` records this plugin adds."""


@hookspec
def register_agent_options() -> HookResult:
    """Return the `AgentOption` records this plugin adds."""
