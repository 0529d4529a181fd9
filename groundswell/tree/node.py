"""One node of the event tree: its type and status, its payload and metrics.

`EventNode` is what a workflow, step, prompt or tool call leaves in the tree;
`EventTree` (in ``tree``) links the nodes. Its JSON record is in ``records``,
its one-line label in ``labels``.
"""

from __future__ import annotations

import contextlib
import enum
import os
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from enum import StrEnum
from typing import Any, TypeGuard

__all__ = ["FINAL_STATUSES", "EventNode", "NodeStatus", "NodeType"]


class NodeType(StrEnum):
    """What a node stands for; ``wait`` is a run waiting for a person (`groundswell.waits`)."""

    WORKFLOW = "workflow"
    STEP = "step"
    PROMPT = "prompt"
    MODEL_CALL = "model_call"
    TOOL_CALL = "tool_call"
    MCP_CALL = "mcp_call"
    MCP_CONNECT = "mcp_connect"
    REFLECTION = "reflection"
    SPAWN = "spawn"
    BUDGET = "budget"
    EXTRACTION = "extraction"
    SUMMARY = "summary"
    WAIT = "wait"


class NodeStatus(StrEnum):
    """Where a node is in its life; ``revised`` marks a prompt replaced by a later one,
    ``waiting`` a wait for a person's decision (`groundswell.waits`; not final)."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    REVISED = "revised"
    WAITING = "waiting"


FINAL_STATUSES = frozenset(
    {NodeStatus.COMPLETED, NodeStatus.FAILED, NodeStatus.CANCELLED, NodeStatus.REVISED}
)

#: A node's attributes, in the order of its record (`EventTree.find` accepts these).
NODE_FIELDS = (
    "id",
    "type",
    "name",
    "status",
    "timestamp",
    "ended_at",
    "parent_id",
    "payload",
    "metrics",
    "events",
    "error",
)
_SLOTS = tuple(f for f in NODE_FIELDS if f not in ("events", "payload", "metrics"))

# 64 random bits: unique across processes and machines. A Mersenne Twister seeded
# from os.urandom gives them without a system call per node (os.urandom was a
# quarter of a step's cost, and under threads a GIL hand-off); ids name nodes,
# they guard nothing, so they need no cryptographic generator.
_ids = random.Random()
# A forked child inherits the generator's state: reseed it there, or parent and
# child would hand out the same ids.
os.register_at_fork(after_in_child=_ids.seed)
_random_bits = _ids.getrandbits


class _Unset(enum.Enum):
    # A sentinel that survives pickling and copying (an Enum member stays itself).
    UNSET = enum.auto()


_UNSET = _Unset.UNSET


class EventNode:
    """One thing that happened in a run, with its children in start order.

    ``timestamp`` and ``ended_at`` are Unix times in seconds; ``metrics["duration"]``
    is the node's wall time in seconds. ``payload`` holds JSON-safe inputs and
    outputs, ``events`` the point-in-time happenings (``{"type": ..., "timestamp":
    ..., **data}``), ``error`` the failure (``{"type", "message"}``, and where
    it was raised: ``"traceback"``, see ``groundswell.tree.tracebacks``) if any.
    """

    # children and events are created on first use: most nodes are leaves without
    # events, and two fewer GC-tracked lists per node halves the cost of big trees.
    # payload and metrics too: a step's only entries are its output and duration,
    # which wait in _output and _duration until someone reads the dict (two dicts
    # were half a step node's memory).
    __slots__ = (
        *_SLOTS,
        "_children",
        "_duration",
        "_events",
        "_metrics",
        "_output",
        "_payload",
        "_summed",
        "_t0",
    )

    def __init__(
        self,
        type: NodeType | str,
        name: str,
        *,
        id: str | None = None,
        parent_id: str | None = None,
        status: NodeStatus | str = NodeStatus.RUNNING,
        timestamp: float | None = None,
        payload: dict[str, Any] | None = None,
    ) -> None:
        # 16 hex digits: what _ids.randbytes(8).hex() gives, without its Python frame.
        self.id: str = id or _random_bits(64).to_bytes(8, "little").hex()
        # Enum lookups by value are slow; skip them for values that are already members.
        self.type: NodeType = type if type.__class__ is NodeType else NodeType(type)
        self.name: str = name
        self.status: NodeStatus = status if status.__class__ is NodeStatus else NodeStatus(status)
        self.timestamp: float = time.time() if timestamp is None else timestamp
        self.ended_at: float | None = None
        self.parent_id: str | None = parent_id
        self._children: list[EventNode] | None = None
        self._payload: dict[str, Any] | None = payload
        self._output: Any = _UNSET
        self._metrics: dict[str, Any] | None = None
        self._duration: float | None = None
        self._events: list[dict[str, Any]] | None = None
        self.error: dict[str, Any] | None = None
        self._t0: float = time.perf_counter()
        # False while what a model call cost, or a prompt's, step's or workflow's sums
        # of the model calls below it, may be missing from its metrics (`_add_sums`).
        self._summed: bool = False

    @property
    def children(self) -> list[EventNode]:
        """Child nodes in start order."""
        kids = self._children
        if kids is None:
            kids = self._children = []
        return kids

    @property
    def payload(self) -> dict[str, Any]:
        """JSON-safe inputs and outputs (``"output"`` once the node has one)."""
        payload = self._payload
        if payload is None:
            # The dict first, the output after: a `finish` in another thread then
            # either sees the dict or has set _output before it is read here.
            payload = self._payload = {}
            output = self._output
            if output is not _UNSET:
                payload.setdefault("output", output)
        return payload

    @payload.setter
    def payload(self, value: dict[str, Any]) -> None:
        self._payload = value
        self._output = _UNSET

    @property
    def metrics(self) -> dict[str, Any]:
        """Measurements: ``"duration"`` (seconds) once the node ends, tokens, attempts..."""
        metrics = self._metrics
        if metrics is None:
            metrics = self._metrics = {}  # first, as in `payload`
            duration = self._duration
            if duration is not None:
                metrics.setdefault("duration", duration)
        if not self._summed:
            _add_sums(self, metrics)
        return metrics

    @metrics.setter
    def metrics(self, value: dict[str, Any]) -> None:
        self._metrics = value
        self._duration = None
        self._summed = True  # a recorded node's metrics hold its sums already

    @property
    def events(self) -> list[dict[str, Any]]:
        """Point-in-time events recorded on this node, oldest first."""
        events = self._events
        if events is None:
            events = self._events = []
        return events

    @events.setter
    def events(self, value: list[dict[str, Any]]) -> None:
        self._events = value

    @property
    def duration(self) -> float | None:
        """Wall time in seconds, or ``None`` while the node is still running."""
        value = metrics_of(self).get("duration")
        return float(value) if is_number(value) else None

    def to_dict(self) -> dict[str, Any]:
        """This node as a flat, JSON-safe dict; children appear as a list of ids."""
        return {
            "id": self.id,
            "type": self.type.value,
            "name": self.name,
            "status": self.status.value,
            "timestamp": self.timestamp,
            "ended_at": self.ended_at,
            "parent_id": self.parent_id,
            "payload": payload_of(self),
            "metrics": metrics_of(self),
            "events": self._events if self._events is not None else [],
            "error": self.error,
            "children": [c.id for c in self._children] if self._children else [],
        }

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EventNode):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def __gs_jsonable__(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type.value,
            "name": self.name,
            "status": self.status.value,
        }

    def __repr__(self) -> str:
        return f"EventNode({self.type.value} {self.name!r} {self.status.value} id={self.id})"


_blank = object.__new__


def new_node(
    type: NodeType | str,
    name: str,
    parent_id: str | None = None,
    payload: dict[str, Any] | None = None,
    id: str | None = None,
) -> EventNode:
    """``EventNode(type, name, id=id, parent_id=parent_id, payload=payload)``, for less.

    Calling a class with keywords is slow (0.3 us, half of what the node costs),
    and the tree starts a node for every step and call. This sets the slots
    ``__init__`` sets, to the same values (tests/test_hotpath_semantics.py checks).
    """
    node: EventNode = _blank(EventNode)
    node.id = id or _random_bits(64).to_bytes(8, "little").hex()
    node.type = type if type.__class__ is NodeType else NodeType(type)
    node.name = name
    node.status = NodeStatus.RUNNING
    node.timestamp = time.time()
    node.ended_at = None
    node.parent_id = parent_id
    node._children = None
    node._payload = payload
    node._output = _UNSET
    node._metrics = None
    node._duration = None
    node._events = None
    node.error = None
    node._t0 = time.perf_counter()
    node._summed = False
    return node


# The tree reads a node's lazily created lists through these, so that walking or
# saving a tree never creates an empty list on every leaf.


def child_nodes(node: EventNode) -> Sequence[EventNode]:
    """``node.children``, without creating the list of a leaf."""
    return node._children or ()


def recorded_events(node: EventNode) -> Sequence[dict[str, Any]]:
    """``node.events``, without creating the list of a node that has none."""
    return node._events or ()


def payload_of(node: EventNode) -> dict[str, Any]:
    """``node.payload`` for reading: the node's own dict, or a new one if it has none yet."""
    payload = node._payload
    if payload is not None:
        return payload
    output = node._output
    return {} if output is _UNSET else {"output": output}


