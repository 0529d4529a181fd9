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

import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import ConfigurationError, GroundswellError, PluginError
from ..plugins import get_plugin_manager

if TYPE_CHECKING:
    from .run import PromptResult, PromptRun, ToolCall

__all__ = [
    "NODE_ORDER",
    "Layer",
    "Layers",
    "Middleware",
    "ModelNext",
    "PromptNext",
    "ToolNext",
    "default_layers",
    "layers_for",
    "merge",
    "resolve",
]

#: The order at which the prompt node starts: ``wrap_prompt`` layers with a lower
#: order wrap all attempts of a prompt, those with this order or higher one attempt.
NODE_ORDER = 200

PromptNext = Callable[[], Awaitable["PromptResult[Any]"]]
ModelNext = Callable[[dict[str, Any]], Awaitable[Any]]
ToolNext = Callable[["ToolCall"], Awaitable[Any]]


class Middleware:
    """Base class of agent middleware: override any of the four seams.

    Set ``name`` and ``order`` as class attributes (defaults: the class name and
    500) for instances passed directly to ``Agent(middleware=[...])``; a
    registered `groundswell.AgentMiddleware` record's own name and order win.
    """

    name: ClassVar[str] = ""
    order: ClassVar[int] = 500

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


@dataclass(frozen=True, slots=True)
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


_chains: dict[tuple[int, ...], Layers] = {}


def _split(layers: Sequence[Layer]) -> Layers:
    key = tuple(id(layer) for layer in layers)
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
    if len(_chains) > 4096:  # layer objects are long-lived; this only guards odd churn
        _chains.clear()
    _chains[key] = made
    return made


# -- resolving names and instances -------------------------------------------------

# Registered middleware are made once per plugin set: (manager, generation, name) -> layer.
_made: dict[tuple[int, int, str], Layer] = {}
_defaults: tuple[int, int, tuple[Layer, ...]] | None = None
_lock = threading.Lock()


def _registered(name: str) -> Layer:
    """The layer of the registered middleware ``name`` (its factory runs once)."""
    manager = get_plugin_manager()
    key = (id(manager), manager.generation, name)
    layer = _made.get(key)
    if layer is not None:
        return layer
    record = manager.lookup("register_agent_middleware", name)
    with _lock:
        layer = _made.get(key)
        if layer is not None:
            return layer
        try:
            made = record.factory()
        except GroundswellError:
            raise
        except Exception as exc:
            raise PluginError(
                f"agent middleware {name!r} could not be made: {type(exc).__name__}: {exc}",
                plugin=name,
            ) from exc
        if not isinstance(made, Middleware):
            raise PluginError(
                f"agent middleware {name!r}: its factory returned {type(made).__name__}, "
                "not a groundswell.Middleware",
                plugin=name,
            )
        layer = _made[key] = Layer.of(made, record.order, record.name)
    return layer


def default_layers() -> tuple[Layer, ...]:
    """The layers of every ``default=True`` middleware, sorted."""
    global _defaults
    manager = get_plugin_manager()
    known = _defaults
    generation = manager.generation
    if known is not None and known[0] == id(manager) and known[1] == generation:
        return known[2]
    records = manager.agent_middleware()
    layers: list[Layer] = []
    for name, record in records.items():
        if not record.default:
            continue
        try:
            layers.append(_registered(name))
        except (PluginError, ConfigurationError) as exc:
            # A broken default middleware is reported and skipped like a broken plugin.
            owner = manager.owner("register_agent_middleware", name) or name
            manager.report(owner, str(exc), exc)
    made = tuple(sorted(layers, key=lambda la: la.key))
    _defaults = (id(manager), generation, made)
    return made


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
    active = [layer for layer in candidates if layer.middleware.active(run)]
    return _split(active)
