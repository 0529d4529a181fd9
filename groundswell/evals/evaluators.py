"""Evaluators: what a case run is scored by.

An evaluator gets an `EvaluatorContext` (the case, the output, the run's tree)
and returns a `Score`, a ``bool`` (pass or fail) or a ``float`` in 0..1 (passes
at 0.5 and above). A plain function taking the context is an evaluator; so is
any object with an ``evaluate(ctx)`` method, sync or async. Subclass
`Evaluator` to give one a name datasets can use (``name = "polite"``), and
ship it in a plugin through the ``register_evaluators`` hook.

Deterministic evaluators compare the output: `EqualsExpected`, `Equals`,
`Contains`, `Regex`, `ValidatesAs`. Tree evaluators (`groundswell.evals.tree_checks`)
read the run's tree; `LLMJudge` asks a model.
"""

from __future__ import annotations

import abc
import asyncio
import inspect
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from ..errors import ConfigurationError

if TYPE_CHECKING:
    from ..tree.tree import EventTree
    from .dataset import Case

__all__ = [
    "Contains",
    "Equals",
    "EqualsExpected",
    "Evaluator",
    "EvaluatorContext",
    "Regex",
    "Score",
    "ValidatesAs",
    "evaluator_name",
    "score_of",
]


@dataclass
class EvaluatorContext:
    """What an evaluator sees of one run of one case.

    The field names are pydantic-evals' (``name``, ``inputs``, ``metadata``,
    ``expected_output``, ``output``, ``duration``), plus the run's ``tree``.
    """

    name: str
    inputs: dict[str, Any]
    metadata: dict[str, Any]
    expected_output: Any
    #: What the target returned (``None`` when it failed: see ``error``).
    output: Any
    #: Seconds the run took.
    duration: float
    #: The run's tree: every step, prompt, model call and tool call.
    tree: EventTree
    #: The error the target raised, or None.
    error: BaseException | None = None
    #: The case itself.
    case: Case | None = field(default=None, repr=False)

    @property
    def output_text(self) -> str:
        """The output as text: a string as it is, anything else as JSON."""
        return _text(self.output)


@dataclass(frozen=True)
class Score:
    """One evaluator's result: a value in 0..1, whether it passed, and why."""

    value: float
    passed: bool
    reason: str | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.value <= 1.0:
            raise ValueError(f"a score's value is between 0 and 1, got {self.value}")


class Evaluator(abc.ABC):
    """Base class of named evaluators: define `evaluate` (sync or async).

    ``name`` is what datasets call it (``- contains: "refund"``); a subclass
    without one is called by its class name in snake case.
    """

    name: ClassVar[str] = ""

    @abc.abstractmethod
    def evaluate(self, ctx: EvaluatorContext) -> Score | bool | float | Awaitable[Any]:
        """Score one run: a `Score`, a bool, or a float in 0..1 (may be async)."""


def evaluator_name(evaluator: Any) -> str:
    """The registered name of an evaluator, its function's name, or its class's in snake case."""
    name = getattr(evaluator, "name", None)
    if isinstance(name, str) and name:
        return name
    if inspect.isfunction(evaluator) or inspect.ismethod(evaluator):
        return evaluator.__name__
    return re.sub(r"(?<!^)(?=[A-Z])", "_", type(evaluator).__name__).lower()


async def score_of(evaluator: Any, ctx: EvaluatorContext) -> Score:
    """Run ``evaluator`` on ``ctx``; its answer as a `Score`.

    A crash is a failed score with the error as its reason; a `ConfigurationError`
    (an evaluator set up wrong, say a judge without an API key) is raised.
    """
    check: Callable[[EvaluatorContext], Any] = (
        evaluator.evaluate if hasattr(evaluator, "evaluate") else evaluator
    )
    try:
        if inspect.iscoroutinefunction(check):
            result = await check(ctx)
        else:  # in a thread: a slow sync evaluator must not hold up the other cases
            result = await asyncio.to_thread(check, ctx)
            if inspect.isawaitable(result):
                result = await result
    except ConfigurationError:
        raise  # set up wrong (a judge without an API key): not a score, a run to fix
    except Exception as exc:
        return Score(0.0, False, f"the evaluator raised {type(exc).__name__}: {exc}")
    return as_score(result, evaluator_name(evaluator))