def metrics_of(node: EventNode) -> dict[str, Any]:
    """``node.metrics`` for reading: the node's own dict, or a new one if it has none yet."""
    if not node._summed:
        _add_sums(node, None)
    metrics = node._metrics
    if metrics is not None:
        return metrics
    duration = node._duration
    return {} if duration is None else {"duration": duration}


#: The nodes whose metrics get what model calls cost when read (`_add_sums`): a model
#: call its own cost, a prompt the cost of those below it (nested prompts' too), a
#: step or workflow their cost and tokens.
SUMMED = frozenset({NodeType.MODEL_CALL, NodeType.PROMPT, NodeType.STEP, NodeType.WORKFLOW})
_TOTALS = frozenset({NodeType.STEP, NodeType.WORKFLOW})
_MODEL_CALL = NodeType.MODEL_CALL
_PROMPT = NodeType.PROMPT
#: ``(node, metrics)`` -> sets ``metrics["cost_usd"]`` of a model call from its usage
#: (`groundswell.budget.pricing` sets it: the price table lives there).
_pricer: list[Callable[[EventNode, dict[str, Any]], None]] = []


def set_pricer(price: Callable[[EventNode, dict[str, Any]], None]) -> None:
    """Make ``price(node, metrics)`` what sets a model call's ``cost_usd`` from its usage."""
    _pricer[:] = [price]


