"""Evaluators that read the run's tree: the path to the answer, not only the answer.

Which tools were called, in what order and how often; whether any node failed;
how many model turns; what the run cost and how long it took.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import ConfigurationError
from ..tree.tree import EventNode, NodeStatus, NodeType
from .evaluators import Evaluator, EvaluatorContext, Score

__all__ = [
    "MaxCost",
    "MaxDuration",
    "MaxModelTurns",
    "NoFailedNodes",
    "ToolCalls",
    "ToolsCalled",
    "tool_calls_of",
]

_TOOL_TYPES = (NodeType.TOOL_CALL, NodeType.MCP_CALL)


def tool_calls_of(ctx: EvaluatorContext) -> list[EventNode]:
    """The run's tool calls (MCP ones too), in the order they started."""
    calls = [n for n in ctx.tree.walk() if n.type in _TOOL_TYPES]
    return sorted(calls, key=lambda n: n.timestamp)


@dataclass(frozen=True)
class ToolsCalled(Evaluator):
    """Each of ``tools`` was called; with ``in_order=True``, in that order (others may
    come between); with ``only=True``, no other tool was called."""

    tools: Sequence[str]
    in_order: bool = False
    only: bool = False
    name: ClassVar[str] = "tools_called"

    def __post_init__(self) -> None:
        if isinstance(self.tools, str):
            object.__setattr__(self, "tools", (self.tools,))
        object.__setattr__(self, "tools", tuple(self.tools))

    def evaluate(self, ctx: EvaluatorContext) -> Score:
        called = [n.name for n in tool_calls_of(ctx)]
        missing = [t for t in self.tools if t not in called]
        if missing:
            return Score(0.0, False, f"not called: {', '.join(missing)} (called: {_list(called)})")
        if self.in_order and not _in_order(list(self.tools), called):
            return Score(
                0.0, False, f"called {_list(called)}, not in the order {', '.join(self.tools)}"
            )
        others = sorted(set(called) - set(self.tools))
        if self.only and others:
            return Score(0.0, False, f"other tools were called too: {', '.join(others)}")
        return Score(1.0, True)


@dataclass(frozen=True)
class ToolCalls(Evaluator):
    """How often ``tool`` was called (every tool when None): at least ``min``, at most ``max``."""

    tool: str | None = None
    min: int | None = None
    max: int | None = None
    name: ClassVar[str] = "tool_calls"

    def __post_init__(self) -> None:
        if self.min is None and self.max is None:
            raise ConfigurationError("tool_calls evaluator: give min, max or both")

    def evaluate(self, ctx: EvaluatorContext) -> Score:
        calls = [n for n in tool_calls_of(ctx) if self.tool is None or n.name == self.tool]
        count, what = len(calls), f"{self.tool!r}" if self.tool else "tools"
        if self.min is not None and count < self.min:
            return Score(0.0, False, f"{what} called {count} times, fewer than {self.min}")
        if self.max is not None and count > self.max:
            return Score(0.0, False, f"{what} called {count} times, more than {self.max}")
        return Score(1.0, True)


@dataclass(frozen=True)
class NoFailedNodes(Evaluator):
    """No node of the run failed (a tool error the model recovered from counts too)."""

    name: ClassVar[str] = "no_failed_nodes"

    def evaluate(self, ctx: EvaluatorContext) -> Score:
        failed = [n for n in ctx.tree.walk() if n.status == NodeStatus.FAILED]
        if not failed:
            return Score(1.0, True)
        shown = ", ".join(f"{n.type} {n.name}" for n in failed[:3])
        more = f" and {len(failed) - 3} more" if len(failed) > 3 else ""
        return Score(0.0, False, f"failed: {shown}{more}")


@dataclass(frozen=True)
class MaxModelTurns(Evaluator):
    """At most ``turns`` model calls in the whole run."""

    turns: int
    name: ClassVar[str] = "max_model_turns"

    def evaluate(self, ctx: EvaluatorContext) -> Score:
        count = sum(1 for n in ctx.tree.walk() if n.type == NodeType.MODEL_CALL)
        if count <= self.turns:
            return Score(1.0, True)
        return Score(0.0, False, f"{count} model calls, more than {self.turns}")


@dataclass(frozen=True)
class MaxCost(Evaluator):
    """The run cost at most ``usd`` dollars (from the price table; see docs/agents.md)."""

    usd: float
    name: ClassVar[str] = "max_cost"

    def evaluate(self, ctx: EvaluatorContext) -> Score:
        root = ctx.tree.root
        cost: Any = root.metrics.get("cost_usd") if root is not None else None
        if cost is None:
            return Score(0.0, False, "the run's cost is unknown (a model missing from the prices)")
        if cost <= self.usd:
            return Score(1.0, True)
        return Score(0.0, False, f"cost ${cost:.6f}, more than ${self.usd}")


@dataclass(frozen=True)
class MaxDuration(Evaluator):
    """The run took at most ``seconds``."""

    seconds: float
    name: ClassVar[str] = "max_duration"

    def evaluate(self, ctx: EvaluatorContext) -> Score:
        if ctx.duration <= self.seconds:
            return Score(1.0, True)
        return Score(0.0, False, f"took {ctx.duration:.3f} s, more than {self.seconds} s")


def _in_order(wanted: list[str], called: list[str]) -> bool:
    position = 0
    for name in called:
        if position < len(wanted) and name == wanted[position]:
            position += 1
    return position == len(wanted)


def _list(names: list[str]) -> str:
    return ", ".join(names) if names else "none"
