"""Swapping an agent's client and settings for a while, without touching the agent.

Apps define agents at module level; tests need them on a fake API. Three scopes:

- ``agent.override(client=..., **settings)`` changes one agent inside a
  ``with`` block. It is held in a context variable, so it follows the task
  (and the tasks and ``asyncio.to_thread`` calls started inside it):
  concurrent tests in one event loop never see each other's overrides.
- `override_agents` changes every agent in the process while it is active,
  whatever task or thread runs it (a web framework's test client runs the app
  in a thread of its own). ``groundswell.testing.use_fake`` is built on it.
- `override_agents_here` changes every agent in the current context only (the
  tasks and threads started inside it too), as an eval runs each case on its
  own recorded replies.

An agent's own override wins over `override_agents_here`, which wins over the
process-wide one; all win over what the agent was built with and over a
call's ``PromptOverrides``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import threading
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ..errors import ConfigurationError
from ..prompt.prompt import NO_OVERRIDES, PromptOverrides

if TYPE_CHECKING:
    import anthropic

    from .core import Agent

__all__ = [
    "Forced",
    "Scope",
    "check_client",
    "forced_for",
    "override_agent",
    "override_agents",
    "override_agents_here",
]


@dataclass(frozen=True)
class Forced:
    """What an override imposes: a client and/or settings (``None`` when not given)."""

    client: anthropic.AsyncAnthropic | None
    settings: PromptOverrides | None

    def then(self, inner: Forced) -> Forced:
        """This override with ``inner`` (a narrower one) applied on top."""
        settings = self.settings
        if inner.settings is not None:
            settings = inner.settings if settings is None else merge(settings, inner.settings)
        return Forced(inner.client or self.client, settings)


# Per agent, for the current context; None (the common case) costs one lookup.
_AGENTS: ContextVar[dict[int, Forced] | None] = ContextVar(
    "groundswell_agent_overrides", default=None
)
# The key of `override_agents_here`'s entry in `_AGENTS` (no agent has id 0).
_HERE = 0
# Process-wide, innermost last.
_EVERY: list[Forced] = []
_EVERY_LOCK = threading.Lock()


def forced_for(agent: Agent) -> Forced | None:
    """The override in force for ``agent`` here and now, or ``None``."""
    mine = _AGENTS.get()
    own = mine.get(id(agent)) if mine else None
    if mine and _HERE in mine:  # `override_agents_here`: every agent in this context
        here = mine[_HERE]
        own = here if own is None else here.then(own)
    if not _EVERY:
        return own
    every = _EVERY[-1]
    return every if own is None else every.then(own)


def merge(call: PromptOverrides, forced: PromptOverrides) -> PromptOverrides:
    """``call`` with every field ``forced`` sets replaced; middleware from both."""
    if call is NO_OVERRIDES:
        return forced
    fields = forced.set_fields()
    if "enable_cache" in fields or "disable_cache" in fields:
        # Two spellings of one switch: the forced one replaces the call's, whichever it used.
        fields.setdefault("enable_cache", None)
        fields.setdefault("disable_cache", None)
    if call.middleware is not None and forced.middleware is not None:
        fields["middleware"] = [*call.middleware, *forced.middleware]
    return dataclasses.replace(call, **fields)


def check(owner: str, client: Any, settings: dict[str, Any]) -> Forced:
    """The `Forced` for ``client`` and ``settings``, refused with a clear error if malformed."""
    if client is None and not settings:
        raise ConfigurationError(
            f"{owner}: nothing to override; pass client=... and/or settings such as model=..."
        )
    check_client(client, owner)
    if client is not None:
        # Fakes and real clients alike: the key never reaches the tree or logs.
        from ..scrubbing.serialize import register_secret

        api_key = getattr(client, "api_key", None)
        if isinstance(api_key, str):
            register_secret(api_key)
    if not settings:
        return Forced(client, None)
    from ..model.request_fields import sdk_fields

    known = {f.name for f in dataclasses.fields(PromptOverrides)} - {"request_fields"}
    unknown = sorted(set(settings) - known - sdk_fields())
    if unknown:
        raise ConfigurationError(
            f"{owner}: cannot override {', '.join(map(repr, unknown))}; the settings that "
            f"can be overridden are client, {', '.join(sorted(known))} and every request "
            "field of the installed SDK's MessageCreateParams"
        )
    return Forced(client, PromptOverrides(**settings))


T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])
# The blocks each `Scope` has open in the current context, by the scope's id.
_OPEN: ContextVar[Mapping[int, tuple[Any, ...]]] = ContextVar(
    "groundswell_open_scopes", default=MappingProxyType({})
)


class Scope(contextlib.AbstractContextManager[T]):
    """A ``with`` block that can also decorate a function, sync or async.

    As a decorator the function (for an ``async def``, its whole coroutine)
    runs inside a fresh block on every call, so ``@use_fake(...)`` on an
    async test does what it says. Each ``with`` opens a fresh block too, so
    one scope can be entered again and nested.
    """

    def __init__(self, make: Callable[[], contextlib.AbstractContextManager[T]]) -> None:
        self._make = make

    def __enter__(self) -> T:
        block = self._make()
        value = block.__enter__()
        # Open blocks are kept per context (task or thread), not on the scope: two
        # tasks inside one scope object each leave their own block.
        opened = _OPEN.get()
        _OPEN.set({**opened, id(self): (*opened.get(id(self), ()), block)})
        return value

    def __exit__(self, *exc: Any) -> bool | None:
        opened = dict(_OPEN.get())
        *rest, block = opened[id(self)]
        if rest:
            opened[id(self)] = tuple(rest)
        else:
            del opened[id(self)]
        _OPEN.set(opened)
        done: bool | None = block.__exit__(*exc)
        return done

    def __call__(self, fn: F) -> F:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                with self._make():
                    return await fn(*args, **kwargs)

            return cast(F, run_async)
        if not callable(fn):
            raise ConfigurationError(
                f"this override decorates functions; got {type(fn).__name__}. "
                "Use it as `with ...:` around the code instead"
            )

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            with self._make():
                return fn(*args, **kwargs)

        return cast(F, run)


def override_agent(agent: Agent, forced: Forced) -> Scope[Agent]:
    """Force ``forced`` on ``agent`` in the current context while the block runs."""

    @contextlib.contextmanager
    def block() -> Iterator[Agent]:
        current = _AGENTS.get() or {}
        previous = current.get(id(agent))
        token = _AGENTS.set(
            {**current, id(agent): forced if previous is None else previous.then(forced)}
        )
        try:
            yield agent
        finally:
            _AGENTS.reset(token)

    return Scope(block)


def override_agents_here(
    client: anthropic.AsyncAnthropic | None = None, **settings: Any
) -> Scope[None]:
    """Put every agent on ``client`` (and ``settings``) in the current context only.

    Like ``groundswell.testing.use_fake``'s process-wide override, but held in a
    context variable: the tasks and threads started inside the block see it, and
    concurrent tasks (an eval's cases, each on its own recorded replies) each see
    their own. An agent's own ``agent.override(...)`` still wins over this::

        with groundswell.override_agents_here(client, model="claude-haiku-4-5"):
            await wf.run()
    """
    forced = check("override_agents_here", client, settings)

    @contextlib.contextmanager
    def block() -> Iterator[None]:
        current = _AGENTS.get() or {}
        previous = current.get(_HERE)
        token = _AGENTS.set(
            {**current, _HERE: forced if previous is None else previous.then(forced)}
        )
        try:
            yield
        finally:
            _AGENTS.reset(token)

    return Scope(block)


def override_agents(client: anthropic.AsyncAnthropic | None = None, **settings: Any) -> Scope[None]:
    """Put every agent in the process on ``client`` (and ``settings``) while the block runs.

    Blocks nest: the innermost wins, field by field. An agent's own
    ``agent.override(...)`` still wins over this.
    """
    forced = check("override_agents", client, settings)

    @contextlib.contextmanager
    def block() -> Iterator[None]:
        with _EVERY_LOCK:
            effective = _EVERY[-1].then(forced) if _EVERY else forced
            _EVERY.append(effective)
        try:
            yield
        finally:
            with _EVERY_LOCK:
                # Blocks may end out of order (two tests' fixtures interleaved): remove this one.
                for index in range(len(_EVERY) - 1, -1, -1):
                    if _EVERY[index] is effective:
                        del _EVERY[index]
                        break

    return Scope(block)


def check_client(client: Any, owner: str) -> None:
    """Refuse anything but an async Messages client (``None`` is allowed)."""
    # Any async Messages client (AsyncAnthropic, its Bedrock/Vertex twins) has an async
    # ``messages.create``; a sync client would only fail at the first await.
    if client is None:
        return
    create = getattr(getattr(client, "messages", None), "create", None)
    if not callable(create) or not inspect.iscoroutinefunction(inspect.unwrap(create)):
        raise ConfigurationError(
            f"{owner}: client must be an anthropic.AsyncAnthropic (offline: "
            f"groundswell.testing.FakeAnthropicAPI().client()), got {type(client).__name__}"
        )