def own_metrics(node: EventNode) -> dict[str, Any]:
    """``node.metrics`` for writing on the hot path: the dict, without adding up costs."""
    metrics = node._metrics
    if metrics is None:
        metrics = node._metrics = {}
        duration = node._duration
        if duration is not None:
            metrics["duration"] = duration
    return metrics


def _add_sums(node: EventNode, metrics: dict[str, Any] | None) -> None:
    """Put in ``node``'s metrics (``metrics``, else its own, made if need be) what its
    model calls cost (``cost_usd``) and, for a step or workflow, used (``usage``,
    ``prompt_cache_share``); a prompt's own ``prompt_cache_share`` too.

    Worked out when read, not as each call ends: a run nobody reads them from (no
    sink watching, no budget in dollars) never prices a call nor makes a dict per
    step. Final once the node has ended, then kept.
    """
    kind = node.type
    if kind not in SUMMED:  # nothing to add up, ever
        node._summed = True
        return
    ended = node.ended_at is not None
    if kind is _MODEL_CALL:
        own = node._metrics if metrics is None else metrics
        if own is not None and "cost_usd" not in own and "usage" in own and _pricer:
            _pricer[0](node, own)
        if ended:
            node._summed = True
        return
    sums = _sums_below(node)
    if sums:
        if kind is _PROMPT:  # its cost only: its usage is its own calls'
            sums.pop("usage", None)
        if metrics is None:
            metrics = own_metrics(node)
        metrics.update(sums)
        usage = sums.get("usage")
        if usage and usage.get("cache_read_input_tokens"):  # else the share is 0: left out
            cache_share(metrics, usage)
    if kind is _PROMPT:  # the share of its own input, once its usage is recorded
        own = metrics if metrics is not None else node._metrics
        if own is not None and "prompt_cache_share" not in own:
            usage = own.get("usage")
            if usage:
                cache_share(own, usage)
    if ended:
        node._summed = True


#: Within a whole-tree read (`reading_whole_tree`): for nodes looked at so far, whether
#: their subtree holds nothing to add up (no model call with metrics, no final totals).
_nothing_below: ContextVar[dict[int, bool] | None] = ContextVar(
    "groundswell_nothing_below", default=None
)