def as_score(result: Any, name: str) -> Score:
    """An evaluator's answer as a `Score`."""
    if isinstance(result, Score):
        return result
    if isinstance(result, bool):
        return Score(1.0 if result else 0.0, result)
    if isinstance(result, int | float):
        value = float(result)
        if not 0.0 <= value <= 1.0:
            return Score(0.0, False, f"evaluator {name!r} answered {value}, not a value in 0..1")
        return Score(value, value >= 0.5)
    return Score(
        0.0,
        False,
        f"evaluator {name!r} answered {type(result).__name__} {result!r:.40}; "
        "return a Score, a bool or a float in 0..1",
    )


@dataclass(frozen=True)
class EqualsExpected(Evaluator):
    """The output equals the case's ``expected_output`` (skipped when it has none)."""

    name: ClassVar[str] = "equals_expected"

    def evaluate(self, ctx: EvaluatorContext) -> Score:
        if ctx.expected_output is None:
            return Score(1.0, True, "the case expects no particular output")
        if _same(ctx.output, ctx.expected_output):
            return Score(1.0, True)
        return Score(
            0.0, False, f"expected {_short(ctx.expected_output)}, got {_short(ctx.output)}"
        )


@dataclass(frozen=True)
class Equals(Evaluator):
    """The output equals ``value``."""

    value: Any
    name: ClassVar[str] = "equals"

    def evaluate(self, ctx: EvaluatorContext) -> Score:
        if _same(ctx.output, self.value):
            return Score(1.0, True)
        return Score(0.0, False, f"expected {_short(self.value)}, got {_short(ctx.output)}")


@dataclass(frozen=True)
class Contains(Evaluator):
    """The output's text contains ``text`` (``case_sensitive=False`` ignores case)."""

    text: str
    case_sensitive: bool = True
    name: ClassVar[str] = "contains"

    def evaluate(self, ctx: EvaluatorContext) -> Score:
        haystack, needle = ctx.output_text, self.text
        if not self.case_sensitive:
            haystack, needle = haystack.lower(), needle.lower()
        if needle in haystack:
            return Score(1.0, True)
        return Score(0.0, False, f"{self.text!r} is not in the output {_short(ctx.output_text)}")


@dataclass(frozen=True)
class Regex(Evaluator):
    """The output's text matches ``pattern`` somewhere (`re.search`)."""

    pattern: str
    name: ClassVar[str] = "regex"

    def __post_init__(self) -> None:
        try:
            re.compile(self.pattern)
        except re.error as exc:
            raise ConfigurationError(
                f"regex evaluator: {self.pattern!r} is not valid: {exc}"
            ) from None

    def evaluate(self, ctx: EvaluatorContext) -> Score:
        if re.search(self.pattern, ctx.output_text):
            return Score(1.0, True)
        return Score(0.0, False, f"/{self.pattern}/ does not match {_short(ctx.output_text)}")


@dataclass(frozen=True)
class ValidatesAs(Evaluator):
    """The output validates as ``type_`` (a pydantic model, ``int``, ``list[str]``...).

    A JSON string is parsed first, as a model's answer would be.
    """

    type_: Any
    name: ClassVar[str] = "validates_as"

    def evaluate(self, ctx: EvaluatorContext) -> Score:
        adapter: TypeAdapter[Any] = TypeAdapter(self.type_)
        value = ctx.output
        try:
            if isinstance(value, str) and self.type_ is not str:
                try:  # a model's JSON answer
                    adapter.validate_json(value)
                except ValidationError as exc:
                    if not any(e["type"] == "json_invalid" for e in exc.errors()):
                        raise
                    try:  # or text the type takes as it is (a Literal, an Enum)
                        adapter.validate_python(value)
                    except ValidationError:
                        raise exc from None  # not JSON is what the user needs to hear
            else:
                adapter.validate_python(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "the output"
            return Score(0.0, False, f"not a {_type_name(self.type_)}: {where}: {first['msg']}")
        return Score(1.0, True)


def _same(output: Any, expected: Any) -> bool:
    """Equal, comparing a model (or other object) by its JSON form with plain data.

    ``True`` is not ``1`` here, nor ``False`` ``0``: an answer's type counts.
    """
    if isinstance(output, bool) != isinstance(expected, bool):
        return False
    if output == expected:
        return True
    return bool(_plain(output) == _plain(expected))


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    try:
        return json.loads(json.dumps(value, default=str))
    except (TypeError, ValueError):
        return value


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    try:
        return json.dumps(value, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _type_name(type_: Any) -> str:
    return type_.__name__ if isinstance(type_, type) else str(type_).replace("typing.", "")
