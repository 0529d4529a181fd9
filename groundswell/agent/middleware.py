"""Agent middleware: the `Middleware` base class and how layers are chosen and ordered.

Every feature around the agent loop (reflection, caches, budgets, extraction,
Claude SDK hooks, context providers, skills, MCP) is a `Middleware`, and so is
anything a plugin adds. A middleware overrides any of four seams:

- ``wrap_prompt(run, call_next)`` around one prompt (all its turns);
- ``before_model(run, request)`` to change the request just before it is sent;
- ``wrap_model_call(run, request, call_next)`` around one model turn;
- ``wrap_tool_call(run, call, call_next)`` around one tool call.

Layers are sorted by ``order`` (lower runs outside higher), then by name. A
seam a middleware does not override costs nothing, and a middleware whose
`Middleware.active` says no for a prompt is left out of that prompt entirely.
The prompt node starts at `NODE_ORDER`: ``wrap_prompt`` layers below it wrap
every attempt of a prompt (and may start it again), layers above it run inside
one attempt's node.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import ConfigurationError, GroundswellError, PluginError
from ..plugins.manager import PluginManager, get_plugin_manager

if TYPE_CHECKING:
    from .run import PromptResult, PromptRun, ToolCall

__all__ = [
    "NODE_ORDER",
    "NO_LAYERS",
    "Layer",
    "Layers",
    "Middleware",
    "ModelNext",
    "PromptNext",
    "ToolNext",
    "default_layers",
    "layers_for",
    "merge",
    "plain_candidates",
    "resolve",
]

#: The order at which the prompt node starts: ``wrap_prompt`` layers with a lower
#: order wrap all attempts of a prompt, those with this order or higher one attempt.
NODE_ORDER = 200

logger = logging.getLogger("groundswell.plugins")  # a middleware's problems are its plugin's

PromptNext = Callable[[], Awaitable["PromptResult[Any]"]]
"""What ``wrap_prompt`` gets as ``call_next``: ``await call_next()`` runs the rest of the
prompt (the inner layers, then the model loop) and returns its `PromptResult`."""
ModelNext = Callable[[dict[str, Any]], Awaitable[Any]]
"""What ``wrap_model_call`` gets as ``call_next``: ``await call_next(request)`` sends the
request (a dict of Messages API fields) on and returns the SDK's ``Message``."""
ToolNext = Callable[["ToolCall"], Awaitable[Any]]
"""What ``wrap_tool_call`` gets as ``call_next``: ``await call_next(call)`` runs the tool
call (the inner layers, then the tool) and returns the tool's result."""


class Middleware:
    """Base class of agent middleware: override any of the four seams.

    Set ``name`` and ``order`` as class attributes (defaults: the class name and
    500) for instances passed directly to ``Agent(middleware=[...])``; a
    registered `groundswell.AgentMiddleware` record's own name and order win.
    """

    name: ClassVar[str] = ""
    order: ClassVar[int] = 500
    #: True when ``wrap_prompt`` may call ``call_next()`` more than once (a retry):
    #: outside any run, the kernel then gives the attempts one ``prompt`` node to share.
    retries: ClassVar[bool] = False
    #: True when `active` reads only what the agent is configured with (``run.settings``,
    #: ``run.agent``) and ``run.history``: a call that sets nothing of its own (no
    #: ``Prompt`` fields, no overrides, no history) then asks it once per agent.
    per_agent: ClassVar[bool] = False

    def active(self, run: PromptRun) -> bool:
        """Whether this middleware takes part in ``run`` (checked once per prompt; keep it cheap)."""
        return True

    async def wrap_prompt(self, run: PromptRun, call_next: PromptNext) -> PromptResult[Any]:
        """Around one whole prompt: ``return await call_next()``, or retry, or answer alone."""
        return await call_next()

    async def before_model(self, run: PromptRun, request: dict[str, Any]) -> dict[str, Any]:
        """Return the request (Messages API fields) to send for the next model turn."""
        return request

    async def wrap_model_call(
        self, run: PromptRun, request: dict[str, Any], call_next: ModelNext
    ) -> Any:
        """Around one model turn: ``return await call_next(request)`` (an SDK ``Message``)."""
        return await call_next(request)

    async def wrap_tool_call(self, run: PromptRun, call: ToolCall, call_next: ToolNext) -> Any:
        """Around one tool call: ``return await call_next(call)`` (the tool's result)."""
        return await call_next(call)


_SEAMS = ("wrap_prompt", "before_model", "wrap_model_call", "wrap_tool_call")


@dataclass(frozen=True, slots=True, eq=False)
class Layer:
    """One middleware in a chain, with the order and name it sorts by."""

    order: int
    name: str
    middleware: Middleware
    #: The seams this middleware overrides.
    seams: frozenset[str]

    @classmethod
    def of(cls, middleware: Middleware, order: int | None = None, name: str | None = None) -> Layer:
        kind = type(middleware)
        seams = frozenset(s for s in _SEAMS if getattr(kind, s) is not getattr(Middleware, s))
        return cls(
            order if order is not None else int(kind.order),
            name or kind.name or kind.__name__,
            middleware,
            seams,
        )

    @property
    def key(self) -> tuple[int, str]:
        return (self.order, self.name)