@contextlib.contextmanager
def reading_whole_tree() -> Iterator[None]:
    """Within: reading the metrics of every node of a tree (`EventTree.to_json`,
    ``render``, ``save``) adds up each running subtree with nothing in it once, not
    once per running node above it (a deep chain of running nodes was quadratic)."""
    token = _nothing_below.set({})
    try:
        yield
    finally:
        _nothing_below.reset(token)


def _is_total(node: EventNode) -> bool:
    """A node whose sums are read from its own metrics: a model call, or a step or
    workflow whose sums are final (or recorded)."""
    return node.type is _MODEL_CALL or (node._summed and node.type in _TOTALS)


def _mark_nothing_below(node: EventNode, known: dict[int, bool]) -> bool:
    """Whether ``node``'s subtree holds nothing to add up; noted in ``known`` for it and
    every running subtree under it (one pass, children before parents)."""
    stack: list[tuple[EventNode, bool]] = [(node, False)]
    while stack:
        at, children_done = stack.pop()
        if id(at) in known:
            continue
        kids = at._children or ()
        if not children_done:
            stack.append((at, True))
            stack.extend((kid, False) for kid in kids if not _is_total(kid))
            continue
        known[id(at)] = all(
            kid._metrics is None if _is_total(kid) else known.get(id(kid), False) for kid in kids
        )
    return known[id(node)]


def _sums_below(node: EventNode) -> dict[str, Any]:
    """``cost_usd`` and ``usage`` of the model calls below ``node`` (empty: none)."""
    known = _nothing_below.get()
    if known is not None and (known.get(id(node)) or _mark_nothing_below(node, known)):
        return {}
    cost: float | None = 0.0
    costed = False
    usage: dict[str, int] | None = None
    stack = list(node._children or ())
    while stack:
        below = stack.pop()
        kind = below.type
        if kind is _MODEL_CALL or (below._summed and kind in _TOTALS):
            # A model call, or a step or workflow whose sums are final (or recorded).
            metrics = below._metrics
            if metrics is None:
                continue
            if not below._summed:
                _add_sums(below, metrics)
            if "cost_usd" in metrics:
                costed = True
                spent = metrics["cost_usd"]
                # Unknown stays unknown: a sum without one call's cost would understate it.
                cost = None if cost is None or spent is None else cost + spent
            counts = metrics.get("usage")
            if type(counts) is dict and counts:
                if usage is None:
                    usage = {}
                for name, value in counts.items():
                    if value and type(value) is int:
                        usage[name] = usage.get(name, 0) + value
            continue
        kids = below._children
        if kids:
            if known is not None:  # a whole-tree read: what holds nothing is not walked again
                kids = [kid for kid in kids if not known.get(id(kid))]
            stack.extend(kids)
    sums: dict[str, Any] = {}
    if costed:
        sums["cost_usd"] = cost
    if usage is not None:
        sums["usage"] = usage
    return sums


def cache_share(metrics: dict[str, Any], usage: Mapping[str, int]) -> None:
    """Set ``metrics["prompt_cache_share"]``: the share of the input read from the prompt
    cache (``cache_read / (input + cache_read + cache_creation)``), when there was input."""
    read = usage.get("cache_read_input_tokens", 0)
    if not read:  # the usual case, without round(), which formats the float in C
        if usage.get("input_tokens") or usage.get("cache_creation_input_tokens"):
            metrics["prompt_cache_share"] = 0.0
        return
    seen = usage.get("input_tokens", 0) + read + usage.get("cache_creation_input_tokens", 0)
    metrics["prompt_cache_share"] = round(read / seen, 4)


def finish(node: EventNode, status: NodeStatus, output: Any, with_output: bool) -> None:
    """End ``node``: its output (JSON-safe already) if ``with_output``, ``ended_at``, its
    duration (``metrics["duration"]``, monotonic clock), and ``status`` last."""
    # Each value goes to its slot first and then into the dict if there is one:
    # a reader creating the dict in another thread (the `payload` and `metrics`
    # properties) cannot lose it in between.
    if with_output:
        node._output = output
        payload = node._payload
        if payload is not None:
            payload["output"] = output
    node.ended_at = time.time()
    node._duration = duration = time.perf_counter() - node._t0
    metrics = node._metrics
    if metrics is not None:
        metrics["duration"] = duration
    # Last, so that nobody sees a "completed" node without its output.
    node.status = status


def is_number(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool)
