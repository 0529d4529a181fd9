"""Reflection: look at a failure, decide whether to try again, and how.

Three levels share one loop:

- **workflow**: a failed ``ctx.step`` is reflected on and run again; the step
  sees the reflection as ``ctx.reflection.last``;
- **agent**: a failed prompt (output that does not validate, a reply that
  cannot be parsed, the tool loop running out of turns, a refusal, a tool
  call cut off at max_tokens) is fed back to the model with the error, and
  the model answers again;
- **prompt**: the same as agent level, switched on for one prompt.

Each reflection is a ``reflection`` node between the failed attempt (which
stays in the tree, ``failed``) and the retry. Strategies come only from the
``register_reflection_strategies`` hook: the kernel registers ``feedback``;
the bundled ``groundswell_reflection`` plugin registers ``llm``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, runtime_checkable

from ._serialize import error_record, jsonable
from .errors import (
    ConfigurationError,
    PluginError,
)
from .hookspecs import ReflectionStrategy, hookimpl
from .plugins import get_plugin_manager
from .recoverable import AGENT_REFLECTABLE, gave_up_on, is_recoverable, mark_given_up
from .run_context import Frame, reset_frame, set_frame
from .tree import EventNode, EventTree, NodeStatus, NodeType

if TYPE_CHECKING:
    from .agent import Agent
    from .prompt import Prompt
    from .workflow import WorkflowContext

__all__ = [
    "AGENT_REFLECTABLE",
    "MAX_ATTEMPTS_CAP",
    "ReflectionAPI",
    "ReflectionConfig",
    "ReflectionContext",
    "ReflectionEntry",
    "ReflectionResult",
    "Reflector",
    "gave_up_on",
    "is_recoverable",
    "mark_given_up",
    "reflect_once",
    "retry_step",
    "retry_with_reflection",
]

logger = logging.getLogger("groundswell.reflection")
T = TypeVar("T")

#: No configuration may ask for more attempts than this (the first one included).
MAX_ATTEMPTS_CAP = 10
Level = Literal["workflow", "agent", "prompt"]


@dataclass(frozen=True, slots=True)
class ReflectionConfig:
    """How reflection runs: on ``Workflow``, ``Agent`` or ``PromptOverrides`` (``reflection=``).

    ``max_attempts`` counts every attempt, the first included (``3`` means at
    most two retries; at most `MAX_ATTEMPTS_CAP`). ``strategy`` names a
    registered strategy (``"llm"`` or ``"feedback"``); ``model`` is the model
    the ``llm`` strategy asks (default: the failing agent's own); ``retry_delay``
    is the pause in seconds before each retry.
    """

    enabled: bool = True
    max_attempts: int = 3
    strategy: str = "llm"
    model: str | None = None
    retry_delay: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ConfigurationError(
                f"ReflectionConfig.enabled must be True or False, got {self.enabled!r}"
            )
        if (
            isinstance(self.max_attempts, bool)
            or not isinstance(self.max_attempts, int)
            or not 1 <= self.max_attempts <= MAX_ATTEMPTS_CAP
        ):
            raise ConfigurationError(
                f"ReflectionConfig.max_attempts must be an int from 1 to {MAX_ATTEMPTS_CAP} "
                f"(it counts the first attempt), got {self.max_attempts!r}"
            )
        if not isinstance(self.strategy, str) or not self.strategy.strip():
            raise ConfigurationError(
                f"ReflectionConfig.strategy must name a strategy such as 'llm' or 'feedback', "
                f"got {self.strategy!r}"
            )
        if self.model is not None and (not isinstance(self.model, str) or not self.model):
            raise ConfigurationError(
                f"ReflectionConfig.model must be a model name or None, got {self.model!r}"
            )
        delay = self.retry_delay
        if (
            isinstance(delay, bool)
            or not isinstance(delay, int | float)
            or not math.isfinite(delay)
            or delay < 0
        ):
            raise ConfigurationError(
                f"ReflectionConfig.retry_delay must be seconds >= 0, got {delay!r}"
            )


@dataclass(frozen=True, slots=True)
class ReflectionResult:
    """A strategy's decision.

    ``should_retry`` says whether to try again; ``reason`` is the analysis (it
    reaches the model on an agent-level retry); ``revised_data`` replaces the
    prompt's ``data`` on an agent-level retry and is what a workflow-level
    retry reads from ``ctx.reflection.last``; ``revised_system`` replaces the
    system prompt on an agent-level retry.
    """

    should_retry: bool
    reason: str = ""
    revised_data: Any = None
    revised_system: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.should_retry, bool):
            raise ConfigurationError(
                f"ReflectionResult.should_retry must be True or False, got {self.should_retry!r}"
            )
        if not isinstance(self.reason, str):
            raise ConfigurationError(
                f"ReflectionResult.reason must be a string, got {type(self.reason).__name__}"
            )
        if self.revised_system is not None and (
            not isinstance(self.revised_system, str) or not self.revised_system.strip()
        ):
            raise ConfigurationError(
                "ReflectionResult.revised_system must be a non-empty string or None, "
                f"got {self.revised_system!r:.60}"
            )


@dataclass(frozen=True, slots=True)
class ReflectionEntry:
    """One reflection, as kept in ``ctx.reflection.history`` and ``agent.reflection_history``."""

    level: Level
    name: str
    attempt: int
    error: dict[str, Any]
    strategy: str
    result: ReflectionResult
    node_id: str
    failed_node_id: str
    timestamp: float = field(default_factory=time.time)

    @property
    def should_retry(self) -> bool:
        """Whether the strategy asked for another attempt."""
        return self.result.should_retry

    @property
    def reason(self) -> str:
        """The strategy's analysis."""
        return self.result.reason

    @property
    def revised_data(self) -> Any:
        """The strategy's revised data, or ``None``."""
        return self.result.revised_data

    @property
    def revised_system(self) -> str | None:
        """The strategy's revised system prompt, or ``None``."""
        return self.result.revised_system


@dataclass(frozen=True, slots=True)
class ReflectionContext:
    """What a strategy is told about a failure.

    ``level`` is ``workflow``, ``agent`` or ``prompt``; ``failed_node`` is the
    failed step or prompt node; ``attempt`` the number of the attempt that
    failed (1 for the first); ``previous_attempts`` the earlier reflections on
    the same step or prompt. ``agent`` is the agent whose prompt failed (agent
    and prompt level) or the workflow's ``reflection_agent``; ``prompt`` and
    ``messages`` are the failed prompt and its conversation (agent and prompt
    level), ``system`` the system prompt that was sent; ``output`` is the reply
    that could not be used, when there was one.
    """

    level: Level
    failed_node: EventNode
    error: BaseException
    attempt: int
    previous_attempts: tuple[ReflectionEntry, ...]
    config: ReflectionConfig
    tree: EventTree
    agent: Agent | None = None
    prompt: Prompt[Any] | None = None
    messages: tuple[dict[str, Any], ...] = ()
    output: str | None = None
    system: Any = None

    @property
    def max_attempts(self) -> int:
        """The attempt limit in force."""
        return self.config.max_attempts

    @property
    def error_text(self) -> str:
        """``"Type: message"`` for the error, with secrets redacted."""
        record = error_record(self.error)
        return f"{record['type']}: {record['message']}"


@runtime_checkable
class Reflector(Protocol):
    """What a reflection strategy's factory returns."""

    async def reflect(self, context: ReflectionContext) -> ReflectionResult:
        """Look at the failure and decide whether (and how) to retry."""
        ...


class FeedbackReflector:
    """The kernel's strategy: always retry, with the error as the feedback.

    At agent and prompt level the error text goes back to the model; at
    workflow level the step simply runs again, with ``ctx.reflection.last``
    telling it what failed.
    """

    async def reflect(self, context: ReflectionContext) -> ReflectionResult:
        """Retry, saying what went wrong."""
        return ReflectionResult(should_retry=True, reason=context.error_text)


@hookimpl
def register_reflection_strategies() -> ReflectionStrategy:
    """The kernel's own ``feedback`` strategy."""
    return ReflectionStrategy(
        "feedback", FeedbackReflector, "retry with the error text as feedback (no model call)"
    )


def resolve_config(value: ReflectionConfig | bool | None, *, owner: str) -> ReflectionConfig | None:
    """A ``reflection=`` / ``enable_reflection=`` argument as a config, or ``None`` when off."""
    if value is None or value is False:
        return None
    if value is True:
        return _DEFAULT_CONFIG
    if isinstance(value, ReflectionConfig):
        return value if value.enabled else None
    raise ConfigurationError(
        f"{owner}: reflection must be a ReflectionConfig, True or False, got {type(value).__name__}"
    )


_DEFAULT_CONFIG = ReflectionConfig()


def _strategy(name: str) -> Reflector:
    strategy = get_plugin_manager().lookup(ReflectionStrategy, name).factory()
    if not isinstance(strategy, Reflector):
        raise PluginError(
            f"reflection strategy {name!r}: its factory returned {type(strategy).__name__}, "
            "which has no async reflect(context) method"
        )
    return strategy


#: Strategies whose own failure falls back to `FALLBACK_STRATEGY` for that attempt
#: instead of losing the run: a retry with the error fed back is never worse.
FALLS_BACK = frozenset({"llm"})
FALLBACK_STRATEGY = "feedback"


def choose_strategy(
    config: ReflectionConfig, agent: Agent | None, records: Mapping[str, ReflectionStrategy]
) -> str:
    """The strategy name that will run: ``llm`` needs an agent, else it falls back to ``feedback``."""
    name = config.strategy
    if name == "llm" and agent is None:
        return "feedback"
    if name == "llm" and "llm" not in records:
        # The bundled plugin is disabled (e.g. GROUNDSWELL_LOAD_PLUGINS): the
        # default must still work, so fall back and say so in the tree.
        return "feedback"
    return name


async def reflect_once(
    context: ReflectionContext,
    *,
    name: str,
    parent: EventNode | None,
    workflow: WorkflowContext | None,
) -> ReflectionEntry | None:
    """Run the strategy for one failure inside its own ``reflection`` node.

    Returns the entry, or ``None`` if the strategy itself failed (recorded on
    the node; the caller re-raises the original error). A strategy in
    `FALLS_BACK` (``llm``) that fails is replaced by `FALLBACK_STRATEGY` for
    this attempt instead, with a ``strategy_fallback`` event on the node.
    """
    tree = context.tree
    wanted = context.config.strategy
    records = get_plugin_manager().reflection_strategies()  # collected once per reflection
    chosen = choose_strategy(context.config, context.agent, records)
    node = tree.start_node(
        NodeType.REFLECTION,
        name,
        parent,
        payload={
            "level": context.level,
            "attempt": context.attempt,
            "strategy": chosen,
            "failed_node_id": context.failed_node.id,
            "failure": error_record(context.error),
        },
        trusted=True,
    )
    node.metrics["attempt"] = context.attempt
    if chosen != wanted and context.agent is not None:
        # Without an agent, llm -> feedback is the documented rule; this is a surprise.
        tree.add_event(
            node,
            "strategy_fallback",
            wanted=wanted,
            used=chosen,
            reason="the plugin providing it is not loaded",
        )
    try:
        strategy = _strategy(chosen)
    except (ConfigurationError, PluginError) as exc:
        # A strategy name nobody registered is the caller's configuration to fix.
        tree.end_node(node, NodeStatus.FAILED, error=exc)
        raise exc from context.error
    token = set_frame(Frame(tree, node, workflow))
    try:
        if workflow is None:
            result = await strategy.reflect(context)
        else:
            # In a durable run the reflection is checkpointed like a step, so a
            # recovered run does not ask the reflecting model again.
            result = await workflow.engine.run_step(
                workflow, node, lambda: strategy.reflect(context)
            )
        if not isinstance(result, ReflectionResult):
            raise PluginError(
                f"reflection strategy {chosen!r} returned {type(result).__name__}, "
                "not a ReflectionResult"
            )
    except asyncio.CancelledError:
        tree.end_node(node, NodeStatus.CANCELLED)
        raise
    except Exception as exc:
        if chosen not in FALLS_BACK:
            # Whatever went wrong in the strategy, the run keeps its original error.
            strategy_failed(context.error, node, tree, chosen, exc)
            return None
        # The analysis call failed (API error, timeout, an unusable answer): a plain
        # retry with the error fed back can still succeed, so that is what happens.
        fell_back_from(node, tree, chosen, exc)
        chosen = FALLBACK_STRATEGY
        result = await FeedbackReflector().reflect(context)
    finally:
        reset_frame(token)
    entry = ReflectionEntry(
        level=context.level,
        name=name,
        attempt=context.attempt,
        error=error_record(context.error),
        strategy=chosen,
        result=result,
        node_id=node.id,
        failed_node_id=context.failed_node.id,
    )
    tree.end_node(node, NodeStatus.COMPLETED, output=jsonable(result), record_output=True)
    return entry


def fell_back_from(node: EventNode, tree: EventTree, strategy: str, exc: BaseException) -> None:
    """Record that ``strategy`` failed and `FALLBACK_STRATEGY` answers for this attempt."""
    record = error_record(exc)  # secrets redacted
    tree.add_event(
        node,
        "strategy_fallback",
        wanted=strategy,
        used=FALLBACK_STRATEGY,
        reason=f"the {strategy} strategy failed",
        error=record,
    )
    logger.warning(
        "reflection (%s) failed, retrying with %s instead: %s: %s",
        strategy,
        FALLBACK_STRATEGY,
        record["type"],
        record["message"],
    )


def feedback_entry(entry: ReflectionEntry, context: ReflectionContext) -> ReflectionEntry:
    """``entry`` redone by the `FALLBACK_STRATEGY`: the error fed back, no revision."""
    return dataclasses.replace(
        entry,
        strategy=FALLBACK_STRATEGY,
        result=ReflectionResult(should_retry=True, reason=context.error_text),
    )


def strategy_failed(
    error: BaseException, node: EventNode, tree: EventTree, strategy: str, exc: BaseException
) -> None:
    """Record that reflection could not help: on its node, in the log, on the original error."""
    if node.ended_at is None:
        tree.end_node(node, NodeStatus.FAILED, error=exc)
    else:
        tree.add_event(node, "revision_rejected", error=error_record(exc))
    record = error_record(exc)  # secrets redacted
    text = f"reflection ({strategy}) could not help: {record['type']}: {record['message']}"
    logger.warning("%s", text)
    with contextlib.suppress(Exception):
        error.add_note(text)


async def pause(config: ReflectionConfig) -> None:
    """Wait ``retry_delay`` before a retry (cancellation passes through)."""
    if config.retry_delay > 0:
        await asyncio.sleep(config.retry_delay)


# The reflection that led to the attempt now running, with the id of its
# workflow: ctx.reflection.last means "mine" inside concurrent retried steps,
# and never leaks into a child workflow or a sibling step.
_current_entry: ContextVar[tuple[str, ReflectionEntry] | None] = ContextVar(
    "groundswell_reflection_entry", default=None
)


class ReflectionAPI:
    """``ctx.reflection``: the workflow's reflection settings and history."""

    __slots__ = ("_history", "_workflow_id", "config")

    def __init__(self, config: ReflectionConfig | None, workflow_id: str = "") -> None:
        #: The workflow's reflection settings (``None`` when reflection is off).
        self.config = config
        self._workflow_id = workflow_id
        self._history: list[ReflectionEntry] = []

    @property
    def enabled(self) -> bool:
        """True when failed steps of this workflow are reflected on."""
        return self.config is not None

    @property
    def history(self) -> list[ReflectionEntry]:
        """Every reflection in this workflow run so far, at every level, oldest first (a copy).

        Agent- and prompt-level reflections on prompts run inside this
        workflow (not inside a child workflow) are included.
        """
        return list(self._history)

    def _mine(self) -> ReflectionEntry | None:
        current = _current_entry.get()
        if current is not None and current[0] == self._workflow_id:
            return current[1]
        return None

    @property
    def last(self) -> ReflectionEntry | None:
        """The reflection that led to the step attempt running now; ``None`` on a first attempt.

        Each retried step sees its own reflection, even when steps retry
        concurrently; for the latest reflection anywhere, use ``history[-1]``.
        """
        return self._mine()

    @property
    def attempt(self) -> int:
        """The attempt number of the step running now (1 unless it is a retry)."""
        mine = self._mine()
        return mine.attempt + 1 if mine is not None else 1

    def record(self, entry: ReflectionEntry) -> None:
        """Add a reflection to this run's history (strategies and reflecting middleware do)."""
        self._history.append(entry)

    def __repr__(self) -> str:
        return f"ReflectionAPI(enabled={self.enabled}, history={len(self._history)})"


async def retry_with_reflection(
    attempt: Callable[[int, ReflectionEntry | None], Awaitable[T]],
    *,
    config: ReflectionConfig,
    name: str,
    workflow: WorkflowContext | None,
    catches: Callable[[Exception], bool],
    describe: Callable[[Exception, int, tuple[ReflectionEntry, ...]], ReflectionContext | None],
    record: Callable[[ReflectionEntry], None],
    prepare: Callable[[ReflectionContext, ReflectionEntry], Awaitable[None]] | None = None,
) -> T:
    """The one retry loop of every level: run, reflect on a failure, run again.

    ``attempt(n, entry)`` runs attempt ``n`` (``entry`` is the reflection that
    led to it, ``None`` for the first). A failure ``catches`` accepts is told
    to the strategy as ``describe(failure, n, previous)`` (``None``: nothing to
    reflect on, give up) in a ``reflection`` node beside the failed one;
    ``record`` keeps each reflection, ``prepare`` applies one before the retry
    (a `ConfigurationError` there gives up). At most ``config.max_attempts``
    attempts; giving up re-raises the last failure, marked so that no
    enclosing level starts over.
    """
    previous: list[ReflectionEntry] = []
    entry: ReflectionEntry | None = None
    number = 1
    while True:
        try:
            return await attempt(number, entry)
        except Exception as exc:
            if not catches(exc):
                raise
            failure = exc
        context = (
            describe(failure, number, tuple(previous)) if number < config.max_attempts else None
        )
        if context is None:
            mark_given_up(failure)
            raise failure
        tree, failed = context.tree, context.failed_node
        parent = tree.get_node(failed.parent_id) if failed.parent_id else None
        entry = await reflect_once(context, name=name, parent=parent, workflow=workflow)
        if entry is not None and entry.should_retry and prepare is not None:
            try:
                await prepare(context, entry)
            except ConfigurationError as exc:  # e.g. revised data that cannot be rendered
                node = tree.get_node(entry.node_id)
                if entry.strategy not in FALLS_BACK:
                    record(entry)
                    strategy_failed(failure, node, tree, entry.strategy, exc)
                    mark_given_up(failure)
                    raise failure from None
                # The revision cannot be applied: retry without it, the error fed back.
                tree.add_event(node, "revision_rejected", error=error_record(exc))
                fell_back_from(node, tree, entry.strategy, exc)
                entry = feedback_entry(entry, context)
                await prepare(context, entry)
        if entry is not None:
            record(entry)
        if entry is None or not entry.should_retry:
            mark_given_up(failure)
            raise failure
        previous.append(entry)
        await pause(config)
        number += 1


async def retry_step(
    run_attempt: Callable[[int], Awaitable[Any]],
    *,
    name: str,
    config: ReflectionConfig,
    ctx: WorkflowContext,
    failed_nodes: list[EventNode],
    agent: Agent | None,
) -> Any:
    """Run a step, reflecting on each recoverable failure and retrying, up to the limit.

    ``run_attempt(n)`` runs attempt ``n`` as its own step node and appends it
    to ``failed_nodes`` before raising. The retried step sees its reflection as
    ``ctx.reflection.last``.
    """

    async def attempt(number: int, entry: ReflectionEntry | None) -> Any:
        token = _current_entry.set((ctx.workflow_id, entry)) if entry is not None else None
        try:
            return await run_attempt(number)
        finally:
            if token is not None:
                _current_entry.reset(token)

    def describe(
        failure: Exception, number: int, previous: tuple[ReflectionEntry, ...]
    ) -> ReflectionContext | None:
        if not is_recoverable(failure) or gave_up_on(failure):
            return None
        return ReflectionContext(
            level="workflow",
            failed_node=failed_nodes[-1],
            error=failure,
            attempt=number,
            previous_attempts=previous,
            config=config,
            tree=ctx.event_tree,
            agent=agent,
        )

    return await retry_with_reflection(
        attempt,
        config=config,
        name=name,
        workflow=ctx,
        catches=lambda exc: True,
        describe=describe,
        record=ctx.reflection.record,
    )