@dataclass(frozen=True, slots=True)
class Layers:
    """The active layers of one prompt, per seam, outermost first."""

    outer_prompt: tuple[Layer, ...]
    inner_prompt: tuple[Layer, ...]
    before_model: tuple[Layer, ...]
    model: tuple[Layer, ...]
    tool: tuple[Layer, ...]


# Keyed by the layers themselves (held, so never confused with later ones).
_chains: dict[tuple[Layer, ...], Layers] = {}


def _split(layers: Sequence[Layer]) -> Layers:
    if not layers:  # the usual prompt: no middleware takes part
        return NO_LAYERS
    key = tuple(layers)
    known = _chains.get(key)
    if known is not None:
        return known

    def having(seam: str) -> tuple[Layer, ...]:
        return tuple(layer for layer in layers if seam in layer.seams)

    prompt = having("wrap_prompt")
    made = Layers(
        outer_prompt=tuple(la for la in prompt if la.order < NODE_ORDER),
        inner_prompt=tuple(la for la in prompt if la.order >= NODE_ORDER),
        before_model=having("before_model"),
        model=having("wrap_model_call"),
        tool=having("wrap_tool_call"),
    )
    if len(_chains) > 4096:  # instances passed per call make new layers: stay bounded
        _chains.clear()
    _chains[key] = made
    return made


#: The layers of a prompt no middleware takes part in (always this one object).
NO_LAYERS = Layers((), (), (), (), ())


# -- resolving names and instances -------------------------------------------------


class _Made:
    """Middleware made for one plugin manager at one generation (plugins unchanged)."""

    __slots__ = ("defaults", "generation", "layers")

    def __init__(self, generation: int) -> None:
        self.generation = generation
        self.layers: dict[str, Layer] = {}
        self.defaults: tuple[Layer, ...] | None = None


# Keyed by the manager itself (weakly), so a new manager never sees an old one's.
_made: weakref.WeakKeyDictionary[PluginManager, _Made] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


# The last manager asked about (weakly) and its `_Made`: every prompt asks, almost
# always about the same manager, and a WeakKeyDictionary lookup makes a weakref each time.
_last: tuple[weakref.ref[PluginManager], _Made] | None = None


def _for(manager: PluginManager) -> _Made:
    global _last
    last = _last
    if last is not None and last[0]() is manager and last[1].generation == manager.generation:
        return last[1]
    made = _made.get(manager)
    if made is None or made.generation != manager.generation:
        made = _made[manager] = _Made(manager.generation)
    _last = (weakref.ref(manager), made)
    return made


class _NotMade(Exception):
    """A registered middleware whose factory failed: what went wrong, and whose it is."""

    def __init__(self, name: str, problem: str, owner: str, label: str, source: str | None) -> None:
        super().__init__(problem)
        self.name, self.problem, self.owner, self.label = name, problem, owner, label
        #: How its plugin was loaded (``PluginInfo.source``), if it is known.
        self.source = source


def _make(manager: PluginManager, name: str) -> Layer:
    """The layer of the registered middleware ``name``; its factory runs once per plugin set."""
    made = _for(manager)
    layer = made.layers.get(name)
    if layer is not None:
        return layer
    record = manager.lookup("register_agent_middleware", name)
    with _lock:
        layer = made.layers.get(name)
        if layer is not None:
            return layer
        owner = manager.owner("register_agent_middleware", name) or name
        info = {i.name: i for i in manager.list_plugins(builtin=True)}.get(owner)
        label = f"{owner} {info.version}" if info is not None and info.version else owner
        source = info.source if info is not None else None
        try:
            instance = record.factory()
        except GroundswellError:
            raise
        except Exception as exc:
            problem = f"agent middleware {name!r} could not be made: {type(exc).__name__}: {exc}"
            raise _NotMade(name, problem, owner, label, source) from exc
        if not isinstance(instance, Middleware):
            problem = (
                f"agent middleware {name!r}: its factory returned {type(instance).__name__}, "
                "not a groundswell.Middleware"
            )
            raise _NotMade(name, problem, owner, label, source)
        layer = made.layers[name] = Layer.of(instance, record.order, record.name)
    return layer


def _registered(name: str) -> Layer:
    """The layer of the registered middleware ``name``; `PluginError` naming its plugin if
    it cannot be made."""
    try:
        return _make(get_plugin_manager(), name)
    except _NotMade as exc:
        raise PluginError(f"plugin {exc.label!r}: {exc.problem}", plugin=exc.owner) from (
            exc.__cause__
        )


def default_layers() -> tuple[Layer, ...]:
    """The layers of every ``default=True`` middleware, sorted; kept once all are made.

    A default middleware may be a safety control (a hook that denies a tool, a
    tool's timeout), so one that cannot be made is never left out: the prompt
    fails with a `PluginError` naming it and saying what to do, and the next
    prompt tries to make it again (an error that passes, such as running out of
    file descriptors, then heals). Nothing is kept until every one is made.
    """
    manager = get_plugin_manager()
    made = _for(manager)
    if made.defaults is not None:
        return made.defaults
    layers: list[Layer] = []
    failed: list[_NotMade] = []
    for name, record in manager.agent_middleware().items():
        if not record.default:
            continue
        try:
            layers.append(_make(manager, name))
        except _NotMade as exc:
            failed.append(exc)
    if failed:
        raise _fail_closed(manager, failed) from failed[0].__cause__
    made.defaults = tuple(sorted(layers, key=lambda la: la.key))
    return made.defaults


def _fail_closed(manager: PluginManager, failed: Sequence[_NotMade]) -> PluginError:
    """The error of a prompt whose default middleware could not all be made.

    Each problem is listed with its plugin (``groundswell plugins``) and logged
    once; the error names the first, and how to run without it.
    """
    for exc in failed:
        if exc.problem not in manager.errors.get(exc.owner, ()):
            logger.warning("plugin %r: %s", exc.label, exc.problem)
        manager.note(exc.owner, exc.problem)
    first = failed[0]
    if first.source == "entry point":
        remedy = f"to run without it, disable its plugin: GROUNDSWELL_DISABLE_PLUGINS={first.owner}"
    elif first.source == "registered":
        remedy = (
            "to run without it, unregister its plugin: "
            f"groundswell.get_plugin_manager().unregister({first.owner!r})"
        )
    else:  # the kernel's own: nothing to switch off
        remedy = "it is the kernel's own: fix the cause above"
    others = ", ".join(repr(e.name) for e in failed[1:])
    also = f" (nor could {others})" if others else ""
    return PluginError(
        f"plugin {first.label!r}: default {first.problem}{also}; prompts fail rather than run "
        f"without it, and the next prompt tries again ({remedy})",
        plugin=first.owner,
    )


def resolve(items: Sequence[Any] | None, owner: str) -> tuple[Layer, ...]:
    """``middleware=[...]`` items (registered names or `Middleware` instances) as layers."""
    if items is None:
        return ()
    if isinstance(items, str | Middleware) or not isinstance(items, Sequence):
        raise ConfigurationError(
            f"{owner}: middleware must be a list of registered names or Middleware instances, "
            f"got {items!r:.60}"
        )
    layers: list[Layer] = []
    for item in items:
        if isinstance(item, str):
            layers.append(_registered(item))
        elif isinstance(item, Middleware):
            layers.append(Layer.of(item))
        else:
            raise ConfigurationError(
                f"{owner}: middleware items must be registered names or groundswell.Middleware "
                f"instances, got {type(item).__name__}"
            )
    return tuple(layers)


def merge(*groups: Sequence[Layer]) -> tuple[Layer, ...]:
    """The layers of all groups, each name once (the first wins), sorted by order then name."""
    seen: dict[str, Layer] = {}
    for group in groups:
        for layer in group:
            seen.setdefault(layer.name, layer)
    return tuple(sorted(seen.values(), key=lambda la: la.key))


def layers_for(run: PromptRun, candidates: Sequence[Layer]) -> Layers:
    """The layers that take part in ``run``, split by seam."""
    return _split(_active(run, candidates))


def plain_candidates(run: PromptRun, candidates: tuple[Layer, ...]) -> tuple[Layer, ...]:
    """``candidates`` less those `Middleware.per_agent` layers that sat ``run`` out: for
    a call that sets nothing of its own, whose settings are its agent's (the agent keeps
    the result while ``candidates`` stays the same tuple)."""
    kept = set(map(id, _active(run, [la for la in candidates if la.middleware.per_agent])))
    return tuple(la for la in candidates if not la.middleware.per_agent or id(la) in kept)


def _active(run: PromptRun, candidates: Sequence[Layer]) -> list[Layer]:
    active: list[Layer] = []
    for layer in candidates:
        try:
            if layer.middleware.active(run):
                active.append(layer)
        except GroundswellError:
            raise
        except Exception as exc:
            # Typed as a dict for the seams that write; here a read-only view (`Agent._execute`).
            if isinstance(exc, TypeError) and type(run.settings) is not dict:
                raise PluginError(
                    f"agent middleware {layer.name!r}: active() changed run.settings, which "
                    "it may only read (on a call that sets nothing of its own they are the "
                    "agent's); change them in wrap_prompt instead",
                    plugin=layer.name,
                ) from exc
            raise PluginError(
                f"agent middleware {layer.name!r} failed in active(): {type(exc).__name__}: {exc}",
                plugin=layer.name,
            ) from exc
    return active
